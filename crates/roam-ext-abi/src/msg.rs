//! Requests roam sends and replies extensions give, one variant per extension kind.

use crate::wire::{DecodeError, Reader, Writer};

/// A byte range of one of the files under study that an extension asks for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Range {
    /// Which file: 0 for query; 0 base, 1 local, 2 remote for resolve.
    pub file: u8,
    pub off: u64,
    pub len: u32,
}

/// A range roam fetched, supplied back to the extension.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Chunk {
    pub file: u8,
    pub off: u64,
    pub data: Vec<u8>,
}

/// The files under study: their sizes and the ranges fetched so far.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Files {
    pub sizes: Vec<u64>,
    pub chunks: Vec<Chunk>,
}

impl Files {
    /// The bytes `off..off+len` of `file` if one supplied chunk covers them.
    pub fn get(&self, file: u8, off: u64, len: u64) -> Option<&[u8]> {
        self.chunks.iter().find_map(|c| {
            let start = off.checked_sub(c.off)?;
            let end = start.checked_add(len)?;
            let (start, end) = (usize::try_from(start).ok()?, usize::try_from(end).ok()?);
            (c.file == file).then(|| c.data.get(start..end)).flatten()
        })
    }

    /// Whether `range` lies inside a chunk already supplied.
    pub fn has(&self, range: &Range) -> bool {
        self.get(range.file, range.off, u64::from(range.len))
            .is_some()
    }
}

/// One entry of a patch against the remote version: delete `del` bytes at `off`, insert `ins`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Edit {
    pub off: u64,
    pub del: u64,
    pub ins: Vec<u8>,
}

/// An eviction candidate the cache offers a policy.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Candidate {
    pub name: String,
    pub size: u64,
    /// Milliseconds since the epoch of the last use.
    pub last_use: u64,
}

/// What a layer is asked to transform.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum LayerOp {
    /// File contents on their way to the program (read).
    Decode = 0,
    /// File contents on their way to storage (write).
    Encode = 1,
    /// A name on its way to the program (listing).
    DecodeName = 2,
    /// A name on its way to storage (lookup).
    EncodeName = 3,
}

/// What a frame codec (a stream graft that changes length) is asked.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum FrameOp {
    /// Which codec it is (answer [`Reply::Codec`]); the other fields are empty.
    Describe = 0,
    /// Plaintext frame `n` → its stored bytes.
    Encode = 1,
    /// Stored frame `n` → exactly `len` plaintext bytes.
    Decode = 2,
}

/// What an archive member is, as an archive extension lists it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum MemberKind {
    File = 0,
    Dir = 1,
    Symlink = 2,
}

/// One member of an archive, as the extension read it from the archive's directory (zip)
/// or headers (tar). Names are the archive's own: the core validates them before use.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Member {
    /// `/`-separated path inside the archive.
    pub name: String,
    pub kind: MemberKind,
    /// Bytes of the member's contents (after decompression).
    pub size: u64,
    /// Permission bits (`0o7777`), 0 when the archive has none.
    pub mode: u32,
    /// Seconds since the epoch, 0 when unknown.
    pub mtime: u64,
    /// The target of a symlink; empty otherwise.
    pub target: String,
    /// Where the member is, opaque to the core: handed back in [`Request::ArchiveExtract`].
    pub at: u64,
    /// How it is stored, opaque to the core too (e.g. a zip compression method).
    pub method: u16,
}

/// A file under a device source's URL, as roam lists it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SourceFile {
    /// `/`-separated path below the source's URL.
    pub path: String,
    pub size: u64,
    /// Seconds since the epoch, 0 when unknown.
    pub mtime: u64,
}

/// A byte range of one of a source's files (numbered as listed in [`Request::SourceList`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Span {
    pub file: u32,
    pub off: u64,
    pub len: u32,
}

/// A span roam fetched, supplied back to the extension.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SpanData {
    pub file: u32,
    pub off: u64,
    pub data: Vec<u8>,
}

