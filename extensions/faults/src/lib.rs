//! The `faults` extension: Sprockets' Table 1, one misbehaviour per `Compute` op, written once
//! and built for every technology so that only the isolation differs.
//!
//! Ops (with their `data`): `ok`; `leak` (1 MiB per call, never freed); `hog` (1 GiB at once);
//! `stomp` (u64 address + u64 length: write 0xAA there, the host's canary); `crash` (load from
//! an unmapped address); `leak_fd` (open /dev/null, forget it); `close_fd` (u32 fd the host
//! holds); `loop` (spin forever); `exec` (run /bin/sh); `write_file` (path: create it);
//! `malformed` (a reply that does not decode); `oversized` (a 32 MiB reply); `count` (calls
//! seen); `peek` (u64 address + u64 length: the bytes there, the host's secret); `env` (the
//! environment the extension sees, `NAME=VALUE` lines). Every other kind of request gets a
//! well-formed but invalid answer (see [`lie`]), but frames: as a frame codec it stores
//! frames as they are and lies only decoding a frame that begins `short` (one byte short)
//! or `junk` (a reply that does not decode), so files of both can be written.

use roam_ext_abi::{Edit, FrameOp, LayerOp, Range, Reply, Request, SourceEntry, SourceFile, Span};
use std::hint::black_box;

roam_ext_abi::export!(raw handle);

fn handle(input: &[u8]) -> Vec<u8> {
    match Request::decode(input) {
        Ok(Request::Compute { op, .. }) if op == "malformed" => b"\xffnot a reply".to_vec(),
        Ok(Request::Frame {
            op: FrameOp::Decode,
            data,
            ..
        }) if data.starts_with(b"junk") => b"\xffnot a reply".to_vec(),
        Ok(Request::Compute { op, data }) => probe(&op, &data).encode(),
        Ok(other) => lie(other).encode(),
        Err(e) => Reply::Fail(e.to_string()).encode(),
    }
}

/// For the other kinds, a well-formed reply the core must reject: a victim that was not offered,
/// a range past the end of the file, a patch past the end of the file, a layer that changes
/// length or produces `..`, an archive member's data past the end of the archive, digests
/// of the wrong length, a device source's tree that escapes or lies (see [`source_lie`]).
fn lie(req: Request) -> Reply {
    match req {
        Request::Policy { candidates, .. } => Reply::Victim(candidates.len() as u32),
        Request::Query { files, .. } => {
            let size = files.sizes.first().copied().unwrap_or(0);
            Reply::Need(vec![Range {
                file: 0,
                off: size,
                len: 1,
            }])
        }
        Request::Resolve { files, .. } => {
            // Overwrites a byte past the end of the remote version (file 2).
            let remote = files.sizes.get(2).copied().unwrap_or(0);
            Reply::Patch(vec![Edit {
                off: remote,
                del: 1,
                ins: b"evil".to_vec(),
            }])
        }
        Request::Layer {
            op: LayerOp::Decode | LayerOp::Encode,
            mut data,
            ..
        } => {
            data.push(b'!');
            Reply::Bytes(data)
        }
        Request::Layer { .. } => Reply::Bytes(b"..".to_vec()),
        Request::ArchiveList { files, .. } | Request::ArchiveExtract { files, .. } => {
            Reply::Extent {
                off: files.sizes.first().copied().unwrap_or(0),
                len: 1,
            }
        }
        Request::Compute { .. } => Reply::Fail("computations are probes".into()),
        // One byte short of MD5 and SHA-256, or a state past the core's bound.
        Request::Digest { .. } => Reply::Bytes(vec![0; 47]),
        Request::SourceList { files, .. } => source_lie(&files),
        Request::Frame { op, data, .. } => frame(op, data),
        Request::Readahead { args, size, .. } => readahead_lie(&args, size),
    }
}

/// As a frame codec (number 9): frames stored as they are; decoding a frame that begins
/// `short` answers a byte less.
fn frame(op: FrameOp, mut data: Vec<u8>) -> Reply {
    match op {
        FrameOp::Describe => Reply::Codec {
            id: 9,
            min_frames: 0,
            key: false,
        },
        FrameOp::Decode if data.starts_with(b"short") => {
            data.pop();
            Reply::Bytes(data)
        }
        _ => Reply::Bytes(data),
    }
}

/// A read-ahead policy's lie, picked by its argument: `lie=huge` (16 ranges of 4 GiB),
/// `lie=slow` (never answers); otherwise a range past the end of the file.
fn readahead_lie(args: &[String], size: u64) -> Reply {
    let range = |off, len| Range { file: 0, off, len };
    match args.first().map(String::as_str) {
        Some("lie=huge") => Reply::Need(vec![range(0, u32::MAX); 16]),
        Some("lie=slow") => loop {
            std::hint::spin_loop();
        },
        _ => Reply::Need(vec![range(size, 4096)]),
    }
}

