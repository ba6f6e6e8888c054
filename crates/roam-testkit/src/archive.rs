//! Test archives written by Python's own `zipfile` and `tarfile` (independent writers, so the
//! archive extension is checked against real formats, not against itself): stored and
//! deflated zip members, GNU tar long names, symlinks, and hostile names on purpose.

use std::fmt::Write as _;
use std::path::Path;
use std::process::{Command, Stdio};

use crate::{required, Scratch};

/// One member to write. Names are written as given, so a test may ask for `../../x`.
pub enum Item<'a> {
    File(&'a str, &'a [u8]),
    /// A zip member compressed with deflate (a plain member in a tar).
    Deflated(&'a str, &'a [u8]),
    Dir(&'a str),
    Symlink(&'a str, &'a str),
}

const SCRIPT: &str = r#"
import json, sys, tarfile, zipfile, io
out, kind = sys.argv[1], sys.argv[2]
items = json.load(sys.stdin)
def data(i): return open(i["data"], "rb").read() if "data" in i else b""
if kind == "zip":
    with zipfile.ZipFile(out, "w") as z:
        for i in items:
            info = zipfile.ZipInfo(i["name"] + ("/" if i["kind"] == "dir" else ""), (2024, 5, 17, 12, 30, 0))
            info.external_attr = (0o40755 if i["kind"] == "dir" else 0o100640) << 16
            info.create_system = 3
            info.compress_type = zipfile.ZIP_DEFLATED if i["kind"] == "deflated" else zipfile.ZIP_STORED
            z.writestr(info, data(i))
else:
    with tarfile.open(out, "w", format=tarfile.GNU_FORMAT) as t:
        for i in items:
            info = tarfile.TarInfo(i["name"])
            info.mtime = 1715949000
            if i["kind"] == "dir":
                info.type, info.mode = tarfile.DIRTYPE, 0o755
                t.addfile(info)
            elif i["kind"] == "link":
                info.type, info.linkname = tarfile.SYMTYPE, i["target"]
                t.addfile(info)
            else:
                d = data(i)
                info.size, info.mode = len(d), 0o640
                t.addfile(info, io.BytesIO(d))
"#;

/// Writes a zip (`kind` "zip") or GNU tar ("tar") of `items` at `out`.
pub fn write(out: &Path, kind: &str, items: &[Item]) {
    let staging = Scratch::new("archive-items");
    let mut spec = String::from("[");
    for (n, item) in items.iter().enumerate() {
        let (name, kind, body, target) = match item {
            Item::File(name, d) => (name, "file", Some(d), ""),
            Item::Deflated(name, d) => (name, "deflated", Some(d), ""),
            Item::Dir(name) => (name, "dir", None, ""),
            Item::Symlink(name, t) => (name, "link", None, *t),
        };
        let _ = write!(
            spec,
            "{}{{\"name\":{},\"kind\":\"{kind}\",\"target\":{}",
            if n == 0 { "" } else { "," },
            quote(name),
            quote(target)
        );
        if let Some(body) = body {
            let path = staging.join(&n.to_string());
            std::fs::write(&path, body).unwrap();
            let _ = write!(spec, ",\"data\":{}", quote(&path.display().to_string()));
        }
        spec.push('}');
    }
    spec.push(']');
    let mut child = Command::new(required("python3", "python3"))
        .args(["-W", "ignore", "-c", SCRIPT])
        .arg(out)
        .arg(kind)
        .stdin(Stdio::piped())
        .spawn()
        .expect("running python3");
    std::io::Write::write_all(child.stdin.as_mut().unwrap(), spec.as_bytes()).unwrap();
    drop(child.stdin.take());
    assert!(
        child.wait().unwrap().success(),
        "python3 could not write {}",
        out.display()
    );
}

/// A JSON string of `s` (names here are ASCII; quotes and backslashes escaped).
fn quote(s: &str) -> String {
    format!("\"{}\"", s.replace('\\', "\\\\").replace('"', "\\\""))
}

/// Writes `evil.zip` and `evil.tar` into `dir`: members whose names climb out (`../`, an
/// absolute name, `a/../../`), a good one, and a name twice (`dup.txt`: `first`, `second`).
pub fn write_hostile(dir: &Path) {
    let evil = [
        Item::File("../../escaped.txt", b"out"),
        Item::File("/abs-escaped.txt", b"out"),
        Item::File("a/../../x-escaped.txt", b"out"),
        Item::File("ok.txt", b"fine"),
        Item::File("dup.txt", b"first"),
        Item::File("dup.txt", b"second"),
    ];
    write(&dir.join("evil.zip"), "zip", &evil);
    write(&dir.join("evil.tar"), "tar", &evil);
}