/// One regular file of the tree a device source shows: `dir/name`, whose bytes are
/// `off..off+len` of source file `file`. Directories are implied by the files in them.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SourceEntry {
    /// `/`-separated directory, empty for the root.
    pub dir: String,
    /// One component.
    pub name: String,
    pub file: u32,
    pub off: u64,
    pub len: u64,
    /// Seconds since the epoch, 0 to take the source file's.
    pub mtime: u64,
}

/// What roam asks an extension.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Request {
    /// Does this file match `args`? (transducer)
    Query {
        name: String,
        args: Vec<(String, String)>,
        files: Files,
    },
    /// Merge a write-back conflict: files 0 base, 1 local, 2 remote; answer a patch of remote.
    Resolve { name: String, files: Files },
    /// Transform data (or a name) on the way through a mount.
    Layer {
        op: LayerOp,
        off: u64,
        data: Vec<u8>,
    },
    /// Pick an eviction victim among `candidates`.
    Policy {
        args: Vec<String>,
        candidates: Vec<Candidate>,
    },
    /// A plain computation (benchmarks and fault probes): `op` on `data`.
    Compute { op: String, data: Vec<u8> },
    /// List the members of the archive `name` (file 0). A listing continues over many calls
    /// (tar headers are spread over the file): each call gets the `state` the previous reply
    /// gave and only the ranges that reply asked for, so no call re-sends earlier data.
    ArchiveList {
        name: String,
        state: Vec<u8>,
        files: Files,
    },
    /// Where the data of the member listed with `at` and `method` is (answer
    /// [`Reply::Extent`]), or the data itself (answer [`Reply::Bytes`] of `size` bytes).
    ArchiveExtract {
        name: String,
        at: u64,
        method: u16,
        size: u64,
        files: Files,
    },
    /// Fingerprints of a file of `size` bytes, one call per piece: `data` is its bytes
    /// from `off` (a multiple of 64), `state` what the previous call answered (empty at
    /// first). Answer [`Reply::Bytes`]: the new state, or after the last piece its MD5
    /// and SHA-256 (16 + 32 bytes).
    Digest {
        size: u64,
        off: u64,
        state: Vec<u8>,
        data: Vec<u8>,
    },
    /// Show the files under a device source's URL as a tree (answer [`Reply::Entries`]).
    /// Like an archive listing, a continued conversation: each call gets the `state` the
    /// previous reply gave and only the spans that reply asked for.
    SourceList {
        files: Vec<SourceFile>,
        state: Vec<u8>,
        spans: Vec<SpanData>,
    },
    /// Encode or decode frame `n` (`last`: the file's last frame) of the framed file whose
    /// 48-byte header is `header`; `len` is the frame's plaintext length. `key` is the
    /// file's own key (derived by roam from its master key and the header's file id) for a
    /// codec that asked for one, else empty.
    Frame {
        op: FrameOp,
        header: Vec<u8>,
        n: u32,
        last: bool,
        len: u32,
        key: Vec<u8>,
        data: Vec<u8>,
    },
    /// Which ranges of a remote file to fetch ahead (a read-ahead policy; answer
    /// [`Reply::Need`] with file 0, possibly empty): the file's `size`, the core's fetch
    /// granularity `chunk`, and the program's last reads of it (`history`, oldest first).
    Readahead {
        args: Vec<String>,
        size: u64,
        chunk: u32,
        history: Vec<Range>,
    },
}

