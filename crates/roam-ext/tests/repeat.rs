//! Sprockets' endurance check: 10,000 faulty calls per isolating technology leak nothing in
//! roam's process (descriptors, resident memory) and leave the extension answering. Alone in
//! its binary so that no other test opens descriptors meanwhile.

use roam_ext::{Extension, Limits, Technology};
use std::os::fd::AsRawFd;

const CALLS: usize = 10_000;

fn open_fds() -> usize {
    std::fs::read_dir("/proc/self/fd").unwrap().count()
}

fn rss_kib() -> u64 {
    let status = std::fs::read_to_string("/proc/self/status").unwrap();
    let line = status.lines().find(|l| l.starts_with("VmRSS:")).unwrap();
    line.split_whitespace().nth(1).unwrap().parse().unwrap()
}

#[test]
fn ten_thousand_faulty_calls_leak_nothing() {
    let held = std::fs::File::open("/dev/null").unwrap();
    let fd = held.as_raw_fd().to_le_bytes();
    let ops: [(&str, &[u8]); 6] = [
        ("leak", b""),
        ("crash", b""),
        ("leak_fd", b""),
        ("close_fd", &fd),
        ("malformed", b""),
        ("ok", b""),
    ];
    let dir = roam_testkit::ext::extensions();
    for tech in [
        Technology::Wasm,
        Technology::Pulley,
        Technology::Fork,
        Technology::Worker,
    ] {
        let ext = Extension::load(&dir, "faults", tech, Limits::default()).unwrap();
        let run = |n: usize| {
            let mut failed = 0;
            for i in 0..n {
                let (op, data) = ops[i % ops.len()];
                failed += usize::from(ext.compute(op, data).is_err());
            }
            failed
        };
        run(ops.len() * 10); // warm up: the worker exists, allocators have their arenas
        let (fds, rss) = (open_fds(), rss_kib());
        let failed = run(CALLS);
        // crash, leak_fd, malformed fail every time; worker leaks also end in restarts.
        assert!(
            failed >= CALLS / 2,
            "{tech}: only {failed} of {CALLS} calls failed"
        );
        assert_eq!(open_fds(), fds, "{tech}: descriptors leaked");
        let grown = rss_kib().saturating_sub(rss);
        assert!(
            grown < 32 * 1024,
            "{tech}: resident memory grew by {grown} KiB"
        );
        assert_eq!(
            ext.compute("ok", b"").unwrap(),
            b"ok",
            "{tech}: no longer answers"
        );
    }
}
