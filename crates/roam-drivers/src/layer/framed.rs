//! Layers that change the length of contents (Small & Seltzer's stream grafts): `zlib:URL`
//! compresses ([`super::zlib::Zlib`]), `seal:URL` encrypts and authenticates
//! ([`super::seal::Seal`]). Names pass unchanged; contents are cut into frames of
//! [`FRAME`] plaintext bytes, each encoded on its own, so a range read fetches the header,
//! the index and only the frames it covers, and `stat` shows the plaintext size.
//!
//! The stored file (integers little-endian):
//!
//! ```text
//! header (48 bytes): magic "roamfrm1" | codec id u8 | 3 zero bytes | frame size u32
//!                    | plaintext length u64 | file id (16 random bytes) | frame count u32
//!                    | 4 zero bytes
//! index:             the stored length of each frame, u32 each
//! frames:            back to back
//! ```
//!
//! A codec sees the whole header and each frame's number and whether it is the last, so an
//! authenticating codec binds a frame to its file and place: a frame swapped, dropped or
//! cut off, or a header changed, fails to decode (`EIO`), never reads as other bytes.
//! Writes replace the whole file (the upload encodes it into a spool file first, since the
//! lower driver needs the stored length up front).

use std::fs::File;
use std::io::{Read, Seek, Write};
use std::sync::Arc;
use std::time::SystemTime;

use crate::{
    Capabilities, DirEntry, Driver, Error, ErrorKind, Expect, Fetched, Kind, Known, Leftover,
    Listing, Meta, Pinned, Result, Upload, Validator,
};

/// Plaintext bytes per frame: a range read decodes at most one frame more at each end.
pub const FRAME: u32 = 64 << 10;
/// Bytes of the header.
pub const HEADER: usize = 48;
const MAGIC: &[u8; 8] = b"roamfrm1";
/// What a first read of a file asks for: the header and the index of files up to
/// ~63 MiB (1,012 frames) in one request.
const PROBE: u64 = 4096;
/// Files whose headers a listing reads at once (one request each).
const LIST_PARALLEL: usize = 8;

/// What a codec's files look like.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Format {
    /// The codec's number in the header: a file is read only by a codec of the number that
    /// wrote it (1 zlib, 2 seal; an extension codec says its own).
    pub id: u8,
    /// Frames an empty file has: an authenticating codec stores one (empty) frame, so
    /// that no file can lose all of its frames unnoticed.
    pub min_frames: u32,
}

/// How one layer encodes a frame.
pub trait Codec: Send + Sync + std::fmt::Debug + 'static {
    /// Its number and frames of an empty file (an extension codec learns them from the
    /// extension, at its first use: so this may fail).
    fn format(&self) -> std::result::Result<Format, String>;
    /// The layer's scheme, for messages (`zlib`, `seal`, `codec:NAME`).
    fn scheme(&self) -> &str;
    /// Frame `n` of the file `head` describes.
    fn encode(
        &self,
        head: &Header,
        n: u32,
        last: bool,
        plain: &[u8],
    ) -> std::result::Result<Vec<u8>, String>;
    /// The inverse: exactly `len` plaintext bytes, or why not.
    fn decode(
        &self,
        head: &Header,
        n: u32,
        last: bool,
        stored: &[u8],
        len: usize,
    ) -> std::result::Result<Vec<u8>, String>;
}

/// A file's header, as stored (a codec authenticates these bytes) and as read.
#[derive(Clone, Debug)]
pub struct Header {
    pub bytes: [u8; HEADER],
    pub frame: u32,
    pub plain: u64,
    pub frames: u32,
}

impl Header {
    /// The 16 random bytes that set this file apart from every other.
    pub fn file_id(&self) -> &[u8] {
        &self.bytes[24..40]
    }

