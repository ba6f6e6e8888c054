//! Operations the driver composes from SFTP requests: whole directory reads, pipelined
//! transfers, and the rename that replaces its target.
//!
//! Transfers keep [`WINDOW`] requests of [`CHUNK`] bytes in flight, as OpenSSH's `sftp`
//! does: one request at a time would cost a round trip per 64 KiB.

use std::collections::VecDeque;
use std::future::Future;
use std::io::{Read, Write};
use std::pin::Pin;
use std::sync::Arc;
use std::task::Poll;

use russh_sftp::client::error::Error as SftpError;
use russh_sftp::client::RawSftpSession;
use russh_sftp::protocol::{FileAttributes, Packet, Status, StatusCode};
use tokio::task::JoinHandle;

use super::link::{Fault, Link};
use crate::Error;

/// Bytes per read or write request (OpenSSH's server answers up to 256 KiB).
const CHUNK: u32 = 64 * 1024;
/// Requests in flight at once.
const WINDOW: usize = 16;

const POSIX_RENAME: &str = "posix-rename@openssh.com";
const LSETSTAT: &str = "lsetstat@openssh.com";
/// `SSH_FILEXFER_ATTR_ACMODTIME`: the attributes hold access and modification times.
const ATTR_TIMES: u32 = 0x8;

/// Every entry of the directory `path`, with its attributes (from `lstat` on OpenSSH).
pub(super) async fn read_dir(
    sftp: &RawSftpSession,
    path: &str,
) -> Result<Vec<(String, FileAttributes)>, SftpError> {
    let handle = sftp.opendir(path).await?.handle;
    let mut entries = Vec::new();
    let outcome = loop {
        match sftp.readdir(handle.as_str()).await {
            Ok(name) => entries.extend(name.files.into_iter().map(|f| (f.filename, f.attrs))),
            Err(SftpError::Status(s)) if s.status_code == StatusCode::Eof => break Ok(entries),
            Err(e) => break Err(e),
        }
    };
    let closed = sftp.close(handle).await;
    let entries = outcome?;
    closed?;
    Ok(entries)
}

/// The target of the symlink `path`.
pub(super) async fn read_link(sftp: &RawSftpSession, path: &str) -> Result<String, SftpError> {
    let name = sftp.readlink(path).await?;
    name.files
        .into_iter()
        .next()
        .map(|f| f.filename)
        .ok_or_else(|| SftpError::UnexpectedBehavior("readlink named no target".into()))
}

/// Renames `from` to `to`, replacing a file at `to` as POSIX `rename` does. With
/// `posix-rename@openssh.com` that is one atomic request. Without it, SFTP's own RENAME
/// refuses to replace, so a file in the way is removed first: for a moment there is no
/// file at `to`, which is why the extension is used wherever the server has it.
pub(super) async fn rename(link: &Link, from: &str, to: &str) -> Result<(), SftpError> {
    let sftp = &link.sftp;
    if link.posix_rename {
        let data = [from, to].iter().flat_map(|s| ssh_string(s)).collect();
        return match sftp.extended(POSIX_RENAME, data).await? {
            Packet::Status(s) if s.status_code == StatusCode::Ok => Ok(()),
            Packet::Status(s) => Err(SftpError::Status(s)),
            _ => Err(SftpError::UnexpectedPacket),
        };
    }
    match sftp.rename(from, to).await {
        Err(SftpError::Status(s)) if s.status_code == StatusCode::Failure => {
            let in_the_way = sftp.lstat(to).await.is_ok_and(|a| !a.attrs.is_dir());
            if !in_the_way || sftp.lstat(from).await.is_err() {
                return Err(SftpError::Status(s));
            }
            sftp.remove(to).await?;
            sftp.rename(from, to).await.map(drop)
        }
        other => other.map(drop),
    }
}

/// Sets the times of the symlink `path` itself with `lsetstat@openssh.com` (SETSTAT
/// follows a link, as `utimes` does; `touch -h` and `tar x` mean the link).
pub(super) async fn set_link_times(
    sftp: &RawSftpSession,
    path: &str,
    atime: u32,
    mtime: u32,
) -> Result<(), SftpError> {
    let mut data = ssh_string(path);
    for word in [ATTR_TIMES, atime, mtime] {
        data.extend(word.to_be_bytes());
    }
    match sftp.extended(LSETSTAT, data).await? {
        Packet::Status(s) if s.status_code == StatusCode::Ok => Ok(()),
        Packet::Status(s) => Err(SftpError::Status(s)),
        _ => Err(SftpError::UnexpectedPacket),
    }
}

