//! The mount table: which names belong to roam and which driver serves them.
//!
//! Two kinds of mounts, looked up in this order (Sprite's prefix table):
//! - explicit mounts (`-m /proj=http://h/dir`, `roam.toml`), by longest prefix; they may
//!   shadow local paths;
//! - implicit mounts `/SCHEME/HOST[:PORT]/PATH`, one driver per host, made on first use.
//!
//! URL schemes and their drivers: `http`/`https` (read-only web servers), `dav`/`davs`
//! (WebDAV over http/https), `ftp`/`ftps` (login from the URL, netrc, or anonymous;
//! `ftps` is explicit FTPS, verified as HTTPS is; http and dav take netrc's login too),
//! `chirp`,
//! `s3` (`s3://bucket/prefix`; endpoint and credentials the way the AWS tools find them, or
//! a mount's own profile, region and endpoint: `s3://bucket/prefix?profile=P&region=R`),
//! `sftp` (OpenSSH's config, known_hosts, keys and agent),
//! `file` (a local directory in place) and `file+cache` (a local directory through roam's
//! cache, like a remote one); `mem:` (an empty in-memory file system, one per mount), and the
//! layers over any other mount URL: `null:URL` (unchanged; `null:/dir` serves a local
//! directory in place), `rot13:URL` (names and contents rotated), `zlib:URL` (contents
//! compressed) and `seal:URL` (contents encrypted and authenticated, key from
//! `ROAM_SEAL_KEY_FILE`), in seekable frames; `ext:NAME:URL` stacks the
//! layer extension `NAME` (from the extension directory, run as wasm) the same way, and
//! `codec:NAME:URL` frames contents with the frame-codec extension `NAME` (`ext_codec.rs`);
//! `src:NAME:URL` shows the files under `URL` as the tree the device-source extension
//! `NAME` makes of them (read-only); `query:NAME:FIELD=VALUE,...@URL` is the live result
//! of a query extension over `URL` (`query.rs`).

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};

use roam_drivers::chirp::{ChirpConfig, ChirpDriver};
use roam_drivers::dav::DavDriver;
use roam_drivers::ftp::{FtpConfig, FtpDriver};
use roam_drivers::http::{HttpClient, HttpConfig, HttpDriver, TlsOptions};
use roam_drivers::layer::framed::Framed;
use roam_drivers::layer::seal::{Seal, KEY_ENV};
use roam_drivers::layer::{null::Null, rot13::Rot13, zlib::Zlib, Stacked};
use roam_drivers::local::LocalDriver;
use roam_drivers::mem::MemDriver;
use roam_drivers::s3::{S3Config, S3Driver};
use roam_drivers::sftp::{SftpConfig, SftpDriver};
use roam_drivers::Driver;

use crate::ext_codec::ExtCodec;
use crate::ext_layer::ExtLayer;
use crate::lazy_ext::LoadExtension;
use crate::observe::Observer;
use crate::path::{normalize, strip_dir_prefix};
use crate::query::QueryDriver;
use crate::source::SourceDriver;
use crate::work::MountRecord;
use crate::{Error, Result};

/// Schemes with an implicit mount at `/SCHEME`.
pub const IMPLICIT_SCHEMES: [&str; 9] = [
    "http", "https", "dav", "davs", "ftp", "ftps", "sftp", "chirp", "s3",
];

/// A name inside the roam namespace.
#[derive(Clone, Debug)]
pub enum Node {
    /// `/http` itself: a synthetic directory of the hosts seen so far.
    SchemeRoot { virt: String },
    /// A name served by a driver.
    Remote(Remote),
}

impl Node {
    pub fn virt(&self) -> &str {
        match self {
            Node::SchemeRoot { virt } => virt,
            Node::Remote(r) => &r.virt,
        }
    }
}

/// A name served by a driver: its namespace name and the driver path it stands for.
#[derive(Clone, Debug)]
pub struct Remote {
    pub virt: String,
    pub path: String,
    pub driver: Arc<dyn Driver>,
}

