//! The everyday tools that copy trees, run on every backend under every frontend, cold and
//! warm, against a local directory as the oracle: `tar c | tar x`, `cp -a`, `cp -r`,
//! `install`, `rsync -aH` into the backend and back out of it, and `git` (a repository made
//! on the backend and cloned out, a local one cloned onto it; `git status` clean, `git fsck`).
//!
//! Each test is one (backend, frontend) cell: a source tree (files of modes 0644, 0755 and
//! 0600 with mtimes in the past, a subdirectory of mode 0700, a symlink, a pair of hard links,
//! a FIFO) goes through the same script twice with one cache: cold (a fresh cache), then warm
//! (a second `roam` on the first one's cache, which also copies out the first run's trees
//! again). Every step's exit code, stdout and stderr, and a listing of every tree it made
//! (kind, mode, size, bytes, mtime to the second, link target, hard-link identity) must be
//! the oracle's, the same script run in a local directory.
//!
//! What a backend cannot express is in one table, [`CANNOT`] (after docs/SEMANTICS.md): the
//! source tree it gets leaves those features out, and each tool is then run on a small tree
//! holding just that feature, where it must fail with the errno roam documents for it
//! (`EPERM` for a hard link or a FIFO where there are none, `ENOTSUP` for a symlink on
//! WebDAV, FTP, S3), never silently. What roam still gets wrong is left out of the
//! comparison in a second table, [`GAPS`], and listed in docs/STATUS.md.

mod common;

use std::path::Path;
use std::process::Command;

use common::{stderr, stdout, Backend, Frontend, Roam};
use roam_testkit::{write_file, Scratch};

/// What a backend cannot express.
#[derive(Clone, Copy)]
struct Cannot {
    kind: &'static str,
    /// Features of the source tree it cannot hold (`symlink`, `hardlink`, `fifo`).
    lacks: &'static [&'static str],
    /// What it cannot hold through FUSE, where that differs (`mem:` serves its files in
    /// place there, so it keeps hard links).
    fuse_lacks: Option<&'static [&'static str]>,
    /// Whether it keeps the modes of files and of directories.
    modes: bool,
    dir_modes: bool,
    /// Whether it keeps the mtimes a program sets (files and symlinks; directories).
    mtimes: bool,
    dir_mtimes: bool,
    /// Whether its files outlive the roam that made them (`mem:` lives in roam's memory).
    persists: bool,
    /// Whether the tools are asked to keep times there (`tar x` without `-m`, `cp -a`
    /// with timestamps, `rsync -a` with `-t`): not where setting one fails.
    keep_times: bool,
    /// Whether its listings show dotfiles (nginx's WebDAV hides them: a repository's
    /// `.git` made by another roam is not found).
    dotfiles: bool,
}

const ALL: Cannot = Cannot {
    kind: "",
    lacks: &[],
    fuse_lacks: None,
    modes: true,
    dir_modes: true,
    mtimes: true,
    dir_mtimes: true,
    persists: true,
    keep_times: true,
    dotfiles: true,
};

/// WebDAV and S3: no symlinks (ENOTSUP), no hard links, no FIFOs, no modes (a
/// directory's `chmod`: ENOTSUP), no times but the server's (`utimensat`: ENOTSUP).
const NO_MODES: Cannot = Cannot {
    kind: "",
    lacks: &["symlink", "hardlink", "fifo", "chmod"],
    modes: false,
    dir_modes: false,
    mtimes: false,
    dir_mtimes: false,
    keep_times: false,
    ..ALL
};