    fn new(id: u8, plain: u64, frames: u32, file_id: [u8; 16]) -> Header {
        let mut bytes = [0; HEADER];
        bytes[..8].copy_from_slice(MAGIC);
        bytes[8] = id;
        bytes[12..16].copy_from_slice(&FRAME.to_le_bytes());
        bytes[16..24].copy_from_slice(&plain.to_le_bytes());
        bytes[24..40].copy_from_slice(&file_id);
        bytes[40..44].copy_from_slice(&frames.to_le_bytes());
        Header {
            bytes,
            frame: FRAME,
            plain,
            frames,
        }
    }

    fn parse(bytes: &[u8], f: Format) -> std::result::Result<Header, String> {
        let bytes: [u8; HEADER] = bytes
            .get(..HEADER)
            .and_then(|b| b.try_into().ok())
            .ok_or("shorter than a header")?;
        if &bytes[..8] != MAGIC || bytes[8] != f.id {
            return Err("not written by this layer (no header of its kind)".into());
        }
        let u32_at = |i: usize| u32::from_le_bytes(bytes[i..i + 4].try_into().unwrap());
        let frame = u32_at(12);
        let plain = u64::from_le_bytes(bytes[16..24].try_into().unwrap());
        let frames = u32_at(40);
        if frame == 0 || frame > 16 << 20 || frames_for(plain, frame, f.min_frames) != Some(frames)
        {
            return Err("a header that does not add up".into());
        }
        Ok(Header {
            bytes,
            frame,
            plain,
            frames,
        })
    }

    /// Plaintext bytes of frame `n`.
    fn len_of(&self, n: u32) -> usize {
        let start = u64::from(n) * u64::from(self.frame);
        (self.plain - start.min(self.plain)).min(u64::from(self.frame)) as usize
    }
}

/// How many frames hold `plain` bytes (`None`: more than a header can say).
fn frames_for(plain: u64, frame: u32, min: u32) -> Option<u32> {
    u32::try_from(plain.div_ceil(u64::from(frame)))
        .ok()
        .map(|n| n.max(min))
}

/// A file's header and index: where each frame is stored.
#[derive(Debug)]
struct Layout {
    head: Header,
    /// Where frame `n` starts in the stored file; one more entry: where the file ends.
    starts: Vec<u64>,
}

impl Layout {
    fn stored_len(&self) -> u64 {
        *self.starts.last().unwrap()
    }

    fn index_end(head: &Header) -> u64 {
        HEADER as u64 + 4 * u64::from(head.frames)
    }

    fn new(head: Header, index: &[u8]) -> Layout {
        let mut at = Layout::index_end(&head);
        let mut starts = Vec::with_capacity(head.frames as usize + 1);
        starts.push(at);
        for len in index.chunks_exact(4) {
            at += u64::from(u32::from_le_bytes(len.try_into().unwrap()));
            starts.push(at);
        }
        Layout { head, starts }
    }
}

/// The layer `C` over the driver `lower`.
#[derive(Debug)]
pub struct Framed<C> {
    lower: Arc<dyn Driver>,
    c: C,
}

impl<C: Codec> Framed<C> {
    pub fn new(c: C, lower: Arc<dyn Driver>) -> Framed<C> {
        Framed { lower, c }
    }

    fn corrupt(&self, path: &str, why: impl std::fmt::Display) -> Error {
        Error::new(ErrorKind::Io, format!("{}: {why}", self.describe(path)))
    }

    fn format(&self, path: &str) -> Result<Format> {
        self.c.format().map_err(|e| self.corrupt(path, e))
    }

    /// Reads the header and index of `path` (one request, two for a large index), of
    /// version `of` if given.
    fn layout(&self, path: &str, of: Option<&Pinned>) -> Result<Layout> {
        let mut buf = Vec::new();
        self.lower.read_range(path, 0, PROBE, of, &mut buf)?;
        let head = Header::parse(&buf, self.format(path)?).map_err(|e| self.corrupt(path, e))?;
        let end = Layout::index_end(&head);
        if (buf.len() as u64) < end {
            let have = buf.len() as u64;
            self.lower
                .read_range(path, have, end - have, of, &mut buf)?;
        }
        if (buf.len() as u64) < end {
            return Err(self.corrupt(path, "cut off inside its index"));
        }
        Ok(Layout::new(head, &buf[HEADER..end as usize]))
    }

