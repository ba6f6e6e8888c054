//! The write path under `roam run`, end to end: the shared write cases (`common::write_cases`)
//! for every backend, and the ones of the tracer alone. Real programs (sh, cp, mv, mkdir,
//! touch, chmod, cc, make, python3) change files under `roam run`, and each test checks the
//! bytes that reached the backend. Backends: a local directory served in place (`file://`),
//! the same through roam's cache and write-back (`file+cache://`), WebDAV (nginx), FTP
//! (pyftpdlib), SFTP (OpenSSH's sshd) and Chirp (`chirp_server`); S3 (moto) has its own test.
//! The cache-only tests cover Ufo's consistency: T_read against a second writer, conflicts,
//! and failures that must reach the program (recovery after `kill -9`: `cache_sharing.rs`).

mod common;

common::write_cases::for_each_backend!(Trap);

use std::fs;
use std::process::Output;

use common::{stderr, stdout, Frontend, Roam};
use roam_testkit::{noise, write_file, Scratch};

use common::Backend as Mount;

fn ok(o: &Output) -> String {
    assert!(o.status.success(), "failed ({:?}): {}", o.status, stderr(o));
    stdout(o)
}

#[test]
fn ftp_has_no_symlinks_but_modes_and_times() {
    let m = Mount::new("ftp");
    let o = m.sh("ln -s target /w/l; echo x > /w/f && chmod 640 /w/f && touch -d @1000000000 /w/f && stat -c '%a %Y' /w/f");
    assert_eq!(stdout(&o), "640 1000000000\n", "{}", stderr(&o));
    assert!(
        stderr(&o).contains("ln: failed to create symbolic link '/w/l': Operation not supported"),
        "{}",
        stderr(&o)
    );
    use std::os::unix::fs::{MetadataExt, PermissionsExt};
    let md = fs::metadata(m.backend("f")).unwrap();
    assert_eq!(
        (md.permissions().mode() & 0o777, md.mtime()),
        (0o640, 1_000_000_000)
    );
}

#[test]
fn webdav_has_no_symlinks_but_chmod_x_works_on_roam_s_copy() {
    let m = Mount::new("dav");
    let o = m.sh("ln -s target /w/l; echo '#!/bin/sh' > /w/run.sh; echo 'echo ran' >> /w/run.sh; chmod +x /w/run.sh && /w/run.sh");
    assert_eq!(stdout(&o), "ran\n", "{}", stderr(&o));
    assert!(
        stderr(&o).contains("ln: failed to create symbolic link '/w/l': Operation not supported"),
        "{}",
        stderr(&o)
    );
    assert!(!m.backend("l").exists());
}

/// On a backend without permission bits, a `chmod` of a file roam holds no copy of (put
/// there by another client) is kept as it is for a cached one: in a copy roam fetches for
/// it, not refused in one case and kept in the other.
#[test]
fn chmod_on_a_modeless_backend_keeps_the_mode_cached_or_not() {
    for kind in ["dav", "s3"] {
        let m = Mount::serving(kind, |srv| {
            write_file(&srv.join("other.sh"), b"echo ran\n", 0o644)
        });
        let o = m.sh("chmod 750 /w/other.sh && stat -c %a /w/other.sh && sh /w/other.sh");
        assert_eq!(stdout(&o), "750\nran\n", "{kind}: {}", stderr(&o));
    }
}

/// `roam.toml` with a T_read, for the consistency tests.
fn with_t_read(secs: u64) -> Roam {
    let roam = Roam::new();
    let conf = roam.cache.join("t_read.toml");
    fs::write(&conf, format!("[cache]\nt_read = {secs}\n")).unwrap();
    roam.env("ROAM_CONFIG", conf)
}

#[test]
fn t_read_bounds_how_stale_a_read_may_be() {
    let m = Mount::new("file+cache");
    write_file(&m.backend("x"), b"v1\n", 0o644);
    // Another client ($B is the backend itself) changes the file behind roam's back. T_read
    // is long enough that a loaded machine still reads twice within it.
    let script = "cat /w/x; echo v2-longer > $B/x; cat /w/x; sleep 4.2; cat /w/x";
    assert_eq!(
        ok(&m.sh_with(with_t_read(4), script)),
        "v1\nv1\nv2-longer\n"
    );
    write_file(&m.backend("x"), b"v1\n", 0o644);
    assert_eq!(
        ok(&m.sh_with(with_t_read(0), script)),
        "v1\nv2-longer\nv2-longer\n"
    );
}

