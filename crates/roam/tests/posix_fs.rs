//! POSIX details checked against a local directory as the oracle: each case runs one shell
//! script natively in a scratch directory and under roam with a backend at `/w` (through
//! `roam run -m`, `roam mount` and `roam run --fuse`), and asserts both print the same
//! (modes, errnos, contents). Cases: the mode `mkdir` and `open(O_CREAT)` give, hard links
//! of files served in place (`null:`), a symlink's own times (`touch -h`, `tar x`), and
//! special files (FIFOs, sockets), `fallocate`, directory link counts, access times, trees
//! deeper than `PATH_MAX` in place.

mod common;

use std::process::{Command, Output};

use common::{stderr, stdout, Backend, Frontend, Roam};
use roam_testkit::Scratch;

/// How the script reaches the backend.
#[derive(Clone, Copy, Debug)]
enum Via {
    /// `roam run -m /w=URL` (ptrace).
    Trap,
    /// `roam mount DIR URL`.
    Mount,
    /// `roam run --fuse -m /w=URL`.
    RunFuse,
}

const ALL: [Via; 3] = [Via::Trap, Via::Mount, Via::RunFuse];

/// `script` run natively with `/w` a fresh scratch directory: its stdout, `/w` put back.
fn native(script: &str) -> String {
    let dir = Scratch::new("native");
    let base = dir.path.display().to_string();
    let o = Command::new("sh")
        .args(["-c", &script.replace("/w", &base)])
        .output()
        .expect("running sh");
    stdout(&o).replace(&base, "/w")
}

/// `script` run under roam on a fresh backend of `kind`, reached `via`.
fn roamed(kind: &str, via: Via, script: &str) -> Output {
    on(Backend::new(kind), via, script).0
}

/// `script` run under roam on `b`, reached `via`; `b` comes back (its files go with it).
fn on(b: Backend, via: Via, script: &str) -> (Output, Backend) {
    let frontend = match via {
        Via::Trap => Frontend::Trap,
        Via::Mount => Frontend::Fuse,
        Via::RunFuse => {
            let mut roam = Roam::new().env("B", b.backend(""));
            for (k, v) in b.env() {
                roam = roam.env(k, v);
            }
            let o = roam.sh(&["--fuse", "-m", &format!("/w={}", b.url)], script);
            return (o, b);
        }
    };
    let b = b.through(frontend);
    (b.sh(script), b)
}

/// Asserts `script` prints under roam what it prints natively, on each backend of `kinds`
/// through each of `vias`.
fn same(kinds: &[&str], vias: &[Via], script: &str) {
    let want = native(script);
    assert!(!want.is_empty(), "the native run printed nothing: {script}");
    let mut wrong = Vec::new();
    for kind in kinds {
        for &via in vias {
            let o = roamed(kind, via, script);
            if stdout(&o) != want {
                wrong.push(format!("{kind} via {via:?}:\n{}{}", stdout(&o), stderr(&o)));
            }
        }
    }
    assert!(
        wrong.is_empty(),
        "{script}\nnatively:\n{want}\n{}",
        wrong.join("\n")
    );
}

/// `mkdir(path, mode)` gives `mode` less the caller's umask, whatever roam's or the
/// server's umask: a private directory is private.
#[test]
fn mkdir_gives_the_mode_asked_less_the_umask() {
    let script = "cd /w && umask 022 && python3 -c \"import os\nos.mkdir('p', 0o700)\nos.mkdir('q', 0o777)\nos.umask(0)\nos.mkdir('r', 0o777)\nos.mkdir('s', 0o1750)\" && stat -c '%n %a' p q r s";
    same(&["mem", "file+cache", "sftp"], &ALL, script);
}

/// What the server keeps: a second run (a fresh cache) lists the directories made by the
/// first with their modes.
#[test]
fn mkdir_modes_are_kept_by_the_backend() {
    for kind in ["file+cache", "sftp"] {
        let b = Backend::new(kind);
        let made = b.sh("umask 077 && mkdir /w/p && umask 0 && mkdir -p /w/q && echo made");
        assert_eq!(stdout(&made), "made\n", "{kind}: {}", stderr(&made));
        let o = b.sh("stat -c '%n %a' /w/p /w/q");
        assert_eq!(stdout(&o), "/w/p 700\n/w/q 777\n", "{kind}: {}", stderr(&o));
    }
}