/// A device source's lie, picked by the name of the source's first file: a name with `/`
/// (`slash`), a directory `..` (`dotdot`), a size past the file's end (`liar`), 200,001
/// entries (`huge`); otherwise a span past the end of the file.
fn source_lie(files: &[SourceFile]) -> Reply {
    let Some(first) = files.first() else {
        return Reply::Fail("no files".into());
    };
    let entry = |dir: &str, name: &str, len| SourceEntry {
        dir: dir.into(),
        name: name.into(),
        file: 0,
        off: 0,
        len,
        mtime: 0,
    };
    let entries = match first.path.split('.').next().unwrap_or("") {
        "slash" => vec![entry("", "a/b", 1)],
        "dotdot" => vec![entry("..", "escaped", 1)],
        "liar" => vec![entry("", "liar", first.size + 1)],
        "huge" => (0..200_001)
            .map(|i| entry("", &format!("{i}"), 1))
            .collect(),
        _ => {
            let past = Span {
                file: 0,
                off: first.size,
                len: 1,
            };
            return Reply::Entries {
                entries: Vec::new(),
                state: Vec::new(),
                need: vec![past],
            };
        }
    };
    Reply::Entries {
        entries,
        state: Vec::new(),
        need: Vec::new(),
    }
}

fn probe(op: &str, data: &[u8]) -> Reply {
    match op {
        "ok" => Reply::Bytes(b"ok".to_vec()),
        "leak" => {
            black_box(vec![1u8; 1 << 20].leak());
            Reply::Bytes(b"leaked".to_vec())
        }
        "hog" => Reply::Bytes(black_box(vec![7u8; 1 << 30])[..1].to_vec()),
        "stomp" => stomp(data),
        "peek" => peek(data),
        "env" => Reply::Bytes(
            std::env::vars_os()
                .flat_map(|(k, v)| [k, "=".into(), v, "\n".into()])
                .map(|s| s.into_encoded_bytes())
                .collect::<Vec<_>>()
                .concat(),
        ),
        // SAFETY: none, on purpose: this address is unmapped on every host (the fault probe).
        "crash" => Reply::Bytes(vec![unsafe {
            std::ptr::read_volatile((usize::MAX - 7) as *const u8)
        }]),
        "leak_fd" => match std::fs::File::open("/dev/null") {
            Ok(f) => {
                std::mem::forget(f);
                Reply::Bytes(b"opened".to_vec())
            }
            Err(e) => Reply::Fail(format!("open: {e}")),
        },
        "close_fd" => close_fd(data),
        "loop" => loop {
            std::hint::spin_loop();
        },
        "exec" => match std::process::Command::new("/bin/sh")
            .arg("-c")
            .arg("true")
            .status()
        {
            Ok(_) => Reply::Bytes(b"executed".to_vec()),
            Err(e) => Reply::Fail(format!("exec: {e}")),
        },
        "write_file" => match std::fs::write(String::from_utf8_lossy(data).as_ref(), b"pwned") {
            Ok(()) => Reply::Bytes(b"written".to_vec()),
            Err(e) => Reply::Fail(format!("write: {e}")),
        },
        "oversized" => Reply::Bytes(vec![0u8; 32 << 20]),
        // State kept between calls: every call must see the same (a count of 1).
        "count" => {
            static CALLS: std::sync::atomic::AtomicU32 = std::sync::atomic::AtomicU32::new(0);
            let n = CALLS.fetch_add(1, std::sync::atomic::Ordering::Relaxed) + 1;
            Reply::Bytes(n.to_string().into_bytes())
        }
        _ => Reply::Fail(format!("unknown op {op}")),
    }
}

fn stomp(data: &[u8]) -> Reply {
    let Some((addr, len)) = data.get(..16).map(|d| (u64_at(&d[..8]), u64_at(&d[8..]))) else {
        return Reply::Fail("stomp needs address and length".into());
    };
    let p = addr as usize as *mut u8;
    for i in 0..len as usize {
        // SAFETY: none, on purpose: the probe writes where the host's canary lives.
        unsafe { std::ptr::write_volatile(p.wrapping_add(i), 0xAA) };
    }
    Reply::Bytes(b"stomped".to_vec())
}

fn peek(data: &[u8]) -> Reply {
    let Some((addr, len)) = data.get(..16).map(|d| (u64_at(&d[..8]), u64_at(&d[8..]))) else {
        return Reply::Fail("peek needs address and length".into());
    };
    let p = addr as usize as *const u8;
    // SAFETY: none, on purpose: the probe reads where the host keeps a secret.
    let bytes = (0..len as usize).map(|i| unsafe { std::ptr::read_volatile(p.wrapping_add(i)) });
    Reply::Bytes(bytes.collect())
}

fn close_fd(data: &[u8]) -> Reply {
    use std::os::fd::{FromRawFd, OwnedFd};
    let Some(fd) = data
        .get(..4)
        .map(|d| i32::from_le_bytes([d[0], d[1], d[2], d[3]]))
    else {
        return Reply::Fail("close_fd needs a descriptor".into());
    };
    // SAFETY: none, on purpose: the descriptor is the host's, not ours (the fault probe).
    drop(unsafe { OwnedFd::from_raw_fd(fd) });
    Reply::Bytes(b"closed".to_vec())
}

fn u64_at(b: &[u8]) -> u64 {
    let mut a = [0u8; 8];
    a.copy_from_slice(b);
    u64::from_le_bytes(a)
}