#[test]
fn a_conflicting_change_is_kept_beside_the_remote_one() {
    let m = Mount::new("file+cache");
    write_file(&m.backend("c"), b"original\n", 0o644);
    let o = m.sh("exec 3>>/w/c; echo mine >&3; echo theirs > $B/c; exec 3>&-; echo closed");
    assert_eq!(ok(&o), "closed\n");
    assert_eq!(fs::read_to_string(m.backend("c")).unwrap(), "theirs\n");
    let beside: Vec<_> = fs::read_dir(m.backend(""))
        .unwrap()
        .flatten()
        .map(|e| e.file_name().into_string().unwrap())
        .filter(|n| n.starts_with("c.roam-conflict-"))
        .collect();
    assert_eq!(beside.len(), 1, "{beside:?}");
    assert_eq!(
        fs::read_to_string(m.backend(&beside[0])).unwrap(),
        "original\nmine\n"
    );
    assert!(
        stderr(&o).contains("changed on the server while it was being written"),
        "{}",
        stderr(&o)
    );
}

/// A Python program that writes 2 MB to `path` and prints "ok" or why it failed.
fn write_2mb(path: &str) -> String {
    format!("python3 -c \"import os\nf = open('{path}', 'wb')\ntry:\n    f.write(b'x' * 2_000_000)\n    f.close()\n    print('ok')\nexcept OSError as e:\n    print(os.strerror(e.errno))\n\"")
}

#[test]
fn a_full_server_disk_is_enospc_at_close() {
    // The server's disk (a 1 MB tmpfs below its tree) fills during the upload: the program
    // hears ENOSPC from close, through every driver whose server can tell (ERRORS.md).
    for kind in ["file+cache", "sftp", "chirp"] {
        // Mounted before the server starts, which then takes the tree over (owner, ACLs).
        let mut full = None;
        let m = Mount::serving(kind, |srv| {
            full = Some(roam_testkit::Tmpfs::mount(&srv.join("full"), "1m"));
        });
        let o = m.sh(&write_2mb("/w/full/big"));
        let err = stderr(&o);
        assert_eq!(stdout(&o), "No space left on device\n", "{kind}: {err}");
        assert!(err.contains("keeps it journaled"), "{kind}: {err}");
        drop(full); // before the scratch tree that holds it goes
    }
}

#[test]
fn a_full_cache_disk_is_enospc_for_the_program() {
    let m = Mount::new("file+cache");
    let roam = Roam::new();
    let _full = roam_testkit::Tmpfs::mount(&roam.cache.join("c"), "1m");
    let o = m.sh_with(roam, &write_2mb("/w/big"));
    assert_eq!(stdout(&o), "No space left on device\n", "{}", stderr(&o));
    assert!(
        stderr(&o).contains("cache disk at") && stderr(&o).contains("is full"),
        "{}",
        stderr(&o)
    );
}