/// What an extension answers.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Reply {
    /// Call me again with these ranges supplied.
    Need(Vec<Range>),
    Match(bool),
    Patch(Vec<Edit>),
    Bytes(Vec<u8>),
    /// Index into the offered candidates.
    Victim(u32),
    /// The extension declines, with a reason.
    Fail(String),
    /// Members found in this call; when `need` is not empty, call again with `state` and
    /// those ranges.
    Members {
        members: Vec<Member>,
        state: Vec<u8>,
        need: Vec<Range>,
    },
    /// A member's data is the archive's bytes `off..off+len`, stored as they are.
    Extent {
        off: u64,
        len: u64,
    },
    /// Entries of a device source's tree found in this call; when `need` is not empty, call
    /// again with `state` and those spans.
    Entries {
        entries: Vec<SourceEntry>,
        state: Vec<u8>,
        need: Vec<Span>,
    },
    /// What a frame codec is: its number in a framed file's header (files are read only by
    /// a codec of the number that wrote them), how many frames an empty file has (0, or 1
    /// for a codec that authenticates the end), and whether it needs a per-file key.
    Codec {
        id: u8,
        min_frames: u32,
        key: bool,
    },
}

impl Files {
    fn encode(&self, w: &mut Writer) {
        w.len(self.sizes.len());
        self.sizes.iter().for_each(|s| w.u64(*s));
        w.len(self.chunks.len());
        for c in &self.chunks {
            w.u8(c.file);
            w.u64(c.off);
            w.bytes(&c.data);
        }
    }
    fn decode(r: &mut Reader) -> Result<Self, DecodeError> {
        let sizes = (0..r.count(8)?)
            .map(|_| r.u64())
            .collect::<Result<_, _>>()?;
        let n = r.count(13)?;
        let chunks = (0..n)
            .map(|_| {
                Ok(Chunk {
                    file: r.u8()?,
                    off: r.u64()?,
                    data: r.bytes()?,
                })
            })
            .collect::<Result<_, DecodeError>>()?;
        Ok(Self { sizes, chunks })
    }
}

impl LayerOp {
    fn from_u8(v: u8) -> Result<Self, DecodeError> {
        [
            Self::Decode,
            Self::Encode,
            Self::DecodeName,
            Self::EncodeName,
        ]
        .into_iter()
        .find(|op| *op as u8 == v)
        .ok_or(DecodeError("unknown layer op"))
    }
}

impl FrameOp {
    fn from_u8(v: u8) -> Result<Self, DecodeError> {
        [Self::Describe, Self::Encode, Self::Decode]
            .into_iter()
            .find(|op| *op as u8 == v)
            .ok_or(DecodeError("unknown frame op"))
    }
}

fn decode_bool(r: &mut Reader) -> Result<bool, DecodeError> {
    match r.u8()? {
        0 => Ok(false),
        1 => Ok(true),
        _ => Err(DecodeError("not a boolean")),
    }
}

fn encode_ranges(w: &mut Writer, ranges: &[Range]) {
    w.len(ranges.len());
    for r in ranges {
        w.u8(r.file);
        w.u64(r.off);
        w.u32(r.len);
    }
}

fn decode_ranges(r: &mut Reader) -> Result<Vec<Range>, DecodeError> {
    (0..r.count(13)?)
        .map(|_| {
            Ok(Range {
                file: r.u8()?,
                off: r.u64()?,
                len: r.u32()?,
            })
        })
        .collect()
}

impl Member {
    /// Bytes of the smallest encoded member (empty name and target).
    const MIN_WIRE: usize = 4 + 1 + 8 + 4 + 8 + 4 + 8 + 2;

    fn encode(&self, w: &mut Writer) {
        w.str(&self.name);
        w.u8(self.kind as u8);
        w.u64(self.size);
        w.u32(self.mode);
        w.u64(self.mtime);
        w.str(&self.target);
        w.u64(self.at);
        w.u16(self.method);
    }

    fn decode(r: &mut Reader) -> Result<Self, DecodeError> {
        Ok(Member {
            name: r.str()?,
            kind: match r.u8()? {
                0 => MemberKind::File,
                1 => MemberKind::Dir,
                2 => MemberKind::Symlink,
                _ => return Err(DecodeError("unknown member kind")),
            },
            size: r.u64()?,
            mode: r.u32()?,
            mtime: r.u64()?,
            target: r.str()?,
            at: r.u64()?,
            method: r.u16()?,
        })
    }
}

