//! One request from a ring entry, answered: decoded from the entry's buffers
//! ([`super::abi`]), handed to the same [`Roamfs`] calls the `/dev/fuse` handlers make
//! ([`crate::ops`]), and its reply written back into the entry. Everything runs on the
//! entry's own thread, which sits on the CPU of the program that asked: a request that
//! waits for a server holds this entry only (each queue has as many entries as the
//! `/dev/fuse` transport has workers).

use std::time::{Duration, SystemTime, UNIX_EPOCH};

use fuser::{Errno, FileAttr, FopenFlags, TimeOrNow};

use super::abi::{names, Body, Header};
use crate::counts::{Counts, Op};
use crate::ops::{dir_flags, fopen_flags, passed};
use crate::write::SetAttr;
use crate::{Res, Roamfs};

// Opcodes (`enum fuse_opcode`). FORGET, BATCH_FORGET and INTERRUPT never come through a
// ring: the kernel sends them on `/dev/fuse`, where fuser's readers answer them.
const LOOKUP: u32 = 1;
const GETATTR: u32 = 3;
const SETATTR: u32 = 4;
const READLINK: u32 = 5;
const SYMLINK: u32 = 6;
const MKNOD: u32 = 8;
const MKDIR: u32 = 9;
const UNLINK: u32 = 10;
const RMDIR: u32 = 11;
const RENAME: u32 = 12;
const LINK: u32 = 13;
const OPEN: u32 = 14;
const READ: u32 = 15;
const WRITE: u32 = 16;
const STATFS: u32 = 17;
const RELEASE: u32 = 18;
const FSYNC: u32 = 20;
const GETXATTR: u32 = 22;
const LISTXATTR: u32 = 23;
const FLUSH: u32 = 25;
const OPENDIR: u32 = 27;
const READDIR: u32 = 28;
const RELEASEDIR: u32 = 29;
const CREATE: u32 = 35;
const DESTROY: u32 = 38;
const FALLOCATE: u32 = 43;
const READDIRPLUS: u32 = 44;
const RENAME2: u32 = 45;

// `fuse_setattr_in.valid` bits.
const FATTR_MODE: u32 = 1 << 0;
const FATTR_UID: u32 = 1 << 1;
const FATTR_GID: u32 = 1 << 2;
const FATTR_SIZE: u32 = 1 << 3;
const FATTR_ATIME: u32 = 1 << 4;
const FATTR_MTIME: u32 = 1 << 5;
const FATTR_FH: u32 = 1 << 6;
const FATTR_ATIME_NOW: u32 = 1 << 7;
const FATTR_MTIME_NOW: u32 = 1 << 8;

const GETATTR_FH: u32 = 1 << 0;
const WRITE_KILL_SUIDGID: u32 = 1 << 2;

/// Answers the request in `h` and `payload`; the reply is in them when this returns.
pub fn serve(fs: &Roamfs, counts: &Counts, h: &mut Header, payload: &mut [u8]) {
    let len = h.payload_len().min(payload.len());
    let res = match h.opcode() {
        // The data is answered in place: its reply is 8 bytes, written after it is used.
        WRITE => {
            write(fs, counts, h, &payload[..len]).map(|n| Body::new(payload).u32(n).u32(0).len)
        }
        _ => {
            // Names are read before the reply's body overwrites them.
            let input = payload[..len].to_vec();
            let mut body = Body::new(payload);
            answer(fs, counts, h, &input, &mut body).map(|()| body.len)
        }
    };
    match res {
        Ok(len) => h.set_reply(0, len),
        Err(e) => h.set_reply(e.code(), 0),
    }
}

fn write(fs: &Roamfs, counts: &Counts, h: &Header, data: &[u8]) -> Res<u32> {
    counts.add(Op::Write);
    let op = h.op();
    let size = (op.u32(16) as usize).min(data.len());
    let kill = op.u32(20) & WRITE_KILL_SUIDGID != 0;
    fs.write(op.u64(0), op.u64(8), &data[..size], kill)
}

