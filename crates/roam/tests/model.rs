//! roam against a reference model, mountpoint-s3's way: sequences of file operations drawn
//! from fixed seeds (write, append, `O_EXCL` create, read, stat, lstat, list, mkdir, rmdir,
//! unlink, rename, truncate, chmod, symlink, readlink, over a few colliding names) run in a
//! local directory, the oracle (what tmpfs and ext4 answer), and through roam on each
//! backend (mem:, the null layer, file+cache, SFTP, WebDAV, FTP, S3, Chirp) under `roam run`
//! and `roam run --fuse`. Every result (bytes, kind, size, mode, errno) must be the
//! oracle's. What a backend cannot express (its entry in [`CANNOT`]: WebDAV and S3 keep no
//! modes and no symlinks, FTP no symlinks ...) is left out of its sequences, the oracle's
//! too.
//! The test prints, per backend and frontend, how many operations matched the oracle.

mod common;

use std::fs;
use std::path::Path;
use std::process::Command;

use common::{stderr, stdout, Backend, Roam};
use roam_testkit::Scratch;

/// Seeds of the sequences (fixed: CI runs the same ones every time).
const SEEDS: std::ops::Range<u64> = 1..33;
/// Operations per sequence.
const OPS: usize = 40;
/// Names a sequence works on (few, so that operations meet each other's names).
const NAMES: [&str; 7] = ["a", "b", "d", "d/x", "d/y", "e", "e/z"];
const DATA: [&str; 4] = ["x", "hello", "", "line\nline"];
/// Modes that leave the owner `rwx`: the oracle runs as root, whom no mode stops, while
/// servers check modes as their own users.
const MODES: [u32; 3] = [0o755, 0o700, 0o750];

/// What a backend cannot express: operations it leaves out, and whether it keeps modes
/// (a mode in a stat is not compared where it does not; `dir_modes`: of directories).
struct Cannot {
    kind: &'static str,
    ops: &'static [&'static str],
    modeless: bool,
    dir_modes: bool,
}

const CANNOT: [Cannot; 4] = [
    Cannot {
        kind: "dav",
        ops: &["symlink", "readlink", "chmod"],
        modeless: true,
        dir_modes: false,
    },
    // Directories are key prefixes: renaming one is EXDEV (`mv` copies).
    Cannot {
        kind: "s3",
        ops: &["symlink", "readlink", "chmod", "rename"],
        modeless: true,
        dir_modes: false,
    },
    Cannot {
        kind: "ftp",
        ops: &["symlink", "readlink"],
        modeless: false,
        dir_modes: true,
    },
    // chirp_server shows every directory as 0700 (its access lists stand for modes).
    Cannot {
        kind: "chirp",
        ops: &[],
        modeless: false,
        dir_modes: false,
    },
];

/// Whether `op` (a JSON line) is one `kind` can express.
fn expressible(kind: &str, op: &str) -> bool {
    let name = op.split('"').nth(1).unwrap_or("");
    !CANNOT
        .iter()
        .any(|c| c.kind == kind && c.ops.contains(&name))
}

/// A small xorshift generator: the same sequence for a seed on every machine.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0
    }

    fn pick<T: Copy>(&mut self, from: &[T]) -> T {
        from[(self.next() % from.len() as u64) as usize]
    }
}

/// The operations of sequence `seed`, as JSON lines, in directory `s{seed}`.
fn sequence(seed: u64) -> Vec<String> {
    let mut rng = Rng(0x9e37_79b9_7f4a_7c15 ^ seed);
    let dir = format!("s{seed}");
    let at = |name: &str| format!("\"{dir}/{name}\"");
    let mut ops = vec![format!("[\"mkdir\", \"{dir}\", 493]")];
    for _ in 0..OPS {
        let (a, b) = (at(rng.pick(&NAMES)), at(rng.pick(&NAMES)));
        let data = serde_json_str(rng.pick(&DATA));
        let op = match rng.next() % 16 {
            0 | 1 => format!("[\"write\", {a}, {data}]"),
            2 => format!("[\"append\", {a}, {data}]"),
            3 => format!("[\"create_excl\", {a}, {data}]"),
            4 | 5 => format!("[\"read\", {a}]"),
            6 => format!("[\"stat\", {a}]"),
            7 => format!("[\"lstat\", {a}]"),
            8 => format!("[\"list\", {}]", at(rng.pick(&[".", "d", "e"]))),
            9 => format!("[\"mkdir\", {a}, {}]", rng.pick(&MODES)),
            10 => format!("[\"rmdir\", {a}]"),
            11 => format!("[\"unlink\", {a}]"),
            12 => format!("[\"rename\", {a}, {b}]"),
            13 => format!("[\"truncate\", {a}, {}]", rng.next() % 8),
            14 => format!("[\"chmod\", {a}, {}]", rng.pick(&MODES)),
            _ => match rng.next() % 2 {
                0 => format!("[\"symlink\", \"{}\", {a}]", rng.pick(&NAMES)),
                _ => format!("[\"readlink\", {a}]"),
            },
        };
        ops.push(op);
    }
    ops
}