impl SourceEntry {
    /// Bytes of the smallest encoded entry (empty dir and name).
    const MIN_WIRE: usize = 4 + 4 + 4 + 8 + 8 + 8;

    fn encode(&self, w: &mut Writer) {
        w.str(&self.dir);
        w.str(&self.name);
        w.u32(self.file);
        w.u64(self.off);
        w.u64(self.len);
        w.u64(self.mtime);
    }

    fn decode(r: &mut Reader) -> Result<Self, DecodeError> {
        Ok(SourceEntry {
            dir: r.str()?,
            name: r.str()?,
            file: r.u32()?,
            off: r.u64()?,
            len: r.u64()?,
            mtime: r.u64()?,
        })
    }
}

fn encode_spans(w: &mut Writer, spans: &[Span]) {
    w.len(spans.len());
    for s in spans {
        w.u32(s.file);
        w.u64(s.off);
        w.u32(s.len);
    }
}

fn decode_spans(r: &mut Reader) -> Result<Vec<Span>, DecodeError> {
    (0..r.count(16)?)
        .map(|_| {
            Ok(Span {
                file: r.u32()?,
                off: r.u64()?,
                len: r.u32()?,
            })
        })
        .collect()
}

fn encode_strs(w: &mut Writer, items: &[String]) {
    w.len(items.len());
    items.iter().for_each(|s| w.str(s));
}

fn decode_strs(r: &mut Reader) -> Result<Vec<String>, DecodeError> {
    (0..r.count(4)?).map(|_| r.str()).collect()
}

impl Request {
    pub fn encode(&self) -> Vec<u8> {
        let mut w = Writer::default();
        match self {
            Request::Query { name, args, files } => {
                w.u8(0);
                w.str(name);
                w.len(args.len());
                for (k, v) in args {
                    w.str(k);
                    w.str(v);
                }
                files.encode(&mut w);
            }
            Request::Resolve { name, files } => {
                w.u8(1);
                w.str(name);
                files.encode(&mut w);
            }
            Request::Layer { op, off, data } => {
                w.u8(2);
                w.u8(*op as u8);
                w.u64(*off);
                w.bytes(data);
            }
            Request::Policy { args, candidates } => {
                w.u8(3);
                encode_strs(&mut w, args);
                w.len(candidates.len());
                for c in candidates {
                    w.str(&c.name);
                    w.u64(c.size);
                    w.u64(c.last_use);
                }
            }
            Request::Compute { op, data } => {
                w.u8(4);
                w.str(op);
                w.bytes(data);
            }
            Request::ArchiveList { name, state, files } => {
                w.u8(5);
                w.str(name);
                w.bytes(state);
                files.encode(&mut w);
            }
            Request::ArchiveExtract {
                name,
                at,
                method,
                size,
                files,
            } => {
                w.u8(6);
                w.str(name);
                w.u64(*at);
                w.u16(*method);
                w.u64(*size);
                files.encode(&mut w);
            }
            Request::Digest {
                size,
                off,
                state,
                data,
            } => {
                w.u8(7);
                w.u64(*size);
                w.u64(*off);
                w.bytes(state);
                w.bytes(data);
            }
            Request::SourceList {
                files,
                state,
                spans,
            } => {
                w.u8(8);
                w.len(files.len());
                for f in files {
                    w.str(&f.path);
                    w.u64(f.size);
                    w.u64(f.mtime);
                }
                w.bytes(state);
                w.len(spans.len());
                for s in spans {
                    w.u32(s.file);
                    w.u64(s.off);
                    w.bytes(&s.data);
                }
            }
            Request::Frame {
                op,
                header,
                n,
                last,
                len,
                key,
                data,
            } => {
                w.u8(9);
                w.u8(*op as u8);
                w.bytes(header);
                w.u32(*n);
                w.u8(u8::from(*last));
                w.u32(*len);
                w.bytes(key);
                w.bytes(data);
            }
            Request::Readahead {
                args,
                size,
                chunk,
                history,
            } => {
                w.u8(10);
                encode_strs(&mut w, args);
                w.u64(*size);
                w.u32(*chunk);
                encode_ranges(&mut w, history);
            }
        }
        w.0
    }

