//! `roam find PATH --ext NAME --where FIELD=VALUE ...`: lists the files under PATH that a query
//! extension (Sprockets' transducer) says match. The extension asks for the byte ranges it
//! needs and only those are fetched, so searching remote MP3s by tag reads their tags, not
//! their audio. PATH is a roam name (`/http/host/dir`, a mount) or a local directory.
//! `--hash md5|sha256` prints each file found with its fingerprint (as `md5sum` does),
//! computed by the digest extension from the bytes read for it.
//!
//! `--watch` keeps the query live (Sprockets' persistent query): the tree is searched again
//! every T_read, and each change to the set of results is printed as it is seen — `+ NAME`
//! (a file that now matches: new, or changed to match), `- NAME` (gone, or changed not to
//! match), `~ NAME` (changed and still matching). A file is identified by the version its
//! listing shows (size, mtime, ETag): the extension runs again only for files whose version
//! changed, so an unchanged tree costs listings alone. It ends on SIGINT or SIGTERM, exit 0.

use roam_drivers::secrets::scrub;
use std::collections::{BTreeSet, HashMap};
use std::io::Write;
use std::path::PathBuf;
use std::time::{Duration, SystemTime};

use anyhow::{bail, Context, Result};
use roam_ext::{Extension, Limits, Technology};
use roam_vfs::{Kind, Node, Pinned, Vfs};

use crate::config::Config;

/// What `roam find` was asked.
#[derive(clap::Args)]
pub struct FindArgs {
    /// The directory to search (recursively).
    path: String,
    /// The query extension, by name (NAME.wasm or libNAME.so in the extension directory).
    #[arg(long = "ext", value_name = "NAME", required_unless_present = "hash")]
    ext: Option<String>,
    /// FIELD=VALUE conditions the extension checks (all must hold).
    #[arg(long = "where", value_name = "FIELD=VALUE")]
    conditions: Vec<String>,
    /// How to run the extension: wasm, pulley, fork or worker.
    #[arg(long, default_value = "wasm")]
    tech: Technology,
    /// Where extensions are: else $ROAM_EXT_DIR, else `[extensions] dir` of roam.toml, else
    /// $XDG_CONFIG_HOME/roam/extensions.
    #[arg(long, value_name = "DIR")]
    ext_dir: Option<PathBuf>,
    /// Print each file found with its fingerprint (`HASH  NAME`, as md5sum and sha256sum).
    #[arg(long, value_enum)]
    hash: Option<Hash>,
    /// Keep searching every T_read and print each change of the results: `+ NAME`,
    /// `- NAME`, `~ NAME` (changed, still matching); ends on SIGINT or SIGTERM (exit 0).
    #[arg(long, requires = "ext", conflicts_with = "hash")]
    watch: bool,
}

impl FindArgs {
    /// Whether the search stays live (`--watch`): the caller blocks the signals that end
    /// it before any thread starts.
    pub fn watching(&self) -> bool {
        self.watch
    }
}

/// Shortest time between two searches of `--watch` (T_read may be 0).
const LEAST_ROUND: Duration = Duration::from_millis(100);

/// A fingerprint `roam find` can print.
#[derive(Clone, Copy, clap::ValueEnum)]
enum Hash {
    Md5,
    Sha256,
}

/// Runs the search; exit status 0 if something matched, 1 if nothing did, 2 on errors
/// (a missing extension, a bad condition, a name that cannot be searched, or a file that
/// could not be read), as `grep` and `find` say. With `--watch`, `signals` (blocked) end
/// it, with status 0.
pub fn run(
    vfs: &Vfs,
    config: &Config,
    args: FindArgs,
    signals: Option<&libc::sigset_t>,
) -> Result<i32> {
    match search(vfs, config, args, signals) {
        Ok(code) => Ok(code),
        Err(e) => {
            eprintln!("roam find: {}", scrub(&format!("{e:#}")));
            Ok(2)
        }
    }
}

fn search(
    vfs: &Vfs,
    config: &Config,
    args: FindArgs,
    signals: Option<&libc::sigset_t>,
) -> Result<i32> {
    if args.tech == Technology::Native {
        bail!("native extensions are for benchmarks only: use wasm, pulley, fork or worker");
    }
    let dir = args.ext_dir.unwrap_or_else(|| config.extensions_dir());
    let load = |name: &str| config.load_extension(&dir, name, args.tech, Limits::default());
    let ext = args.ext.as_deref().map(load).transpose()?;
    let digest = args.hash.map(|_| load("digest")).transpose()?;
    let conditions = args
        .conditions
        .iter()
        .map(|c| c.split_once('=').map(|(k, v)| (k.to_owned(), v.to_owned())))
        .collect::<Option<Vec<_>>>()
        .context("--where takes FIELD=VALUE")?;
    let root = roam_vfs::path::normalize(&args.path);
    if let Some(Node::SchemeRoot { .. }) = vfs.lookup(&root)? {
        bail!("{root}: name a host to search");
    }
    let none = HashMap::new();
    let mut search = Search {
        vfs,
        ext: ext.as_ref(),
        digest: digest.as_ref().zip(args.hash),
        conditions: &conditions,
        before: &none,
        now: HashMap::new(),
        quiet: signals.is_some(),
        matched: 0,
        errors: 0,
    };
    if let Some(signals) = signals {
        let every = vfs.t_read(&root, None).max(LEAST_ROUND);
        return watch(search, &root, every, signals);
    }
    search.walk(&root);
    Ok(if search.errors > 0 {
        2
    } else {
        i32::from(search.matched == 0)
    })
}