    /// `m` as the program sees it: the plaintext size of a file, checked against what is
    /// stored (a file cut short or grown is caught at `stat`).
    fn meta_up(&self, path: &str, mut m: Meta) -> Result<Meta> {
        if m.kind == Kind::File {
            let layout = self.layout(path, Some(&Pinned::new(Validator::of(&m))))?;
            if m.size.is_some_and(|s| s != layout.stored_len()) {
                return Err(self.corrupt(
                    path,
                    "stored length differs from its index (cut off or grown)",
                ));
            }
            m.size = Some(layout.head.plain);
        }
        Ok(m)
    }

    fn decode(&self, path: &str, head: &Header, n: u32, stored: &[u8]) -> Result<Vec<u8>> {
        let last = n + 1 == head.frames;
        self.c
            .decode(head, n, last, stored, head.len_of(n))
            .map_err(|e| self.corrupt(path, format!("frame {n}: {e}")))
    }

    /// The lower driver's precondition for an upload expecting `expect` of the plaintext:
    /// a version without an ETag is compared by size, which is the stored one below.
    fn expect_down(&self, path: &str, expect: &Expect) -> Expect {
        match expect {
            Expect::Version {
                etag: None,
                size,
                mtime,
            } => {
                let stored = match self.layout(path, None) {
                    Ok(l) if l.head.plain == *size => l.stored_len(),
                    // Not that version: one no file has, so the lower driver says so.
                    _ => u64::MAX,
                };
                Expect::Version {
                    etag: None,
                    size: stored,
                    mtime: *mtime,
                }
            }
            other => other.clone(),
        }
    }

    /// Encodes the `len` bytes of `src` into a spool file; returns the header and index
    /// and the spool, rewound.
    fn encode(&self, path: &str, src: &mut dyn Read, len: u64) -> Result<(Vec<u8>, File)> {
        let io = |e: std::io::Error| Error::from_io(self.describe(path), &e);
        let format = self.format(path)?;
        let frames = frames_for(len, FRAME, format.min_frames)
            .ok_or_else(|| self.corrupt(path, "too large for this layer"))?;
        let mut file_id = [0; 16];
        ring::rand::SecureRandom::fill(&ring::rand::SystemRandom::new(), &mut file_id)
            .map_err(|_| self.corrupt(path, "no random bytes for a file id"))?;
        let head = Header::new(format.id, len, frames, file_id);
        let mut spool = spool().map_err(io)?;
        let mut index = head.bytes.to_vec();
        let mut plain = Vec::with_capacity(FRAME as usize);
        for n in 0..frames {
            plain.clear();
            let want = head.len_of(n) as u64;
            let got = src.take(want).read_to_end(&mut plain).map_err(io)?;
            if got as u64 != want {
                return Err(self.corrupt(path, format!("the data ended before {len} bytes")));
            }
            let stored = self
                .c
                .encode(&head, n, n + 1 == frames, &plain)
                .map_err(|e| self.corrupt(path, e))?;
            index.extend_from_slice(&(stored.len() as u32).to_le_bytes());
            spool.write_all(&stored).map_err(io)?;
        }
        spool.rewind().map_err(io)?;
        Ok((index, spool))
    }
}

/// An unnamed temporary file: made beside nothing, removed at once, gone when closed.
fn spool() -> std::io::Result<File> {
    use std::os::unix::fs::OpenOptionsExt;
    std::fs::OpenOptions::new()
        .read(true)
        .write(true)
        .custom_flags(libc::O_TMPFILE)
        .mode(0o600)
        .open(std::env::temp_dir())
}

