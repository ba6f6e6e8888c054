//! Persistent queries (Sprockets) as a mount: `query:NAME:FIELD=VALUE[,FIELD=VALUE...]@URL`
//! is the tree of `URL` narrowed to the files the query extension `NAME` says match (every
//! condition), with the directories that lead to them. A result is the source's file
//! itself: its bytes, ranges and version are the source's. The results follow the source:
//! roam-vfs lists a directory again once its listing is older than T_read, and each listing
//! here walks the source tree again (listings only, shared by the calls of one moment). The
//! extension runs again only for files whose listed version (size, mtime, ETag) changed.
//! Read-only (`EROFS`).

use std::collections::HashMap;
use std::io::Write;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant, SystemTime};

use roam_drivers::{
    Capabilities, DirEntry, Driver, Error, ErrorKind, Fetched, Kind, Listing, Meta, Pinned, Result,
    Validator,
};

use crate::lazy_ext::{LazyExtension, LoadExtension};
use crate::path::join;

/// How long one walk of the source answers for: the listings and stats of one `ls -R`.
const WALK_FRESH: Duration = Duration::from_millis(500);

/// A file's version as its listing shows it: size, mtime and validator.
type Version = (Option<u64>, Option<SystemTime>, Option<String>);

/// The results of one walk: every matching file and every directory leading to one.
#[derive(Default)]
struct Results {
    files: HashMap<String, Meta>,
    /// Directory → its entries among the results (the root always).
    dirs: HashMap<String, Vec<DirEntry>>,
}

/// The driver of a `query:` mount.
pub(crate) struct QueryDriver {
    lower: Arc<dyn Driver>,
    name: String,
    ext: LazyExtension,
    conditions: Vec<(String, String)>,
    /// Each file's version when the extension last ran on it, and its answer.
    seen: Mutex<HashMap<String, (Version, bool)>>,
    /// The last walk and when it was made.
    last: Mutex<Option<(Instant, Arc<Results>)>>,
}

impl std::fmt::Debug for QueryDriver {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "QueryDriver({})", self.name)
    }
}

/// A query mount's URL, taken apart.
#[derive(Debug, PartialEq, Eq)]
pub(crate) struct Query<'a> {
    /// The query extension.
    pub name: &'a str,
    /// FIELD=VALUE conditions, all of which must hold.
    pub conditions: Vec<(String, String)>,
    /// The source.
    pub url: &'a str,
}

/// Parses `NAME:FIELD=VALUE,...@URL`.
pub(crate) fn parse(spec: &str) -> std::result::Result<Query<'_>, String> {
    let form = "expected query:NAME:FIELD=VALUE,...@URL";
    let (query, url) = spec.split_once('@').ok_or(form)?;
    let (name, conditions) = query.split_once(':').ok_or(form)?;
    let conditions = conditions
        .split(',')
        .map(|c| match c.split_once('=') {
            Some((k, v)) if !k.is_empty() => Ok((k.to_owned(), v.to_owned())),
            _ => Err(format!("{c:?}: expected FIELD=VALUE")),
        })
        .collect::<std::result::Result<Vec<_>, _>>()?;
    if name.is_empty() || url.is_empty() {
        return Err(form.into());
    }
    Ok(Query {
        name,
        conditions,
        url,
    })
}

impl QueryDriver {
    pub(crate) fn new(
        lower: Arc<dyn Driver>,
        name: &str,
        load: LoadExtension,
        conditions: Vec<(String, String)>,
    ) -> QueryDriver {
        QueryDriver {
            lower,
            name: name.to_owned(),
            ext: LazyExtension::new(load),
            conditions,
            seen: Mutex::new(HashMap::new()),
            last: Mutex::new(None),
        }
    }

    /// The results as the source stands now (a walk of at most [`WALK_FRESH`] ago).
    fn results(&self) -> Result<Arc<Results>> {
        let mut last = self.last.lock().unwrap();
        if let Some((at, results)) = last.as_ref() {
            if at.elapsed() < WALK_FRESH {
                return Ok(results.clone());
            }
        }
        let mut results = Results::default();
        self.walk("/", &mut results)?;
        results.dirs.entry("/".into()).or_default();
        let results = Arc::new(results);
        *last = Some((Instant::now(), results.clone()));
        Ok(results)
    }