fn answer(fs: &Roamfs, counts: &Counts, h: &Header, input: &[u8], out: &mut Body) -> Res<()> {
    let ino = h.nodeid();
    let op = h.op();
    let mut name = names(input);
    let mut first = || name.next().unwrap_or_default().to_owned();
    let entry = |out: &mut Body, (attr, ttl): (FileAttr, Duration)| {
        out.entry_out(&attr, ttl);
    };
    match h.opcode() {
        LOOKUP => {
            counts.add(Op::Lookup);
            entry(out, fs.lookup(ino, &first())?);
        }
        GETATTR => {
            counts.add(Op::Getattr);
            let fh = (op.u32(0) & GETATTR_FH != 0).then(|| op.u64(8));
            let (attr, ttl) = fs.getattr(ino, fh)?;
            out.attr_out(&attr, ttl);
        }
        SETATTR => {
            counts.add(Op::Setattr);
            let valid = op.u32(0);
            let has = |bit| valid & bit != 0;
            let time = |set, now, at, nsec_at| {
                has(set).then(|| match has(now) {
                    true => TimeOrNow::Now,
                    false => TimeOrNow::SpecificTime(at_time(op.u64(at), op.u32(nsec_at))),
                })
            };
            let set = SetAttr {
                mode: has(FATTR_MODE).then(|| op.u32(68)),
                uid: has(FATTR_UID).then(|| op.u32(76)),
                gid: has(FATTR_GID).then(|| op.u32(80)),
                size: has(FATTR_SIZE).then(|| op.u64(16)),
                atime: time(FATTR_ATIME, FATTR_ATIME_NOW, 32, 56),
                mtime: time(FATTR_MTIME, FATTR_MTIME_NOW, 40, 60),
            };
            let fh = has(FATTR_FH).then(|| op.u64(8));
            let (attr, ttl) = fs.setattr(ino, fh, &set)?;
            out.attr_out(&attr, ttl);
        }
        READLINK => {
            counts.add(Op::Readlink);
            out.bytes(&fs.readlink(ino)?);
        }
        SYMLINK => {
            counts.add(Op::Symlink);
            let link = first();
            let target = first();
            entry(out, fs.symlink(ino, &link, target.as_ref())?);
        }
        MKNOD => {
            counts.add(Op::Mknod);
            entry(out, fs.mknod(ino, &first(), op.u32(0), op.u32(4))?);
        }
        MKDIR => {
            counts.add(Op::Mkdir);
            entry(out, fs.mkdir(ino, &first(), op.u32(0))?);
        }
        UNLINK | RMDIR => {
            let dir = h.opcode() == RMDIR;
            counts.add(if dir { Op::Rmdir } else { Op::Unlink });
            fs.unlink(ino, &first(), dir)?;
        }
        RENAME | RENAME2 => {
            counts.add(Op::Rename);
            let flags = if h.opcode() == RENAME2 { op.u32(8) } else { 0 };
            let (from, to) = (first(), first());
            fs.rename(ino, &from, op.u64(0), &to, flags)?;
        }
        LINK => {
            counts.add(Op::Link);
            entry(out, fs.link(op.u64(0), ino, &first())?);
        }
        OPEN => {
            counts.add(Op::Open);
            let flags = op.u32(0) as i32;
            let (fh, keep, how) = fs.open(ino, flags)?;
            opened(fs, out, fh, fopen_flags(keep, how, flags));
        }
        CREATE => {
            counts.add(Op::Create);
            let flags = op.u32(0) as i32;
            let (attr, ttl, fh, how) = fs.create(ino, &first(), op.u32(4), flags)?;
            out.entry_out(&attr, ttl);
            opened(fs, out, fh, fopen_flags(false, how, flags));
        }
        READ => {
            counts.add(Op::Read);
            let f = fs.handles.file(op.u64(0)).ok_or(Errno::EBADF)?;
            out.fill(op.u32(16) as usize, |buf| fs.read_into(&f, op.u64(8), buf))?;
        }
        STATFS => {
            counts.add(Op::Statfs);
            let st = fs.statfs()?;
            out.u64(st.f_blocks).u64(st.f_bfree).u64(st.f_bavail);
            out.u64(st.f_files).u64(st.f_ffree);
            out.u32(st.f_bsize as u32)
                .u32(255)
                .u32(st.f_frsize as u32)
                .u32(0);
            out.bytes(&[0; 24]);
        }
        RELEASE => {
            counts.add(Op::Release);
            fs.release(op.u64(0));
        }
        FSYNC => {
            counts.add(Op::Fsync);
            fs.fsync(op.u64(0))?;
        }
        FLUSH => {
            counts.add(Op::Flush);
            fs.flush(op.u64(0), h.pid())?;
        }
        FALLOCATE => {
            counts.add(Op::Fallocate);
            fs.fallocate(op.u64(0), op.u64(8), op.u64(16), op.u32(24) as i32)?;
        }
        OPENDIR => {
            counts.add(Op::Opendir);
            let (fh, keep) = fs.opendir(ino)?;
            out.open_out(fh, dir_flags(keep).bits(), 0);
        }
        READDIR => {
            counts.add(Op::Readdir);
            readdir(fs, op.u64(0), op.u64(8), op.u32(16) as usize, out)?;
        }
        READDIRPLUS => {
            counts.add(Op::Readdirplus);
            let max = op.u32(16) as usize;
            fs.readdirplus(op.u64(0), op.u64(8), |ino, off, name, ttl, attr| {
                let need = 128 + Body::dirent_len(name);
                if out.len + need > max || !out.fits(need) {
                    return true;
                }
                out.entry_out(attr, *ttl).dirent(ino, off, attr.kind, name);
                false
            })?;
        }
        RELEASEDIR => {
            counts.add(Op::Releasedir);
            fs.handles.remove_dir(op.u64(0));
        }
        // No extended attributes: ENOSYS makes the kernel stop asking (crate::ops).
        GETXATTR => {
            counts.add(Op::Getxattr);
            return Err(Errno::ENOSYS);
        }
        LISTXATTR => {
            counts.add(Op::Listxattr);
            return Err(Errno::ENOSYS);
        }
        DESTROY => {}
        // What fuser answers for requests roam does not implement.
        _ => return Err(Errno::ENOSYS),
    }
    Ok(())
}

