//! The command line as a user meets it: completion scripts and man pages that name every
//! subcommand and flag `--help` shows, help that tells exit statuses, name forms, the
//! configuration file, environment variables and every mount scheme, and `roam config`
//! (effective values with their sources, units, the example file) — all through the real
//! `roam` binary.

mod common;

use std::collections::BTreeSet;
use std::process::Output;

use common::{stderr, stdout, Roam};
use roam_testkit::Scratch;

/// `roam ARGS` with a private cache and no configuration file; must succeed.
fn roam_ok(args: &[&str]) -> String {
    let o = run(&Roam::new(), args);
    assert!(o.status.success(), "roam {args:?}: {}", stderr(&o));
    stdout(&o)
}

fn run(roam: &Roam, args: &[&str]) -> Output {
    roam.command().args(args).output().expect("running roam")
}

/// What `--help` shows: each command path (`["cache", "stat"]`) with its flags (`--x`,
/// `-x`), walking every visible subcommand.
fn commands() -> Vec<(Vec<String>, BTreeSet<String>)> {
    let mut out = Vec::new();
    let mut todo = vec![Vec::<String>::new()];
    while let Some(path) = todo.pop() {
        let mut args: Vec<&str> = path.iter().map(String::as_str).collect();
        args.push("--help");
        let help = roam_ok(&args);
        let (subs, flags) = parse_help(&help);
        for sub in subs {
            let mut p = path.clone();
            p.push(sub);
            todo.push(p);
        }
        out.push((path, flags));
    }
    assert!(out.len() > 10, "too few commands found: {out:?}");
    out
}

/// The subcommands (`Commands:` section, without `help`) and flags (`Options:`) of one
/// help text.
fn parse_help(help: &str) -> (Vec<String>, BTreeSet<String>) {
    let mut subs = Vec::new();
    let mut flags = BTreeSet::new();
    let mut section = "";
    for line in help.lines() {
        if !line.starts_with(' ') {
            section = line.trim_end_matches(':');
            continue;
        }
        // Entries are indented by 2 (6 for a flag without a short form); wrapped text more.
        let indent = line.len() - line.trim_start().len();
        let first = line.split_whitespace().next().unwrap_or("");
        match section {
            "Commands" if indent == 2 && first != "help" => subs.push(first.to_owned()),
            "Options" if indent <= 6 && first.starts_with('-') => {
                for word in line.split_whitespace().take(2) {
                    let word = word.trim_end_matches(',').trim_end_matches("...");
                    let word = word.split(['=', '[', '<']).next().unwrap();
                    if word.starts_with('-') && word.len() > 1 {
                        flags.insert(word.to_owned());
                    }
                }
            }
            _ => {}
        }
    }
    (subs, flags)
}

#[test]
fn help_is_walked_completely() {
    let all = commands();
    let find = |path: &[&str]| {
        all.iter()
            .find(|(p, _)| p.iter().map(String::as_str).eq(path.iter().copied()))
            .unwrap_or_else(|| panic!("{path:?} not in --help: {all:?}"))
            .1
            .clone()
    };
    for flag in [
        "--verbose",
        "-v",
        "--cache-dir",
        "--cache-size",
        "--t-read",
        "--t-write",
    ] {
        assert!(find(&[]).contains(flag), "{flag}");
    }
    for flag in [
        "--nonempty",
        "--read-only",
        "--allow-other",
        "--foreground",
        "--cache-dir",
    ] {
        assert!(find(&["mount"]).contains(flag), "mount {flag}");
    }
    assert!(find(&["run"]).contains("-m"));
    find(&["cache", "clean"]);
    find(&["config", "example"]);
}

#[test]
fn completion_scripts_name_every_subcommand_and_flag() {
    let all = commands();
    for shell in ["bash", "zsh", "fish"] {
        let script = roam_ok(&["completions", shell]);
        for (path, flags) in &all {
            if let Some(sub) = path.last() {
                let named = match shell {
                    "fish" => script.contains(&format!("-a \"{sub}\"")),
                    "zsh" => script.contains(&format!("'{sub}:")),
                    _ => script.contains(&format!(",{sub})")),
                };
                assert!(named, "{shell}: no subcommand {path:?}");
            }
            for flag in flags {
                let named = match (shell, flag.strip_prefix("--")) {
                    ("fish", Some(long)) => script.contains(&format!("-l {long}")),
                    ("fish", None) => script.contains(&format!("-s {}", &flag[1..])),
                    _ => script.contains(flag.as_str()),
                };
                assert!(named, "{shell}: no {flag} of {path:?}");
            }
        }
    }
}

