//! The write cases run for every writable backend, through either frontend: real programs
//! (sh, cp, mv, mkdir, touch, chmod, cc, make) change files at `/w`, and each case checks
//! the bytes that reached the backend. `write_path` runs them under `roam run`,
//! `fuse_suite` on `roam mount`.

use std::fs;
use std::process::Output;

use roam_testkit::{noise, write_file, Scratch};

use super::{stderr, stdout, Backend as Mount};

pub fn ok(o: &Output) -> String {
    assert!(o.status.success(), "failed ({:?}): {}", o.status, stderr(o));
    stdout(o)
}

/// Generates a module per case with one test per backend, through the frontend named (`Trap`,
/// `Fuse`); `links_modes_and_times` only where the backend keeps symlinks, modes and times
/// (WebDAV and FTP keep only some of them: their own tests say which).
#[allow(unused_macros)] // used by the test binaries of the write cases only
macro_rules! for_each_backend {
    ($frontend:ident) => {
        $crate::common::write_cases::for_each_backend!(
            $frontend,
            [in_place "file", cached "file+cache", dav "dav", chirp "chirp", ftp "ftp", sftp "sftp"],
            [
                round_trips_are_byte_exact,
                append_truncate_and_rename,
                directories_and_their_errors,
                concurrent_appenders_lose_nothing,
                forked_and_execed_writers_share_an_fd,
                andrew_like_copy_build_delete,
            ]
        );
        $crate::common::write_cases::for_each_backend!(
            $frontend,
            [in_place "file", cached "file+cache", chirp "chirp", sftp "sftp"],
            [links_modes_and_times]
        );
    };
    ($frontend:ident, $backends:tt, [$($case:ident),* $(,)?]) => {
        $($crate::common::write_cases::for_each_backend!(@case $frontend, $case, $backends);)*
    };
    (@case $frontend:ident, $case:ident, [$($module:ident $kind:literal),*]) => {
        mod $case {
            $(
                #[test]
                fn $module() {
                    use $crate::common::{write_cases, Backend, Frontend};
                    write_cases::$case(&Backend::new($kind).through(Frontend::$frontend));
                }
            )*
        }
    };
}
#[allow(unused_imports)]
pub(crate) use for_each_backend;

pub fn round_trips_are_byte_exact(m: &Mount) {
    let src = Scratch::new("src");
    let sizes = [0usize, 1, 4095, 4096, 4097, 1 << 20, 100 << 20];
    let mut script = String::new();
    for (i, &len) in sizes.iter().enumerate() {
        write_file(&src.join(&format!("f{i}")), &noise(len, i as u64), 0o644);
        script += &format!("cp {} /w/f{i} && ", src.join(&format!("f{i}")).display());
    }
    script += "echo copied";
    assert_eq!(ok(&m.sh(&script)), "copied\n");
    for (i, &len) in sizes.iter().enumerate() {
        let got = fs::read(m.backend(&format!("f{i}"))).unwrap();
        assert!(
            got == noise(len, i as u64),
            "f{i} ({len} bytes) differs on the backend"
        );
    }
    // And back through roam, in a fresh run.
    let check: Vec<String> = (0..sizes.len())
        .map(|i| format!("cmp {} /w/f{i}", src.join(&format!("f{i}")).display()))
        .collect();
    ok(&m.sh(&(check.join(" && ") + " && echo same")));
}

pub fn append_truncate_and_rename(m: &Mount) {
    let out = ok(&m.sh("echo one > /w/f && echo two >> /w/f && cat /w/f && truncate -s 5 /w/f && mv /w/f /w/g && cat /w/g && ls /w"));
    assert_eq!(out, "one\ntwo\none\ntg\n");
    assert_eq!(fs::read(m.backend("g")).unwrap(), b"one\nt");
    assert!(!m.backend("f").exists());
}

