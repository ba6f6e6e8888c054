//! The `id3merge` resolver extension: merges the tags of an MP3 file that two clients changed
//! in different fields (one fixed the title, the other the year). The tags are three-way
//! merged field by field: a field changed on one side only takes that change, the same change
//! on both sides is taken once, and different changes to one field are a conflict, which the
//! extension declines (roam then keeps both versions). The answer is a patch of the remote
//! version: the remote ID3v2 tag rebuilt (in the same space where the merged frames fit) and
//! the changed ID3v1 fields rewritten in place.
//!
//! It reads tags, not audio: the ID3v2 header and the ID3v1 tail of the three versions, then
//! the ID3v2 bodies, and the audio of base and local only to make sure the local change did
//! not touch it (an audio change cannot be merged by tags). It declines ID3v2 tags with
//! flags (unsynchronisation, extended headers) and versions of different ID3v2 majors.

use roam_ext_abi::{Edit, Files, Range, Reply, Request};

roam_ext_abi::export!(handle);

const BASE: u8 = 0;
const LOCAL: u8 = 1;
const REMOTE: u8 = 2;
/// Largest ID3v2 tag body it reads (cover pictures included).
const MAX_TAG: u64 = 4 << 20;
/// Bytes of audio (base and local together) it is willing to compare.
const MAX_AUDIO: u64 = 56 << 20;
/// Padding of a rebuilt ID3v2 tag that no longer fits in the remote's space.
const PADDING: usize = 1024;
/// The fields of an ID3v1 tag: name and byte range in the 128-byte tail.
const V1_FIELDS: [(&str, usize, usize); 6] = [
    ("title", 3, 33),
    ("artist", 33, 63),
    ("album", 63, 93),
    ("year", 93, 97),
    ("comment", 97, 127),
    ("genre", 127, 128),
];

fn handle(req: Request) -> Reply {
    match req {
        Request::Resolve { files, .. } => match study(&files) {
            Ok(versions) => merge(&versions, files.sizes[2]).unwrap_or_else(Reply::Fail),
            Err(reply) => reply,
        },
        _ => Reply::Fail("id3merge only merges conflicts".into()),
    }
}

/// What one version holds: its ID3v2 tag (major version, frames, bytes it takes at the start)
/// and its ID3v1 tail.
struct Version {
    v2: Option<V2>,
    v1: Option<Vec<u8>>,
}

struct V2 {
    major: u8,
    frames: Vec<Frame>,
    /// Header and body: where the audio starts.
    len: u64,
}

/// A frame: its id and its whole bytes (header included).
#[derive(Clone, PartialEq, Eq)]
struct Frame {
    id: [u8; 4],
    raw: Vec<u8>,
}

/// Reads the three versions through the conversation: `Err` asks for more (or declines).
fn study(files: &Files) -> Result<[Version; 3], Reply> {
    if files.sizes.len() != 3 {
        return Err(Reply::Fail(
            "expected base, local and remote versions".into(),
        ));
    }
    let size = |f: u8| files.sizes[usize::from(f)];
    let ends = [BASE, LOCAL, REMOTE]
        .into_iter()
        .flat_map(|f| [head(f, size(f)), tail(f, size(f))]);
    need(files, ends)?;
    let bodies = [BASE, LOCAL, REMOTE]
        .into_iter()
        .map(|f| v2_body(files, f).map_err(Reply::Fail))
        .collect::<Result<Vec<_>, _>>()?;
    need(files, bodies.iter().flatten().copied())?;
    let versions = [BASE, LOCAL, REMOTE].map(|f| version(files, f));
    let [base, local, remote] = versions;
    let (base, local, remote) = (
        base.map_err(Reply::Fail)?,
        local.map_err(Reply::Fail)?,
        remote.map_err(Reply::Fail)?,
    );
    let audio = [(BASE, &base), (LOCAL, &local)].map(|(f, v)| audio(f, v, size(f)));
    if audio.iter().map(|r| u64::from(r.len)).sum::<u64>() > MAX_AUDIO {
        return Err(Reply::Fail("too much audio to compare".into()));
    }
    need(files, audio.iter().copied())?;
    let bytes = |r: &Range| files.get(r.file, r.off, u64::from(r.len));
    if bytes(&audio[0]) != bytes(&audio[1]) {
        return Err(Reply::Fail(
            "the local change is not to the tags alone".into(),
        ));
    }
    Ok([base, local, remote])
}