impl Remote {
    pub fn describe(&self) -> String {
        self.driver.describe(&self.path)
    }

    /// The directory holding this name (at the mount's root: the root itself).
    pub fn parent(&self) -> Remote {
        Remote {
            virt: crate::path::split_name(&self.virt).0.to_owned(),
            path: crate::path::split_name(&self.path).0.to_owned(),
            driver: self.driver.clone(),
        }
    }

    /// The entry `name` of this directory.
    pub fn child(&self, name: &str) -> Remote {
        Remote {
            virt: crate::path::join(&self.virt, name),
            path: crate::path::join(&self.path, name),
            driver: self.driver.clone(),
        }
    }
}

struct Explicit {
    prefix: String,
    url: String,
    driver: Arc<dyn Driver>,
}

/// What drivers are made with: shared clients and timeouts.
struct Protocols {
    http: HttpClient,
    /// Clients for hosts with their own TLS choices, by `host[:port]`.
    tls: HashMap<String, HttpClient>,
    /// Those choices, and the timeouts, for the S3 client (see [`Protocols::s3_http`]).
    tls_options: HashMap<String, TlsOptions>,
    http_config: HttpConfig,
    chirp: ChirpConfig,
    ftp: FtpConfig,
    /// Endpoint and credentials as the AWS tools find them (environment, `~/.aws`).
    s3: S3Config,
    /// OpenSSH's files: `~/.ssh/config`, `known_hosts`, keys, the agent.
    sftp: SftpConfig,
    /// Where layer extensions (`ext:NAME:URL`) and device sources (`src:NAME:URL`) are.
    extensions: Option<PathBuf>,
}

impl Protocols {
    fn new(
        cfg: &HttpConfig,
        tls: &[(String, TlsOptions)],
        extensions: Option<&Path>,
    ) -> Result<Protocols> {
        let chirp = ChirpConfig {
            connect_timeout: cfg.connect_timeout,
            read_timeout: cfg.read_timeout,
            ..ChirpConfig::default()
        };
        let ftp = FtpConfig {
            connect_timeout: cfg.connect_timeout,
            read_timeout: cfg.read_timeout,
            netrc: cfg.netrc.clone(),
            ..FtpConfig::default()
        };
        let mut clients = HashMap::new();
        for (host, opts) in tls {
            if opts.insecure {
                tracing::warn!(
                    "TLS certificates of {host} are not verified (roam.toml says insecure)"
                );
            }
            clients.insert(host.clone(), HttpClient::with_tls(cfg, opts)?);
        }
        Ok(Protocols {
            http: HttpClient::new(cfg),
            tls: clients,
            tls_options: tls.iter().cloned().collect(),
            http_config: cfg.clone(),
            chirp,
            ftp,
            s3: S3Config::from_env(),
            sftp: SftpConfig {
                connect_timeout: cfg.connect_timeout,
                read_timeout: cfg.read_timeout,
                ..SftpConfig::default()
            },
            extensions: extensions.map(Path::to_path_buf),
        })
    }

    /// `ext:NAME:URL`: the layer extension `NAME` over the mount `URL`.
    fn ext_layer(&self, spec: &str) -> Result<Arc<dyn Driver>> {
        let (name, load, lower) = self.extension_over("ext", spec)?;
        let layer = ExtLayer::new(name, load);
        Ok(Arc::new(Stacked::new(layer, self.driver(lower)?)))
    }

    /// `codec:NAME:URL`: the contents of the mount `URL` in seekable frames, each encoded
    /// by the frame-codec extension `NAME`; a codec that wants a key gets each file's own,
    /// from the master key of `ROAM_SEAL_KEY_FILE` (read now when it is set: a bad key
    /// file is refused at start).
    fn codec_layer(&self, spec: &str) -> Result<Arc<dyn Driver>> {
        let (name, load, lower) = self.extension_over("codec", spec)?;
        let master = match std::env::var_os(KEY_ENV) {
            Some(_) => Some(Seal::from_env().map_err(Error::Config)?),
            None => None,
        };
        let codec = ExtCodec::new(name, load, master);
        Ok(Arc::new(Framed::new(codec, self.driver(lower)?)))
    }

