//! A read-ahead policy as a black-box graft (`[cache] readahead`), on nginx WebDAV under
//! `roam run`: a program reading 64 KiB every 4 MiB of a 64 MiB file (16 reads) makes one
//! 1 MiB GET per read without a policy; with the `stride` extension most reads are served
//! from ranges fetched ahead (64 KiB GETs started by earlier reads), with the same bytes.
//! A hostile policy (ranges past the end, 64 GiB asked for, one that never answers) changes
//! nothing but one warning: the same GETs as without a policy, the same bytes, and a slow
//! one delays one read by its deadline at most. Through FUSE (`roam run --fuse`) too, where
//! the kernel's reads are what the policy sees.

mod common;

use std::process::Output;
use std::time::{Duration, Instant};

use common::{stderr, Backend, Frontend, Roam};
use roam_testkit::{noise, write_file, Scratch};

const MIB: usize = 1 << 20;
const SIZE: usize = 64 * MIB;
const STRIDE: usize = 4 * MIB;
const READ: usize = 64 << 10;

struct Setup {
    b: Backend,
    data: Vec<u8>,
    scratch: Scratch,
}

impl Setup {
    fn new() -> Setup {
        Setup::through(Frontend::Trap)
    }

    fn through(frontend: Frontend) -> Setup {
        let data = noise(SIZE, 11);
        let b = Backend::serving("dav", |srv| write_file(&srv.join("big"), &data, 0o644))
            .through(frontend);
        Setup {
            b,
            data,
            scratch: Scratch::new("readahead"),
        }
    }

    /// The strided reader under `roam run` with `config` as roam.toml (a fresh cache):
    /// its output, the sizes of the GETs of `big` it caused, and how long it took.
    fn read(&self, config: &str) -> (Output, Vec<usize>, Duration) {
        let toml = self.scratch.join("roam.toml");
        write_file(&toml, config.as_bytes(), 0o644);
        let out = self.scratch.join("out");
        let script = format!(
            "python3 -c 'import os; fd = os.open(\"/w/big\", os.O_RDONLY); \
             open(\"{}\", \"wb\").write(b\"\".join(os.pread(fd, {READ}, i * {STRIDE}) for i in range({})))'",
            out.display(),
            SIZE / STRIDE
        );
        let roam = Roam::new()
            .env("ROAM_EXT_DIR", roam_testkit::ext::extensions())
            .env("ROAM_CONFIG", &toml);
        let before = self.b.access_log().len();
        let began = Instant::now();
        let o = self.b.sh_with(roam, &script);
        let took = began.elapsed();
        assert!(o.status.success(), "{}", stderr(&o));
        let want: Vec<u8> = (0..SIZE / STRIDE)
            .flat_map(|i| self.data[i * STRIDE..i * STRIDE + READ].to_vec())
            .collect();
        assert!(std::fs::read(&out).unwrap() == want, "bytes differ");
        (o, gets(&self.b.access_log()[before..]), took)
    }
}

/// The bytes nginx sent for each GET of `/big` in `log`.
fn gets(log: &str) -> Vec<usize> {
    log.lines()
        .filter(|l| l.contains("\"GET /big "))
        .map(|l| {
            let after = l.split('"').nth(2).unwrap_or_default();
            after.split_whitespace().nth(1).unwrap().parse().unwrap()
        })
        .collect()
}

fn warnings(o: &Output) -> usize {
    stderr(o).matches("read-ahead policy is ignored").count()
}

#[test]
fn a_strided_reader_is_served_from_ranges_fetched_ahead() {
    let s = Setup::new();
    let (_, plain, _) = s.read("");
    eprintln!("without a policy: {plain:?}");
    assert_eq!(plain, vec![MIB; SIZE / STRIDE], "a 1 MiB chunk per read");
    let (o, ahead, _) = s.read("[cache]\nreadahead = \"stride\"\nreadahead_args = [\"ahead=4\"]\n");
    eprintln!("with stride: {ahead:?}");
    let own = ahead.iter().filter(|&&n| n == MIB).count();
    let early = ahead.iter().filter(|&&n| n == READ).count();
    // Three reads show the stride; then each read that fetches brings the next four.
    assert!(
        own <= 6,
        "reads that fetched their own chunk: {own} ({ahead:?})"
    );
    assert!(early >= 10, "ranges fetched ahead: {early} ({ahead:?})");
    assert_eq!(own + early, ahead.len(), "{ahead:?}");
    assert_eq!(warnings(&o), 0, "{}", stderr(&o));
}

