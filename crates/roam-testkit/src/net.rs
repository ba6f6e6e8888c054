//! A network of a test's own: a namespace with only a loopback, where firewall rules (a
//! partition, a host only a bastion may reach) touch nothing outside the test.

use std::process::Command;

/// Puts this thread, and every thread and process it starts, in a network namespace of its
/// own with only a loopback: its firewall rules partition nothing else. Each test runs on
/// a thread of its own, and a network namespace is a thread's.
pub fn own_network() {
    // SAFETY: unshare(2) of this thread's network namespace; touches no memory.
    let rc = unsafe { libc::unshare(libc::CLONE_NEWNET) };
    assert_eq!(
        rc,
        0,
        "a network namespace of the test's own needs CAP_SYS_ADMIN (run the tests as root): {}",
        std::io::Error::last_os_error()
    );
    command_ok("ip", &["link", "set", "lo", "up"]);
}

/// Runs `program` (`ip`, `iptables` ...), failing the test if it fails.
pub fn command_ok(program: &str, args: &[&str]) {
    let o = Command::new(program)
        .args(args)
        .output()
        .unwrap_or_else(|e| panic!("{program}: {e} (.ci/run installs it)"));
    assert!(
        o.status.success(),
        "{program} {args:?}: {}",
        String::from_utf8_lossy(&o.stderr)
    );
}