/// A writer that decodes stored frames written into it, one by one as they arrive, on
/// their way to `dest`: a whole file (header first; [`Decoder::whole`]) or the frames of a
/// range ([`Decoder::range`]), of which only the plaintext in `keep` is passed on. So a
/// stream of any length needs one frame of memory. [`Decoder::finish`] checks that the
/// bytes ended where the index says.
struct Decoder<'a, C> {
    layer: &'a Framed<C>,
    path: &'a str,
    dest: &'a mut dyn Write,
    buf: Vec<u8>,
    layout: Option<Layout>,
    /// The next frame expected, and the last one wanted.
    next: u32,
    last: u32,
    keep: std::ops::Range<u64>,
    written: u64,
    /// The first failure, which the lower driver sees only as an I/O error.
    failed: Option<Error>,
}

impl<'a, C: Codec> Decoder<'a, C> {
    fn whole(layer: &'a Framed<C>, path: &'a str, dest: &'a mut dyn Write) -> Self {
        Decoder {
            layer,
            path,
            dest,
            buf: Vec::new(),
            layout: None,
            next: 0,
            last: u32::MAX,
            keep: 0..u64::MAX,
            written: 0,
            failed: None,
        }
    }

    /// Frames `first..=last` of `layout`, keeping the plaintext bytes `keep`.
    fn range(
        layer: &'a Framed<C>,
        path: &'a str,
        dest: &'a mut dyn Write,
        layout: Layout,
        frames: std::ops::RangeInclusive<u32>,
        keep: std::ops::Range<u64>,
    ) -> Self {
        Decoder {
            layout: Some(layout),
            next: *frames.start(),
            last: *frames.end(),
            keep,
            ..Decoder::whole(layer, path, dest)
        }
    }

    fn step(&mut self) -> Result<()> {
        if self.layout.is_none() {
            if self.buf.len() < HEADER {
                return Ok(());
            }
            let head = Header::parse(&self.buf, self.layer.format(self.path)?)
                .map_err(|e| self.layer.corrupt(self.path, e))?;
            let end = Layout::index_end(&head) as usize;
            if self.buf.len() < end {
                return Ok(());
            }
            self.last = head.frames.wrapping_sub(1);
            self.layout = Some(Layout::new(head, &self.buf[HEADER..end]));
            self.buf.drain(..end);
        }
        let layout = self.layout.as_ref().unwrap();
        while self.next < layout.head.frames && self.next <= self.last {
            let n = self.next as usize;
            let len = (layout.starts[n + 1] - layout.starts[n]) as usize;
            if self.buf.len() < len {
                break;
            }
            let plain = self
                .layer
                .decode(self.path, &layout.head, self.next, &self.buf[..len])?;
            let at = u64::from(self.next) * u64::from(layout.head.frame);
            let end = at + plain.len() as u64;
            let (from, to) = (self.keep.start.clamp(at, end), self.keep.end.clamp(at, end));
            self.dest
                .write_all(&plain[(from - at) as usize..(to - at) as usize])
                .map_err(|e| Error::from_io(self.layer.describe(self.path), &e))?;
            self.written += to - from;
            self.buf.drain(..len);
            self.next += 1;
        }
        Ok(())
    }

    /// The plaintext bytes passed on, once every frame wanted has come and nothing else.
    fn finish(self) -> Result<u64> {
        if let Some(e) = self.failed {
            return Err(e);
        }
        let corrupt = |why| Err(self.layer.corrupt(self.path, why));
        match &self.layout {
            None => corrupt("shorter than its header"),
            Some(_) if !self.buf.is_empty() => corrupt("bytes after its last frame"),
            Some(l) if self.next < l.head.frames.min(self.last.wrapping_add(1)) => {
                corrupt("cut off")
            }
            Some(_) => Ok(self.written),
        }
    }
}

impl<C: Codec> Write for Decoder<'_, C> {
    fn write(&mut self, data: &[u8]) -> std::io::Result<usize> {
        if self.failed.is_some() {
            return Err(std::io::Error::other("failed before"));
        }
        self.buf.extend_from_slice(data);
        match self.step() {
            Ok(()) => Ok(data.len()),
            Err(e) => {
                let io = std::io::Error::other(e.message.clone());
                self.failed = Some(e);
                Err(io)
            }
        }
    }

    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

impl<C: Codec> Driver for Framed<C> {
    fn describe(&self, path: &str) -> String {
        format!("{}:{}", self.c.scheme(), self.lower.describe(path))
    }

