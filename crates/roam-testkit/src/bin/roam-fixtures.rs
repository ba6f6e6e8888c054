//! `roam-fixtures DIR KIND...`: starts the real servers roam's tests use (see
//! `roam_testkit::backend`), each serving `DIR/KIND` (created if missing; write the tree
//! first, servers take ownership of it) with its state in `DIR/.run/KIND`, on 127.0.0.1.
//! Prints shell assignments for each, then `READY=1`, and keeps them running until it gets
//! SIGTERM or SIGINT, stopping them on the way out:
//!
//! ```text
//! DAV_URL='dav://127.0.0.1:40123'       what `roam run -m /w=URL` mounts
//! SFTP_ENV='HOME=/...'                  environment roam needs (for `env $SFTP_ENV roam ...`)
//! SFTP_PORT='40125'                     facts for other clients (sshfs, rclone)
//! ```
//!
//! For the shell benchmarks (`bench/protocols.sh`): the same servers, configured as in the
//! tests, so benchmark and test suites measure one thing.

use std::path::PathBuf;

use roam_testkit::backend::{serve, Served, KINDS};
use roam_testkit::mkdir;

fn main() {
    let mut args = std::env::args().skip(1);
    let (Some(dir), kinds) = (args.next(), args.collect::<Vec<_>>()) else {
        usage();
    };
    if kinds.is_empty() || kinds.iter().any(|k| !KINDS.contains(&k.as_str())) {
        usage();
    }
    let dir = PathBuf::from(dir);
    let served: Vec<Served> = kinds
        .iter()
        .map(|kind| {
            let srv = dir.join(kind);
            mkdir(&srv);
            let served = serve(kind, &srv, &dir.join(".run").join(kind));
            print_assignments(kind, &served);
            served
        })
        .collect();
    // Blocked only now: the servers would inherit a blocked SIGTERM and ignore their stop.
    let signals = stop_signals();
    println!("READY=1");
    wait_for(&signals);
    drop(served);
}

fn usage() -> ! {
    eprintln!(
        "usage: roam-fixtures DIR KIND... (kinds: {})",
        KINDS.join(" ")
    );
    std::process::exit(2);
}

/// `KIND_URL`, `KIND_ENV` and one `KIND_FACT` per fact, single-quoted for the shell.
fn print_assignments(kind: &str, served: &Served) {
    let prefix = kind.to_uppercase();
    let env: Vec<String> = served.env.iter().map(|(k, v)| format!("{k}={v}")).collect();
    println!("{prefix}_URL={}", quote(&served.url));
    println!("{prefix}_ENV={}", quote(&env.join(" ")));
    for (name, value) in &served.facts {
        println!("{prefix}_{}={}", name.to_uppercase(), quote(value));
    }
}

fn quote(value: &str) -> String {
    format!("'{}'", value.replace('\'', r"'\''"))
}

/// SIGTERM and SIGINT, blocked (this process has one thread), to be taken by `sigwait`.
fn stop_signals() -> libc::sigset_t {
    // SAFETY: sigemptyset/sigaddset initialise the set we own; pthread_sigmask only changes
    // this thread's mask.
    unsafe {
        let mut set: libc::sigset_t = std::mem::zeroed();
        libc::sigemptyset(&mut set);
        libc::sigaddset(&mut set, libc::SIGTERM);
        libc::sigaddset(&mut set, libc::SIGINT);
        libc::pthread_sigmask(libc::SIG_BLOCK, &set, std::ptr::null_mut());
        set
    }
}

/// Returns once one of `signals` (blocked) arrives.
fn wait_for(signals: &libc::sigset_t) {
    let mut got = 0;
    // SAFETY: sigwait reads the set and writes the signal number into `got`.
    unsafe { libc::sigwait(signals, &mut got) };
}
