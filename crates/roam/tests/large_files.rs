//! Large remote files are not fetched whole before the program may read them: `head` and
//! `tail` of a 1 GiB file return at once and transfer a chunk, sequential reads stream, and
//! every way of reading (read, pread, mmap, sendfile) sees exactly the remote bytes.

mod common;

use std::fs::OpenOptions;
use std::os::unix::fs::FileExt;
use std::time::{Duration, Instant};

use common::{stderr, stdout, Backend, Frontend, Roam};
use roam_testkit::{noise, write_file, Scratch, Server};

const GIB: u64 = 1 << 30;

/// A 1 GiB sparse file with noise at both ends, and a 40 MiB file of noise.
struct Big {
    server: Server,
    scratch: Scratch,
}

impl Big {
    fn new() -> Big {
        let scratch = Scratch::new("large");
        let www = scratch.join("www");
        write_file(&www.join("gib.bin"), b"", 0o644);
        let f = OpenOptions::new()
            .write(true)
            .open(www.join("gib.bin"))
            .unwrap();
        f.set_len(GIB).unwrap();
        f.write_all_at(&noise(4096, 7), 0).unwrap();
        f.write_all_at(&noise(4096, 8), GIB - 4096).unwrap();
        write_file(&www.join("forty.bin"), &noise(40 << 20, 9), 0o644);
        let server = Server::nginx(&www, &scratch.join("run"));
        Big { server, scratch }
    }

    fn path(&self, name: &str) -> String {
        format!("/http/{}/{name}", self.server.authority())
    }

    fn local(&self, name: &str) -> String {
        self.scratch.join("www").join(name).display().to_string()
    }

    /// Bytes nginx sent for `name` so far.
    fn bytes_sent(&self, name: &str) -> u64 {
        let needle = format!("GET /{name} ");
        self.server
            .access_log()
            .lines()
            .filter(|l| l.contains(&needle))
            .filter_map(|l| {
                l.split('"')
                    .nth(2)?
                    .split_whitespace()
                    .nth(1)?
                    .parse::<u64>()
                    .ok()
            })
            .sum()
    }
}

/// The ways a program reaches the files: `roam run`, and `roam run --fuse`.
const FRONTENDS: [&[&str]; 2] = [&[], &["--fuse"]];

/// Runs `script` under roam (`run_args`: the frontend) with a fresh cache; returns stdout,
/// and the time it took.
fn timed(run_args: &[&str], script: &str) -> (String, Duration) {
    let t = Instant::now();
    let o = Roam::new().sh(run_args, script);
    let took = t.elapsed();
    assert!(o.status.success(), "{script}: {}", stderr(&o));
    (stdout(&o), took)
}

fn native(script: &str) -> String {
    let o = std::process::Command::new("sh")
        .args(["-c", script])
        .output()
        .unwrap();
    assert!(o.status.success());
    String::from_utf8_lossy(&o.stdout).into_owned()
}

#[test]
fn head_and_tail_of_a_gib_return_at_once_and_fetch_little() {
    let big = Big::new();
    for (args, cmd) in FRONTENDS
        .iter()
        .flat_map(|a| ["head -c 1000", "tail -c 1000"].map(|c| (a, c)))
    {
        let before = big.bytes_sent("gib.bin");
        let (out, took) = timed(
            args,
            &format!("{cmd} {} | od -An -tx1 | md5sum", big.path("gib.bin")),
        );
        assert_eq!(
            out,
            native(&format!(
                "{cmd} {} | od -An -tx1 | md5sum",
                big.local("gib.bin")
            )),
            "{args:?} {cmd}"
        );
        let sent = big.bytes_sent("gib.bin") - before;
        assert!(
            took < Duration::from_secs(1),
            "{args:?} {cmd} took {took:?}"
        );
        assert!(sent < 64 << 20, "{args:?} {cmd} transferred {sent} bytes");
    }
}

#[test]
fn sequential_random_and_mapped_reads_see_the_remote_bytes() {
    let big = Big::new();
    let (f, l) = (big.path("forty.bin"), big.local("forty.bin"));
    for script in [
        "md5sum < {}",
        "dd if={} bs=4096 skip=3000 count=7 status=none | md5sum",
        "python3 -c \"import mmap,sys,hashlib; f=open(sys.argv[1],'rb'); m=mmap.mmap(f.fileno(),0,prot=mmap.PROT_READ); print(hashlib.md5(m[-5000000:]).hexdigest())\" {}",
        "python3 -c \"import os,sys; fd=os.open(sys.argv[1],os.O_RDONLY); print(os.pread(fd,16,30000000).hex())\" {}",
        "cat {} {} | wc -c",
    ] {
        for args in FRONTENDS {
            let (out, _) = timed(args, &script.replace("{}", &f));
            assert_eq!(out, native(&script.replace("{}", &l)), "{args:?} {script}");
        }
    }
    // The file came over the wire about once per run, not once per read.
    assert!(
        big.bytes_sent("forty.bin") < 12 * (40 << 20),
        "sent {}",
        big.bytes_sent("forty.bin")
    );
}

