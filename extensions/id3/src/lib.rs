//! The `id3` query extension (transducer): does an MP3 file's tag match `field=value` pairs?
//!
//! It converses with roam instead of reading the file: first it asks for the ID3v2 header (10
//! bytes at 0) and the ID3v1 tail (last 128 bytes), then for the ID3v2 tag body if there is
//! one. Fields: artist, title, album, year; ID3v2 values take precedence over ID3v1's.

use roam_ext_abi::{Files, Range, Reply, Request};

roam_ext_abi::export!(handle);

/// Bytes of an ID3v2 tag we are willing to read; larger tags (embedded pictures) are cut.
const MAX_TAG: u32 = 64 * 1024;

fn handle(req: Request) -> Reply {
    match req {
        Request::Query { args, files, .. } => query(&args, &files),
        _ => Reply::Fail("id3 only answers queries".into()),
    }
}

fn query(args: &[(String, String)], files: &Files) -> Reply {
    let size = files.sizes.first().copied().unwrap_or(0);
    let head = Range {
        file: 0,
        off: 0,
        len: size.min(10) as u32,
    };
    let tail = Range {
        file: 0,
        off: size.saturating_sub(128),
        len: size.min(128) as u32,
    };
    let missing: Vec<Range> = [head, tail].into_iter().filter(|r| !files.has(r)).collect();
    if !missing.is_empty() {
        return Reply::Need(missing);
    }
    let mut tag = Tag::default();
    if let Some(v1) = files.get(0, tail.off, 128) {
        tag.read_v1(v1);
    }
    if let Some((major, body_len)) = v2_header(files.get(0, 0, u64::from(head.len)).unwrap_or(&[]))
    {
        let body = Range {
            file: 0,
            off: 10,
            len: body_len.min(MAX_TAG).min(size.saturating_sub(10) as u32),
        };
        match files.get(0, body.off, u64::from(body.len)) {
            Some(bytes) => tag.read_v2(bytes, major),
            None => return Reply::Need(vec![body]),
        }
    }
    Reply::Match(
        args.iter()
            .all(|(k, v)| tag.field(k).is_some_and(|f| f.eq_ignore_ascii_case(v))),
    )
}

/// The major version and body length announced by a 10-byte ID3v2 header, if it is one.
fn v2_header(header: &[u8]) -> Option<(u8, u32)> {
    if header.len() < 10 || &header[..3] != b"ID3" {
        return None;
    }
    Some((header[3], syncsafe(&header[6..10])))
}

fn syncsafe(b: &[u8]) -> u32 {
    b.iter().fold(0, |acc, x| (acc << 7) | u32::from(x & 0x7f))
}

#[derive(Default)]
struct Tag {
    artist: Option<String>,
    title: Option<String>,
    album: Option<String>,
    year: Option<String>,
}

impl Tag {
    fn field(&self, name: &str) -> Option<&str> {
        match name {
            "artist" => self.artist.as_deref(),
            "title" => self.title.as_deref(),
            "album" => self.album.as_deref(),
            "year" => self.year.as_deref(),
            _ => None,
        }
    }

    fn read_v1(&mut self, t: &[u8]) {
        if t.len() != 128 || &t[..3] != b"TAG" {
            return;
        }
        let text = |r: std::ops::Range<usize>| {
            let s: String = t[r]
                .iter()
                .take_while(|b| **b != 0)
                .map(|b| char::from(*b))
                .collect();
            Some(s.trim_end().to_string()).filter(|s| !s.is_empty())
        };
        self.title = text(3..33);
        self.artist = text(33..63);
        self.album = text(63..93);
        self.year = text(93..97);
    }

    /// ID3v2.3/2.4 text frames: v2.4 frame sizes are syncsafe, v2.3's plain big-endian.
    fn read_v2(&mut self, mut body: &[u8], major: u8) {
        while body.len() >= 10 && body[0] != 0 {
            let id = &body[..4];
            let size = match major {
                4 => syncsafe(&body[4..8]),
                _ => u32::from_be_bytes([body[4], body[5], body[6], body[7]]),
            } as usize;
            let Some(frame) = body.get(10..10 + size) else {
                return;
            };
            let value = decode_text(frame);
            match id {
                b"TPE1" => self.artist = value,
                b"TIT2" => self.title = value,
                b"TALB" => self.album = value,
                b"TYER" | b"TDRC" => self.year = value,
                _ => {}
            }
            body = &body[10 + size..];
        }
    }
}

/// A text frame's value: encoding byte 0 (Latin-1) or 3 (UTF-8); UTF-16 (1, 2) decoded too.
fn decode_text(frame: &[u8]) -> Option<String> {
    let (enc, data) = frame.split_first()?;
    let s = match enc {
        0 => data.iter().map(|b| char::from(*b)).collect(),
        1 | 2 => {
            let units: Vec<u16> = data
                .chunks_exact(2)
                .map(|c| u16::from_le_bytes([c[0], c[1]]))
                .collect();
            let units = units.strip_prefix(&[0xfeff]).unwrap_or(&units);
            String::from_utf16_lossy(units)
        }
        _ => String::from_utf8_lossy(data).into_owned(),
    };
    Some(s.trim_end_matches('\0').to_string()).filter(|s| !s.is_empty())
}