/// `Err(Need)` for those of `ranges` not supplied yet.
fn need(files: &Files, ranges: impl Iterator<Item = Range>) -> Result<(), Reply> {
    let missing: Vec<Range> = ranges.filter(|r| r.len > 0 && !files.has(r)).collect();
    match missing.is_empty() {
        true => Ok(()),
        false => Err(Reply::Need(missing)),
    }
}

fn head(file: u8, size: u64) -> Range {
    Range {
        file,
        off: 0,
        len: size.min(10) as u32,
    }
}

fn tail(file: u8, size: u64) -> Range {
    Range {
        file,
        off: size.saturating_sub(128),
        len: size.min(128) as u32,
    }
}

/// The ID3v2 header of `file`: (major, flags, body length), if it has one.
fn v2_header(files: &Files, file: u8) -> Option<(u8, u8, u64)> {
    let h = files.get(file, 0, 10)?;
    (&h[..3] == b"ID3").then(|| (h[3], h[5], u64::from(syncsafe(&h[6..10]))))
}

/// The range of the ID3v2 body of `file`, if it has a tag.
fn v2_body(files: &Files, file: u8) -> Result<Option<Range>, String> {
    let Some((_, _, len)) = v2_header(files, file) else {
        return Ok(None);
    };
    if len > MAX_TAG || 10 + len > files.sizes[usize::from(file)] {
        return Err("ID3v2 tag too large or cut short".into());
    }
    Ok(Some(Range {
        file,
        off: 10,
        len: len as u32,
    }))
}

fn version(files: &Files, file: u8) -> Result<Version, String> {
    let size = files.sizes[usize::from(file)];
    let v1 = files
        .get(file, size.saturating_sub(128), 128)
        .filter(|t| size >= 128 && t.starts_with(b"TAG"))
        .map(<[u8]>::to_vec);
    let v2 = match v2_header(files, file) {
        None => None,
        Some((_, flags, _)) if flags != 0 => {
            return Err("ID3v2 tags with flags are not merged".into())
        }
        Some((major, _, len)) => Some(V2 {
            major,
            frames: frames(files.get(file, 10, len).unwrap_or(&[]), major)?,
            len: 10 + len,
        }),
    };
    let v1_len = if v1.is_some() { 128 } else { 0 };
    if v2.as_ref().map_or(0, |t| t.len) + v1_len > size {
        return Err("the tags overlap".into());
    }
    Ok(Version { v2, v1 })
}

/// The range of a version's audio: between its tags.
fn audio(file: u8, v: &Version, size: u64) -> Range {
    let start = v.v2.as_ref().map_or(0, |t| t.len);
    let end = size - if v.v1.is_some() { 128 } else { 0 };
    Range {
        file,
        off: start,
        len: (end - start) as u32,
    }
}

/// The frames of an ID3v2.3/2.4 body (v2.4 frame sizes are syncsafe), up to the padding.
fn frames(mut body: &[u8], major: u8) -> Result<Vec<Frame>, String> {
    let mut out = Vec::new();
    while body.len() >= 10 && body[0] != 0 {
        let size = match major {
            4 => syncsafe(&body[4..8]),
            _ => u32::from_be_bytes([body[4], body[5], body[6], body[7]]),
        } as usize;
        let raw = body
            .get(..10 + size)
            .ok_or("an ID3v2 frame runs past its tag")?;
        out.push(Frame {
            id: [body[0], body[1], body[2], body[3]],
            raw: raw.to_vec(),
        });
        body = &body[10 + size..];
    }
    Ok(out)
}

fn syncsafe(b: &[u8]) -> u32 {
    b.iter().fold(0, |acc, x| (acc << 7) | u32::from(x & 0x7f))
}

fn to_syncsafe(n: usize) -> [u8; 4] {
    [21, 14, 7, 0].map(|shift| (n >> shift) as u8 & 0x7f)
}

/// The three-way choice for one value: `Err(())` when both sides changed it differently.
fn pick<T: PartialEq + Clone>(base: &T, local: &T, remote: &T) -> Result<T, ()> {
    match (local == base, remote == base, local == remote) {
        (true, _, _) | (_, _, true) => Ok(remote.clone()),
        (false, true, _) => Ok(local.clone()),
        (false, false, false) => Err(()),
    }
}