#[test]
fn a_hostile_readahead_policy_changes_nothing_but_a_warning() {
    let s = Setup::new();
    for lie in ["lie=past", "lie=huge", "lie=slow"] {
        let config = format!("[cache]\nreadahead = \"faults\"\nreadahead_args = [\"{lie}\"]\n");
        let (o, got, took) = s.read(&config);
        eprintln!("{lie}: {got:?} in {took:?}");
        assert_eq!(got, vec![MIB; SIZE / STRIDE], "{lie}: as without a policy");
        assert_eq!(warnings(&o), 1, "{lie}: {}", stderr(&o));
        assert!(stderr(&o).contains("extension `faults`"), "{}", stderr(&o));
        assert!(took < Duration::from_secs(30), "{lie}: {took:?}");
    }
}

#[test]
fn through_fuse_a_strided_reader_is_served_from_ranges_fetched_ahead() {
    let s = Setup::through(Frontend::RunFuse);
    let (_, plain, _) = s.read("");
    let (o, ahead, _) = s.read("[cache]\nreadahead = \"stride\"\nreadahead_args = [\"ahead=4\"]\n");
    eprintln!("without a policy: {plain:?}\nwith stride: {ahead:?}");
    let own = |gets: &[usize]| gets.iter().filter(|&&n| n == MIB).count();
    assert!(
        own(&ahead) * 2 <= own(&plain),
        "reads that fetched their own chunk: {} with the policy, {} without",
        own(&ahead),
        own(&plain)
    );
    assert_eq!(warnings(&o), 0, "{}", stderr(&o));
}

/// The server dies while the policy's ranges are fetched ahead: each later read gives the
/// file's own bytes (fetched before) or fails, never other bytes, and no read hangs.
#[test]
fn reads_after_the_server_died_under_a_readahead_policy_are_whole_or_fail() {
    let s = Setup::new();
    let toml = s.scratch.join("roam.toml");
    let config = "[cache]\nreadahead = \"stride\"\nreadahead_args = [\"ahead=4\"]\n";
    write_file(&toml, config.as_bytes(), 0o644);
    let pid_file = s.b.backend("").parent().unwrap().join("run/nginx.pid");
    let out = s.scratch.join("reads");
    roam_testkit::mkdir(&out);
    let script = format!(
        "python3 -c 'import os, subprocess\n\
         fd = os.open(\"/w/big\", os.O_RDONLY)\n\
         for i in range({n}):\n\
         \x20   if i == 6: subprocess.run([\"sh\", \"-c\", \"kill -TERM $(cat {pid})\"])\n\
         \x20   try: got = os.pread(fd, {READ}, i * {STRIDE})\n\
         \x20   except OSError as e: got = None; open(\"{out}/%d.err\" % i, \"w\").write(str(e))\n\
         \x20   if got is not None: open(\"{out}/%d\" % i, \"wb\").write(got)\n'",
        n = SIZE / STRIDE,
        pid = pid_file.display(),
        out = out.display(),
    );
    let roam = Roam::new()
        .env("ROAM_EXT_DIR", roam_testkit::ext::extensions())
        .env("ROAM_CONFIG", &toml);
    let began = Instant::now();
    let o = s.b.sh_with(roam, &script);
    let took = began.elapsed();
    assert!(
        took < Duration::from_secs(90),
        "took {took:?}: {}",
        stderr(&o)
    );
    let mut failed = 0;
    for i in 0..SIZE / STRIDE {
        match std::fs::read(out.join(i.to_string())) {
            Ok(got) => assert!(
                got == s.data[i * STRIDE..i * STRIDE + READ],
                "read {i} gave other bytes ({} of {READ}, zero: {})",
                got.len(),
                got.iter().all(|&b| b == 0)
            ),
            Err(_) => {
                assert!(
                    out.join(format!("{i}.err")).exists(),
                    "read {i}: no outcome"
                );
                assert!(i >= 6, "read {i} failed before the server died");
                failed += 1;
            }
        }
    }
    assert!(
        failed > 0,
        "every read succeeded with the server gone: {}",
        stderr(&o)
    );
}