    fn sources(&self) -> Vec<(String, String)> {
        self.lower.sources()
    }

    fn stat(&self, path: &str) -> Result<Meta> {
        self.meta_up(path, self.lower.stat(path)?)
    }

    /// The lower listing, with each file's plaintext size read from its header (one
    /// request per file, [`LIST_PARALLEL`] at a time). A file whose header cannot be read
    /// is listed without a size: opening it then says why.
    fn list(&self, path: &str) -> Result<Listing> {
        let mut l = self.lower.list(path)?;
        for chunk in l.entries.chunks_mut(LIST_PARALLEL) {
            std::thread::scope(|s| {
                for e in chunk.iter_mut().filter(|e| e.meta.kind == Kind::File) {
                    s.spawn(move || self.size_entry(path, e));
                }
            });
        }
        Ok(l)
    }

    fn fetch(
        &self,
        path: &str,
        dest: &mut dyn Write,
        validator: Option<&Validator>,
    ) -> Result<Fetched> {
        let mut d = Decoder::whole(self, path, dest);
        let fetched = self.lower.fetch(path, &mut d, validator);
        if let Some(e) = d.failed.take() {
            return Err(e);
        }
        match fetched? {
            Fetched::Body(mut m) => {
                m.size = Some(d.finish()?);
                Ok(Fetched::Body(m))
            }
            Fetched::NotModified => Ok(Fetched::NotModified),
        }
    }

    /// Nor copies on the server: not passed down (a copy would share the file's key).
    fn capabilities(&self) -> Capabilities {
        Capabilities {
            server_copy: false,
            ..super::opaque(self.lower.capabilities())
        }
    }

    /// Reads the layout, then the stored frames covering the range in one request,
    /// decoded as they come. A range past the end still decodes the last frame, so that
    /// what says where the end is (the header) has been authenticated. The layout and the
    /// frames are of one version (`of`, else the first the server shows).
    fn read_range(
        &self,
        path: &str,
        offset: u64,
        len: u64,
        of: Option<&Pinned>,
        dest: &mut dyn Write,
    ) -> Result<u64> {
        let first_seen = Pinned::default();
        let of = Some(of.unwrap_or(&first_seen));
        let layout = self.layout(path, of)?;
        let head = &layout.head;
        if head.frames == 0 {
            return Ok(0);
        }
        let end = offset.saturating_add(len).min(head.plain);
        let frame = u64::from(head.frame);
        let frames = if offset < end {
            (offset / frame) as u32..=((end - 1) / frame) as u32
        } else {
            head.frames - 1..=head.frames - 1
        };
        let a = layout.starts[*frames.start() as usize];
        let b = layout.starts[*frames.end() as usize + 1];
        let mut d = Decoder::range(self, path, dest, layout, frames, offset..end);
        let read = self.lower.read_range(path, a, b - a, of, &mut d);
        if let Some(e) = d.failed.take() {
            return Err(e);
        }
        read?;
        d.finish()
    }

    /// Encodes the whole file and uploads it in one piece; versions are the lower
    /// driver's (see [`Framed::expect_down`]).
    fn upload(&self, path: &str, src: &mut dyn Read, len: u64, how: &Upload) -> Result<Meta> {
        let (index, spool) = self.encode(path, src, len)?;
        let spooled = spool
            .metadata()
            .map_err(|e| Error::from_io(self.describe(path), &e))?
            .len();
        let stored = index.len() as u64 + spooled;
        let expect = self.expect_down(path, how.expect);
        let how = Upload {
            expect: &expect,
            ..*how
        };
        let mut m = self
            .lower
            .upload(path, &mut index.as_slice().chain(spool), stored, &how)?;
        m.size = Some(len);
        Ok(m)
    }

    fn remove_leftover(&self, leftover: &Leftover) -> Result<()> {
        self.lower.remove_leftover(leftover)
    }

    fn make_special(&self, path: &str, kind: Kind, mode: u32) -> Result<()> {
        self.lower.make_special(path, kind, mode)
    }

