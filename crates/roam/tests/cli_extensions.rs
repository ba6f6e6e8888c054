//! The example extensions on a fresh install: `scripts/install-extensions.sh` builds them
//! and installs them into a fresh `$XDG_CONFIG_HOME` (and `HOME`, no `ROAM_EXT_DIR`, no
//! configuration file), where the real `roam` binary finds them — `photos.zip#/` is a
//! directory and `roam find --ext id3` finds a song on nginx — and without them a search
//! says how to get them.

mod common;

use std::path::Path;
use std::process::{Command, Output};

use common::{stderr, stdout};
use roam_testkit::archive::{self, Item};
use roam_testkit::{write_file, Scratch, Server};

/// `roam ARGS` as a user with only `home` and `config` of their own.
fn roam(home: &Path, config: &Path, cache: &Path, args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_roam"))
        .args(args)
        .env_clear()
        .env("PATH", std::env::var_os("PATH").unwrap())
        .env("HOME", home)
        .env("XDG_CONFIG_HOME", config)
        .env("XDG_CACHE_HOME", cache)
        .output()
        .expect("running roam")
}

#[test]
fn examples_installed_by_the_script_work_from_a_fresh_home() {
    let s = Scratch::new("fresh-ext");
    let www = s.join("www");
    roam_testkit::mkdir(&www);
    archive::write(
        &www.join("photos.zip"),
        "zip",
        &[Item::File("a.txt", b"alpha\n"), Item::Dir("sub")],
    );
    write_file(
        &www.join("music/song.mp3"),
        &roam_testkit::mp3::tagged("Airbag", "1997", 512, &[0; 4096]),
        0o644,
    );
    write_file(
        &www.join("music/other.mp3"),
        &roam_testkit::mp3::tagged("Lucky", "1997", 512, &[0; 4096]),
        0o644,
    );
    let server = Server::nginx(&www, &s.join("run"));
    let (home, config, cache) = (s.join("home"), s.join("config"), s.join("cache"));
    roam_testkit::mkdir(&home);
    let r = format!("/http/{}", server.authority());
    let find = [
        "find",
        &format!("{r}/music"),
        "--ext",
        "id3",
        "--where",
        "title=Airbag",
    ];

    // Nothing installed: a search says where it looked and how to get the examples.
    let o = roam(&home, &config, &cache, &find);
    assert_eq!(o.status.code(), Some(2), "{}", stderr(&o));
    let err = stderr(&o);
    assert!(
        err.contains(&format!("{}/roam/extensions/id3.wasm", config.display())),
        "{err}"
    );
    assert!(err.contains("scripts/install-extensions.sh"), "{err}");

    let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../scripts/install-extensions.sh");
    let o = Command::new(&script)
        .env("HOME", &home)
        .env("XDG_CONFIG_HOME", &config)
        .env_remove("ROAM_EXT_DIR")
        .output()
        .expect("running scripts/install-extensions.sh");
    assert!(o.status.success(), "{}", stderr(&o));
    for name in [
        "archive", "id3", "id3merge", "merge3", "rot13", "hotlist", "camera", "zlib", "seal",
        "stride",
    ] {
        let file = config.join(format!("roam/extensions/{name}.wasm"));
        assert!(file.is_file(), "{} missing", file.display());
    }

    let o = roam(&home, &config, &cache, &find);
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    assert_eq!(stdout(&o), format!("{r}/music/song.mp3\n"));

    let zip = format!("{r}/photos.zip#");
    let script = format!("ls {zip}/ && cat {zip}/a.txt");
    let o = roam(&home, &config, &cache, &["run", "--", "sh", "-c", &script]);
    assert!(o.status.success(), "{}", stderr(&o));
    assert_eq!(stdout(&o), "a.txt\nsub\nalpha\n");
}