    /// `src:NAME:URL`: the tree the device-source extension `NAME` makes of the mount `URL`.
    fn source(&self, spec: &str) -> Result<Arc<dyn Driver>> {
        let (name, load, lower) = self.extension_over("src", spec)?;
        Ok(Arc::new(SourceDriver::new(name, load, self.driver(lower)?)))
    }

    /// `NAME:URL` after `FORM:`: the extension's name, its loader and the URL below it.
    fn extension_over<'s>(
        &self,
        form: &str,
        spec: &'s str,
    ) -> Result<(&'s str, LoadExtension, &'s str)> {
        let bad = |why: String| Error::Config(format!("{form}:{spec}: {why}"));
        let (name, lower) = spec
            .split_once(':')
            .ok_or_else(|| bad(format!("expected {form}:NAME:URL")))?;
        Ok((name, self.extension(name).map_err(bad)?, lower))
    }

    /// `query:NAME:FIELD=VALUE,...@URL`: the files of `URL` the query extension `NAME`
    /// says match.
    fn query(&self, spec: &str) -> Result<Arc<dyn Driver>> {
        let bad = |why: String| Error::Config(format!("query:{spec}: {why}"));
        let q = crate::query::parse(spec).map_err(bad)?;
        let load = self.extension(q.name).map_err(bad)?;
        let lower = self.driver(q.url)?;
        Ok(Arc::new(QueryDriver::new(
            lower,
            q.name,
            load,
            q.conditions,
        )))
    }

    /// Loads the extension `name` (wasm) of the extension directory: refused at start
    /// when missing, compiled at its first use.
    fn extension(&self, name: &str) -> std::result::Result<LoadExtension, String> {
        let dir = self
            .extensions
            .as_deref()
            .ok_or("no extension directory is configured")?;
        let tech = roam_ext::Technology::Wasm;
        let path = tech.artifact(dir, name);
        if !path.is_file() {
            return Err(format!("{} does not exist", path.display()));
        }
        let (dir, owned) = (dir.to_path_buf(), name.to_owned());
        Ok(Box::new(move || {
            roam_ext::Extension::load(&dir, &owned, tech, Default::default())
        }))
    }

    /// The HTTP client for `rest` (`[user@]host[:port]/path` of a URL).
    fn http_for(&self, rest: &str) -> HttpClient {
        self.tls
            .get(host_of(rest))
            .cloned()
            .unwrap_or_else(|| self.http.clone())
    }

    /// The FTP settings for `rest`, with its host's `[tls."HOST:PORT"]` choices.
    fn ftp_for(&self, rest: &str) -> FtpConfig {
        FtpConfig {
            tls: self
                .tls_options
                .get(host_of(rest))
                .cloned()
                .unwrap_or_default(),
            ..self.ftp.clone()
        }
    }

    /// `s3://BUCKET/PREFIX`, with the AWS settings of the environment, or with those of
    /// its own after a `?` (`profile=`, `region=`, `endpoint=`: [`S3Config::for_mount`]).
    fn s3_driver(&self, rest: &str) -> Result<Arc<dyn Driver>> {
        let (rest, own) = match rest.split_once('?') {
            Some((rest, query)) => (rest, Some(S3Config::for_mount(query)?)),
            None => (rest, None),
        };
        let config = own.as_ref().unwrap_or(&self.s3);
        Ok(Arc::new(S3Driver::new(
            self.s3_http(config)?,
            config,
            rest,
        )?))
    }

    /// The HTTP client of an S3 mount: the endpoint host's `[tls."HOST:PORT"]` choices,
    /// with `AWS_CA_BUNDLE` as its `ca_file` if it has none.
    fn s3_http(&self, s3: &S3Config) -> Result<HttpClient> {
        let host = s3.endpoint_authority();
        let options = s3.tls_options(host.and_then(|h| self.tls_options.get(&h)));
        if options == TlsOptions::default() {
            return Ok(self.http.clone());
        }
        Ok(HttpClient::with_tls(&self.http_config, &options)?)
    }

    /// The driver for a mount URL.
    fn driver(&self, url: &str) -> Result<Arc<dyn Driver>> {
        if url == "mem:" {
            return Ok(Arc::new(MemDriver::new()));
        }
        if let Some(lower) = url.strip_prefix("null:") {
            return Ok(Arc::new(Stacked::new(Null, self.driver(lower)?)));
        }
        if let Some(lower) = url.strip_prefix("rot13:") {
            return Ok(Arc::new(Stacked::new(Rot13, self.driver(lower)?)));
        }
        if let Some(lower) = url.strip_prefix("zlib:") {
            return Ok(Arc::new(Framed::new(Zlib, self.driver(lower)?)));
        }
        if let Some(lower) = url.strip_prefix("seal:") {
            let seal = Seal::from_env().map_err(Error::Config)?;
            return Ok(Arc::new(Framed::new(seal, self.driver(lower)?)));
        }
        if let Some(spec) = url.strip_prefix("ext:") {
            return self.ext_layer(spec);
        }
        if let Some(spec) = url.strip_prefix("codec:") {
            return self.codec_layer(spec);
        }
        if let Some(spec) = url.strip_prefix("src:") {
            return self.source(spec);
        }
        if let Some(spec) = url.strip_prefix("query:") {
            return self.query(spec);
        }
        let (scheme, rest) = url.split_once("://").unwrap_or(("", url));
        Ok(match scheme {
            "http" | "https" => Arc::new(HttpDriver::new(self.http_for(rest), url)?),
            "dav" => Arc::new(DavDriver::new(self.http_for(rest), &format!("http://{rest}"))?),
            "davs" => Arc::new(DavDriver::new(self.http_for(rest), &format!("https://{rest}"))?),
            "chirp" => Arc::new(ChirpDriver::new(self.chirp.clone(), url)?),
            "ftp" | "ftps" => Arc::new(FtpDriver::new(self.ftp_for(rest), url)?),
            "s3" => self.s3_driver(rest)?,
            "sftp" => Arc::new(SftpDriver::new(self.sftp.clone(), url)?),
            "file+cache" if rest.starts_with('/') => Arc::new(LocalDriver::cached(normalize(rest))),
            "file" | "" if rest.starts_with('/') => Arc::new(LocalDriver::new(normalize(rest))),
            _ => {
                return Err(Error::Config(format!(
                    "unsupported mount target {url:?} (use http://, https://, dav://, davs://, ftp://, ftps://, sftp://, chirp://, s3://, file://, file+cache://, an absolute path, mem:, null:URL, rot13:URL, zlib:URL, seal:URL, ext:NAME:URL, codec:NAME:URL, src:NAME:URL or query:NAME:FIELD=VALUE,...@URL)"
                )))
            }
        })
    }
}