fn merge(v: &[Version; 3], remote_size: u64) -> Result<Reply, String> {
    let [base, local, remote] = v;
    let mut edits = Vec::new();
    edits.extend(merge_v2(base, local, remote)?);
    edits.extend(merge_v1(base, local, remote, remote_size)?);
    Ok(Reply::Patch(edits))
}

/// The edit of the remote's ID3v2 tag, if the merge changes it.
fn merge_v2(base: &Version, local: &Version, remote: &Version) -> Result<Option<Edit>, String> {
    let tags = [&base.v2, &local.v2, &remote.v2];
    let mut majors = tags.iter().filter_map(|t| t.as_ref().map(|t| t.major));
    let Some(major) = majors.next() else {
        return Ok(None);
    };
    if majors.any(|m| m != major) {
        return Err("the versions have different ID3v2 versions".into());
    }
    let frames = tags.map(|t| keyed(t.as_ref().map_or(&[][..], |t| &t.frames)));
    let [base_f, local_f, remote_f] = &frames;
    // The remote's frames in its order, then frames only the local side has, in its order.
    let mut keys: Vec<&(Vec<u8>, usize)> = remote_f.iter().map(|(k, _)| k).collect();
    keys.extend(
        local_f
            .iter()
            .map(|(k, _)| k)
            .filter(|k| !remote_f.iter().any(|(r, _)| r == *k)),
    );
    let find = |f: &[((Vec<u8>, usize), Frame)], k: &(Vec<u8>, usize)| {
        f.iter().find(|(key, _)| key == k).map(|(_, fr)| fr.clone())
    };
    let mut merged = Vec::new();
    for k in keys {
        let chosen =
            pick(&find(base_f, k), &find(local_f, k), &find(remote_f, k)).map_err(|()| {
                format!(
                    "both sides changed the {} frame",
                    String::from_utf8_lossy(&k.0)
                )
            })?;
        merged.extend(chosen);
    }
    let unchanged: Vec<Frame> = remote_f.iter().map(|(_, f)| f.clone()).collect();
    if merged == unchanged {
        return Ok(None);
    }
    let room = remote.v2.as_ref().map_or(0, |t| t.len as usize - 10);
    Ok(Some(Edit {
        off: 0,
        del: remote.v2.as_ref().map_or(0, |t| t.len),
        ins: build_v2(major, &merged, room),
    }))
}

/// Frames keyed by (id, how many of that id came before), so repeated ids stay apart.
fn keyed(frames: &[Frame]) -> Vec<((Vec<u8>, usize), Frame)> {
    frames
        .iter()
        .enumerate()
        .map(|(i, f)| {
            let nth = frames[..i].iter().filter(|g| g.id == f.id).count();
            ((f.id.to_vec(), nth), f.clone())
        })
        .collect()
}

/// An ID3v2 tag of `frames`, padded to `room` bytes of body if they fit (so the audio stays
/// where it is), else with some padding of its own.
fn build_v2(major: u8, frames: &[Frame], room: usize) -> Vec<u8> {
    let mut body: Vec<u8> = frames.iter().flat_map(|f| f.raw.iter().copied()).collect();
    let len = if body.len() <= room {
        room
    } else {
        body.len() + PADDING
    };
    body.resize(len, 0);
    let mut tag = vec![b'I', b'D', b'3', major, 0, 0];
    tag.extend_from_slice(&to_syncsafe(len));
    tag.extend_from_slice(&body);
    tag
}

/// The edits of the remote's ID3v1 tail: field by field when all three have one, else the
/// whole tail (added or removed on one side).
fn merge_v1(
    base: &Version,
    local: &Version,
    remote: &Version,
    remote_size: u64,
) -> Result<Vec<Edit>, String> {
    let (Some(b), Some(l), Some(r)) = (&base.v1, &local.v1, &remote.v1) else {
        let whole = pick(&base.v1, &local.v1, &remote.v1)
            .map_err(|()| "both sides changed the ID3v1 tag".to_string())?;
        if whole == remote.v1 {
            return Ok(Vec::new());
        }
        let at = remote_size - if remote.v1.is_some() { 128 } else { 0 };
        return Ok(vec![Edit {
            off: at,
            del: remote_size - at,
            ins: whole.unwrap_or_default(),
        }]);
    };
    let start = remote_size - 128;
    let mut edits = Vec::new();
    for (name, from, to) in V1_FIELDS {
        let field = |t: &Vec<u8>| t[from..to].to_vec();
        let chosen = pick(&field(b), &field(l), &field(r))
            .map_err(|()| format!("both sides changed the ID3v1 {name}"))?;
        if chosen != field(r) {
            edits.push(Edit {
                off: start + from as u64,
                del: (to - from) as u64,
                ins: chosen,
            });
        }
    }
    Ok(edits)
}