/// Links `from` as `to` with `hardlink@openssh.com`, which fails if `to` exists (link(2)
/// on OpenSSH), and removes `from` after a link. `pipelined` (the server is known to
/// have the extension): the removal goes out right behind the link, in the same round
/// trip (the server handles them in order), and `from` goes whatever the link's outcome.
/// The link's outcome is the result; a failed removal after a link only leaves a hidden
/// name, and is logged.
pub(super) async fn link_into_place(
    link: &Link,
    from: &str,
    to: &str,
    pipelined: bool,
) -> Result<(), Fault> {
    let sftp = &*link.sftp;
    let linked = Sent::now(sftp.hardlink(from, to)).await;
    let (linked, removed) = match pipelined {
        true => {
            let removed = Sent::now(sftp.remove(from)).await;
            (answer(link, linked).await, answer(link, removed).await)
        }
        false => match answer(link, linked).await {
            Ok(()) => (
                Ok(()),
                answer(link, Sent::now(sftp.remove(from)).await).await,
            ),
            Err(f) => (Err(f), Ok(())),
        },
    };
    if let (Ok(()), Err(f)) = (&linked, removed) {
        tracing::warn!("sftp: could not remove the temporary {from}: {f:?}");
    }
    linked
}

/// A request that needs nothing back but its status.
#[derive(Clone, Copy, Debug)]
pub(super) enum Simple<'a> {
    /// A directory with these permission bits (less the server's umask).
    MakeDir(u32),
    RemoveFile,
    RemoveDir,
    SetMode(u32),
    /// A symlink pointing to this target.
    Symlink(&'a str),
}

/// Sends `request` about `path`.
pub(super) async fn simple(
    sftp: &RawSftpSession,
    request: Simple<'_>,
    path: &str,
) -> Result<(), SftpError> {
    match request {
        Simple::MakeDir(mode) => sftp.mkdir(path, permissions(mode)).await,
        Simple::RemoveFile => sftp.remove(path).await,
        Simple::RemoveDir => sftp.rmdir(path).await,
        Simple::SetMode(mode) => sftp.setstat(path, permissions(mode)).await,
        // OpenSSH's server reads SSH_FXP_SYMLINK's two paths in the opposite order to the
        // draft (target first), as do the servers that follow it; russh-sftp sends the
        // draft's order (link first), so the arguments go in swapped.
        Simple::Symlink(target) => sftp.symlink(target, path).await,
    }
    .map(drop)
}

/// Attributes that set only permission bits.
fn permissions(mode: u32) -> FileAttributes {
    FileAttributes {
        permissions: Some(mode & 0o7777),
        ..FileAttributes::empty()
    }
}

/// What an upload sets on its temporary before the rename: the mode `put` keeps, and the
/// modification time (`mtime`, seconds) it was given; `None` when neither. SFTP v3 sets
/// both times at once: the access time is the one given, else the upload's, as it would
/// be without.
pub(super) fn kept_attrs(
    mode: Option<u32>,
    mtime: Option<u32>,
    atime: Option<u32>,
) -> Option<FileAttributes> {
    if mode.is_none() && mtime.is_none() {
        return None;
    }
    let now = super::meta::seconds(std::time::SystemTime::now());
    Some(FileAttributes {
        permissions: mode.map(|m| m & 0o7777),
        atime: mtime.map(|m| atime.or(now).unwrap_or(m)),
        mtime,
        ..FileAttributes::empty()
    })
}

/// An SSH wire string: length (u32, big-endian), then the bytes.
fn ssh_string(s: &str) -> Vec<u8> {
    let len = u32::try_from(s.len()).unwrap_or(u32::MAX);
    len.to_be_bytes().into_iter().chain(s.bytes()).collect()
}

/// Requests in flight, aborted if the transfer ends early (their answers are then
/// ignored by the session).
struct InFlight<T>(VecDeque<JoinHandle<T>>);

impl<T> Drop for InFlight<T> {
    fn drop(&mut self) {
        self.0.iter().for_each(JoinHandle::abort);
    }
}

/// What a read request brought: its offset, how much it asked for, and the answer.
type ReadAnswer = (u64, u64, Result<Vec<u8>, SftpError>);

/// Copies bytes `[offset, offset + len)` of the open file `handle` into `dest`, stopping
/// early at the end of the file; returns how many were copied.
pub(super) async fn download(
    link: &Link,
    handle: &str,
    offset: u64,
    len: u64,
    dest: &mut dyn Write,
) -> Result<u64, Fault> {
    let end = offset.saturating_add(len);
    let mut reads = InFlight(VecDeque::new());
    let (mut next, mut done) = (offset, offset);
    loop {
        while reads.0.len() < WINDOW && next < end {
            let want = (end - next).min(CHUNK.into());
            reads
                .0
                .push_back(spawn_read(&link.sftp, handle, next, want));
            next += want;
        }
        let Some(task) = reads.0.pop_front() else {
            break;
        };
        let (at, want, answer) = task.await.map_err(|e| Fault::Lost(e.to_string()))?;
        match answer {
            Ok(data) => {
                deliver(dest, &data)?;
                done = at + data.len() as u64;
                // A short answer before the end of the chunk: ask for the rest of it
                // before going on; hitting the end of the file there ends the copy.
                if done < at + want && !fill(link, handle, &mut done, at + want, dest).await? {
                    break;
                }
            }
            Err(SftpError::Status(s)) if s.status_code == StatusCode::Eof => break,
            Err(e) => return Err(link.fault(e)),
        }
    }
    Ok(done - offset)
}