/// The mount table.
pub struct Mounts {
    explicit: Vec<Explicit>,
    protocols: Protocols,
    hosts: Mutex<HashMap<String, Arc<dyn Driver>>>,
    observer: Arc<Observer>,
}

impl Mounts {
    /// `mounts` are `(LOCAL, URL)` pairs; `URL` is `http(s)://...`, `file:///dir` or `/dir`.
    pub fn new(
        mounts: &[(String, String)],
        http: &HttpConfig,
        tls: &[(String, TlsOptions)],
        extensions: Option<&Path>,
    ) -> Result<Mounts> {
        let protocols = Protocols::new(http, tls, extensions)?;
        let observer = Arc::new(Observer::default());
        let mut explicit = Vec::new();
        for (local, url) in mounts {
            if !local.starts_with('/') {
                return Err(Error::Config(format!(
                    "mount point {local:?} must be an absolute path"
                )));
            }
            let driver = observer.wrap(url, protocols.driver(url)?);
            explicit.push(Explicit {
                prefix: normalize(local),
                url: url.clone(),
                driver,
            });
        }
        // Longest prefix first, so the first match is the most specific mount.
        explicit.sort_by_key(|m| std::cmp::Reverse(m.prefix.len()));
        Ok(Mounts {
            explicit,
            protocols,
            hosts: Mutex::new(HashMap::new()),
            observer,
        })
    }