#[cfg(test)]
mod tests {
    use super::*;
    use roam_ext_abi::Chunk;

    fn frame(id: &[u8; 4], text: &str) -> Vec<u8> {
        let mut f = id.to_vec();
        f.extend_from_slice(&(text.len() as u32 + 1).to_be_bytes());
        f.extend_from_slice(&[0, 0, 0]);
        f.extend_from_slice(text.as_bytes());
        f
    }

    /// An MP3-like file: an ID3v2.3 tag (title, artist, year), audio, an ID3v1 tail.
    fn mp3(title: &str, artist: &str, year: &str, audio: &[u8]) -> Vec<u8> {
        let mut body = [
            frame(b"TIT2", title),
            frame(b"TPE1", artist),
            frame(b"TYER", year),
        ]
        .concat();
        body.resize(256, 0);
        let mut f = b"ID3\x03\0\0".to_vec();
        f.extend_from_slice(&to_syncsafe(body.len()));
        f.extend_from_slice(&body);
        f.extend_from_slice(audio);
        let mut v1 = vec![0u8; 128];
        v1[..3].copy_from_slice(b"TAG");
        v1[3..3 + title.len()].copy_from_slice(title.as_bytes());
        v1[93..97].copy_from_slice(year.as_bytes());
        f.extend_from_slice(&v1);
        f
    }

    /// Plays roam's part of the conversation, then applies the patch to the remote version.
    fn resolve(versions: [&[u8]; 3]) -> Result<Vec<u8>, String> {
        let mut files = Files {
            sizes: versions.iter().map(|v| v.len() as u64).collect(),
            chunks: Vec::new(),
        };
        for _ in 0..5 {
            let req = Request::Resolve {
                name: "a.mp3".into(),
                files: files.clone(),
            };
            match handle(req) {
                Reply::Need(ranges) => files.chunks.extend(ranges.iter().map(|r| {
                    Chunk {
                        file: r.file,
                        off: r.off,
                        data: versions[usize::from(r.file)]
                            [r.off as usize..(r.off + u64::from(r.len)) as usize]
                            .to_vec(),
                    }
                })),
                Reply::Patch(edits) => {
                    let mut out = versions[2].to_vec();
                    for e in edits.iter().rev() {
                        let (off, del) = (e.off as usize, e.del as usize);
                        out.splice(off..off + del, e.ins.iter().copied());
                    }
                    return Ok(out);
                }
                Reply::Fail(why) => return Err(why),
                other => panic!("{other:?}"),
            }
        }
        panic!("too many rounds")
    }

    #[test]
    fn different_fields_merge() {
        let audio = vec![0x55; 4096];
        let base = mp3("Song", "Band", "1999", &audio);
        let local = mp3("Better Title", "Band", "1999", &audio);
        let remote = mp3("Song", "Band", "2001", &audio);
        let merged = resolve([&base, &local, &remote]).unwrap();
        assert_eq!(merged, mp3("Better Title", "Band", "2001", &audio));
    }

    #[test]
    fn the_same_field_changed_twice_is_declined() {
        let audio = vec![0x55; 4096];
        let base = mp3("Song", "Band", "1999", &audio);
        let local = mp3("Song", "Band", "2000", &audio);
        let remote = mp3("Song", "Band", "2001", &audio);
        let why = resolve([&base, &local, &remote]).unwrap_err();
        assert!(why.contains("TYER"), "{why}");
    }

    #[test]
    fn a_local_audio_change_is_declined() {
        let base = mp3("Song", "Band", "1999", &[1; 4096]);
        let local = mp3("Song", "Band", "1999", &[2; 4096]);
        let remote = mp3("Song 2", "Band", "1999", &[1; 4096]);
        let why = resolve([&base, &local, &remote]).unwrap_err();
        assert!(why.contains("not to the tags"), "{why}");
    }
}
