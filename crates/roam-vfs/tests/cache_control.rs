//! The origin's `Cache-Control` bounds how long roam uses a copy without asking again
//! (docs/SEMANTICS.md): a real nginx serves three directories, one with `no-cache`, one with
//! `max-age=1`, one with neither, to a namespace whose T_read is an hour. Each file is opened
//! twice; the origin's access log tells which opens asked it.
//!
//! nginx is required: a machine without it fails this test.

use std::path::Path;
use std::time::{Duration, Instant};

use roam_drivers::http::HttpConfig;
use roam_testkit::{write_file, Scratch, Server};
use roam_vfs::{Consistency, TRead, Vfs, VfsConfig};

const DIRECTIVES: &str = r#"
location /nocache/ { add_header Cache-Control "no-cache"; }
location /short/ { add_header Cache-Control "public, max-age=1"; }
"#;

fn vfs(root: &Path, origin: &Server) -> Vfs {
    let cfg = VfsConfig {
        cache_dir: root.join("cache"),
        consistency: Consistency::new(TRead::Fixed(Duration::from_secs(3600)), vec![]),
        mounts: vec![("/o".into(), origin.url())],
        max_cache_bytes: 1 << 30,
        http: HttpConfig::default(),
        tls: vec![],
        extensions: None,
        adopt_orphans: true,
        t_write: Duration::ZERO,
    };
    Vfs::new(&cfg).unwrap()
}

/// Opens `virt` and checks the copy's bytes.
fn open(v: &Vfs, virt: &str) {
    let node = v.lookup(virt).unwrap().unwrap();
    let copy = v.open_path(&node).unwrap();
    assert_eq!(std::fs::read(copy).unwrap(), b"contents\n");
}

/// The statuses of the origin's answers for `path`, in order, once there are `count`
/// (nginx logs a request after answering it: a moment after the client has the answer).
fn statuses(origin: &Server, path: &str, count: usize) -> Vec<String> {
    let needle = format!(" {path} HTTP/");
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let statuses: Vec<String> = origin
            .access_log()
            .lines()
            .filter(|line| line.contains(&needle))
            .filter_map(|line| {
                line.split("\" ")
                    .nth(1)?
                    .split(' ')
                    .next()
                    .map(str::to_owned)
            })
            .collect();
        if statuses.len() >= count || Instant::now() > deadline {
            return statuses;
        }
        std::thread::sleep(Duration::from_millis(20));
    }
}

#[test]
fn cache_control_bounds_how_long_a_copy_is_used_unasked() {
    let scratch = Scratch::new("cache-control");
    let www = scratch.join("www");
    for dir in ["nocache", "short", "plain"] {
        write_file(&www.join(dir).join("f"), b"contents\n", 0o644);
    }
    let origin = Server::nginx_directives(&www, &scratch.join("run"), DIRECTIVES);
    let v = vfs(&scratch.path, &origin);
    for dir in ["nocache", "short", "plain"] {
        open(&v, &format!("/o/{dir}/f"));
    }
    // Past max-age=1 (roam counts whole seconds), within T_read.
    std::thread::sleep(Duration::from_millis(2200));
    for dir in ["nocache", "short", "plain"] {
        open(&v, &format!("/o/{dir}/f"));
    }
    assert_eq!(statuses(&origin, "/nocache/f", 2), ["200", "304"]);
    assert_eq!(statuses(&origin, "/short/f", 2), ["200", "304"]);
    assert_eq!(statuses(&origin, "/plain/f", 1), ["200"]);
}
