//! `mem:` through `roam mount`: its files are sparse, as tmpfs's are, so a huge truncate or
//! a write far out holds no memory, and sizes stop where tmpfs's do, instead of aborting
//! roam on an allocation it cannot make, with every file in it.

mod common;

use std::fs::{self, OpenOptions};
use std::os::unix::fs::FileExt;

use common::fuse::{is_mounted, FuseMount};
use common::Roam;

/// What `truncate -s 999999999999999` asked for when it aborted roam.
const HUGE: u64 = 999_999_999_999_999;

/// The resident memory of process `pid`, in KiB.
fn rss_kib(pid: u32) -> u64 {
    let status = fs::read_to_string(format!("/proc/{pid}/status")).unwrap();
    let line = status.lines().find(|l| l.starts_with("VmRSS:")).unwrap();
    line.split_whitespace().nth(1).unwrap().parse().unwrap()
}

#[test]
fn huge_files_hold_no_memory_and_stop_at_the_largest_size() {
    let m = FuseMount::start(Roam::new(), Some("mem:"), &[]);
    let path = m.dir.join("huge");
    fs::write(&path, b"head").unwrap();
    fs::write(m.dir.join("other"), b"kept").unwrap();
    let before = rss_kib(m.pid());

    let f = OpenOptions::new()
        .read(true)
        .write(true)
        .open(&path)
        .unwrap();
    f.set_len(HUGE).unwrap();
    assert_eq!(fs::metadata(&path).unwrap().len(), HUGE);
    let mut middle = [7u8; 4096];
    f.read_exact_at(&mut middle, HUGE / 2).unwrap();
    assert_eq!(middle, [0; 4096], "a hole reads as zeros");
    f.write_all_at(b"far", HUGE - 3).unwrap();
    let mut end = [0u8; 3];
    f.read_exact_at(&mut end, HUGE - 3).unwrap();
    assert_eq!(&end, b"far");
    let grown = rss_kib(m.pid()).saturating_sub(before);
    assert!(grown < 32 << 10, "roam grew by {grown} KiB");

    // tmpfs's largest file is 2^63-1 bytes: roam takes that size and its last byte. A
    // byte past it the kernel refuses before roam sees it, with EINVAL as on tmpfs (roam's
    // own EFBIG there serves frontends that call it directly: the driver's tests).
    let largest = i64::MAX as u64;
    f.set_len(largest).unwrap();
    assert_eq!(fs::metadata(&path).unwrap().len(), largest);
    f.write_all_at(b"z", largest - 1).unwrap();
    assert_eq!(fs::metadata(&path).unwrap().len(), largest);
    let past = f.write_at(b"x", largest).unwrap_err();
    assert_eq!(past.raw_os_error(), Some(libc::EINVAL), "{past}");

    // roam lives on, and so do its files.
    assert!(is_mounted(&m.dir));
    let mut head = [0u8; 4];
    f.read_exact_at(&mut head, 0).unwrap();
    assert_eq!(&head, b"head");
    assert_eq!(fs::read(m.dir.join("other")).unwrap(), b"kept");
}
