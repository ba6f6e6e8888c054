//! Reading and writing a stopped tracee's memory with `process_vm_readv/writev`: one
//! system call per transfer instead of one `PTRACE_PEEKDATA` per word.

use std::io::{IoSlice, IoSliceMut};

use nix::sys::uio::{process_vm_readv, process_vm_writev, RemoteIoVec};
use nix::unistd::Pid;

const PAGE: usize = 4096;
/// Longest path the kernel accepts, including the NUL.
pub const PATH_MAX: usize = 4096;
/// Bytes below the stack pointer that the x86_64 ABI lets leaf functions use.
const RED_ZONE: u64 = 128;

/// Reads a NUL-terminated string of at most `PATH_MAX` bytes (without the NUL).
/// Reads page by page so a string ending just before an unmapped page is still read.
pub fn read_cstr(pid: Pid, addr: u64) -> nix::Result<Vec<u8>> {
    let mut out = Vec::with_capacity(128);
    let mut at = addr;
    while out.len() < PATH_MAX {
        let room = PAGE - (at as usize % PAGE);
        let want = room
            .min(PATH_MAX - out.len())
            .min(if out.is_empty() { 256 } else { PAGE });
        // Read straight into `out`: a page-sized buffer zeroed for every name cost more
        // than the read itself.
        let len = out.len();
        out.resize(len + want, 0);
        let n = read(pid, at, &mut out[len..])?;
        if let Some(end) = out[len..len + n].iter().position(|&b| b == 0) {
            out.truncate(len + end);
            return Ok(out);
        }
        out.truncate(len + n);
        at += n as u64;
    }
    Err(nix::errno::Errno::ENAMETOOLONG)
}

/// Reads up to `buf.len()` bytes at `addr`; returns how many were read.
pub fn read(pid: Pid, addr: u64, buf: &mut [u8]) -> nix::Result<usize> {
    let remote = [RemoteIoVec {
        base: addr as usize,
        len: buf.len(),
    }];
    let n = process_vm_readv(pid, &mut [IoSliceMut::new(buf)], &remote)?;
    if n == 0 {
        return Err(nix::errno::Errno::EFAULT);
    }
    Ok(n)
}

/// Writes all of `data` at `addr`.
pub fn write(pid: Pid, addr: u64, data: &[u8]) -> nix::Result<()> {
    let remote = [RemoteIoVec {
        base: addr as usize,
        len: data.len(),
    }];
    let n = process_vm_writev(pid, &[IoSlice::new(data)], &remote)?;
    if n != data.len() {
        return Err(nix::errno::Errno::EFAULT);
    }
    Ok(())
}

/// The highest address a stopped thread's stack offers for roam's strings: below the red
/// zone, which a leaf function may be using. Only the thread itself could use that memory,
/// and it is stopped; but the room there is the program's (see `platform::scratch`).
pub fn below_red_zone(sp: u64) -> u64 {
    sp - RED_ZONE
}

/// Bytes [`push_strings`] needs for `strings`.
pub fn strings_len(strings: &[&[u8]]) -> usize {
    strings.iter().map(|s| s.len() + 1).sum::<usize>() + 16
}

/// Places NUL-terminated copies of `strings` right below `top` (a thread's scratch slot, or
/// its stack) and returns their addresses. The thread is stopped at a system call, and the
/// kernel copies path arguments at entry (Ufo's trick).
pub fn push_strings(pid: Pid, top: u64, strings: &[&[u8]]) -> nix::Result<Vec<u64>> {
    let total: usize = strings.iter().map(|s| s.len() + 1).sum();
    let base = (top - total as u64) & !0xf;
    let mut blob = Vec::with_capacity(total);
    let mut addrs = Vec::with_capacity(strings.len());
    for s in strings {
        addrs.push(base + blob.len() as u64);
        blob.extend_from_slice(s);
        blob.push(0);
    }
    write(pid, base, &blob)?;
    Ok(addrs)
}

/// Bytes [`push_exec`] needs.
pub fn exec_len(path: &[u8], argv: &[Vec<u8>]) -> usize {
    let strings: usize = argv.iter().map(|a| a.len() + 1).sum::<usize>() + path.len() + 1;
    strings + 8 * (argv.len() + 1) + 32
}

/// Places a new program name and argument vector for `execve` right below `top`
/// (strings, then the NULL-terminated pointer array below them); returns the address of
/// the name and of the array.
pub fn push_exec(pid: Pid, top: u64, path: &[u8], argv: &[Vec<u8>]) -> nix::Result<(u64, u64)> {
    let mut strings: Vec<&[u8]> = vec![path];
    strings.extend(argv.iter().map(Vec::as_slice));
    let addrs = push_strings(pid, top, &strings)?;
    let lowest = addrs[0];
    let mut array: Vec<u8> = addrs[1..].iter().flat_map(|a| a.to_ne_bytes()).collect();
    array.extend_from_slice(&0u64.to_ne_bytes());
    let at = (lowest - array.len() as u64) & !0xf;
    write(pid, at, &array)?;
    Ok((addrs[0], at))
}

/// Reads a NULL-terminated array of string pointers (an `argv`), at most `max` entries.
pub fn read_argv(pid: Pid, addr: u64, max: usize) -> nix::Result<Vec<Vec<u8>>> {
    let mut out = Vec::new();
    for i in 0..max as u64 {
        let mut word = [0u8; 8];
        read(pid, addr + 8 * i, &mut word)?;
        let p = u64::from_ne_bytes(word);
        if p == 0 {
            return Ok(out);
        }
        out.push(read_cstr(pid, p)?);
    }
    Err(nix::errno::Errno::E2BIG)
}