/// The table of what each backend cannot express (docs/SEMANTICS.md); the null layer over
/// a local directory expresses everything.
const CANNOT: &[Cannot] = &[
    // No hard links under `roam run` (EPERM), where its files go through copies; FIFOs
    // live in roam's memory like the files.
    Cannot {
        kind: "mem",
        lacks: &["hardlink"],
        fuse_lacks: Some(&[]),
        persists: false,
        ..ALL
    },
    Cannot {
        kind: "file+cache",
        lacks: &["hardlink", "fifo"],
        ..ALL
    },
    Cannot {
        kind: "sftp",
        lacks: &["hardlink", "fifo"],
        ..ALL
    },
    // Dotfiles hidden from listings (nginx).
    Cannot {
        kind: "dav",
        dotfiles: false,
        ..NO_MODES
    },
    // No symlinks; pyftpdlib sets no directory's time (MFMT on a directory fails: roam
    // says EACCES), so the tools keep no times there.
    Cannot {
        kind: "ftp",
        lacks: &["symlink", "hardlink", "fifo"],
        mtimes: false,
        dir_mtimes: false,
        keep_times: false,
        ..ALL
    },
    // Directories are key prefixes.
    Cannot {
        kind: "s3",
        ..NO_MODES
    },
    // chirp_server shows every directory as 0700 (its access lists stand for modes), and
    // its `utime` follows links: a link's own times cannot be set (ENOTSUP), so `tar x`,
    // `cp -a` and `rsync -a` of a tree with symlinks fail there.
    Cannot {
        kind: "chirp",
        lacks: &["hardlink", "fifo", "symlink-times"],
        dir_modes: false,
        ..ALL
    },
];

fn cannot(kind: &str, frontend: Frontend) -> Cannot {
    let c = *CANNOT.iter().find(|c| c.kind == kind).unwrap_or(&ALL);
    match (frontend, c.fuse_lacks) {
        (Frontend::Fuse | Frontend::RunFuse, Some(lacks)) => Cannot { lacks, ..c },
        _ => c,
    }
}

/// An mtime in the past (2017-07-14), whole seconds.
const PAST: &str = "@1500000000";

/// Makes the source tree in `src`, without the features `lacks` names.
fn make_src(src: &Path, lacks: &[&str]) {
    write_file(&src.join("a.txt"), b"alpha\n", 0o644);
    write_file(&src.join("run.sh"), b"#!/bin/sh\necho ran\n", 0o755);
    write_file(&src.join("secret"), b"only mine\n", 0o600);
    write_file(&src.join("sub/deep.txt"), b"deep down\n", 0o644);
    // Where nothing keeps a mode, a directory made with the umask's needs no chmod.
    let sub = if lacks.contains(&"chmod") {
        "0755"
    } else {
        "0700"
    };
    let mut script = format!("cd '{}' && chmod {sub} sub", src.display());
    if !lacks.contains(&"symlink") && !lacks.contains(&"symlink-times") {
        script += " && ln -s a.txt link && ln -s sub/deep.txt sub-link";
    }
    if !lacks.contains(&"hardlink") {
        script += " && printf 'twice\\n' > hard1 && ln hard1 sub/hard2";
    }
    if !lacks.contains(&"fifo") {
        script += " && mkfifo -m 0640 fifo";
    }
    script += &format!(" && touch -h -d {PAST} * sub/* sub . ");
    run_local(&script);
}

/// The small trees, one per feature, that the tools must fail to copy where it is lacking.
fn make_feature(dir: &Path, feature: &str) {
    roam_testkit::mkdir(dir);
    let make = match feature {
        "symlink" => "ln -s target link",
        "hardlink" => "printf 'twice\\n' > hard1 && ln hard1 hard2",
        "symlink-times" => "echo x > target && ln -s target link && touch -h -d @1500000000 link",
        "chmod" => "mkdir sub && echo x > sub/f",
        _ => "mkfifo fifo",
    };
    run_local(&format!("cd '{}' && {make}", dir.display()));
}

fn run_local(script: &str) {
    let o = Command::new("sh").args(["-c", script]).output().unwrap();
    assert!(o.status.success(), "{script}: {}", stderr(&o));
}

/// Lists trees given as `LABEL=PATH`: per name (sorted, `.git` not entered) its kind, mode,
/// size and md5 (files), link target, mtime to the second (`now` within 10 minutes of now,
/// for what a tool does not preserve) and the first name of its hard-link group.
const LISTER: &str = r#"
import hashlib, os, stat, sys, time
now = time.time()
def names(root, rel):
    for name in sorted(os.listdir(os.path.join(root, rel) if rel else root)):
        r = os.path.join(rel, name) if rel else name
        yield r
        if name != '.git' and stat.S_ISDIR(os.lstat(os.path.join(root, r)).st_mode):
            yield from names(root, r)