/// `fuse_open_out` for the open file `fh`, served by the kernel itself where it can.
fn opened(fs: &Roamfs, out: &mut Body, fh: u64, flags: FopenFlags) {
    match fs.backing_for(fh) {
        Some(b) => out.open_out(
            fh,
            (passed(flags) | FopenFlags::FOPEN_PASSTHROUGH).bits(),
            b.id(),
        ),
        None => out.open_out(fh, flags.bits(), 0),
    };
}

/// The entries of the open directory `fh` from `offset`, as many as `max` bytes hold.
fn readdir(fs: &Roamfs, fh: u64, offset: u64, max: usize, out: &mut Body) -> Res<()> {
    let dir = fs.handles.dir(fh).ok_or(Errno::EBADF)?;
    for (i, (ino, kind, name)) in dir.entries.iter().enumerate().skip(offset as usize) {
        let need = Body::dirent_len(name);
        if out.len + need > max || !out.fits(need) {
            break;
        }
        out.dirent(*ino, i as u64 + 1, *kind, name);
    }
    Ok(())
}

/// A time the kernel sends as seconds (negative before the epoch) and nanoseconds.
fn at_time(secs: u64, nsecs: u32) -> SystemTime {
    let secs = secs as i64;
    let since = Duration::new(secs.unsigned_abs(), 0);
    let t = if secs >= 0 {
        UNIX_EPOCH + since
    } else {
        UNIX_EPOCH - since
    };
    t + Duration::from_nanos(nsecs.into())
}