/// `s` as a JSON string.
fn serde_json_str(s: &str) -> String {
    format!("\"{}\"", s.replace('\\', "\\\\").replace('\n', "\\n"))
}

/// Writes the executor and the operations of every seed that `kind` can express into
/// `dir`; returns the command that runs them under a root given as its first argument.
fn prepare(dir: &Path, kind: &str) -> (String, Vec<String>) {
    let script = dir.join("model_ops.py");
    fs::write(&script, include_str!("fixtures/model_ops.py")).unwrap();
    let ops: Vec<String> = SEEDS
        .flat_map(sequence)
        .filter(|op| expressible(kind, op))
        .collect();
    let file = dir.join("ops");
    fs::write(&file, ops.join("\n") + "\n").unwrap();
    let run = format!("python3 {} ROOT {}", script.display(), file.display());
    (run, ops)
}

/// Results of the operations run natively in `root`.
fn oracle(run: &str, root: &Path) -> Vec<String> {
    fs::create_dir_all(root).unwrap();
    let o = Command::new("sh")
        .args(["-c", &run.replace("ROOT", &root.display().to_string())])
        .output()
        .unwrap();
    assert!(o.status.success(), "oracle: {}", stderr(&o));
    stdout(&o).lines().map(str::to_owned).collect()
}

/// Results of the operations through roam with `url` mounted at `/w` (`env`: what its
/// server needs), under `roam run` (`fuse` false) or `roam run --fuse`.
fn through_roam(run: &str, url: &str, env: &[(String, String)], fuse: bool) -> Vec<String> {
    let mut roam = Roam::new();
    for (k, v) in env {
        roam = roam.env(k, v);
    }
    let mount = format!("/w={url}");
    let mut args = vec!["-m", mount.as_str()];
    if fuse {
        args.insert(0, "--fuse");
    }
    let o = roam.sh(&args, &run.replace("ROOT", "/w"));
    assert!(o.status.success(), "{url} fuse {fuse}: {}", stderr(&o));
    stdout(&o).lines().map(str::to_owned).collect()
}

/// A stat result without its mode.
fn strip_mode(result: &str) -> String {
    match result.rsplit_once(' ') {
        Some((kind_size, _)) if result.starts_with("ok ") => kind_size.to_owned(),
        _ => result.to_owned(),
    }
}

/// Runs the model on a fresh `kind` backend under both frontends; returns the mismatches.
fn model(kind: &str) -> Vec<String> {
    let scratch = Scratch::new("model");
    let (run, ops) = prepare(&scratch.join(""), kind);
    let want = oracle(&run, &scratch.join("oracle"));
    let cannot = CANNOT.iter().find(|c| c.kind == kind);
    let modeless = cannot.is_some_and(|c| c.modeless);
    let dir_modes = cannot.is_none_or(|c| c.dir_modes);
    let mut wrong = Vec::new();
    for fuse in [false, true] {
        let (url, env, _server) = backend(kind);
        let got = through_roam(&run, &url, &env, fuse);
        let frontend = if fuse { "roam run --fuse" } else { "roam run" };
        let mut matched = 0;
        for (i, op) in ops.iter().enumerate() {
            let stat = op.contains("\"stat\"") || op.contains("\"lstat\"");
            let unmoded =
                |r: &str| match stat && (modeless || (!dir_modes && r.starts_with("ok dir"))) {
                    true => strip_mode(r),
                    false => r.to_owned(),
                };
            let w = unmoded(&want[i]);
            let g = got.get(i).map_or("(nothing)".to_owned(), |g| unmoded(g));
            match g == w {
                true => matched += 1,
                false => wrong.push(format!("{kind} {frontend} #{i} {op}: {g}, not {w}")),
            }
        }
        eprintln!(
            "| {kind} | {frontend} | {matched} of {} operations as the oracle |",
            ops.len()
        );
    }
    wrong
}

/// A fresh, empty `kind` backend: its mount URL, the environment its server needs, and
/// what keeps the server alive.
fn backend(kind: &str) -> (String, Vec<(String, String)>, Option<Backend>) {
    match kind {
        "mem" => ("mem:".into(), Vec::new(), None),
        "null" => {
            let b = Backend::new("file");
            (
                format!("null:{}", b.backend("").display()),
                Vec::new(),
                Some(b),
            )
        }
        _ => {
            let b = Backend::new(kind);
            (b.url.clone(), b.env().to_vec(), Some(b))
        }
    }
}

fn model_on(kind: &str) {
    let wrong = model(kind);
    assert!(wrong.is_empty(), "{} mismatches: {wrong:#?}", wrong.len());
}

#[test]
fn mem() {
    model_on("mem");
}

#[test]
fn null_layer() {
    model_on("null");
}

#[test]
fn file_through_the_cache() {
    model_on("file+cache");
}

#[test]
fn sftp() {
    model_on("sftp");
}

#[test]
fn webdav() {
    model_on("dav");
}

#[test]
fn ftp() {
    model_on("ftp");
}

#[test]
fn s3() {
    model_on("s3");
}

#[test]
fn chirp() {
    model_on("chirp");
}