    fn mkdir(&self, path: &str, mode: u32) -> Result<()> {
        self.lower.mkdir(path, mode)
    }

    fn remove_file(&self, path: &str) -> Result<()> {
        self.lower.remove_file(path)
    }

    fn mkdir_in_known_dir(&self, path: &str, mode: u32) -> Result<Option<Meta>> {
        self.lower.mkdir_in_known_dir(path, mode)
    }

    fn remove_known_file(&self, path: &str, known: Known) -> Result<()> {
        self.lower.remove_known_file(path, known)
    }

    fn remove_known_dir(&self, path: &str, known: Known) -> Result<()> {
        self.lower.remove_known_dir(path, known)
    }

    fn remove_dir(&self, path: &str) -> Result<()> {
        self.lower.remove_dir(path)
    }

    fn rename(&self, from: &str, to: &str) -> Result<()> {
        self.lower.rename(from, to)
    }

    fn set_mode(&self, path: &str, mode: u32) -> Result<()> {
        self.lower.set_mode(path, mode)
    }

    fn set_mtime(&self, path: &str, mtime: SystemTime) -> Result<()> {
        self.lower.set_mtime(path, mtime)
    }

    fn set_times(&self, path: &str, atime: SystemTime, mtime: Option<SystemTime>) -> Result<()> {
        self.lower.set_times(path, atime, mtime)
    }

    fn symlink(&self, target: &str, path: &str) -> Result<()> {
        self.lower.symlink(target, path)
    }
}

impl<C: Codec> Framed<C> {
    /// Replaces the stored size of the listed file `e` by its plaintext size, or by none.
    fn size_entry(&self, dir: &str, e: &mut DirEntry) {
        let path = if dir == "/" {
            format!("/{}", e.name)
        } else {
            format!("{dir}/{}", e.name)
        };
        e.meta.size = match self.meta_up(&path, e.meta.clone()) {
            Ok(m) => m.size,
            Err(err) => {
                tracing::debug!("{err}");
                None
            }
        };
    }
}

#[cfg(test)]
mod tests {
    use std::sync::atomic::{AtomicU64, Ordering};

    use super::*;
    use crate::layer::seal::Seal;
    use crate::layer::zlib::Zlib;
    use crate::mem::MemDriver;

    /// `mem:` counting what range reads fetch from it (to show a read fetches only the
    /// frames it needs).
    #[derive(Debug, Default)]
    struct Counted {
        mem: MemDriver,
        bytes: AtomicU64,
        calls: AtomicU64,
    }

    impl Driver for Counted {
        fn describe(&self, path: &str) -> String {
            self.mem.describe(path)
        }
        fn stat(&self, path: &str) -> Result<Meta> {
            self.mem.stat(path)
        }
        fn list(&self, path: &str) -> Result<Listing> {
            self.mem.list(path)
        }
        fn fetch(&self, p: &str, d: &mut dyn Write, v: Option<&Validator>) -> Result<Fetched> {
            self.mem.fetch(p, d, v)
        }
        fn capabilities(&self) -> Capabilities {
            self.mem.capabilities()
        }
        fn read_range(
            &self,
            p: &str,
            off: u64,
            len: u64,
            of: Option<&Pinned>,
            d: &mut dyn Write,
        ) -> Result<u64> {
            let n = self.mem.read_range(p, off, len, of, d)?;
            self.bytes.fetch_add(n, Ordering::Relaxed);
            self.calls.fetch_add(1, Ordering::Relaxed);
            Ok(n)
        }
        fn upload(&self, p: &str, s: &mut dyn Read, len: u64, how: &Upload) -> Result<Meta> {
            self.mem.upload(p, s, len, how)
        }
    }