#[test]
fn a_streamed_copy_becomes_an_ordinary_cached_copy() {
    let big = Big::new();
    let script = format!("md5sum < {0} && md5sum < {0}", big.path("forty.bin"));
    let o = Roam::new().sh(&[], &script);
    let want = native(&format!("md5sum < {}", big.local("forty.bin")));
    assert_eq!(stdout(&o), format!("{want}{want}"), "{}", stderr(&o));
    // The second read was served by the finished copy: the file came over the wire once.
    let sent = big.bytes_sent("forty.bin");
    assert!(sent <= (40 << 20) + (2 << 20), "fetched once: {sent}");
}

/// A large file read to its end by plain reads (the stream ahead of the reader brings the
/// last bytes before the reader asks for them) is a cached copy like any other: `roam
/// status` counts it, a second run reads it without fetching, and `roam cache clean`
/// drops it. One read only in part leaves none of its bytes in the cache.
#[test]
fn a_copy_read_to_its_end_is_counted_and_one_read_in_part_leaves_nothing() {
    let big = Big::new();
    let scratch = Scratch::new("large-cache");
    let cache = scratch.join("c");
    let roam = || Roam::new().env("ROAM_CACHE_DIR", &cache);
    let cat = format!("cat {} | md5sum", big.path("forty.bin"));
    let want = native(&format!("md5sum < {}", big.local("forty.bin")));
    for _ in 0..2 {
        let o = roam().sh(&[], &cat);
        assert_eq!(stdout(&o), want, "{}", stderr(&o));
    }
    let sent = big.bytes_sent("forty.bin");
    assert!(sent <= (40 << 20) + (2 << 20), "fetched once: {sent}");
    let status = stdout(&roam().cli(&["status"]));
    assert!(status.contains("copies:   1 files, 40.0 MiB"), "{status}");
    let o = roam().sh(
        &[],
        &format!("head -c 1000 {} | wc -c", big.path("gib.bin")),
    );
    assert_eq!(stdout(&o), "1000\n", "{}", stderr(&o));
    let clean = roam().cli(&["cache", "clean"]);
    assert!(clean.status.success(), "{}", stderr(&clean));
    let du = std::process::Command::new("du")
        .args(["-sk", &cache.display().to_string()])
        .output()
        .unwrap();
    let kib: u64 = stdout(&du)
        .split_whitespace()
        .next()
        .unwrap()
        .parse()
        .unwrap();
    assert!(
        kib < 1024,
        "{kib} KiB left in the cache after `roam cache clean`"
    );
}

/// The server's file is replaced (renamed over, same size) while a program holds it open
/// and has read only its head: a later read far from it must be the old version's bytes
/// or fail, never the new version's bytes under the old version's name (a local file
/// replaced by a rename keeps its old bytes for the fd that holds it).
#[test]
fn a_file_replaced_on_the_server_while_read_in_part_never_mixes_versions() {
    let big = Big::new();
    let www = big.scratch.join("www");
    write_file(&www.join("next.bin"), &noise(40 << 20, 10), 0o644);
    let script = format!(
        "import os, sys\n\
         fd = os.open('{remote}', os.O_RDONLY)\n\
         head = os.pread(fd, 4096, 0)\n\
         os.rename('{next}', '{file}')\n\
         try:\n    far = os.pread(fd, 4096, 30 << 20)\n\
         except OSError as e:\n    print('error', e.errno); sys.exit(0)\n\
         print(head.hex()[:16], far.hex())",
        remote = big.path("forty.bin"),
        next = www.join("next.bin").display(),
        file = www.join("forty.bin").display(),
    );
    for args in FRONTENDS {
        write_file(&www.join("next.bin"), &noise(40 << 20, 10), 0o644);
        write_file(&www.join("forty.bin"), &noise(40 << 20, 9), 0o644);
        // Another time, so that nginx's ETag (time and size) tells the versions apart.
        set_mtime(&www.join("next.bin"), Duration::from_secs(100));
        let o = Roam::new().sh(args, &format!("python3 -c \"{script}\""));
        assert!(o.status.success(), "{args:?}: {}", stderr(&o));
        let out = stdout(&o);
        let (old, new) = (noise(40 << 20, 9), noise(40 << 20, 10));
        let far = |v: &[u8]| hex(&v[30 << 20..(30 << 20) + 4096]);
        eprintln!("{args:?}: {}", &out[..out.len().min(60)]);
        assert!(
            out.starts_with("error") || out.trim().ends_with(&far(&old)),
            "{args:?}: read the new version's bytes: {}",
            out.trim().ends_with(&far(&new))
        );
    }
}

/// Sets the modification time of `path` to `ago` before now.
fn set_mtime(path: &std::path::Path, ago: Duration) {
    let f = std::fs::File::options().write(true).open(path).unwrap();
    f.set_modified(std::time::SystemTime::now() - ago).unwrap();
}