for arg in sys.argv[1:]:
    label, root = arg.split('=', 1)
    print('#', label)
    if not os.path.lexists(root):
        print('  (absent)')
        continue
    groups = {}
    isdir = stat.S_ISDIR(os.lstat(root).st_mode)
    for rel in ['.'] + (list(names(root, '')) if isdir else []):
        p = root if rel == '.' else os.path.join(root, rel)
        st = os.lstat(p)
        m = st.st_mode
        kind = {stat.S_IFDIR: 'd', stat.S_IFREG: 'f', stat.S_IFLNK: 'l', stat.S_IFIFO: 'p'}.get(stat.S_IFMT(m), '?')
        if os.path.basename(rel) == '.git':
            print(' ', rel, kind)
            continue
        f = [rel, kind, 'm%o' % stat.S_IMODE(m)]
        if kind == 'f':
            f += [str(st.st_size), hashlib.md5(open(p, 'rb').read()).hexdigest()[:12]]
        if kind == 'l':
            f.append('->' + os.readlink(p))
        t = int(st.st_mtime)
        f.append('t' + ('now' if abs(t - now) < 600 else str(t)))
        if kind == 'f' and st.st_nlink > 1:
            f.append('=' + groups.setdefault((st.st_dev, st.st_ino), rel))
        print(' ', ' '.join(f))
"#;

/// The bash function that runs one step: its name, exit code, stdout (`|`) and stderr (`!`).
const STEP: &str = r#"step() { ( eval "$2" ) >"$O/.out" 2>"$O/.err"; echo "== $1: $?"; sed 's/^/  | /' "$O/.out"; sed 's/^/  ! /' "$O/.err"; }
"#;

/// A deterministic git: no user or system configuration, fixed names and dates.
const GIT_ENV: &str = "export GIT_CONFIG_NOSYSTEM=1 GIT_AUTHOR_NAME=roam \
    GIT_AUTHOR_EMAIL=roam@example.org GIT_COMMITTER_NAME=roam GIT_COMMITTER_EMAIL=roam@example.org \
    GIT_AUTHOR_DATE=2024-01-01T00:00:00Z GIT_COMMITTER_DATE=2024-01-01T00:00:00Z\n";

/// The tools' commands on `c`: `tar x`, `cp -a`, `rsync -aH`, keeping times or not.
fn tools(c: &Cannot) -> (&'static str, &'static str, &'static str) {
    match (c.keep_times, c.modes) {
        (true, _) => ("tar x", "cp -a", "rsync -aH"),
        (false, true) => (
            "tar x -m",
            "cp -a --no-preserve=timestamps",
            "rsync -aH --no-times",
        ),
        (false, false) => (
            "tar x -m",
            "cp -a --no-preserve=mode,timestamps",
            "rsync -aH --no-times --no-perms",
        ),
    }
}