    pub fn decode(buf: &[u8]) -> Result<Self, DecodeError> {
        let mut r = Reader::new(buf);
        let req = match r.u8()? {
            0 => {
                let name = r.str()?;
                let n = r.count(8)?;
                let args = (0..n)
                    .map(|_| Ok((r.str()?, r.str()?)))
                    .collect::<Result<_, DecodeError>>()?;
                Request::Query {
                    name,
                    args,
                    files: Files::decode(&mut r)?,
                }
            }
            1 => Request::Resolve {
                name: r.str()?,
                files: Files::decode(&mut r)?,
            },
            2 => Request::Layer {
                op: LayerOp::from_u8(r.u8()?)?,
                off: r.u64()?,
                data: r.bytes()?,
            },
            3 => {
                let args = decode_strs(&mut r)?;
                let n = r.count(20)?;
                let candidates = (0..n)
                    .map(|_| {
                        Ok(Candidate {
                            name: r.str()?,
                            size: r.u64()?,
                            last_use: r.u64()?,
                        })
                    })
                    .collect::<Result<_, DecodeError>>()?;
                Request::Policy { args, candidates }
            }
            4 => Request::Compute {
                op: r.str()?,
                data: r.bytes()?,
            },
            5 => Request::ArchiveList {
                name: r.str()?,
                state: r.bytes()?,
                files: Files::decode(&mut r)?,
            },
            6 => Request::ArchiveExtract {
                name: r.str()?,
                at: r.u64()?,
                method: r.u16()?,
                size: r.u64()?,
                files: Files::decode(&mut r)?,
            },
            7 => Request::Digest {
                size: r.u64()?,
                off: r.u64()?,
                state: r.bytes()?,
                data: r.bytes()?,
            },
            8 => {
                let files = (0..r.count(20)?)
                    .map(|_| {
                        Ok(SourceFile {
                            path: r.str()?,
                            size: r.u64()?,
                            mtime: r.u64()?,
                        })
                    })
                    .collect::<Result<_, DecodeError>>()?;
                let state = r.bytes()?;
                let spans = (0..r.count(16)?)
                    .map(|_| {
                        Ok(SpanData {
                            file: r.u32()?,
                            off: r.u64()?,
                            data: r.bytes()?,
                        })
                    })
                    .collect::<Result<_, DecodeError>>()?;
                Request::SourceList {
                    files,
                    state,
                    spans,
                }
            }
            9 => Request::Frame {
                op: FrameOp::from_u8(r.u8()?)?,
                header: r.bytes()?,
                n: r.u32()?,
                last: decode_bool(&mut r)?,
                len: r.u32()?,
                key: r.bytes()?,
                data: r.bytes()?,
            },
            10 => Request::Readahead {
                args: decode_strs(&mut r)?,
                size: r.u64()?,
                chunk: r.u32()?,
                history: decode_ranges(&mut r)?,
            },
            _ => return Err(DecodeError("unknown request kind")),
        };
        r.finish()?;
        Ok(req)
    }
}

