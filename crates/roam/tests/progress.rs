//! The progress line, through the real binary fetching from nginx behind the fault
//! proxy (dripping, about 3 s): drawn on a terminal (a pty made by `script`), cleared at
//! the end, and absent when stderr is a pipe or with `-q`.

mod common;

use std::process::{Command, Stdio};

use common::{stderr, stdout, Roam};

const LEN: usize = 2 << 20;

/// `roam [FLAGS] run -- sh -c 'wc -c < FILE'` with the terminal `script` makes as its
/// stdin, stdout and stderr; returns all it wrote there.
fn in_a_pty(flags: &str, file: &str) -> String {
    let roam = Roam::new();
    let cmd = format!(
        "{} {flags} run -- sh -c 'wc -c < {file}'",
        env!("CARGO_BIN_EXE_roam")
    );
    let mut script = Command::new("script");
    for (k, v) in roam.command().get_envs() {
        if let Some(v) = v {
            script.env(k, v);
        }
    }
    let o = script
        .args(["-qec", &cmd, "/dev/null"])
        .stdin(Stdio::null())
        .output()
        .expect("running script");
    assert!(o.status.success(), "{}{}", stdout(&o), stderr(&o));
    stdout(&o)
}

#[test]
fn a_slow_fetch_shows_progress_on_a_terminal_and_clears_it() {
    let (_dir, _server, proxy) = common::dripping(LEN);
    let file = format!("/http/127.0.0.1:{}/big.bin", proxy.port);
    let out = in_a_pty("", &file);
    assert!(out.contains(&LEN.to_string()), "{out:?}");
    let last = out.rfind("roam: fetching").expect("no progress line");
    let line = &out[last..];
    assert!(line.contains("big.bin"), "{line:?}");
    assert!(line.contains(" / 2.0 MiB"), "{line:?}");
    assert!(line.contains("/s  ETA "), "{line:?}");
    // Each draw starts at the line's start; the last one is erased.
    assert!(out[..last].ends_with('\r'), "{out:?}");
    assert!(line.contains("\r\x1b[K"), "not cleared: {line:?}");
}

#[test]
fn no_progress_into_a_pipe_nor_with_q() {
    let (_dir, _server, proxy) = common::dripping(LEN);
    let file = format!("/http/127.0.0.1:{}/big.bin", proxy.port);
    let out = in_a_pty("-q", &file);
    assert!(out.contains(&LEN.to_string()), "{out:?}");
    assert!(!out.contains("roam: fetching"), "{out:?}");
    assert!(!out.contains('\x1b'), "{out:?}");

    let o = Roam::new().sh(&[], &format!("wc -c < {file}"));
    assert!(o.status.success(), "{}", stderr(&o));
    assert_eq!(stdout(&o).trim(), LEN.to_string());
    assert_eq!(stderr(&o), "", "stderr is a pipe: nothing drawn");
}