/// The script of run `run` (a directory of `/w`) on `c`, with local output in `{out}`;
/// `prev`: the earlier run whose trees on the backend are copied out again.
fn script(c: &Cannot, run: &str, prev: Option<&str>) -> String {
    let r = format!("/w/{run}");
    let (tar_x, cp_a, rsync) = tools(c);
    let mut s = format!("set -o pipefail\nO={{out}}\nexport HOME={{out}}\n{GIT_ENV}{STEP}");
    let mut step = |name: &str, cmd: String| {
        let cmd = cmd
            .replace("R/", &format!("{r}/"))
            .replace("TARX", tar_x)
            .replace("CPA", cp_a)
            .replace("RSYNC", rsync);
        s += &format!("step {name} {}\n", sh_quote(&cmd));
    };
    step("mkdir", format!("mkdir {r}"));
    // `tar x` gives each directory it made its mode at the end: where that fails (see
    // `feature_script`), the archive holds no directories (`tar x` makes them as needed).
    let chmod = !c.lacks.contains(&"chmod");
    match chmod {
        true => step(
            "tar-in",
            "mkdir R/tar && tar c -C {src} . | TARX -C R/tar".into(),
        ),
        false => step(
            "tar-in-no-dirs",
            "mkdir R/tar && (cd {src} && tar c $(find . ! -type d | sort)) | TARX -C R/tar".into(),
        ),
    }
    step(
        "tar-out",
        "mkdir $O/tar && tar c -C R/tar . | TARX -C $O/tar".into(),
    );
    // `cp -a` sets each directory's mode after filling it: where that fails (see
    // `feature_script`), the tree goes in with `cp -r`.
    match chmod {
        true => step("cp-a-in", "CPA {src} R/cpa".into()),
        false => step("cp-r-in-for-cp-a", "cp -r {src} R/cpa".into()),
    }
    step("cp-a-out", "CPA R/cpa $O/cpa".into());
    step("cp-r-in", "cp -r {src} R/cpr".into());
    step("cp-r-out", "cp -r R/cpr $O/cpr".into());
    if chmod {
        step(
            "install-in",
            "install -d -m 0750 R/inst && install -m 0640 {src}/a.txt R/inst/a.txt \
             && install -m 0755 {src}/run.sh R/inst/"
                .into(),
        );
        step(
            "install-out",
            "install -m 0600 R/inst/a.txt $O/inst.txt".into(),
        );
    }
    step("rsync-in", "RSYNC {src}/ R/rsync/".into());
    if c.keep_times {
        // Nothing to send again: every size, time and mode arrived.
        step("rsync-again", "RSYNC -i {src}/ R/rsync/".into());
    }
    step("rsync-out", "RSYNC R/rsync/ $O/rsync/".into());
    step(
        "git-on-backend",
        "git init -q -b main R/repo && cp {src}/a.txt R/repo/ \
         && git -C R/repo add . && git -C R/repo commit -q -m first \
         && echo more >> R/repo/a.txt && git -C R/repo commit -q -am second \
         && git -C R/repo status --porcelain && git -C R/repo fsck && git -C R/repo log --format=%H"
            .into(),
    );
    step(
        "git-clone-out",
        "git clone -q R/repo $O/clone && git -C $O/clone status --porcelain \
         && git -C $O/clone fsck && git -C $O/clone log --format=%H"
            .into(),
    );
    // A local clone copies the objects with their times; where times cannot be set, git
    // must fetch them (`--no-local`).
    let local = if c.keep_times { "" } else { " --no-local" };
    step(
        "git-clone-in",
        format!(
            "git init -q -b main $O/lrepo && cp {{src}}/a.txt $O/lrepo/ && git -C $O/lrepo add . \
             && git -C $O/lrepo commit -q -m local && git clone -q{local} $O/lrepo R/clone \
             && git -C R/clone status --porcelain && git -C R/clone fsck \
             && git -C R/clone log --format=%H"
        ),
    );
    let mut trees = vec![];
    for t in ["tar", "cpa", "cpr", "inst", "rsync", "repo", "clone"] {
        trees.push(format!("in/{t}={r}/{t}"));
    }
    for t in ["tar", "cpa", "cpr", "inst.txt", "rsync", "clone"] {
        trees.push(format!("out/{t}=$O/{t}"));
    }
    if let Some(p) = prev {
        let p = format!("/w/{p}");
        step(
            "prev-tar-out",
            format!("mkdir $O/ptar && tar c -C {p}/tar . | TARX -C $O/ptar"),
        );
        step("prev-cp-a-out", format!("CPA {p}/cpa $O/pcpa"));
        step("prev-rsync-out", format!("RSYNC {p}/rsync/ $O/prsync/"));
        if c.dotfiles {
            step(
                "prev-git",
                format!(
                    "git -C {p}/repo status --porcelain && git -C {p}/repo fsck \
                     && git clone -q {p}/repo $O/pclone && git -C $O/pclone log --format=%H"
                ),
            );
        }
        for t in ["ptar", "pcpa", "prsync", "pclone"] {
            trees.push(format!("prev/{t}=$O/{t}"));
        }
    }
    s += &format!("python3 {{lister}} {}\n", trees.join(" "));
    s
}

