//! The Chirp requests roam sends, one method each, as `chirp_client.c` frames them: a
//! request line, an integer reply, and for some a stat record, names or bytes after it.
//! Paths here are the server's (prefix included) and decoded; they are escaped on the way.

use std::io::{self, Read, Write};

use super::conn::{broken, Conn, Reply};
use super::proto::{encode_path, Stat};

/// Most bytes asked of one `pread` (the server answers at most 16 MiB).
pub(crate) const READ_CHUNK: usize = 4 << 20;

/// Bytes of a file body sent per write after `putfile`.
const WRITE_CHUNK: usize = 256 * 1024;

/// `readlink` buffer: Linux's PATH_MAX.
const LINK_MAX: u32 = 4096;

/// One entry of `getlongdir`: the raw name and its (lstat) record.
pub(crate) type LongEntry = (Vec<u8>, Stat);

impl Conn {
    /// `stat` (follows a final symlink) or `lstat` (does not).
    pub(crate) fn stat(&mut self, follow: bool, path: &str) -> Reply<Stat> {
        let verb = if follow { "stat" } else { "lstat" };
        self.call(&format!("{verb} {}\n", encode_path(path)))?;
        self.read_stat()
    }

    pub(crate) fn readlink(&mut self, path: &str) -> Reply<String> {
        let len = self.call(&format!("readlink {} {LINK_MAX}\n", encode_path(path)))?;
        let mut target = Vec::new();
        self.read_body(body_len(len, LINK_MAX as usize)?, &mut target)?;
        // As the local driver does: a target that is not UTF-8 is shown, not refused.
        Ok(String::from_utf8_lossy(&target).into_owned())
    }

    /// The entries of a directory with their records, `.` and `..` included.
    pub(crate) fn getlongdir(&mut self, path: &str) -> Reply<Vec<LongEntry>> {
        self.call(&format!("getlongdir {}\n", encode_path(path)))?;
        let mut entries = Vec::new();
        loop {
            let name = self.read_line()?;
            if name.is_empty() {
                return Ok(entries);
            }
            entries.push((name, self.read_stat()?));
        }
    }

    /// Opens a file for reading; returns the descriptor and the record of what was opened.
    pub(crate) fn open_read(&mut self, path: &str) -> Reply<(u64, Stat)> {
        let fd = self.call(&format!("open {} r 0\n", encode_path(path)))?;
        Ok((fd, self.read_stat()?))
    }

    /// Writes up to `len` bytes at `offset` into `dest` as they arrive; returns how many
    /// came, 0 at the end of the file.
    pub(crate) fn pread(
        &mut self,
        fd: u64,
        offset: u64,
        len: usize,
        dest: &mut dyn Write,
    ) -> Reply<usize> {
        let got = body_len(self.call(&format!("pread {fd} {len} {offset}\n"))?, len)?;
        self.copy_body(got, dest)?;
        Ok(got)
    }

    pub(crate) fn close(&mut self, fd: u64) -> Reply<()> {
        self.call(&format!("close {fd}\n")).map(drop)
    }

    /// Creates or truncates `path` with `mode` and writes the `len` bytes of `src` into it.
    /// The server writes in place, so callers write to a temporary name.
    pub(crate) fn putfile(
        &mut self,
        path: &str,
        mode: u32,
        src: &mut dyn Read,
        len: u64,
    ) -> Reply<()> {
        self.call(&format!("putfile {} {mode} {len}\n", encode_path(path)))?;
        let mut buf = vec![0; WRITE_CHUNK];
        let mut left = len;
        while left > 0 {
            let want = buf.len().min(usize::try_from(left).unwrap_or(usize::MAX));
            // The server now waits for exactly `len` bytes: a source that fails or ends
            // early leaves the connection out of step, so these failures break it (and the
            // server removes what it wrote).
            let n = match src.read(&mut buf[..want]) {
                Ok(0) => {
                    let sent = len - left;
                    return Err(broken(
                        io::ErrorKind::UnexpectedEof,
                        format!("the source ended after {sent} of {len} bytes"),
                    ));
                }
                Ok(n) => n,
                Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
                Err(e) => return Err(broken(e.kind(), format!("reading the source: {e}"))),
            };
            self.write_all(&buf[..n])?;
            left -= n as u64;
        }
        match self.result()? {
            stored if stored == len => Ok(()),
            stored => Err(broken(
                io::ErrorKind::InvalidData,
                format!("the server stored {stored} of {len} bytes"),
            )),
        }
    }
}

/// The length of a reply body, which must not exceed what was asked for.
fn body_len(announced: u64, most: usize) -> Reply<usize> {
    usize::try_from(announced)
        .ok()
        .filter(|&n| n <= most)
        .ok_or_else(|| {
            broken(
                io::ErrorKind::InvalidData,
                format!("the server announced {announced} bytes where at most {most} fit"),
            )
        })
}
