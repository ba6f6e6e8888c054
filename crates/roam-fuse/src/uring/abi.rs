//! The kernel's FUSE structures as they travel through a ring entry
//! (`include/uapi/linux/fuse.h`), read and written by hand: fuser keeps its own decoder
//! and reply types private (its requests come only from its `/dev/fuse` loop), so the
//! io_uring transport decodes the few requests roam answers itself. Only fields roam
//! uses are read; every offset is the uapi header's.
//!
//! A ring entry is two buffers: the header block (`struct fuse_uring_req_header`: the
//! in/out header, the operation's fixed argument struct, the entry's own in/out fields)
//! and the payload (names, written data; on the way back the reply's body).

use std::ffi::OsStr;
use std::os::unix::ffi::OsStrExt;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use fuser::{FileAttr, FileType};

/// `struct fuse_uring_req_header`: in_out[128], op_in[128], ring_ent_in_out (32 bytes).
pub const HEADER_LEN: usize = 288;
const OP_IN: usize = 128;
const ENT_IN_OUT: usize = 256;

/// `FUSE_IO_URING_CMD_REGISTER` and `FUSE_IO_URING_CMD_COMMIT_AND_FETCH`.
pub const CMD_REGISTER: u32 = 1;
pub const CMD_COMMIT_AND_FETCH: u32 = 2;

/// The header block of one ring entry, where the kernel reads and writes it.
#[repr(C, align(8))]
pub struct Header(pub [u8; HEADER_LEN]);

fn u32_at(b: &[u8], at: usize) -> u32 {
    u32::from_ne_bytes(b[at..at + 4].try_into().unwrap())
}

fn u64_at(b: &[u8], at: usize) -> u64 {
    u64::from_ne_bytes(b[at..at + 8].try_into().unwrap())
}

impl Header {
    /// `fuse_in_header.opcode`.
    pub fn opcode(&self) -> u32 {
        u32_at(&self.0, 4)
    }

    /// `fuse_in_header.unique`: the request's id, echoed in the reply.
    pub fn unique(&self) -> u64 {
        u64_at(&self.0, 8)
    }

    /// `fuse_in_header.nodeid`: the inode the request is about.
    pub fn nodeid(&self) -> u64 {
        u64_at(&self.0, 16)
    }

    /// `fuse_in_header.pid`: the calling process.
    pub fn pid(&self) -> u32 {
        u32_at(&self.0, 32)
    }

    /// The operation's fixed argument struct (`fuse_read_in`, `fuse_setattr_in` ...).
    pub fn op(&self) -> Op<'_> {
        Op(&self.0[OP_IN..ENT_IN_OUT])
    }

    /// `ring_ent_in_out.commit_id`: what the commit names the request by.
    pub fn commit_id(&self) -> u64 {
        u64_at(&self.0, ENT_IN_OUT + 8)
    }

    /// `ring_ent_in_out.payload_sz`: the payload's length, either way.
    pub fn payload_len(&self) -> usize {
        u32_at(&self.0, ENT_IN_OUT + 16) as usize
    }

    /// Writes the reply's header: `fuse_out_header` and the payload's length.
    pub fn set_reply(&mut self, errno: i32, payload_len: usize) {
        let unique = self.unique();
        let len = 16 + payload_len as u32;
        self.0[0..4].copy_from_slice(&len.to_ne_bytes());
        self.0[4..8].copy_from_slice(&(-errno).to_ne_bytes());
        self.0[8..16].copy_from_slice(&unique.to_ne_bytes());
        let at = ENT_IN_OUT + 16;
        self.0[at..at + 4].copy_from_slice(&(payload_len as u32).to_ne_bytes());
    }
}

/// An operation's fixed argument struct.
pub struct Op<'a>(&'a [u8]);

impl Op<'_> {
    pub fn u32(&self, at: usize) -> u32 {
        u32_at(self.0, at)
    }

    pub fn u64(&self, at: usize) -> u64 {
        u64_at(self.0, at)
    }
}

/// The NUL-terminated names at the start of a payload (`LOOKUP`'s name, `RENAME`'s two).
pub fn names(payload: &[u8]) -> impl Iterator<Item = &OsStr> {
    payload
        .split(|b| *b == 0)
        .map(OsStr::from_bytes)
        .chain(std::iter::repeat(OsStr::new("")))
}

/// A reply's body, written into the entry's payload buffer.
pub struct Body<'a> {
    buf: &'a mut [u8],
    pub len: usize,
}