/// The tools run on the tree of `feature`, by name, with their commands.
fn feature_steps(c: &Cannot, r: &str, x: &str, feature: &str) -> Vec<(&'static str, String)> {
    let (tar_x, cp_a, rsync) = tools(c);
    match feature {
        // A directory's mode (`install -d -m`, and `cp -a` setting it after the files).
        "chmod" => vec![
            (
                "tar",
                format!("mkdir {r}/tar && tar c -C {x} . | {tar_x} -C {r}/tar"),
            ),
            ("install-d", format!("install -d -m 0750 {r}/inst")),
            ("cp-a", format!("{cp_a} {x} {r}/cpa")),
        ],
        _ => vec![
            (
                "tar",
                format!("mkdir {r}/tar && tar c -C {x} . | {tar_x} -C {r}/tar"),
            ),
            ("cp-a", format!("{cp_a} {x} {r}/cpa")),
            ("cp-r", format!("cp -r {x} {r}/cpr")),
            ("rsync", format!("{rsync} {x}/ {r}/rsync/")),
        ],
    }
}

/// The steps, run only under roam, that copy a tree holding one feature `c` lacks.
fn feature_script(c: &Cannot, run: &str, feature: &str) -> String {
    let r = format!("/w/{run}/x-{feature}");
    let x = format!("{{x}}/{feature}");
    let mut s = format!("O={{out}}\n{STEP}step mkdir 'mkdir {r}'\n");
    for (name, cmd) in feature_steps(c, &r, &x, feature) {
        s += &format!("step {feature}/{name} {}\n", sh_quote(&cmd));
    }
    s
}

fn sh_quote(text: &str) -> String {
    format!("'{}'", text.replace('\'', r"'\''"))
}

/// `text` with the attributes `c` cannot keep dropped from the listing's lines.
fn comparable(text: &str, c: &Cannot) -> String {
    text.lines()
        .map(|line| {
            let fields: Vec<&str> = line.split(' ').collect();
            if !line.starts_with("  ") || line.starts_with("  |") || line.starts_with("  !") {
                return line.to_owned();
            }
            let kind = fields.get(3).copied().unwrap_or("");
            let keep = |f: &&str| match f.as_bytes().first() {
                Some(b'm') if kind == "d" => c.dir_modes,
                Some(b'm') if kind == "f" => c.modes,
                Some(b't') if kind == "d" => c.dir_mtimes,
                Some(b't') => c.mtimes,
                _ => true,
            };
            let mut kept: Vec<&str> = fields[..4.min(fields.len())].to_vec();
            kept.extend(fields.iter().skip(4).filter(|f| keep(f)));
            kept.join(" ")
        })
        .collect::<Vec<_>>()
        .join("\n")
}

/// Known gaps: what roam gets wrong today, left out of the comparison (and listed in
/// docs/STATUS.md) rather than asserted: on the backends `kinds`, under `frontends`, the
/// steps (`== NAME`) or trees (`# LABEL`) whose blocks are left out, or lines containing
/// a text.
struct Gap {
    kinds: &'static [&'static str],
    frontends: &'static [Frontend],
    what: &'static [&'static str],
}

/// None today: every cell is compared whole.
const GAPS: &[Gap] = &[];

/// `text` without the gaps of this cell.
fn without_gaps(text: &str, kind: &str, frontend: Frontend) -> String {
    let gaps: Vec<&str> = GAPS
        .iter()
        .filter(|g| g.kinds.contains(&kind) && g.frontends.contains(&frontend))
        .flat_map(|g| g.what.iter().copied())
        .collect();
    let header = |l: &str| l.starts_with("== ") || l.starts_with("# ");
    let mut skipping = false;
    let mut out = Vec::new();
    for line in text.lines() {
        if header(line) {
            skipping = gaps
                .iter()
                .any(|g| header(g) && (line == *g || line.starts_with(&format!("{g}:"))));
        }
        if !skipping && !gaps.iter().any(|g| !header(g) && line.contains(g)) {
            out.push(line);
        }
    }
    out.join("\n")
}