    /// What every mount's requests and transfers were ([`crate::observe`]).
    pub(crate) fn observer(&self) -> &Observer {
        &self.observer
    }

    /// Absolute path prefixes under which roam names live (for the tracer's quick filter).
    pub fn prefixes(&self) -> Vec<String> {
        let mut v: Vec<String> = self.explicit.iter().map(|m| m.prefix.clone()).collect();
        v.extend(IMPLICIT_SCHEMES.iter().map(|s| format!("/{s}")));
        v
    }

    /// The node a normalised absolute path names, or `None` when it is a local path.
    pub fn lookup(&self, virt: &str) -> Result<Option<Node>> {
        for m in &self.explicit {
            if let Some(rest) = strip_dir_prefix(virt, &m.prefix) {
                return Ok(Some(remote(virt, rest, &m.driver)));
            }
        }
        for scheme in IMPLICIT_SCHEMES {
            let root = format!("/{scheme}");
            let Some(rest) = strip_dir_prefix(virt, &root) else {
                continue;
            };
            if rest == "/" {
                return Ok(Some(Node::SchemeRoot { virt: root }));
            }
            let rest = &rest[1..];
            let (host, path) = match rest.find('/') {
                Some(i) => (&rest[..i], &rest[i..]),
                None => (rest, "/"),
            };
            let driver = self.host_driver(scheme, host)?;
            return Ok(Some(remote(virt, path, &driver)));
        }
        Ok(None)
    }

    /// Whether `virt` is the root of an explicit mount: its parent's listing (another
    /// mount's, or a local directory) does not say whether it exists.
    pub fn is_mount_point(&self, virt: &str) -> bool {
        self.explicit.iter().any(|m| m.prefix == virt)
    }

    /// The names of the explicit mounts right inside `dir` (`-m /proj=A -m /proj/m=B`:
    /// `m` in `/proj`), which its listing shows as directories.
    pub fn mount_points_in(&self, dir: &str) -> Vec<String> {
        self.explicit
            .iter()
            .filter(|m| m.prefix != "/" && crate::path::split_name(&m.prefix).0 == dir)
            .map(|m| crate::path::split_name(&m.prefix).1.to_owned())
            .collect()
    }

    /// The explicit mount `virt` is under, as a change records it.
    pub fn origin(&self, virt: &str) -> Option<MountRecord> {
        let m = self
            .explicit
            .iter()
            .find(|m| strip_dir_prefix(virt, &m.prefix).is_some())?;
        Some(MountRecord {
            prefix: m.prefix.clone(),
            url: m.url.clone(),
        })
    }

    /// `virt` under a mount of `prefix` to `url` that this table need not have (one a
    /// change recorded); `None` if `virt` is not under `prefix`.
    pub fn under(&self, prefix: &str, url: &str, virt: &str) -> Result<Option<Node>> {
        let Some(rest) = strip_dir_prefix(virt, prefix) else {
            return Ok(None);
        };
        let driver = self.cached_driver(url)?;
        Ok(Some(remote(virt, rest, &driver)))
    }

    fn host_driver(&self, scheme: &str, host: &str) -> Result<Arc<dyn Driver>> {
        self.cached_driver(&format!("{scheme}://{host}"))
    }