impl<'a> Body<'a> {
    pub fn new(buf: &'a mut [u8]) -> Body<'a> {
        Body { buf, len: 0 }
    }

    /// Whether `n` more bytes fit.
    pub fn fits(&self, n: usize) -> bool {
        self.len + n <= self.buf.len()
    }

    pub fn bytes(&mut self, b: &[u8]) -> &mut Self {
        self.buf[self.len..self.len + b.len()].copy_from_slice(b);
        self.len += b.len();
        self
    }

    /// Lets `fill` write up to `n` bytes in place; it says how many it wrote.
    pub fn fill<E>(
        &mut self,
        n: usize,
        fill: impl FnOnce(&mut [u8]) -> Result<usize, E>,
    ) -> Result<(), E> {
        let end = (self.len + n).min(self.buf.len());
        self.len += fill(&mut self.buf[self.len..end])?;
        Ok(())
    }

    pub fn u32(&mut self, v: u32) -> &mut Self {
        self.bytes(&v.to_ne_bytes())
    }

    pub fn u64(&mut self, v: u64) -> &mut Self {
        self.bytes(&v.to_ne_bytes())
    }

    /// Zeros up to the next multiple of 8 (directory entries are 8-aligned).
    fn align8(&mut self) -> &mut Self {
        let pad = self.len.next_multiple_of(8) - self.len;
        self.bytes(&[0; 8][..pad])
    }

    /// `struct fuse_attr` (88 bytes).
    pub fn attr(&mut self, a: &FileAttr) -> &mut Self {
        let (at, atn) = time(a.atime);
        let (mt, mtn) = time(a.mtime);
        let (ct, ctn) = time(a.ctime);
        self.u64(a.ino.0).u64(a.size).u64(a.blocks);
        self.u64(at as u64).u64(mt as u64).u64(ct as u64);
        self.u32(atn).u32(mtn).u32(ctn);
        self.u32(mode(a.kind) | u32::from(a.perm));
        self.u32(a.nlink).u32(a.uid).u32(a.gid).u32(a.rdev);
        self.u32(a.blksize).u32(0)
    }

    /// `struct fuse_attr_out` (104 bytes).
    pub fn attr_out(&mut self, a: &FileAttr, ttl: Duration) -> &mut Self {
        self.u64(ttl.as_secs())
            .u32(ttl.subsec_nanos())
            .u32(0)
            .attr(a)
    }

    /// `struct fuse_entry_out` (128 bytes), generation 0.
    pub fn entry_out(&mut self, a: &FileAttr, ttl: Duration) -> &mut Self {
        self.u64(a.ino.0).u64(0);
        self.u64(ttl.as_secs()).u64(ttl.as_secs());
        self.u32(ttl.subsec_nanos()).u32(ttl.subsec_nanos());
        self.attr(a)
    }

    /// `struct fuse_open_out` (16 bytes).
    pub fn open_out(&mut self, fh: u64, flags: u32, backing_id: u32) -> &mut Self {
        self.u64(fh).u32(flags).u32(backing_id)
    }

    /// The length of a `struct fuse_dirent` named `name`, padding included.
    pub fn dirent_len(name: &str) -> usize {
        (24 + name.len()).next_multiple_of(8)
    }

    /// `struct fuse_dirent` and its name, padded to 8 bytes.
    pub fn dirent(&mut self, ino: u64, off: u64, kind: FileType, name: &str) -> &mut Self {
        self.u64(ino)
            .u64(off)
            .u32(name.len() as u32)
            .u32(mode(kind) >> 12);
        self.bytes(name.as_bytes()).align8()
    }
}

/// The `S_IF*` bits of a file type.
fn mode(kind: FileType) -> u32 {
    match kind {
        FileType::NamedPipe => libc::S_IFIFO,
        FileType::CharDevice => libc::S_IFCHR,
        FileType::BlockDevice => libc::S_IFBLK,
        FileType::Directory => libc::S_IFDIR,
        FileType::RegularFile => libc::S_IFREG,
        FileType::Symlink => libc::S_IFLNK,
        FileType::Socket => libc::S_IFSOCK,
    }
}

/// Seconds and nanoseconds since the epoch, negative before it.
fn time(t: SystemTime) -> (i64, u32) {
    match t.duration_since(UNIX_EPOCH) {
        Ok(d) => (d.as_secs() as i64, d.subsec_nanos()),
        Err(e) => {
            let d = e.duration();
            match d.subsec_nanos() {
                0 => (-(d.as_secs() as i64), 0),
                n => (-(d.as_secs() as i64) - 1, 1_000_000_000 - n),
            }
        }
    }
}