    fn seal() -> Seal {
        let dir = std::env::temp_dir().join(format!("roam-seal-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let key = dir.join("key");
        std::fs::write(
            &key,
            "00112233445566778899aabbccddeeff00112233445566778899aabbccddeeff\n",
        )
        .unwrap();
        use std::os::unix::fs::PermissionsExt;
        std::fs::set_permissions(&key, std::fs::Permissions::from_mode(0o600)).unwrap();
        Seal::from_file(&key).unwrap()
    }

    /// Bytes that compress a little (so frames differ in length).
    fn data(len: usize) -> Vec<u8> {
        (0..len)
            .map(|i| ((i * 7919) % 251 % (1 + i % 64)) as u8)
            .collect()
    }

    fn put<C: Codec>(top: &Framed<C>, path: &str, bytes: &[u8]) {
        top.put(path, &mut &bytes[..], bytes.len() as u64).unwrap();
    }

    fn fetch(d: &dyn Driver, path: &str) -> Result<Vec<u8>> {
        let mut out = Vec::new();
        d.fetch(path, &mut out, None)?;
        Ok(out)
    }

    fn range(d: &dyn Driver, path: &str, off: u64, len: u64) -> Result<Vec<u8>> {
        let mut out = Vec::new();
        let n = d.read_range(path, off, len, None, &mut out)?;
        assert_eq!(n, out.len() as u64);
        Ok(out)
    }

    fn round_trips<C: Codec>(c: C) {
        let lower = Arc::new(Counted::default());
        let top = Framed::new(c, lower.clone());
        let f = FRAME as usize;
        for len in [0, 1, f - 1, f, f + 1, 3 << 20] {
            let want = data(len);
            put(&top, "/f", &want);
            assert_eq!(fetch(&top, "/f").unwrap(), want, "{len}");
            assert_eq!(top.stat("/f").unwrap().size, Some(len as u64));
            let listed = &top.list("/").unwrap().entries[0];
            assert_eq!(listed.meta.size, Some(len as u64));
            assert_ne!(fetch(&lower.mem, "/f").unwrap(), want, "stored transformed");
            for (off, n) in [
                (0, 10),
                (f as u64 - 3, 7),
                (len as u64 / 2, 100_000),
                (len as u64, 5),
            ] {
                let end = (off + n).min(len as u64).max(off.min(len as u64));
                let part = range(&top, "/f", off, n).unwrap();
                assert_eq!(
                    part,
                    want[off.min(len as u64) as usize..end as usize],
                    "{len} {off}"
                );
            }
        }
    }

    #[test]
    fn zlib_round_trips_and_reads_ranges() {
        round_trips(Zlib);
    }

    #[test]
    fn seal_round_trips_and_reads_ranges() {
        round_trips(seal());
    }

    #[test]
    fn a_range_read_fetches_only_its_frames() {
        let lower = Arc::new(Counted::default());
        let top = Framed::new(seal(), lower.clone());
        let want = data(8 << 20);
        put(&top, "/big", &want);
        let (b0, c0) = (
            lower.bytes.load(Ordering::Relaxed),
            lower.calls.load(Ordering::Relaxed),
        );
        // Two bytes either side of a frame boundary: two frames and the layout.
        let at = 5 * u64::from(FRAME) - 2;
        assert_eq!(
            range(&top, "/big", at, 4).unwrap(),
            want[at as usize..at as usize + 4]
        );
        let bytes = lower.bytes.load(Ordering::Relaxed) - b0;
        let calls = lower.calls.load(Ordering::Relaxed) - c0;
        assert_eq!(calls, 2, "the layout, then the frames");
        assert!(bytes <= PROBE + 2 * (u64::from(FRAME) + 16), "{bytes}");
        assert!(bytes >= 2 * u64::from(FRAME), "{bytes}");
    }

    /// A change to a stored file.
    type Tamper = dyn Fn(&mut Vec<u8>);

    /// The stored file of `path`, changed by `f`, stored again under the layer's feet.
    fn tamper(lower: &MemDriver, path: &str, f: impl FnOnce(&mut Vec<u8>)) {
        let mut raw = fetch(lower, path).unwrap();
        f(&mut raw);
        lower.put(path, &mut &raw[..], raw.len() as u64).unwrap();
    }

    fn is_eio(r: Result<Vec<u8>>) -> String {
        let e = r.expect_err("tampering must be caught");
        assert_eq!(e.kind, ErrorKind::Io, "{e}");
        e.message
    }

    #[test]
    fn seal_catches_flips_cuts_and_swaps() {
        let f = FRAME as usize;
        let lower = Arc::new(MemDriver::new());
        let top = Framed::new(seal(), lower.clone() as Arc<dyn Driver>);
        let want = data(3 * f + 5);
        let frame_at = move |n: usize| HEADER + 4 * 4 + n * (f + 16);
        let cases: Vec<(&str, Box<Tamper>)> = vec![
            ("a flipped byte", Box::new(move |r| r[frame_at(1) + 9] ^= 1)),
            ("a changed size in the header", Box::new(|r| r[16] ^= 1)),
            (
                "two frames swapped",
                Box::new(move |r| {
                    let (a, b) = (frame_at(0), frame_at(1));
                    let first: Vec<u8> = r[a..b].to_vec();
                    r.copy_within(b..b + (f + 16), a);
                    r[b..b + f + 16].copy_from_slice(&first);
                }),
            ),
            (
                "cut after frame 2, the header and index made to match",
                Box::new(move |r| {
                    r.truncate(frame_at(3));
                    r[16..24].copy_from_slice(&(3 * f as u64).to_le_bytes());
                    r[40..44].copy_from_slice(&3u32.to_le_bytes());
                    r.remove(HEADER + 12);
                    r.drain(HEADER + 12..HEADER + 15);
                }),
            ),
            ("cut short", Box::new(|r| r.truncate(r.len() - 1))),
        ];
        for (what, change) in cases {
            put(&top, "/f", &want);
            tamper(&lower, "/f", change);
            let whole = is_eio(fetch(&top, "/f"));
            assert!(whole.starts_with("seal:mem:"), "{what}: {whole}");
            let part = top
                .stat("/f")
                .and_then(|_| range(&top, "/f", u64::from(FRAME), 10));
            let part = match part {
                Ok(_) => range(&top, "/f", 0, 1 << 30),
                e => e,
            };
            is_eio(part);
        }
        // A frame of another file (same key, same place) does not open here.
        put(&top, "/g", &want);
        put(&top, "/f", &want);
        let g = fetch(&*lower, "/g").unwrap();
        tamper(&lower, "/f", |r| {
            r[frame_at(1)..frame_at(2)].copy_from_slice(&g[frame_at(1)..frame_at(2)])
        });
        assert!(is_eio(fetch(&top, "/f")).contains("frame 1: does not authenticate"));
    }

    #[test]
    fn seal_refuses_an_empty_object_and_another_key() {
        let lower = Arc::new(MemDriver::new());
        let top = Framed::new(seal(), lower.clone() as Arc<dyn Driver>);
        lower.put("/empty", &mut &b""[..], 0).unwrap();
        is_eio(fetch(&top, "/empty"));
        put(&top, "/f", b"secret");
        let dir = std::env::temp_dir().join(format!("roam-seal2-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let key = dir.join("key");
        std::fs::write(&key, [7u8; 32]).unwrap();
        use std::os::unix::fs::PermissionsExt;
        std::fs::set_permissions(&key, std::fs::Permissions::from_mode(0o644)).unwrap();
        let err = Seal::from_file(&key).unwrap_err();
        assert!(err.contains("others may read it"), "{err}");
        std::fs::set_permissions(&key, std::fs::Permissions::from_mode(0o600)).unwrap();
        let other = Framed::new(Seal::from_file(&key).unwrap(), lower as Arc<dyn Driver>);
        is_eio(fetch(&other, "/f"));
    }

    #[test]
    fn zlib_catches_a_flipped_byte() {
        let lower = Arc::new(MemDriver::new());
        let top = Framed::new(Zlib, lower.clone() as Arc<dyn Driver>);
        put(&top, "/f", &data(200_000));
        tamper(&lower, "/f", |r| {
            let n = r.len();
            r[n - 3] ^= 0x40;
        });
        is_eio(fetch(&top, "/f"));
    }
}