/// Runs the cell `kind` × `frontend`: cold, then warm on the same cache.
fn cell(kind: &str, frontend: Frontend) {
    let c = &cannot(kind, frontend);
    let s = Scratch::new("tools");
    let src = s.join("src");
    make_src(&src, c.lacks);
    for f in c.lacks {
        make_feature(&s.join("x").join(f), f);
    }
    let lister = s.join("lister.py");
    std::fs::write(&lister, LISTER).unwrap();
    let oracle = s.join("oracle");
    roam_testkit::mkdir(&oracle);
    let cache = s.join("cache");
    let mut b = Backend::serving(kind, |_| {}).through(frontend);
    let fill = |script: &str, out: &Path| {
        script
            .replace("{src}", &src.display().to_string())
            .replace("{x}", &s.join("x").display().to_string())
            .replace("{lister}", &lister.display().to_string())
            .replace("{out}", &out.display().to_string())
    };
    let mut wrong = Vec::new();
    for (i, run) in ["r1", "r2"].into_iter().enumerate() {
        let temper = if i == 0 { "cold" } else { "warm" };
        let prev = (i > 0 && c.persists).then_some("r1");
        let (out_n, out_r) = (
            s.join(&format!("oracle-{run}")),
            s.join(&format!("out-{run}")),
        );
        for d in [&out_n, &out_r] {
            roam_testkit::mkdir(d);
        }
        let body = script(c, run, prev);
        let native = Command::new("bash")
            .args([
                "-c",
                &fill(&body, &out_n).replace("/w", oracle.to_str().unwrap()),
            ])
            .output()
            .unwrap();
        assert!(native.status.success(), "oracle: {}", stderr(&native));
        let want = stdout(&native)
            .replace(oracle.to_str().unwrap(), "/w")
            .replace(out_n.to_str().unwrap(), "{out}");
        let mut full = fill(&body, &out_r);
        full += "echo '=== lacking'\n";
        for f in c.lacks {
            full += &fill(&feature_script(c, run, f), &out_r);
        }
        if frontend == Frontend::Fuse && i > 0 {
            b.remount();
        }
        let roam = Roam::new().env("ROAM_CACHE_DIR", &cache);
        let o = b.sh_with(roam, &format!("exec bash -c {}", sh_quote(&full)));
        let got = stdout(&o).replace(out_r.to_str().unwrap(), "{out}");
        let (got, lacking) = got.split_once("=== lacking\n").unwrap_or((&got, ""));
        let gapless = |t: &str| without_gaps(&comparable(t, c), kind, frontend);
        let (want, got) = (gapless(&want), gapless(got));
        if want != got {
            wrong.push(format!(
                "{kind} {frontend:?} {temper}:\n{}\nroam's stderr:\n{}",
                diff(&want, &got),
                stderr(&o)
            ));
        }
        let before = wrong.len();
        for f in c.lacks {
            check_lacking(c, f, lacking, &mut wrong);
        }
        for w in &mut wrong[before..] {
            *w = format!("{kind} {frontend:?} {temper}: {w}\n{lacking}");
        }
    }
    assert!(wrong.is_empty(), "{}", wrong.join("\n\n"));
}

/// A line diff of the oracle's listing (`-`) and roam's (`+`), with a line of context.
fn diff(want: &str, got: &str) -> String {
    let w: Vec<&str> = want.lines().collect();
    let g: Vec<&str> = got.lines().collect();
    // lcs[i][j]: the longest common subsequence of w[i..] and g[j..].
    let mut lcs = vec![vec![0usize; g.len() + 1]; w.len() + 1];
    for i in (0..w.len()).rev() {
        for j in (0..g.len()).rev() {
            lcs[i][j] = match w[i] == g[j] {
                true => lcs[i + 1][j + 1] + 1,
                false => lcs[i + 1][j].max(lcs[i][j + 1]),
            };
        }
    }
    let mut lines = Vec::new();
    let (mut i, mut j) = (0, 0);
    while i < w.len() || j < g.len() {
        if i < w.len() && j < g.len() && w[i] == g[j] {
            lines.push((' ', w[i]));
            (i, j) = (i + 1, j + 1);
        } else if j < g.len() && (i == w.len() || lcs[i][j + 1] >= lcs[i + 1][j]) {
            lines.push(('+', g[j]));
            j += 1;
        } else {
            lines.push(('-', w[i]));
            i += 1;
        }
    }
    let near = |k: usize| {
        lines[k.saturating_sub(1)..(k + 2).min(lines.len())]
            .iter()
            .any(|l| l.0 != ' ')
    };
    let mut out = String::new();
    for (k, (mark, line)) in lines.iter().enumerate() {
        if near(k) || line.starts_with('#') || line.starts_with("==") {
            out += &format!("{mark} {line}\n");
        }
    }
    out
}

