//! The `camera` device source: a camera's store (a directory of JPEGs, in subdirectories
//! or not) shown as folders by the day each photo was taken, `2024-06-01/IMG_0001.jpg`,
//! from EXIF's DateTimeOriginal (else the IFD0 DateTime; `undated/` without either). Each
//! photo is its whole source file, so roam serves its bytes by ranges of that file.
//!
//! It reads only the head of each `*.jpg`/`*.jpeg`: 4 KiB first, then exactly as much more
//! as the EXIF segment needs (at most 256 KiB). Files of another name or that are not JPEGs
//! are left out. A photo in a subdirectory is named by its path with `_` for `/`
//! (`100CANON_IMG_0001.jpg`), so names from different folders never clash.
//!
//! The listing's state is the number of the next file to read (4 bytes).

use roam_ext_abi::{Reply, Request, SourceEntry, SourceFile, Span, SpanData};

roam_ext_abi::export!(handle);

/// Bytes of a file read first: the EXIF segment of most cameras ends well before.
const HEAD: u64 = 4096;
/// The most of a file's head read to find its date.
const MAX_HEAD: u64 = 256 << 10;
/// Files read per step (the core allows 64 spans).
const PER_STEP: usize = 48;

fn handle(req: Request) -> Reply {
    match req {
        Request::SourceList {
            files,
            state,
            spans,
        } => step(&files, &state, &spans),
        _ => Reply::Fail("camera is a device source".into()),
    }
}

/// One step: entries for the heads supplied, then the next heads to read.
fn step(files: &[SourceFile], state: &[u8], spans: &[SpanData]) -> Reply {
    let mut next = state
        .get(..4)
        .map_or(0, |b| u32::from_le_bytes([b[0], b[1], b[2], b[3]]) as usize);
    let mut entries = Vec::new();
    let mut need = Vec::new();
    for s in spans {
        let Some(f) = files.get(s.file as usize) else {
            continue;
        };
        match date_of(&s.data) {
            Head::Date(day) => entries.push(entry(s.file, f, day)),
            Head::Undated => entries.push(entry(s.file, f, "undated".into())),
            Head::NotJpeg => {}
            Head::More(len) => match len.min(f.size) {
                len if len > s.data.len() as u64 && len <= MAX_HEAD => need.push(Span {
                    file: s.file,
                    off: 0,
                    len: len as u32,
                }),
                _ => entries.push(entry(s.file, f, "undated".into())),
            },
        }
    }
    while need.len() < PER_STEP && next < files.len() {
        let f = &files[next];
        if is_photo(&f.path) && f.size > 0 {
            need.push(Span {
                file: next as u32,
                off: 0,
                len: f.size.min(HEAD) as u32,
            });
        }
        next += 1;
    }
    Reply::Entries {
        entries,
        state: (next as u32).to_le_bytes().to_vec(),
        need,
    }
}

fn is_photo(path: &str) -> bool {
    let lower = path.to_ascii_lowercase();
    lower.ends_with(".jpg") || lower.ends_with(".jpeg")
}

fn entry(file: u32, f: &SourceFile, dir: String) -> SourceEntry {
    SourceEntry {
        dir,
        name: f.path.replace('/', "_"),
        file,
        off: 0,
        len: f.size,
        mtime: 0,
    }
}

/// What a file's head says.
#[derive(Debug, PartialEq)]
enum Head {
    /// `YYYY-MM-DD`.
    Date(String),
    Undated,
    NotJpeg,
    /// The first `n` bytes are needed to tell.
    More(u64),
}

/// The day a JPEG was taken, from its head (`data`, from offset 0).
fn date_of(data: &[u8]) -> Head {
    if data.get(..2) != Some(&[0xff, 0xd8]) {
        return Head::NotJpeg;
    }
    let mut pos = 2usize;
    loop {
        let Some(&[ff, marker, hi, lo]) = data.get(pos..pos + 4) else {
            return Head::More(pos as u64 + HEAD);
        };
        if ff != 0xff {
            return Head::Undated;
        }
        match marker {
            // Fill bytes before a marker.
            0xff => {
                pos += 1;
                continue;
            }
            // Start of scan or end of image: no EXIF before the image data.
            0xda | 0xd9 => return Head::Undated,
            0x01 | 0xd0..=0xd7 => {
                pos += 2;
                continue;
            }
            _ => {}
        }
        let end = pos + 2 + usize::from(u16::from_be_bytes([hi, lo]));
        if marker == 0xe1 && data.get(pos + 4..pos + 10) == Some(b"Exif\0\0") {
            return match data.get(pos + 10..end) {
                Some(tiff) => exif_date(tiff).map_or(Head::Undated, Head::Date),
                None => Head::More(end as u64),
            };
        }
        pos = end;
    }
}

/// DateTimeOriginal (Exif IFD, 0x9003), else DateTime (IFD0, 0x0132), as `YYYY-MM-DD`.
fn exif_date(tiff: &[u8]) -> Option<String> {
    let t = Tiff {
        b: tiff,
        le: match tiff.get(..2)? {
            b"II" => true,
            b"MM" => false,
            _ => return None,
        },
    };
    let ifd0 = t.u32(4)? as usize;
    let original = t
        .find(ifd0, 0x8769)
        .and_then(|(_, _, exif)| t.find(exif as usize, 0x9003))
        .and_then(|e| t.day(e));
    original.or_else(|| t.find(ifd0, 0x0132).and_then(|e| t.day(e)))
}

/// A TIFF structure in the byte order its header says.
struct Tiff<'a> {
    b: &'a [u8],
    le: bool,
}