#[test]
fn man_pages_name_every_subcommand_and_flag() {
    let dir = Scratch::new("man");
    let out = dir.join("man1");
    roam_ok(&["man", out.to_str().unwrap()]);
    // roff writes `-` as `\-`.
    let page = |name: &str| {
        let p = out.join(format!("{name}.1"));
        std::fs::read_to_string(&p)
            .unwrap_or_else(|e| panic!("{}: {e}", p.display()))
            .replace("\\-", "-")
    };
    let top = page("roam");
    assert!(
        top.starts_with(".ie") || top.contains(".TH roam 1"),
        "{top}"
    );
    assert!(top.contains("Exit status"), "roam.1 tells exit statuses");
    for (path, flags) in commands() {
        let name = std::iter::once("roam".to_owned())
            .chain(path.iter().cloned())
            .collect::<Vec<_>>()
            .join("-");
        let text = page(&name);
        if let Some(sub) = path.last() {
            let parent = page(&name[..name.len() - sub.len() - 1]);
            assert!(
                parent.contains(sub.as_str()),
                "{name}: not in its parent's page"
            );
        }
        for flag in &flags {
            assert!(text.contains(flag.as_str()), "{name}.1: no {flag}");
        }
    }
    let stdout_page = roam_ok(&["man"]);
    assert!(stdout_page.contains(".TH roam 1"), "{stdout_page}");
}

#[test]
fn help_tells_exit_statuses_name_forms_config_and_environment() {
    let top = roam_ok(&["--help"]);
    for code in ["75", "126", "127"] {
        assert!(
            top.contains(&format!("  {code} ")),
            "--help: exit status {code}"
        );
    }
    let run = roam_ok(&["run", "--help"]);
    for form in [
        "/http/HOST[:PORT]/PATH",
        "/sftp/[USER@]HOST[:PORT]/PATH",
        "/s3/BUCKET/KEY",
        "/dav/",
        "/ftp/",
        "/chirp/",
        "http://HOST/PATH",
        "roam.toml",
        "ROAM_CONFIG",
        "ROAM_CACHE_DIR",
        "ROAM_EXT_DIR",
        "AWS_ACCESS_KEY_ID",
        "SSH_AUTH_SOCK",
    ] {
        assert!(run.contains(form), "run --help lacks {form}:\n{run}");
    }
}

/// `-m`'s help names every kind of mount roam accepts: the list is taken from roam's own
/// refusal of an unknown one, so a new scheme without help fails here.
#[test]
fn mount_help_lists_every_scheme() {
    let o = run(&Roam::new(), &["run", "-m", "/x=gopher://h/", "--", "true"]);
    assert_eq!(o.status.code(), Some(126), "{}", stderr(&o));
    let err = stderr(&o);
    let list = err
        .split_once("(use ")
        .and_then(|(_, l)| l.split_once(')'))
        .unwrap_or_else(|| panic!("no scheme list in: {err}"))
        .0
        .replace(" or ", ", ");
    let schemes: Vec<&str> = list
        .split(", ")
        .map(|s| s.trim_end_matches("URL").trim_end_matches("NAME:"))
        .filter(|s| !s.starts_with("an absolute"))
        .collect();
    assert!(schemes.len() >= 12, "{schemes:?}");
    for cmd in [
        &["run", "--help"][..],
        &["mount", "--help"],
        &["attach", "--help"],
    ] {
        let help = roam_ok(cmd).replace('\n', " ");
        for s in &schemes {
            assert!(help.contains(s), "{cmd:?} lacks {s}");
        }
    }
}

/// A `roam.toml` in a scratch directory; the [`Roam`] reading it.
fn with_config(text: &str) -> (Scratch, Roam) {
    let dir = Scratch::new("config");
    let file = dir.join("roam.toml");
    std::fs::write(&file, text).unwrap();
    let roam = Roam::new().env("ROAM_CONFIG", &file);
    (dir, roam)
}

/// The value and the source `roam config` gives `key`.
fn setting(out: &str, key: &str) -> (String, String) {
    let line = out
        .lines()
        .find(|l| l.starts_with(&format!("{key} = ")))
        .unwrap_or_else(|| panic!("no {key} in:\n{out}"));
    let (kv, from) = line.split_once("  # ").expect("a source");
    let value = kv.split_once(" = ").unwrap().1.trim();
    (value.trim_matches('"').to_owned(), from.to_owned())
}