/// `--watch`: searches `root` every `every` and prints what changed since the round
/// before (the first round: every file that matches, as `+`), until a signal of `signals`.
fn watch(first: Search, root: &str, every: Duration, signals: &libc::sigset_t) -> Result<i32> {
    let mut seen = HashMap::new();
    loop {
        let mut round = Search {
            before: &seen,
            now: HashMap::new(),
            matched: 0,
            errors: 0,
            ..first
        };
        round.walk(root);
        let now = round.now;
        let mut out = std::io::stdout().lock();
        for line in changes(&seen, &now) {
            writeln!(out, "{line}")?;
        }
        out.flush()?;
        seen = now;
        if crate::mount::wait_signal(signals, every) {
            return Ok(0);
        }
    }
}

/// What a file was when last searched: its version and whether the query matched it.
#[derive(Clone, PartialEq, Debug)]
struct Seen {
    version: Version,
    matched: bool,
}

/// A file's version as its listing shows it: size, mtime and validator (an ETag).
type Version = (u64, Option<SystemTime>, Option<String>);

/// The lines `--watch` prints for the change from `before` to `now`, in name order.
fn changes(before: &HashMap<String, Seen>, now: &HashMap<String, Seen>) -> Vec<String> {
    let names: BTreeSet<&String> = before.keys().chain(now.keys()).collect();
    let matching =
        |m: &HashMap<String, Seen>, name: &str| m.get(name).filter(|s| s.matched).cloned();
    names
        .into_iter()
        .filter_map(|name| match (matching(before, name), matching(now, name)) {
            (None, Some(_)) => Some(format!("+ {name}")),
            (Some(_), None) => Some(format!("- {name}")),
            (Some(was), Some(is)) if was.version != is.version => Some(format!("~ {name}")),
            _ => None,
        })
        .collect()
}

/// A search over names as programs see them: roam names go through the vfs (its mounts,
/// listings, T_read and copies, ranges read as the core decides), local names are read
/// natively.
struct Search<'a> {
    vfs: &'a Vfs,
    ext: Option<&'a Extension>,
    /// The digest extension and the fingerprint to print, for `--hash`.
    digest: Option<(&'a Extension, Hash)>,
    conditions: &'a [(String, String)],
    /// The files of the round before (`--watch`): one whose version is the same is not
    /// read again.
    before: &'a HashMap<String, Seen>,
    /// The files of this round.
    now: HashMap<String, Seen>,
    /// Prints nothing per file (`--watch` prints the changes of a round).
    quiet: bool,
    matched: usize,
    errors: usize,
}