/// A file or directory made gets the caller's mode less the caller's umask, not less
/// roam's as well (umask 0 and 0666: 0666).
#[test]
fn creations_get_the_callers_mode_less_only_the_callers_umask() {
    let script = "cd /w && umask 0 && python3 -c \"import os\nos.close(os.open('m', os.O_CREAT | os.O_WRONLY, 0o666))\nos.mkdir('d', 0o777)\nos.umask(0o027)\nos.close(os.open('n', os.O_CREAT | os.O_WRONLY, 0o666))\nos.mkdir('e', 0o777)\" && stat -c '%n %a' m d n e";
    same(&["null", "mem"], &ALL, script);
}

/// The hard links' script: a name outlives another's removal (git's object writes: link,
/// then unlink the temporary), both show one `st_ino`, a write through one shows through
/// the other, a symlink and a FIFO get second names too, and neither a taken name nor a
/// directory gets a link.
const HARD_LINKS: &str = "cd /w && echo d > a && ln a b && rm a && cat b && echo x > c && ln c e && [ \"$(stat -c %i c)\" = \"$(stat -c %i e)\" ] && echo same && stat -c %h c e && echo y >> e && cat c && rm c && stat -c %h e && cat e && ln -s e l && ln l l2 && mkfifo p && ln p p2 && stat -c '%n %h %F' l l2 p p2 && readlink l2 && mv e b && stat -c %h b && (ln b b 2>/dev/null || echo taken) && mkdir d && (ln d d2 2>/dev/null || echo directory) && ls";

/// Hard links of files served in place are one file, under every frontend.
#[test]
fn hard_links_in_place_are_one_file() {
    same(&["null"], &ALL, HARD_LINKS);
}

/// Hard links on `mem:` are one file, as on tmpfs, where it is served in place: through
/// FUSE. Under `roam run` its files go through copies and whole uploads, which would
/// split the names: `EPERM`, as for SFTP (docs/SEMANTICS.md).
#[test]
fn hard_links_in_memory_are_one_file() {
    same(&["mem"], &[Via::Mount, Via::RunFuse], HARD_LINKS);
    let o = roamed("mem", Via::Trap, "cd /w && echo d > a && ln a b");
    assert!(
        stderr(&o).contains("Operation not permitted"),
        "{}",
        stderr(&o)
    );
}

/// `touch -h` (utimensat with AT_SYMLINK_NOFOLLOW) sets a link's own time, also of a
/// dangling link; `touch` of a link sets its target's.
#[test]
fn touch_h_sets_the_links_own_time() {
    let script = "cd /w && echo t > f && ln -s f l && ln -s nowhere dl && touch -h -d @1000000000 l && touch -h -d @1100000000 dl && touch -d @1200000000 f && stat -c '%n %Y' f l dl && touch -d @1300000000 l && stat -c '%n %Y' f l";
    same(&["sftp", "file+cache", "mem", "null"], &ALL, script);
}

/// `tar x` restores a symlink's own time after making it.
#[test]
fn tar_extracts_symlinks_with_their_times() {
    let script = "T=$(mktemp -d) && cd $T && echo a > f && ln -s f l && touch -h -d @1000000000 l && touch -d @1100000000 f && tar cf a.tar f l && cd /w && tar xf $T/a.tar && rm -r $T && stat -c '%n %Y %F' f l && cat l";
    same(&["sftp", "file+cache"], &ALL, script);
}

/// A FIFO made in a directory served in place is the local one, and one made on `mem:` is
/// a FIFO too (as on tmpfs): either carries bytes between two processes.
#[test]
fn fifos_in_place_and_in_memory() {
    let script = "cd /w && umask 022 && mkfifo p && stat -c '%n %F %a' p && (echo through > p &) && cat p && ls -l p | cut -c1";
    same(&["null", "mem"], &ALL, script);
}