#[test]
fn s3_buckets_are_directories_programs_can_write() {
    let scratch = Scratch::new("s3");
    let server = roam_testkit::s3::moto(&scratch.join("run"));
    roam_testkit::s3::create_bucket(&server, "roam");
    let creds = roam_testkit::s3::enforce_auth(&server);
    let aws = |roam: Roam| {
        roam.env("AWS_ENDPOINT_URL", server.url())
            .env("AWS_ACCESS_KEY_ID", &creds.access_key)
            .env("AWS_SECRET_ACCESS_KEY", &creds.secret_key)
            .env("AWS_REGION", "us-east-1")
            .env("AWS_CA_BUNDLE", "")
    };
    let src = Scratch::new("s3src");
    write_file(&src.join("data.bin"), &noise(3 << 20, 5), 0o644);
    let script = format!(
        "mkdir /s3/roam/dir && cp {0} /s3/roam/dir/data.bin && echo hi > /s3/roam/dir/note && ls /s3/roam/dir && cat /s3/roam/dir/note",
        src.join("data.bin").display()
    );
    assert_eq!(
        ok(&aws(Roam::new()).sh(&[], &script)),
        "data.bin\nnote\nhi\n"
    );
    // A fresh run (and cache) reads it back from the server.
    let check = format!("cmp {} /s3/roam/dir/data.bin && rm /s3/roam/dir/note && ls /s3/roam/dir && rmdir /s3/roam/dir 2>&1; echo $?", src.join("data.bin").display());
    assert_eq!(
        ok(&aws(Roam::new()).sh(&[], &check)),
        "data.bin\nrmdir: failed to remove '/s3/roam/dir': Directory not empty\n1\n"
    );
    // `rm -r` removes the files it listed without asking first (a conditional DELETE
    // each), then the directory; a fresh run finds nothing left on the server.
    assert_eq!(
        ok(&aws(Roam::new()).sh(&[], "rm -r /s3/roam/dir && ls -A /s3/roam")),
        ""
    );
    assert_eq!(ok(&aws(Roam::new()).sh(&[], "ls -A /s3/roam")), "");
    // Wrong credentials are EACCES, said clearly.
    let o = aws(Roam::new())
        .env("AWS_SECRET_ACCESS_KEY", "wrong")
        .sh(&[], "cat /s3/roam/dir/data.bin > /dev/null");
    assert!(
        stderr(&o).contains("Permission denied") && stderr(&o).contains("EACCES"),
        "{}",
        stderr(&o)
    );
}

#[test]
fn t_read_rules_apply_per_glob() {
    let m = Mount::new("file+cache");
    write_file(&m.backend("x"), b"v1\n", 0o644);
    write_file(&m.backend("live/x"), b"v1\n", 0o644);
    let roam = Roam::new();
    let conf = roam.cache.join("rules.toml");
    fs::write(
        &conf,
        "[cache]\nt_read = 30\n[t_read]\n\"/w/live/**\" = 0\n",
    )
    .unwrap();
    let script =
        "cat /w/x /w/live/x; echo v2-longer > $B/x; echo v2-longer > $B/live/x; cat /w/x /w/live/x";
    assert_eq!(
        ok(&m.sh_with(roam.env("ROAM_CONFIG", &conf), script)),
        "v1\nv1\nv1\nv2-longer\n"
    );
}

#[test]
fn t_write_delays_and_coalesces_uploads() {
    t_write_delays_and_coalesces(Frontend::Trap);
}

/// T_write is the core's: a mount delays and coalesces as `roam run` does.
#[test]
fn t_write_delays_and_coalesces_uploads_on_a_mount() {
    t_write_delays_and_coalesces(Frontend::Fuse);
}

fn t_write_delays_and_coalesces(frontend: Frontend) {
    let m = Mount::new("file+cache").through(frontend);
    let roam = Roam::new();
    let conf = roam.cache.join("t_write.toml");
    fs::write(&conf, "[cache]\nt_write = 2\n").unwrap();
    let script = "sh -c 'echo first > /w/f'; sh -c 'echo second > /w/f'; cat /w/f; \
                  [ -e $B/f ] || echo not-yet; sleep 3; cat $B/f";
    assert_eq!(
        ok(&m.sh_with(roam.env("ROAM_CONFIG", &conf), script)),
        "second\nnot-yet\nsecond\n"
    );
}

#[test]
fn a_failed_upload_is_retried_until_it_succeeds() {
    failed_upload_retried(Frontend::Trap);
}

/// Retries are the core's: a mount retries as `roam run` does.
#[test]
fn a_failed_upload_is_retried_until_it_succeeds_on_a_mount() {
    failed_upload_retried(Frontend::Fuse);
}