fn hex(b: &[u8]) -> String {
    b.iter().map(|x| format!("{x:02x}")).collect()
}

/// Two terminals: a program holds a large file open and has read its head when another
/// `roam run` replaces the file (every writable backend; the reader under `roam run` and
/// `roam mount`). Its later read far from the head is the old version's bytes or fails
/// with `ESTALE`, never the new version's; a new open then reads the new version.
#[test]
fn a_file_another_roam_replaces_while_read_in_part_never_mixes_versions() {
    const LEN: usize = 24 << 20;
    let (old, new) = (noise(LEN, 21), noise(LEN, 22));
    let far = 20 << 20;
    for kind in ["dav", "s3", "ftp", "chirp", "sftp", "file+cache"] {
        for frontend in [Frontend::Trap, Frontend::Fuse] {
            let what = format!("{kind} {frontend:?}");
            // Written a while ago: nginx's ETag is the time (in seconds) and the size, so
            // a replacement of the same size within the second would look the same to any
            // client.
            let b = Backend::serving(kind, |srv| {
                write_file(&srv.join("f"), &old, 0o644);
                set_mtime(&srv.join("f"), Duration::from_secs(100));
            })
            .through(frontend);
            let scratch = Scratch::new("replaced");
            write_file(&scratch.join("new"), &new, 0o644);
            let (read, go) = (scratch.join("read"), scratch.join("go"));
            let script = format!(
                "import os, sys, time\n\
                 fd = os.open('/w/f', os.O_RDONLY)\n\
                 os.pread(fd, 4096, 0)\n\
                 open('{read}', 'w').close()\n\
                 while not os.path.exists('{go}'): time.sleep(0.05)\n\
                 try:\n    far = os.pread(fd, 4096, {far})\n\
                 except OSError as e:\n    print('error', e.errno)\n    \
                 print(os.pread(os.open('/w/f', os.O_RDONLY), 4096, {far}).hex()); sys.exit(0)\n\
                 print(far.hex())",
                read = read.display(),
                go = go.display(),
            );
            std::thread::scope(|s| {
                let reader = s.spawn(|| b.sh(&format!("python3 -c \"{script}\"")));
                let began = Instant::now();
                while !read.exists() && began.elapsed() < Duration::from_secs(60) {
                    std::thread::sleep(Duration::from_millis(50));
                }
                let mut writer = Roam::new();
                for (k, v) in b.env() {
                    writer = writer.env(k, v);
                }
                let w = writer.sh(
                    &["-m", &format!("/w={}", b.url)],
                    &format!("cp {} /w/f", scratch.join("new").display()),
                );
                assert!(w.status.success(), "{what}: writer: {}", stderr(&w));
                write_file(&go, b"", 0o644);
                let o = reader.join().unwrap();
                assert!(o.status.success(), "{what}: {}", stderr(&o));
                let out = stdout(&o);
                let lines: Vec<&str> = out.lines().collect();
                eprintln!("{what}: {}", &out[..out.len().min(40)]);
                let (old, new) = (hex(&old[far..far + 4096]), hex(&new[far..far + 4096]));
                match lines[..] {
                    [read] => assert!(read == old, "{what}: other bytes (new: {})", read == new),
                    // Stale for the fd that holds it; a new open reads the new version.
                    [stale, again] => {
                        assert_eq!(stale, format!("error {}", libc::ESTALE), "{what}");
                        assert!(again == new, "{what}: a new open read other bytes");
                    }
                    _ => panic!("{what}: {out}"),
                }
            });
        }
    }
}

/// SFTP's large files stream too: the head of a 64 MiB file is read at once while the
/// cache holds about a chunk of it (the rest never fetched), and a far `pread` is the
/// file's own bytes.
#[test]
fn the_head_of_a_large_sftp_file_fetches_a_chunk() {
    let data = noise(64 << 20, 31);
    let b = Backend::serving("sftp", |srv| write_file(&srv.join("big"), &data, 0o644));
    let scratch = Scratch::new("sftp-head");
    let cache = scratch.join("c");
    let script = format!(
        "import os, subprocess\n\
         fd = os.open('/w/big', os.O_RDONLY)\n\
         print(os.pread(fd, 16, 0).hex(), os.pread(fd, 16, 50 << 20).hex())\n\
         print(subprocess.run(['du', '-sk', '{}'], capture_output=True, text=True).stdout.split()[0])",
        cache.display()
    );
    let o = b.sh_with(
        Roam::new().env("ROAM_CACHE_DIR", &cache),
        &format!("python3 -c \"{script}\""),
    );
    assert!(o.status.success(), "{}", stderr(&o));
    let out = stdout(&o);
    let lines: Vec<&str> = out.lines().collect();
    let want = format!(
        "{} {}",
        hex(&data[..16]),
        hex(&data[50 << 20..(50 << 20) + 16])
    );
    assert_eq!(lines[0], want);
    let kib: u64 = lines[1].parse().unwrap();
    assert!(
        kib < 16 << 10,
        "{kib} KiB in the cache for two 16-byte reads"
    );
}
