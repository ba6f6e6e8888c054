//! Mounting without privileges, through the setuid `fusermount3` helper: it opens
//! `/dev/fuse`, mounts it on the directory and hands the fd back over a socket
//! (`_FUSE_COMMFD`, an `SCM_RIGHTS` message). Used when roam may not open `/dev/fuse` or
//! call mount(2) itself; the mount is undone with `fusermount3 -u`.

use std::io::{Error, ErrorKind, IoSliceMut};
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd, RawFd};
use std::os::unix::net::UnixStream;
use std::os::unix::process::CommandExt;
use std::path::Path;
use std::process::{Command, Stdio};

use nix::sys::socket::{recvmsg, ControlMessageOwned, MsgFlags, UnixAddr};

/// Mounts `/dev/fuse` on `dir` with the mount options `opts`; the session's fd.
pub fn mount(dir: &Path, opts: &str) -> std::io::Result<OwnedFd> {
    let (ours, theirs) = UnixStream::pair()?;
    let fd = theirs.as_raw_fd();
    let mut cmd = Command::new("fusermount3");
    cmd.arg("-o")
        .arg(opts)
        .arg("--")
        .arg(dir)
        .env("_FUSE_COMMFD", fd.to_string())
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::piped());
    // SAFETY: only fcntl(2) between fork and exec: fusermount3 must inherit the socket.
    unsafe {
        cmd.pre_exec(move || {
            if libc::fcntl(fd, libc::F_SETFD, 0) == -1 {
                return Err(Error::last_os_error());
            }
            Ok(())
        });
    }
    let child = cmd.spawn().map_err(|e| {
        Error::new(
            e.kind(),
            format!("running fusermount3 (is fuse3 installed?): {e}"),
        )
    })?;
    drop(theirs);
    let received = receive_fd(&ours);
    let out = child.wait_with_output()?;
    received.map_err(|e| {
        let why = String::from_utf8_lossy(&out.stderr).trim().to_owned();
        Error::new(
            ErrorKind::PermissionDenied,
            format!("fusermount3: {why} ({e})"),
        )
    })
}

/// Lazily unmounts `dir` (the user's own FUSE mount).
pub fn unmount(dir: &Path) -> std::io::Result<()> {
    let status = Command::new("fusermount3")
        .args(["-u", "-z", "--"])
        .arg(dir)
        .stderr(Stdio::null())
        .status()?;
    if status.success() {
        Ok(())
    } else {
        Err(Error::other(format!(
            "fusermount3 -u {}: {status}",
            dir.display()
        )))
    }
}

fn receive_fd(sock: &UnixStream) -> std::io::Result<OwnedFd> {
    let mut byte = [0u8];
    let mut iov = [IoSliceMut::new(&mut byte)];
    let mut space = nix::cmsg_space!(RawFd);
    let msg = loop {
        match recvmsg::<UnixAddr>(
            sock.as_raw_fd(),
            &mut iov,
            Some(&mut space),
            MsgFlags::empty(),
        ) {
            Err(nix::errno::Errno::EINTR) => continue,
            other => break other?,
        }
    };
    for cmsg in msg.cmsgs()? {
        if let ControlMessageOwned::ScmRights(fds) = cmsg {
            if let Some(&fd) = fds.first().filter(|&&fd| fd >= 0) {
                // SAFETY: the fd was just received and is owned by nobody else.
                return Ok(unsafe { OwnedFd::from_raw_fd(fd) });
            }
        }
    }
    Err(Error::new(ErrorKind::UnexpectedEof, "no fd received"))
}