    /// Adds the matches under the source directory `dir`; whether there was one.
    fn walk(&self, dir: &str, results: &mut Results) -> Result<bool> {
        let mut entries = Vec::new();
        for entry in self.lower.list(dir)?.entries {
            let path = join(dir, &entry.name);
            let found = match entry.meta.kind {
                Kind::Dir => self.walk(&path, results)?,
                Kind::File => self.matches(&path, &entry.meta),
                _ => false,
            };
            if found {
                if entry.meta.kind == Kind::File {
                    results.files.insert(path, entry.meta.clone());
                }
                entries.push(entry);
            }
        }
        let found = !entries.is_empty();
        if found {
            results.dirs.insert(dir.to_owned(), entries);
        }
        Ok(found)
    }

    /// Whether the file `path` (as `meta` lists it) matches: asked of the extension only
    /// when its version changed. A file the extension cannot read is no result (said once
    /// per version in the log).
    fn matches(&self, path: &str, meta: &Meta) -> bool {
        let version = (meta.size, meta.mtime, meta.etag.clone());
        if let Some((v, matched)) = self.seen.lock().unwrap().get(path) {
            if *v == version {
                return *matched;
            }
        }
        let matched = self.ask(path, meta.size.unwrap_or(0)).unwrap_or_else(|e| {
            tracing::warn!("{}: {e}", self.lower.describe(path));
            false
        });
        self.seen
            .lock()
            .unwrap()
            .insert(path.to_owned(), (version, matched));
        matched
    }

    fn ask(&self, path: &str, size: u64) -> std::result::Result<bool, String> {
        let ext = self.ext.get()?;
        let base = path.rsplit('/').next().unwrap_or(path);
        let mut fetch = |_file: u8, off: u64, len: u32| {
            let mut buf = Vec::new();
            self.lower
                .read_range(path, off, u64::from(len), None, &mut buf)
                .map(|_| buf)
                .map_err(std::io::Error::other)
        };
        roam_ext::query::matches(&ext, base, &self.conditions, size, &mut fetch)
            .map_err(|e| e.to_string())
    }

    fn absent(&self, path: &str) -> Error {
        Error::new(
            ErrorKind::NotFound,
            format!(
                "{}: no result of the query {}",
                self.describe(path),
                self.name
            ),
        )
    }

    /// `path` if it is a result file.
    fn result(&self, path: &str) -> Result<Meta> {
        self.results()?
            .files
            .get(path)
            .cloned()
            .ok_or_else(|| self.absent(path))
    }
}

impl Driver for QueryDriver {
    fn describe(&self, path: &str) -> String {
        format!("query:{}@{}", self.name, self.lower.describe(path))
    }

    fn stat(&self, path: &str) -> Result<Meta> {
        let results = self.results()?;
        if let Some(meta) = results.files.get(path) {
            return Ok(meta.clone());
        }
        match results.dirs.contains_key(path) {
            true => self.lower.stat(path),
            false => Err(self.absent(path)),
        }
    }

    fn list(&self, path: &str) -> Result<Listing> {
        let results = self.results()?;
        let entries = results
            .dirs
            .get(path)
            .ok_or_else(|| self.absent(path))?
            .clone();
        Ok(Listing {
            entries,
            complete: true,
            stands_alone: true,
        })
    }

    fn fetch(
        &self,
        path: &str,
        dest: &mut dyn Write,
        validator: Option<&Validator>,
    ) -> Result<Fetched> {
        self.result(path)?;
        self.lower.fetch(path, dest, validator)
    }

    fn read_range(
        &self,
        path: &str,
        offset: u64,
        len: u64,
        of: Option<&Pinned>,
        dest: &mut dyn Write,
    ) -> Result<u64> {
        self.result(path)?;
        self.lower.read_range(path, offset, len, of, dest)
    }

    /// Read-only; ranges as the source reads them.
    fn capabilities(&self) -> Capabilities {
        let lower = self.lower.capabilities();
        Capabilities {
            read_ranges: lower.read_ranges,
            stream_large_files: lower.stream_large_files,
            ..Capabilities::READ_ONLY
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_query_names_its_extension_conditions_and_source() {
        let q = parse("id3:artist=Radiohead,album=OK Computer@dav://u@h/m").unwrap();
        let conditions = vec![
            ("artist".into(), "Radiohead".into()),
            ("album".into(), "OK Computer".into()),
        ];
        let want = Query {
            name: "id3",
            conditions,
            url: "dav://u@h/m",
        };
        assert_eq!(q, want);
        assert!(parse("id3@dav://h").is_err());
        assert!(parse("id3:artist@dav://h").is_err());
        assert!(parse("id3:artist=x").is_err());
    }
}