impl Tiff<'_> {
    fn u16(&self, at: usize) -> Option<u16> {
        let b: [u8; 2] = self.b.get(at..at + 2)?.try_into().ok()?;
        Some(if self.le {
            u16::from_le_bytes(b)
        } else {
            u16::from_be_bytes(b)
        })
    }

    fn u32(&self, at: usize) -> Option<u32> {
        let b: [u8; 4] = self.b.get(at..at + 4)?.try_into().ok()?;
        Some(if self.le {
            u32::from_le_bytes(b)
        } else {
            u32::from_be_bytes(b)
        })
    }

    /// The entry `tag` of the IFD at `ifd`: its type, count and value (or offset).
    fn find(&self, ifd: usize, tag: u16) -> Option<(u16, u32, u32)> {
        let n = usize::from(self.u16(ifd)?);
        (0..n).find_map(|i| {
            let at = ifd + 2 + 12 * i;
            (self.u16(at)? == tag).then_some((
                self.u16(at + 2)?,
                self.u32(at + 4)?,
                self.u32(at + 8)?,
            ))
        })
    }

    /// An ASCII `YYYY:MM:DD HH:MM:SS` entry's day.
    fn day(&self, (kind, count, off): (u16, u32, u32)) -> Option<String> {
        const ASCII: u16 = 2;
        if kind != ASCII || count < 10 {
            return None;
        }
        let s = self.b.get(off as usize..off as usize + 10)?;
        let digits = [0, 1, 2, 3, 5, 6, 8, 9]
            .iter()
            .all(|&i| s[i].is_ascii_digit());
        (digits && s[4] == b':' && s[7] == b':').then(|| {
            let s = std::str::from_utf8(s).unwrap_or_default();
            format!("{}-{}-{}", &s[..4], &s[5..7], &s[8..10])
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A JPEG head: SOI, an APP1 Exif segment with IFD0 → Exif IFD → DateTimeOriginal
    /// (little-endian or big-endian TIFF), then SOS.
    fn jpeg(date: &[u8; 19], le: bool) -> Vec<u8> {
        let w16 = |v: u16| if le { v.to_le_bytes() } else { v.to_be_bytes() };
        let w32 = |v: u32| if le { v.to_le_bytes() } else { v.to_be_bytes() };
        let mut t = Vec::new();
        t.extend_from_slice(if le { b"II" } else { b"MM" });
        t.extend_from_slice(&w16(42));
        t.extend_from_slice(&w32(8));
        // IFD0 at 8: one entry, the Exif IFD pointer (26 = 8 + 2 + 12 + 4).
        t.extend_from_slice(&w16(1));
        t.extend_from_slice(&w16(0x8769));
        t.extend_from_slice(&w16(4));
        t.extend_from_slice(&w32(1));
        t.extend_from_slice(&w32(26));
        t.extend_from_slice(&w32(0));
        // Exif IFD at 26: DateTimeOriginal, its value at 44.
        t.extend_from_slice(&w16(1));
        t.extend_from_slice(&w16(0x9003));
        t.extend_from_slice(&w16(2));
        t.extend_from_slice(&w32(20));
        t.extend_from_slice(&w32(44));
        t.extend_from_slice(&w32(0));
        t.extend_from_slice(date);
        t.push(0);
        let mut j = vec![0xff, 0xd8, 0xff, 0xe1];
        j.extend_from_slice(&((t.len() + 8) as u16).to_be_bytes());
        j.extend_from_slice(b"Exif\0\0");
        j.extend_from_slice(&t);
        j.extend_from_slice(&[0xff, 0xda, 0, 2]);
        j
    }

    #[test]
    fn dates_from_either_byte_order() {
        assert_eq!(
            date_of(&jpeg(b"2024:06:01 10:00:00", true)),
            Head::Date("2024-06-01".into())
        );
        assert_eq!(
            date_of(&jpeg(b"1999:12:31 23:59:59", false)),
            Head::Date("1999-12-31".into())
        );
        assert_eq!(date_of(&jpeg(b"garbage!garbage!gar", true)), Head::Undated);
    }

    #[test]
    fn short_heads_ask_for_more_and_others_are_not_photos() {
        let j = jpeg(b"2024:06:01 10:00:00", true);
        assert_eq!(date_of(&j[..20]), Head::More(j.len() as u64 - 4));
        assert_eq!(date_of(b"GIF89a"), Head::NotJpeg);
        assert_eq!(date_of(&[0xff, 0xd8, 0xff, 0xda, 0, 2]), Head::Undated);
    }

    #[test]
    fn a_listing_reads_heads_then_files_them_by_day() {
        let j = jpeg(b"2024:06:01 10:00:00", true);
        let files = vec![
            SourceFile {
                path: "DCIM/IMG_1.JPG".into(),
                size: j.len() as u64,
                mtime: 1,
            },
            SourceFile {
                path: "notes.txt".into(),
                size: 9,
                mtime: 1,
            },
        ];
        let Reply::Entries {
            entries,
            state,
            need,
        } = step(&files, &[], &[])
        else {
            panic!()
        };
        assert!(entries.is_empty());
        assert_eq!(
            need,
            [Span {
                file: 0,
                off: 0,
                len: j.len() as u32
            }]
        );
        let spans = [SpanData {
            file: 0,
            off: 0,
            data: j,
        }];
        let Reply::Entries { entries, need, .. } = step(&files, &state, &spans) else {
            panic!()
        };
        assert!(need.is_empty());
        assert_eq!(
            (entries[0].dir.as_str(), entries[0].name.as_str()),
            ("2024-06-01", "DCIM_IMG_1.JPG")
        );
    }
}