fn spawn_read(
    sftp: &Arc<RawSftpSession>,
    handle: &str,
    at: u64,
    want: u64,
) -> JoinHandle<ReadAnswer> {
    let (sftp, handle) = (sftp.clone(), handle.to_owned());
    tokio::spawn(async move {
        // `want` is at most CHUNK, so it fits.
        let answer = sftp.read(handle, at, want as u32).await.map(|d| d.data);
        (at, want, answer)
    })
}

/// Reads `[*done, end)` one request at a time; `false` if the file ended first.
async fn fill(
    link: &Link,
    handle: &str,
    done: &mut u64,
    end: u64,
    dest: &mut dyn Write,
) -> Result<bool, Fault> {
    while *done < end {
        let (_, _, answer) = spawn_read(&link.sftp, handle, *done, end - *done)
            .await
            .map_err(|e| Fault::Lost(e.to_string()))?;
        match answer {
            Ok(data) if !data.is_empty() => {
                deliver(dest, &data)?;
                *done += data.len() as u64;
            }
            Ok(_) => return Ok(false),
            Err(SftpError::Status(s)) if s.status_code == StatusCode::Eof => return Ok(false),
            Err(e) => return Err(link.fault(e)),
        }
    }
    Ok(true)
}

fn deliver(dest: &mut dyn Write, data: &[u8]) -> Result<(), Fault> {
    dest.write_all(data)
        .map_err(|e| Fault::Local(Error::from_io("writing the copy", &e)))
}

/// Writes up to `len` bytes of `src` into the open file `handle` from offset 0, sets
/// `attrs` on it (a mode exactly, not masked by the server's umask; times) and closes it;
/// returns how many bytes `src` had (fewer than `len` if it ended early). The attributes
/// and the close go out behind the last writes without waiting for them (the server
/// handles a session's requests in order), so a small file costs one round trip, not
/// three; every answer is still awaited, and the first failure is the result. The handle
/// is closed whatever happened.
pub(super) async fn upload(
    link: &Link,
    handle: &str,
    src: &mut dyn Read,
    len: u64,
    attrs: Option<FileAttributes>,
) -> Result<u64, Fault> {
    let sftp = &*link.sftp;
    let mut pending = VecDeque::new();
    let mut fault = None;
    let mut sent = 0u64;
    while sent < len && fault.is_none() {
        let chunk = match take(src, (len - sent).min(CHUNK.into())) {
            Ok(chunk) if chunk.is_empty() => break,
            Ok(chunk) => chunk,
            Err(f) => {
                fault = Some(f);
                break;
            }
        };
        if pending.len() == WINDOW {
            if let Some(oldest) = pending.pop_front() {
                fault = answer(link, oldest).await.err();
            }
        }
        let at = sent;
        sent += chunk.len() as u64;
        pending.push_back(Sent::now(sftp.write(handle, at, chunk)).await);
    }
    if let Some(attrs) = attrs.filter(|_| fault.is_none()) {
        pending.push_back(Sent::now(sftp.fsetstat(handle, attrs)).await);
    }
    // The close must succeed too: servers may report a failed write only there.
    pending.push_back(Sent::now(sftp.close(handle)).await);
    for request in pending {
        let answered = answer(link, request).await;
        fault = fault.or(answered.err());
    }
    fault.map_or(Ok(sent), Err)
}

/// A request on the wire, to be answered later. russh-sftp sends a request when it is first
/// polled: polling each once as it is made keeps the order in which they reach the server
/// (a `close` after the writes), which spawned tasks would not promise.
struct Sent<'a>(Pin<Box<dyn Future<Output = Result<Status, SftpError>> + Send + 'a>>);

impl<'a> Sent<'a> {
    async fn now(request: impl Future<Output = Result<Status, SftpError>> + Send + 'a) -> Sent<'a> {
        let mut request = Box::pin(request);
        match std::future::poll_fn(|cx| Poll::Ready(request.as_mut().poll(cx))).await {
            Poll::Ready(answer) => Sent(Box::pin(std::future::ready(answer))),
            Poll::Pending => Sent(request),
        }
    }
}

/// Waits for the answer to one request.
async fn answer(link: &Link, request: Sent<'_>) -> Result<(), Fault> {
    request.0.await.map(drop).map_err(|e| link.fault(e))
}

/// Up to `limit` bytes of `src` (fewer only at its end).
fn take(src: &mut dyn Read, limit: u64) -> Result<Vec<u8>, Fault> {
    let mut chunk = Vec::new();
    src.take(limit)
        .read_to_end(&mut chunk)
        .map_err(|e| Fault::Local(Error::from_io("reading the data to upload", &e)))?;
    Ok(chunk)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ssh_strings_are_length_prefixed() {
        assert_eq!(ssh_string("ab"), [0, 0, 0, 2, b'a', b'b']);
        assert_eq!(ssh_string(""), [0, 0, 0, 0]);
    }
}
