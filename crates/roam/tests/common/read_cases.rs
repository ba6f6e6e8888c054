//! The read suite over every driver, through either frontend: the fixture tree of the HTTP
//! suite (nested dirs, a 10 MB binary, a C project, a Python package, shell scripts) served
//! by WebDAV, FTP, SFTP, Chirp and S3 servers, and the same real programs run on it at `/w`
//! as on the local copy, with the same output.

use std::process::Command;

use super::{make_tree, stderr, Backend, Frontend};

/// Scripts run with `{}` standing for the tree, locally and at `/w` under roam.
const SCRIPTS: &[&str] = &[
    "cat {}/hello.txt '{}/dir/a b.txt'",
    "md5sum {}/big.bin {}/hello.txt",
    "head -c 100000 {}/big.bin | od -An -tx1 | tail -3",
    "wc -l {}/hello.txt {}/dir/sub/deep.txt",
    "grep -r needle {}/dir {}/hello.txt | sort",
    "ls {} {}/dir {}/dir/sub {}/empty",
    "ls -l {}/dir/sub | grep '^-' | awk '{print $5, $9}'",
    "find {} -name '*.c' | sort",
    "cd {}/dir/sub && pwd && cat deep.txt ../'a b.txt' && ls ../../proj",
    "cc -o /tmp/roam-read-$$ {}/proj/main.c {}/proj/util.c && /tmp/roam-read-$$; rm -f /tmp/roam-read-$$",
    "python3 -B {}/py/app.py",
    "sh {}/script.sh one two; {}/script.sh three",
];

pub fn read_suite(kind: &str, frontend: Frontend) {
    let backend = Backend::serving(kind, make_tree).through(frontend);
    let local = backend.backend("");
    let local = local.to_str().unwrap().trim_end_matches('/');
    let mut differences = Vec::new();
    for script in SCRIPTS {
        let native = Command::new("sh")
            .args(["-c", &script.replace("{}", local)])
            .output()
            .unwrap();
        let roamed = backend.sh(&script.replace("{}", "/w"));
        let (want, got) = (
            String::from_utf8_lossy(&native.stdout).replace(local, "{}"),
            String::from_utf8_lossy(&roamed.stdout).replace("/w", "{}"),
        );
        if want.is_empty() || want != got || !roamed.status.success() {
            differences.push(format!(
                "{script}\n  native: {want:?}\n  roam:   {got:?}\n  stderr: {}",
                stderr(&roamed)
            ));
        }
    }
    // A missing file is ENOENT, a directory read as a file EISDIR, through every driver.
    let o = backend.sh("cat /w/missing.txt; cat /w/dir");
    let err = stderr(&o);
    for want in [
        "cat: /w/missing.txt: No such file or directory",
        "cat: /w/dir: Is a directory",
    ] {
        if !err.contains(want) {
            differences.push(format!("expected {want:?} in: {err}"));
        }
    }
    assert!(
        differences.is_empty(),
        "{kind}: {} difference(s):\n{}",
        differences.len(),
        differences.join("\n")
    );
}
