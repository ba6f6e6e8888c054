//! `roam find PATH --ext NAME --where FIELD=VALUE ...`: lists the files under PATH that a query
//! extension (Sprockets' transducer) says match. The extension asks for the byte ranges it
//! needs and only those are fetched, so searching remote MP3s by tag reads their tags, not
//! their audio. PATH is a roam name (`/http/host/dir`, a mount) or a local directory.

use std::path::PathBuf;
use std::sync::Arc;

use anyhow::{bail, Context, Result};
use roam_drivers::local::LocalDriver;
use roam_drivers::{Driver, Kind};
use roam_ext::{Extension, Limits, Technology};
use roam_vfs::{Node, Vfs};

use crate::config::Config;

/// What `roam find` was asked.
#[derive(clap::Args)]
pub struct FindArgs {
    /// The directory to search (recursively).
    path: String,
    /// The query extension, by name (NAME.wasm or libNAME.so in the extension directory).
    #[arg(long = "ext", value_name = "NAME")]
    ext: String,
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
}

/// Runs the search; exit status 0 if something matched, 1 if nothing did, 2 on errors.
pub fn run(vfs: &Vfs, config: &Config, args: FindArgs) -> Result<i32> {
    if args.tech == Technology::Native {
        bail!("native extensions are for benchmarks only: use wasm, pulley, fork or worker");
    }
    let dir = args.ext_dir.unwrap_or_else(|| config.extensions_dir());
    let ext = Extension::load(&dir, &args.ext, args.tech, Limits::default())?;
    let conditions = args
        .conditions
        .iter()
        .map(|c| c.split_once('=').map(|(k, v)| (k.to_owned(), v.to_owned())))
        .collect::<Option<Vec<_>>>()
        .context("--where takes FIELD=VALUE")?;
    let root = roam_vfs::path::normalize(&args.path);
    let (driver, path): (Arc<dyn Driver>, String) = match vfs.lookup(&root)? {
        Some(Node::Remote(r)) => (r.driver, r.path),
        Some(Node::SchemeRoot { .. }) => bail!("{root}: name a host to search"),
        None => (Arc::new(LocalDriver::new("/")), root.clone()),
    };
    let mut search = Search {
        ext: &ext,
        conditions: &conditions,
        driver: driver.as_ref(),
        matched: 0,
        errors: 0,
    };
    search.walk(&path, &root);
    Ok(if search.errors > 0 {
        2
    } else {
        i32::from(search.matched == 0)
    })
}

struct Search<'a> {
    ext: &'a Extension,
    conditions: &'a [(String, String)],
    driver: &'a dyn Driver,
    matched: usize,
    errors: usize,
}

impl Search<'_> {
    /// Visits the directory `path` (shown as `shown`), depth first, in name order.
    fn walk(&mut self, path: &str, shown: &str) {
        let mut entries = match self.driver.list(path) {
            Ok(listing) => listing.entries,
            Err(e) => return self.error(shown, &e),
        };
        entries.sort_by(|a, b| a.name.cmp(&b.name));
        for entry in entries {
            let (child, child_shown) = (join(path, &entry.name), join(shown, &entry.name));
            match entry.meta.kind {
                Kind::Dir => self.walk(&child, &child_shown),
                Kind::File => self.check(&child, &child_shown, entry.meta.size),
                Kind::Symlink | Kind::Fifo | Kind::Socket => {}
            }
        }
    }

    fn check(&mut self, path: &str, shown: &str, size: Option<u64>) {
        let size =
            match size.map_or_else(|| self.driver.stat(path).map(|m| m.size.unwrap_or(0)), Ok) {
                Ok(size) => size,
                Err(e) => return self.error(shown, &e),
            };
        let mut fetch = |_file: u8, off: u64, len: u32| {
            let mut buf = Vec::with_capacity(len as usize);
            self.driver
                .read_range(path, off, u64::from(len), &mut buf)
                .map_err(std::io::Error::other)?;
            Ok(buf)
        };
        let name = shown.rsplit('/').next().unwrap_or(shown);
        match roam_ext::query::matches(self.ext, name, self.conditions, size, &mut fetch) {
            Ok(true) => {
                self.matched += 1;
                println!("{shown}");
            }
            Ok(false) => {}
            Err(e) => self.error(shown, &e),
        }
    }

    fn error(&mut self, shown: &str, e: &dyn std::fmt::Display) {
        self.errors += 1;
        eprintln!("roam find: {shown}: {e}");
    }
}

fn join(dir: &str, name: &str) -> String {
    format!("{}/{name}", dir.trim_end_matches('/'))
}