/// A unix socket bound in a directory served in place, or on `mem:`, takes connections,
/// by its relative and its absolute name, and is listed as a socket; once removed, the name
/// is free again. Under `roam run` too, where the kernel takes the name from a socket
/// address, not a path argument.
#[test]
fn sockets_in_place_and_in_memory() {
    let script = "cd /w && python3 -c \"import socket\ns = socket.socket(socket.AF_UNIX)\ns.bind('s')\ns.listen()\nfor name, word in [('s', b'relative'), ('/w/s', b'absolute')]:\n    c = socket.socket(socket.AF_UNIX)\n    c.connect(name)\n    c.sendall(word)\n    print(s.accept()[0].recv(8).decode())\" && stat -c '%n %F' s && ls -l | cut -c1 && rm s && python3 -c \"import errno, socket\ntry:\n    socket.socket(socket.AF_UNIX).connect('/w/s')\nexcept OSError as e:\n    print(errno.errorcode[e.errno])\"";
    same(&["null", "mem"], &ALL, script);
}

/// A socket whose name under roam (its skeleton entry on `mem:`, its local name in a tree
/// served in place) is longer than a `sockaddr_un` holds is bound and found all the same,
/// as the program's own short name is.
#[test]
fn sockets_with_long_local_names() {
    let d = "d".repeat(100);
    let script = format!("cd /w && mkdir {d} && cd {d} && python3 -c \"import socket\ns = socket.socket(socket.AF_UNIX)\ns.bind('s')\ns.listen()\nc = socket.socket(socket.AF_UNIX)\nc.connect('s')\nc.sendall(b'long')\nprint(s.accept()[0].recv(8).decode())\" && ls -l s | cut -c1");
    same(&["null", "mem"], &ALL, &script);
}

/// Where a backend has no special files, `mkfifo` fails with `EPERM`, what Linux says for
/// a file system without them (not `ENOSYS`); so does `bind` of a unix socket there.
#[test]
fn special_files_elsewhere_are_eperm() {
    let python = |calls: &str| {
        format!("cd /w && python3 -c \"import errno, os, socket\ntry:\n    {calls}\nexcept OSError as e:\n    print(errno.errorcode[e.errno])\"")
    };
    let fifo = python("os.mkfifo('p')");
    let socket = python("socket.socket(socket.AF_UNIX).bind('s')");
    for kind in ["file+cache", "sftp"] {
        for via in ALL {
            let o = roamed(kind, via, &fifo);
            assert_eq!(stdout(&o), "EPERM\n", "{kind} via {via:?}: {}", stderr(&o));
        }
        for via in ALL {
            let o = roamed(kind, via, &socket);
            assert_eq!(stdout(&o), "EPERM\n", "{kind} via {via:?}: {}", stderr(&o));
        }
    }
}

/// `fallocate` of an open file: mode 0 grows it (zeros), `--keep-size` changes no size; a
/// copy being written is uploaded grown.
#[test]
fn fallocate_grows_files() {
    let script = "cd /w && printf abc > f && fallocate -l 10000 f && stat -c %s f && fallocate -n -o 0 -l 20000 f && stat -c %s f && head -c 3 f && echo && tail -c +4 f | tr -d '\\0' | wc -c";
    same(&["mem", "null", "file+cache"], &ALL, script);
    for via in ALL {
        let b = Backend::new("file+cache");
        let (o, b) = on(
            b,
            via,
            "printf abc > /w/g && fallocate -l 10000 /w/g && echo ok",
        );
        let server = b.backend("g");
        assert_eq!(stdout(&o), "ok\n", "{via:?}: {}", stderr(&o));
        let len = std::fs::metadata(&server).map(|m| m.len()).ok();
        assert_eq!(len, Some(10000), "{via:?}: the upload is the grown file");
    }
}