/// What each tool does with a tree holding a feature the backend lacks: its exit code and
/// the errno every message of its names (`None`: it copies the tree without the feature,
/// as `cp -r` does with hard links, two files, and with symlinks, whose times it leaves).
fn lacking_outcome(feature: &str, tool: &str) -> (i32, Option<&'static str>) {
    let errno = match feature {
        "symlink" | "symlink-times" | "chmod" => "Operation not supported",
        _ => "Operation not permitted",
    };
    match (feature, tool) {
        // `tar x` lets a link without times of its own be (EOPNOTSUPP is not its error).
        ("symlink-times", "tar") => (0, None),
        ("hardlink" | "symlink-times", "cp-r") => (0, None),
        (_, "tar") => (2, Some(errno)),
        (_, "cp-a" | "cp-r" | "install-d") => (1, Some(errno)),
        _ => (23, Some(errno)),
    }
}

/// The summary lines tools add to their messages.
const SUMMARIES: [&str; 2] = [
    "tar: Exiting with failure status due to previous errors",
    "rsync error: some files/attrs were not transferred (see previous errors) (code 23)",
];

/// Asserts each tool failed to copy `feature` onto a backend lacking it, with the errno
/// roam documents, and told so (`lacking`: the steps' output).
fn check_lacking(c: &Cannot, feature: &str, lacking: &str, wrong: &mut Vec<String>) {
    for (tool, _) in feature_steps(c, "", "", feature) {
        let head = format!("== {feature}/{tool}: ");
        let Some(at) = lacking.find(&head) else {
            wrong.push(format!("{feature}/{tool}: not run"));
            continue;
        };
        let rest = &lacking[at + head.len()..];
        let end = rest.find("\n==").unwrap_or(rest.len());
        let mut lines = rest[..end].lines();
        let code: i32 = lines.next().unwrap_or("").trim().parse().unwrap_or(-1);
        let messages: Vec<&str> = lines.filter_map(|l| l.strip_prefix("  ! ")).collect();
        let (want_code, errno) = lacking_outcome(feature, tool);
        let told = match errno {
            None => messages.is_empty(),
            Some(e) => {
                !messages.is_empty()
                    && messages.iter().all(|m| {
                        m.contains(e)
                            || SUMMARIES.iter().any(|s| m.starts_with(s))
                            // `cp -a` sets the directory's mode after its entries.
                            || (c.lacks.contains(&"chmod") && m.contains("Operation not supported"))
                    })
            }
        };
        if code != want_code || !told {
            wrong.push(format!(
                "{feature}/{tool}: exit {code} (not {want_code}), messages {messages:?} (each should name {errno:?})"
            ));
        }
    }
}

macro_rules! cells {
    ($($name:ident => $kind:literal, $frontend:ident;)*) => {
        $(#[test] fn $name() { cell($kind, Frontend::$frontend) })*
    };
}

cells! {
    mem_run => "mem", Trap;
    mem_run_fuse => "mem", RunFuse;
    mem_mount => "mem", Fuse;
    null_run => "null", Trap;
    null_run_fuse => "null", RunFuse;
    null_mount => "null", Fuse;
    file_cache_run => "file+cache", Trap;
    file_cache_run_fuse => "file+cache", RunFuse;
    file_cache_mount => "file+cache", Fuse;
    sftp_run => "sftp", Trap;
    sftp_run_fuse => "sftp", RunFuse;
    sftp_mount => "sftp", Fuse;
    dav_run => "dav", Trap;
    dav_run_fuse => "dav", RunFuse;
    dav_mount => "dav", Fuse;
    ftp_run => "ftp", Trap;
    ftp_run_fuse => "ftp", RunFuse;
    ftp_mount => "ftp", Fuse;
    s3_run => "s3", Trap;
    s3_run_fuse => "s3", RunFuse;
    s3_mount => "s3", Fuse;
    chirp_run => "chirp", Trap;
    chirp_run_fuse => "chirp", RunFuse;
    chirp_mount => "chirp", Fuse;
}