impl Reply {
    pub fn encode(&self) -> Vec<u8> {
        let mut w = Writer::default();
        match self {
            Reply::Need(ranges) => {
                w.u8(0);
                encode_ranges(&mut w, ranges);
            }
            Reply::Match(m) => {
                w.u8(1);
                w.u8(u8::from(*m));
            }
            Reply::Patch(edits) => {
                w.u8(2);
                w.len(edits.len());
                for e in edits {
                    w.u64(e.off);
                    w.u64(e.del);
                    w.bytes(&e.ins);
                }
            }
            Reply::Bytes(b) => {
                w.u8(3);
                w.bytes(b);
            }
            Reply::Victim(i) => {
                w.u8(4);
                w.u32(*i);
            }
            Reply::Fail(why) => {
                w.u8(5);
                w.str(why);
            }
            Reply::Members {
                members,
                state,
                need,
            } => {
                w.u8(6);
                w.len(members.len());
                members.iter().for_each(|m| m.encode(&mut w));
                w.bytes(state);
                encode_ranges(&mut w, need);
            }
            Reply::Extent { off, len } => {
                w.u8(7);
                w.u64(*off);
                w.u64(*len);
            }
            Reply::Entries {
                entries,
                state,
                need,
            } => {
                w.u8(8);
                w.len(entries.len());
                entries.iter().for_each(|e| e.encode(&mut w));
                w.bytes(state);
                encode_spans(&mut w, need);
            }
            Reply::Codec {
                id,
                min_frames,
                key,
            } => {
                w.u8(9);
                w.u8(*id);
                w.u32(*min_frames);
                w.u8(u8::from(*key));
            }
        }
        w.0
    }