pub fn links_modes_and_times(m: &Mount) {
    let script = "mkdir /w/d && ln -s target /w/d/l && readlink /w/d/l \
                  && echo x > /w/d/f && chmod 640 /w/d/f && touch -d @1000000000 /w/d/f \
                  && stat -c '%a %Y %s' /w/d/f && ls /w/d && rm /w/d/l && ls /w/d";
    assert_eq!(ok(&m.sh(script)), "target\n640 1000000000 2\nf\nl\nf\n");
    let md = fs::metadata(m.backend("d/f")).unwrap();
    use std::os::unix::fs::{MetadataExt, PermissionsExt};
    assert_eq!(
        (md.permissions().mode() & 0o777, md.mtime(), md.len()),
        (0o640, 1_000_000_000, 2)
    );
    assert!(!m.backend("d/l").exists());
}

pub fn directories_and_their_errors(m: &Mount) {
    assert_eq!(
        ok(&m.sh("mkdir -p /w/d/e && rmdir /w/d/e && echo x > /w/d/f && ls /w/d")),
        "f\n"
    );
    assert!(!m.backend("d/e").exists() && m.backend("d/f").exists());
    let o = m.sh("mkdir /w/d; rmdir /w/d; rm /w/d; rmdir /w/nothere; echo done");
    let err = stderr(&o);
    assert!(
        err.contains("mkdir: cannot create directory ‘/w/d’: File exists"),
        "{err}"
    );
    assert!(
        err.contains("rmdir: failed to remove '/w/d': Directory not empty"),
        "{err}"
    );
    assert!(
        err.contains("rm: cannot remove '/w/d': Is a directory"),
        "{err}"
    );
    assert!(
        err.contains("rmdir: failed to remove '/w/nothere': No such file or directory"),
        "{err}"
    );
}

pub fn concurrent_appenders_lose_nothing(m: &Mount) {
    let script = "(for i in $(seq 200); do echo A$i; done >> /w/log) & \
                  (for i in $(seq 200); do echo B$i; done >> /w/log); wait; wc -l < /w/log";
    assert_eq!(ok(&m.sh(script)).trim(), "400");
    let text = fs::read_to_string(m.backend("log")).unwrap();
    for who in ["A", "B"] {
        let lines: Vec<&str> = text.lines().filter(|l| l.starts_with(who)).collect();
        let want: Vec<String> = (1..=200).map(|i| format!("{who}{i}")).collect();
        assert_eq!(lines, want, "{who}'s lines are all there, in order");
    }
}

pub fn forked_and_execed_writers_share_an_fd(m: &Mount) {
    let script = "exec 3>/w/f; echo parent1 >&3; (echo child >&3); sh -c 'echo exec >&3'; \
                  echo parent2 >&3; exec 3>&-; cat /w/f";
    assert_eq!(ok(&m.sh(script)), "parent1\nchild\nexec\nparent2\n");
    assert_eq!(
        fs::read_to_string(m.backend("f")).unwrap(),
        "parent1\nchild\nexec\nparent2\n"
    );
}

pub fn andrew_like_copy_build_delete(m: &Mount) {
    let src = Scratch::new("andrew");
    for i in 0..20 {
        write_file(
            &src.join(&format!("src/f{i}.c")),
            format!("int f{i}(void) {{ return {i}; }}\n").as_bytes(),
            0o644,
        );
    }
    let calls: String = (0..20).map(|i| format!("f{i}()+")).collect();
    let main = format!(
        "#include <stdio.h>\n{}\nint main(void) {{ printf(\"%d\\n\", {calls}0); return 0; }}\n",
        (0..20)
            .map(|i| format!("int f{i}(void);"))
            .collect::<String>()
    );
    write_file(&src.join("src/main.c"), main.as_bytes(), 0o644);
    write_file(
        &src.join("src/Makefile"),
        b"OBJS := $(patsubst %.c,%.o,$(wildcard *.c))\nsum: $(OBJS)\n\t$(CC) -o $@ $^\n",
        0o644,
    );
    let script = format!(
        "cp -r {} /w/src && ls /w/src | wc -l && cat /w/src/*.c | wc -l && make -s -j2 -C /w/src && /w/src/sum && rm -rf /w/src && ls /w",
        src.join("src").display()
    );
    assert_eq!(ok(&m.sh(&script)), "22\n23\n190\n");
    assert!(!m.backend("src").exists());
}