    /// The driver of `key` (a host's or a recorded mount's URL), made once.
    fn cached_driver(&self, key: &str) -> Result<Arc<dyn Driver>> {
        let mut hosts = self.hosts.lock().unwrap();
        if let Some(d) = hosts.get(key) {
            return Ok(d.clone());
        }
        let driver = self.observer.wrap(key, self.protocols.driver(key)?);
        hosts.insert(key.to_owned(), driver.clone());
        Ok(driver)
    }
}

/// `host[:port]` of `rest` (`[user@]host[:port]/path` of a URL), as `[tls."..."]` names it.
fn host_of(rest: &str) -> &str {
    let authority = rest.split('/').next().unwrap_or("");
    authority.rsplit('@').next().unwrap_or(authority)
}

fn remote(virt: &str, path: &str, driver: &Arc<dyn Driver>) -> Node {
    Node::Remote(Remote {
        virt: virt.to_owned(),
        path: path.to_owned(),
        driver: driver.clone(),
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use roam_drivers::http::HttpConfig;

    fn table() -> Mounts {
        let m = vec![
            ("/proj".to_owned(), "file:///srv/x".to_owned()),
            ("/proj/deep".to_owned(), "/srv/y".to_owned()),
            ("/web".to_owned(), "http://127.0.0.1:8080/pub".to_owned()),
        ];
        Mounts::new(&m, &HttpConfig::default(), &[], None).unwrap()
    }

    fn remote_of(m: &Mounts, p: &str) -> (String, String) {
        match m.lookup(p).unwrap() {
            Some(Node::Remote(r)) => (r.describe(), r.path),
            other => panic!("{p}: {other:?}"),
        }
    }

    #[test]
    fn longest_prefix_wins() {
        let m = table();
        assert_eq!(remote_of(&m, "/proj/a").0, "file:///srv/x/a");
        assert_eq!(remote_of(&m, "/proj/deep/b").0, "file:///srv/y/b");
        assert_eq!(remote_of(&m, "/proj").1, "/");
        assert_eq!(
            remote_of(&m, "/web/f.txt").0,
            "http://127.0.0.1:8080/pub/f.txt"
        );
        assert!(m.lookup("/project").unwrap().is_none());
        assert!(m.lookup("/etc/passwd").unwrap().is_none());
    }

    #[test]
    fn implicit_mounts_per_host() {
        let m = table();
        assert_eq!(
            remote_of(&m, "/http/h:81/a/b.c"),
            ("http://h:81/a/b.c".to_owned(), "/a/b.c".to_owned())
        );
        assert_eq!(remote_of(&m, "/https/h").1, "/");
        assert_eq!(
            remote_of(&m, "/ftps/u@h:2121/a"),
            ("ftps://u@h:2121/a".to_owned(), "/a".to_owned())
        );
        assert!(matches!(
            m.lookup("/http").unwrap(),
            Some(Node::SchemeRoot { .. })
        ));
        assert!(m.lookup("/httpx/a").unwrap().is_none());
    }

    #[test]
    fn bad_mounts_are_refused() {
        let http = HttpConfig::default();
        assert!(Mounts::new(&[("rel".into(), "/x".into())], &http, &[], None).is_err());
        assert!(Mounts::new(&[("/a".into(), "gopher://x".into())], &http, &[], None).is_err());
        assert!(Mounts::new(
            &[("/a".into(), "rot13:gopher://x".into())],
            &http,
            &[],
            None
        )
        .is_err());
    }

    #[test]
    fn layers_stack_on_any_mount() {
        let m = vec![
            ("/n".to_owned(), "null:/srv/x".to_owned()),
            ("/r".to_owned(), "rot13:null:file:///srv/y".to_owned()),
            ("/m".to_owned(), "mem:".to_owned()),
        ];
        let m = Mounts::new(&m, &HttpConfig::default(), &[], None).unwrap();
        assert_eq!(remote_of(&m, "/n/a").0, "null:file:///srv/x/a");
        assert_eq!(remote_of(&m, "/r/abc").0, "rot13:null:file:///srv/y/nop");
        assert_eq!(remote_of(&m, "/m/f").0, "mem:/f");
    }
}