impl Search<'_> {
    /// Visits the directory `dir`, depth first, in name order.
    fn walk(&mut self, dir: &str) {
        let names = match self.names_in(dir) {
            Ok(names) => names,
            Err(e) => return self.error(dir, &e),
        };
        for name in names {
            let child = join(dir, &name);
            match self.version(&child) {
                Ok((Kind::Dir, _)) => self.walk(&child),
                Ok((Kind::File, version)) => self.check(&child, version),
                Ok(_) => {}
                Err(e) => self.error(&child, &e),
            }
        }
    }

    /// The names in the directory `dir`, sorted (a local one shows the mounts inside it).
    fn names_in(&self, dir: &str) -> Result<Vec<String>> {
        let real = match self.vfs.lookup(dir)? {
            Some(node) => self.vfs.open_path(&node)?,
            None => PathBuf::from(dir),
        };
        let mut names = std::fs::read_dir(&real)?
            .map(|e| Ok(e?.file_name().to_string_lossy().into_owned()))
            .collect::<Result<Vec<_>>>()?;
        names.extend(self.vfs.mount_names_under(dir).into_iter().map(|(n, _)| n));
        names.sort();
        names.dedup();
        Ok(names)
    }

    /// What `name` is (not following a final link) and its version.
    fn version(&self, name: &str) -> Result<(Kind, Version)> {
        Ok(match self.vfs.lookup(name)? {
            Some(node) => {
                let meta = self.vfs.stat(&node)?;
                (meta.kind, (meta.size.unwrap_or(0), meta.mtime, meta.etag))
            }
            None => {
                let md = std::fs::symlink_metadata(name)?;
                let kind = match md.file_type() {
                    t if t.is_dir() => Kind::Dir,
                    t if t.is_file() => Kind::File,
                    _ => Kind::Symlink, // passed over, as every name no file or directory
                };
                (kind, (md.len(), md.modified().ok(), None))
            }
        })
    }

    fn check(&mut self, name: &str, version: Version) {
        if let Some(seen) = self.before.get(name).filter(|s| s.version == version) {
            self.now.insert(name.to_owned(), seen.clone());
            return;
        }
        let size = version.0;
        let node = match self.vfs.lookup(name) {
            Ok(node) => node,
            Err(e) => return self.error(name, &e),
        };
        let vfs = self.vfs;
        let pinned = Pinned::default();
        let mut fetch = |_file: u8, off: u64, len: u32| match &node {
            Some(node) => vfs
                .read_range(node, off, u64::from(len), &pinned)
                .map_err(std::io::Error::other),
            None => read_local(name, off, len),
        };
        let base = name.rsplit('/').next().unwrap_or(name);
        let matched = match self.ext {
            Some(ext) => roam_ext::query::matches(ext, base, self.conditions, size, &mut fetch),
            None => Ok(true),
        };
        match matched {
            Ok(matched) => {
                self.now.insert(name.to_owned(), Seen { version, matched });
                if matched {
                    self.found(name, node.as_ref(), size);
                }
            }
            Err(e) => self.error(name, &e),
        }
    }

    /// Prints a file found: its name, or with `--hash` its fingerprint and name, computed
    /// from the bytes the vfs reads for it (its copy when current, else ranges).
    fn found(&mut self, name: &str, node: Option<&Node>, size: u64) {
        let Some((digest, hash)) = self.digest else {
            self.matched += 1;
            if !self.quiet {
                println!("{name}");
            }
            return;
        };
        let vfs = self.vfs;
        let pinned = Pinned::default();
        let mut read = |off, len| match node {
            Some(node) => vfs
                .read_range(node, off, len, &pinned)
                .map_err(std::io::Error::other),
            None => read_local(name, off, len),
        };
        let sums = roam_ext::digest::digest(digest, size, &mut read);
        match sums {
            Ok(s) => {
                self.matched += 1;
                let sum = match hash {
                    Hash::Md5 => &s.md5[..],
                    Hash::Sha256 => &s.sha256[..],
                };
                println!("{}  {name}", roam_ext::digest::hex(sum));
            }
            Err(e) => self.error(name, &e),
        }
    }

    fn error(&mut self, name: &str, e: &dyn std::fmt::Display) {
        self.errors += 1;
        eprintln!("roam find: {}", scrub(&format!("{name}: {e}")));
        // What could not be searched now stays as last seen: a server that did not
        // answer is no file gone.
        let under = format!("{}/", name.trim_end_matches('/'));
        for (n, seen) in self.before {
            if n == name || n.starts_with(&under) {
                self.now.insert(n.clone(), seen.clone());
            }
        }
    }
}

/// `len` bytes of the local file `name` from `off` (fewer at its end).
fn read_local(name: &str, off: u64, len: impl Into<u64>) -> std::io::Result<Vec<u8>> {
    use std::io::{Read, Seek, SeekFrom};
    let mut f = std::fs::File::open(name)?;
    f.seek(SeekFrom::Start(off))?;
    let len = len.into();
    let mut buf = Vec::with_capacity(len.min(16 << 20) as usize);
    f.take(len).read_to_end(&mut buf)?;
    Ok(buf)
}

fn join(dir: &str, name: &str) -> String {
    format!("{}/{name}", dir.trim_end_matches('/'))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn seen(files: &[(&str, u64, bool)]) -> HashMap<String, Seen> {
        files
            .iter()
            .map(|&(name, size, matched)| {
                let version = (size, None, None);
                (name.to_owned(), Seen { version, matched })
            })
            .collect()
    }

    #[test]
    fn changes_say_what_came_went_and_changed_among_the_matches() {
        let before = seen(&[
            ("/a", 1, true),
            ("/b", 1, true),
            ("/c", 1, true),
            ("/d", 1, false),
            ("/e", 1, true),
        ]);
        // a: unchanged; b: changed, still matches; c: gone; d: changed to match;
        // e: changed not to match; f: new, matching; g: new, not matching.
        let now = seen(&[
            ("/a", 1, true),
            ("/b", 2, true),
            ("/d", 2, true),
            ("/e", 2, false),
            ("/f", 1, true),
            ("/g", 1, false),
        ]);
        assert_eq!(
            changes(&before, &now),
            ["~ /b", "- /c", "+ /d", "- /e", "+ /f"]
        );
        assert!(changes(&now, &now).is_empty());
    }
}