    pub fn decode(buf: &[u8]) -> Result<Self, DecodeError> {
        let mut r = Reader::new(buf);
        let reply = match r.u8()? {
            0 => Reply::Need(decode_ranges(&mut r)?),
            1 => Reply::Match(decode_bool(&mut r)?),
            2 => {
                let n = r.count(20)?;
                let edits = (0..n)
                    .map(|_| {
                        Ok(Edit {
                            off: r.u64()?,
                            del: r.u64()?,
                            ins: r.bytes()?,
                        })
                    })
                    .collect::<Result<_, DecodeError>>()?;
                Reply::Patch(edits)
            }
            3 => Reply::Bytes(r.bytes()?),
            4 => Reply::Victim(r.u32()?),
            5 => Reply::Fail(r.str()?),
            6 => {
                let n = r.count(Member::MIN_WIRE)?;
                let members = (0..n)
                    .map(|_| Member::decode(&mut r))
                    .collect::<Result<_, _>>()?;
                Reply::Members {
                    members,
                    state: r.bytes()?,
                    need: decode_ranges(&mut r)?,
                }
            }
            7 => Reply::Extent {
                off: r.u64()?,
                len: r.u64()?,
            },
            8 => {
                let n = r.count(SourceEntry::MIN_WIRE)?;
                let entries = (0..n)
                    .map(|_| SourceEntry::decode(&mut r))
                    .collect::<Result<_, _>>()?;
                Reply::Entries {
                    entries,
                    state: r.bytes()?,
                    need: decode_spans(&mut r)?,
                }
            }
            9 => Reply::Codec {
                id: r.u8()?,
                min_frames: r.u32()?,
                key: decode_bool(&mut r)?,
            },
            _ => return Err(DecodeError("unknown reply kind")),
        };
        r.finish()?;
        Ok(reply)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn requests_and_replies_round_trip() {
        let files = Files {
            sizes: vec![10, 20],
            chunks: vec![Chunk {
                file: 1,
                off: 4,
                data: b"abc".to_vec(),
            }],
        };
        let files_b = files.clone();
        let reqs = [
            Request::Query {
                name: "a.mp3".into(),
                args: vec![("artist".into(), "X".into())],
                files: files.clone(),
            },
            Request::Resolve {
                name: "t.txt".into(),
                files,
            },
            Request::Layer {
                op: LayerOp::EncodeName,
                off: 7,
                data: b"n".to_vec(),
            },
            Request::Policy {
                args: vec!["hot".into()],
                candidates: vec![Candidate {
                    name: "c".into(),
                    size: 1,
                    last_use: 2,
                }],
            },
            Request::Compute {
                op: "md5".into(),
                data: vec![1, 2, 3],
            },
            Request::ArchiveList {
                name: "a.tar".into(),
                state: vec![7],
                files: files_b.clone(),
            },
            Request::ArchiveExtract {
                name: "a.zip".into(),
                at: 30,
                method: 8,
                size: 99,
                files: files_b,
            },
            Request::Digest {
                size: 200,
                off: 128,
                state: vec![5; 56],
                data: vec![9; 72],
            },
            Request::SourceList {
                files: vec![SourceFile {
                    path: "DCIM/a.jpg".into(),
                    size: 70_000,
                    mtime: 9,
                }],
                state: vec![3],
                spans: vec![SpanData {
                    file: 0,
                    off: 2,
                    data: vec![0xff, 0xd8],
                }],
            },
            Request::Frame {
                op: FrameOp::Decode,
                header: vec![1; 48],
                n: 3,
                last: true,
                len: 65536,
                key: vec![2; 32],
                data: vec![3; 17],
            },
            Request::Readahead {
                args: vec!["ahead=4".into()],
                size: 1 << 30,
                chunk: 1 << 20,
                history: vec![Range {
                    file: 0,
                    off: 4 << 20,
                    len: 65536,
                }],
            },
        ];
        for req in reqs {
            assert_eq!(Request::decode(&req.encode()).unwrap(), req);
        }
        let replies = [
            Reply::Need(vec![Range {
                file: 2,
                off: 9,
                len: 128,
            }]),
            Reply::Match(true),
            Reply::Patch(vec![Edit {
                off: 1,
                del: 2,
                ins: b"x".to_vec(),
            }]),
            Reply::Bytes(vec![9]),
            Reply::Victim(3),
            Reply::Fail("no".into()),
            Reply::Members {
                members: vec![Member {
                    name: "d/f".into(),
                    kind: MemberKind::Symlink,
                    size: 5,
                    mode: 0o644,
                    mtime: 6,
                    target: "g".into(),
                    at: 512,
                    method: 0,
                }],
                state: vec![1, 2],
                need: vec![Range {
                    file: 0,
                    off: 1024,
                    len: 512,
                }],
            },
            Reply::Extent { off: 3, len: 4 },
            Reply::Entries {
                entries: vec![SourceEntry {
                    dir: "2024-06-01".into(),
                    name: "a.jpg".into(),
                    file: 70_000,
                    off: 0,
                    len: 12,
                    mtime: 0,
                }],
                state: vec![4],
                need: vec![Span {
                    file: 300,
                    off: 0,
                    len: 4096,
                }],
            },
            Reply::Codec {
                id: 1,
                min_frames: 0,
                key: true,
            },
        ];
        for reply in replies {
            assert_eq!(Reply::decode(&reply.encode()).unwrap(), reply);
        }
    }

    #[test]
    fn malformed_buffers_are_errors_not_panics() {
        assert!(Reply::decode(&[]).is_err());
        assert!(Reply::decode(&[9]).is_err());
        // A count of 2^32-1 ranges in a 5-byte buffer must not allocate or panic.
        assert!(Reply::decode(&[0, 255, 255, 255, 255]).is_err());
        assert!(Reply::decode(&[1, 2]).is_err());
        assert!(
            Reply::decode(&[4, 1, 0, 0, 0, 0]).is_err(),
            "trailing bytes"
        );
        assert!(Request::decode(&[3, 0, 0, 0, 0, 255, 255, 255, 255]).is_err());
    }

    #[test]
    fn files_get_finds_covering_chunk_only() {
        let f = Files {
            sizes: vec![100],
            chunks: vec![Chunk {
                file: 0,
                off: 10,
                data: (0..10).collect(),
            }],
        };
        assert_eq!(f.get(0, 12, 3), Some(&[2u8, 3, 4][..]));
        assert_eq!(f.get(0, 18, 3), None);
        assert_eq!(f.get(1, 12, 3), None);
        assert_eq!(f.get(0, 5, 2), None);
    }
}