fn failed_upload_retried(frontend: Frontend) {
    let m = Mount::new("file+cache").through(frontend);
    let _small = roam_testkit::Tmpfs::mount(&m.backend(""), "3m");
    write_file(&m.backend("filler"), &vec![0u8; 2 << 20], 0o644);
    // The close fails (the server's disk is full); once space is freed, roam's retry lands.
    let script = format!(
        "{}; rm $B/filler; sleep 2.5; wc -c < $B/big",
        write_2mb("/w/big")
    );
    let o = m.sh(&script);
    assert_eq!(
        stdout(&o),
        "No space left on device\n2000000\n",
        "{}",
        stderr(&o)
    );
    // `roam run` says so where the program's stderr goes (a mount, in its own log).
    if frontend == Frontend::Trap {
        assert!(stderr(&o).contains("tries again"), "{}", stderr(&o));
    }
}

#[test]
fn in_place_edits_and_moves_across_mounts_are_exact_and_quiet() {
    // sed -i (temp file, fchown to the same owner, xattr copy, rename) and mv between a
    // remote mount and a local directory (EXDEV, then copy): what programs do every day,
    // with nothing for roam to complain about; one link per file, as on the server.
    let m = Mount::serving("file+cache", |srv| {
        write_file(&srv.join("a.txt"), b"alpha beta\n", 0o644)
    });
    let local = Scratch::new("moved");
    let script = format!(
        "sed -i s/alpha/gamma/ /w/a.txt && cat /w/a.txt && mv /w/a.txt {l}/m.txt \
         && mv {l}/m.txt /w/b.txt && ls /w && stat -c '%h %s' /w/b.txt",
        l = local.path.display()
    );
    let o = m.sh(&script);
    assert_eq!(ok(&o), "gamma beta\nb.txt\n1 11\n");
    assert!(!stderr(&o).contains("roam:"), "{}", stderr(&o));
    assert_eq!(
        fs::read_to_string(m.backend("b.txt")).unwrap(),
        "gamma beta\n"
    );
    assert!(!m.backend("a.txt").exists());
    // Another owner is refused, with a reason.
    let o = m.sh("chown 12345 /w/b.txt 2>&1; echo $?");
    assert_eq!(
        stdout(&o),
        "chown: changing ownership of '/w/b.txt': Operation not permitted\n1\n"
    );
    assert!(
        stderr(&o).contains("remote files keep their owner (EPERM)"),
        "{}",
        stderr(&o)
    );
}

/// The copy a `chmod` fetches on a backend without modes (WebDAV) meets a server that dies
/// halfway through: the `chmod` fails with the transfer's errno within the timeouts, no
/// part of the file is ever served as the whole of it, and the server's file is untouched.
#[test]
fn a_chmod_whose_fetch_meets_a_dying_server_fails_and_publishes_nothing() {
    use roam_testkit::fault::{Fault, Proxy};
    let dir = Scratch::new("chmod-dies");
    let big = noise(4 << 20, 11);
    write_file(&dir.join("www/big.bin"), &big, 0o644);
    let server = roam_testkit::dav::nginx_dav(&dir.join("www"), &dir.join("run"));
    let proxy = Proxy::start(server.port);
    // The stat's small reply passes; the body's first megabyte, then the server is gone.
    proxy.after_served(1 << 20, Fault::Kill);
    let config = dir.join("roam.toml");
    fs::write(&config, "[http]\nconnect_timeout = 2\nread_timeout = 2\n").unwrap();
    let roam = Roam::new().env("ROAM_CONFIG", &config);
    let mount = format!("/d=dav://127.0.0.1:{}", proxy.port);
    let started = std::time::Instant::now();
    let o = roam.sh(
        &["-m", &mount],
        "chmod 750 /d/big.bin; echo \"chmod $?\"; wc -c < /d/big.bin || echo unreadable",
    );
    assert!(
        started.elapsed() < std::time::Duration::from_secs(30),
        "took {:?}",
        started.elapsed()
    );
    let out = stdout(&o);
    assert!(proxy.fired(), "the server never died: {out}{}", stderr(&o));
    assert!(!out.contains("chmod 0"), "{out}{}", stderr(&o));
    assert!(
        out.ends_with("unreadable\n") || out.ends_with(&format!("{}\n", big.len())),
        "a part was served as the file: {out}{}",
        stderr(&o)
    );
    assert!(fs::read(dir.join("www/big.bin")).unwrap() == big);
}