/// A directory's link count is 2 and one per subdirectory, as on a local disk.
#[test]
fn directory_link_counts_count_subdirectories() {
    let script = "cd /w && mkdir -p d/a d/b d/c/x && touch d/f && stat -c '%n %h' d d/c d/a && ls -l | awk '$NF == \"d\" {print $2}'";
    same(&["mem"], &ALL, script);
}

/// Access and modification times are kept apart: `touch -a` and `touch -m` each set one,
/// an append leaves the access time, and a read after a change moves it (`relatime`,
/// Linux's default) — on the server's files too (SFTP, a cached tree), where roam's own
/// reads for its cache move nothing and a program's read moves the copy's.
#[test]
fn access_times_are_kept_apart_from_modification_times() {
    let script = "cd /w && echo x > f && touch -a -d @1000000000 f && touch -m -d @1100000000 f && stat -c '%X %Y' f && echo y >> f && stat -c %X f && cat f && [ $(stat -c %X f) -gt 1100000000 ] && echo read-moved-it";
    same(&["mem", "file+cache", "sftp"], &ALL, script);
}

/// What the server keeps of a file's times: the access time a program set, apart from
/// the modification time, on the server's own file (and in a second run's stat).
#[test]
fn access_times_reach_the_server() {
    use std::os::unix::fs::MetadataExt;
    for kind in ["file+cache", "sftp"] {
        let b = Backend::new(kind);
        let set = b.sh("echo x > /w/f && touch -a -d @1000000000 /w/f && touch -m -d @1100000000 /w/f && echo y >> /w/f && echo set");
        assert_eq!(stdout(&set), "set\n", "{kind}: {}", stderr(&set));
        let md = std::fs::metadata(b.backend("f")).unwrap();
        assert_eq!(md.atime(), 1_000_000_000, "{kind}: the server's atime");
        let seen = b.sh("stat -c %X /w/f");
        assert_eq!(stdout(&seen), "1000000000\n", "{kind}: {}", stderr(&seen));
    }
}

/// A tree served in place may be deeper than `PATH_MAX` bytes of absolute path, as a
/// local one may: a program working relative to its cwd makes, lists, renames, links and
/// removes names down there and reads its cwd back, under every frontend (`roam run`
/// spells the names it hands the kernel through links past `PATH_MAX`, and knows a deep
/// cwd by its identity).
#[test]
fn trees_deeper_than_path_max_in_place() {
    let deep = "import os\nn = 'n' * 200\nfor i in range(25):\n    os.mkdir(n, 0o750)\n    os.chdir(n)\nprint(os.getcwd().endswith('/'.join([''] + [n] * 25)))\nopen('f', 'w').write('deep')\nos.rename('f', 'g')\nos.link('g', 'h')\nos.unlink('g')\nos.symlink('h', 'l')\nos.mkdir('d')\nprint(open('l').read(), sorted(os.listdir('.')), os.readlink('l'), oct(os.stat('..').st_mode & 0o777), os.stat('h').st_nlink)\nfor name in ['h', 'l']:\n    os.unlink(name)\nos.rmdir('d')\nfor i in range(25):\n    os.chdir('..')\n    os.rmdir(n)\nprint(os.listdir('.'))";
    let script = format!("cd /w && umask 022 && python3 -c \"{deep}\"");
    same(&["null"], &ALL, &script);
    // What is made down there is in the tree itself (not in roam's skeleton).
    let make = "import os\nn = 'n' * 200\nfor i in range(25):\n    os.mkdir(n)\n    os.chdir(n)\nopen('f', 'w').write('deep')";
    let walk = "import os\nfor i in range(25): os.chdir('n' * 200)\nprint(open('f').read())";
    for via in ALL {
        let script = format!("cd /w && python3 -c \"{make}\"");
        let (o, b) = on(Backend::new("null"), via, &script);
        assert!(o.status.success(), "{via:?}: {}", stderr(&o));
        let found = Command::new("python3")
            .args(["-c", walk])
            .current_dir(b.backend(""))
            .output()
            .unwrap();
        assert_eq!(stdout(&found), "deep\n", "{via:?}: {}", stderr(&found));
    }
}