#[test]
fn config_shows_each_value_and_where_it_came_from() {
    let (dir, roam) = with_config(
        "[cache]\nmax_size = \"512M\"\nt_read = \"5m\"\n[http]\nread_timeout = \"1m30s\"\n\
         [mounts]\n\"/p\" = \"sftp://me:hunter2@127.0.0.1/x\"\n",
    );
    let file = dir.join("roam.toml");
    let cache = dir.join("flag-cache");
    let o = run(
        &roam,
        &[
            "--t-write",
            "30s",
            "--cache-dir",
            cache.to_str().unwrap(),
            "config",
        ],
    );
    assert!(o.status.success(), "{}", stderr(&o));
    let out = stdout(&o);
    let from_file = format!("file {}", file.display());
    assert_eq!(
        setting(&out, "cache.max_size"),
        ("512M".into(), from_file.clone())
    );
    assert_eq!(
        setting(&out, "cache.t_read"),
        ("5m".into(), from_file.clone())
    );
    assert_eq!(
        setting(&out, "http.read_timeout"),
        ("1m30s".into(), from_file.clone())
    );
    assert_eq!(setting(&out, "http.connect_timeout").1, "default");
    assert_eq!(
        setting(&out, "cache.t_write"),
        ("30s".into(), "flag --t-write".into())
    );
    let dir_setting = setting(&out, "cache.dir");
    assert_eq!(
        dir_setting,
        (cache.display().to_string(), "flag --cache-dir".into())
    );
    assert!(!out.contains("hunter2"), "a password was printed:\n{out}");
    assert!(out.contains("sftp://me:***@127.0.0.1/x"), "{out}");

    // Without the flag the environment (the fixture's ROAM_CACHE_DIR) wins over defaults.
    let (_dir, roam) = with_config("");
    let out = stdout(&run(&roam, &["config"]));
    assert_eq!(setting(&out, "cache.dir").1, "env ROAM_CACHE_DIR");
    assert_eq!(
        setting(&out, "cache.max_size"),
        ("10G".into(), "default".into())
    );
    assert_eq!(
        setting(&out, "cache.settle"),
        ("10m".into(), "default".into())
    );
}

/// The limit a config sets in units is the one the cache works with (`roam status`).
#[test]
fn sizes_with_units_reach_the_cache() {
    let (_dir, roam) = with_config("[cache]\nmax_size = \"512M\"\n");
    let status = stdout(&run(&roam, &["status"]));
    assert!(status.contains("of 512 MiB"), "{status}");
    let (_dir, roam) = with_config("[cache]\nmax_size = \"512M\"\n");
    let status = stdout(&run(&roam, &["--cache-size", "1G", "status"]));
    assert!(status.contains("of 1024 MiB"), "the flag wins: {status}");
}

#[test]
fn bad_units_are_refused_with_the_value_named() {
    let (_dir, roam) = with_config("[cache]\nmax_size = \"10Q\"\n");
    let o = run(&roam, &["config"]);
    assert_eq!(o.status.code(), Some(126));
    assert!(stderr(&o).contains("\"10Q\""), "{}", stderr(&o));
    let (_dir, roam) = with_config("[http]\nread_timeout = \"soon\"\n");
    let o = run(&roam, &["status"]);
    assert_eq!(o.status.code(), Some(126));
    assert!(stderr(&o).contains("\"soon\""), "{}", stderr(&o));
    let o = run(&Roam::new(), &["--t-read", "5x", "config"]);
    assert_eq!(o.status.code(), Some(2), "a usage error: {}", stderr(&o));
}

/// `roam config example` is a working file, and `roam config`'s output reads back to the
/// same settings.
#[test]
fn the_example_and_the_shown_config_parse_back() {
    let example = roam_ok(&["config", "example"]);
    assert!(example.contains("[cache]") && example.contains("[mounts]"));
    let (dir, roam) = with_config(&example);
    let o = run(&roam, &["config"]);
    assert!(
        o.status.success(),
        "the example does not parse: {}",
        stderr(&o)
    );
    let shown = stdout(&o);
    assert_eq!(setting(&shown, "cache.max_size").0, "10G");
    assert!(setting(&shown, "cache.t_read").1.starts_with("file "));
    assert_eq!(setting(&shown, "t_read.\"/s3/archive/**\"").0, "10%");

    std::fs::write(dir.join("shown.toml"), &shown).unwrap();
    let roam = roam.env("ROAM_CONFIG", dir.join("shown.toml"));
    let again = stdout(&run(&roam, &["config"]));
    let values = |t: &str| -> Vec<String> {
        t.lines()
            .filter(|l| !l.starts_with('#'))
            .map(|l| {
                l.split_once("  # ")
                    .map_or(l, |(kv, _)| kv)
                    .trim()
                    .to_owned()
            })
            .collect()
    };
    assert_eq!(values(&shown), values(&again));
}

/// `bench/plot` still finds each table it draws in docs/BENCHMARKS.md (an edit that moves
/// or renames one fails here, not when someone redraws the charts).
#[test]
fn bench_plot_finds_every_table_it_draws() {
    let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../..");
    let o = std::process::Command::new("python3")
        .arg(root.join("bench/plot"))
        .arg("--check")
        .output()
        .expect("running python3");
    assert!(o.status.success(), "{}", stderr(&o));
    let names: Vec<String> = stdout(&o)
        .lines()
        .map(|l| l.split(':').next().unwrap().to_owned())
        .collect();
    assert!(names.len() >= 5, "{names:?}");
    for name in names {
        for ext in ["png", "svg"] {
            let chart = root.join(format!("docs/plots/{name}.{ext}"));
            assert!(chart.is_file(), "{} not committed", chart.display());
        }
    }
}
