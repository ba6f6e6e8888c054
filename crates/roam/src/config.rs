//! `roam.toml` (the `.uforc` of roam): cache location and consistency, HTTP timeouts, and
//! explicit mounts. Found at `$ROAM_CONFIG`, else `$XDG_CONFIG_HOME/roam/roam.toml`, else
//! `~/.config/roam/roam.toml`; a missing file means defaults.
//!
//! ```toml
//! [cache]
//! dir = "/var/tmp/me/roam"   # default: $XDG_CACHE_HOME/roam or ~/.cache/roam
//! t_read = 30                # seconds cached data and metadata are used without asking
//! max_size = 10737418240     # bytes of file copies kept; least recently used go first
//! t_write = 0                # seconds after the last close a change is uploaded (0: in close)
//! policy = "hotlist"         # an eviction policy extension instead of plain LRU
//! policy_args = ["/http/example.org/big/index.db", ".so"]   # its arguments (the hot list)
//! [extensions]
//! dir = "/opt/roam/ext"      # NAME.wasm, libNAME.so; default: $XDG_CONFIG_HOME/roam/extensions
//! [[resolver]]               # conflicts of matching files are merged by an extension
//! glob = "*.txt"             # a file name, or with `/` a whole path ("/proj/**/*.c")
//! ext = "merge3"             # the resolver extension (first matching rule wins)
//! tech = "wasm"              # optional: wasm (default), pulley, fork or worker
//! archive = "archive"        # shows *.zip/*.tar as directories (default: `archive` if it is
//!                            # there; "" turns archives off)
//! [http]
//! connect_timeout = 10
//! read_timeout = 30
//! [tls."files.internal:8443"]
//! ca_file = "/etc/ssl/internal-ca.pem"   # or: insecure = true
//! [mounts]
//! "/proj" = "http://example.org/src"
//! "/data" = "file:///srv/data"
//! "/team" = "files:reports"   # a remote's URL and login (see `[remote.NAME]`, remote.rs)
//! [remote.files]
//! url = "davs://files.example.org/team"
//! user = "alice"
//! password_command = "pass show files"
//! ```

mod remote;

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::time::Duration;

use anyhow::{Context, Result};
use roam_vfs::{Consistency, TRead};
use serde::Deserialize;

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Config {
    #[serde(default)]
    pub cache: CacheSection,
    #[serde(default)]
    pub http: HttpSection,
    #[serde(default)]
    pub extensions: ExtensionsSection,
    /// Resolver extensions per glob, tried in file order.
    #[serde(default)]
    pub resolver: Vec<ResolverRule>,
    #[serde(default)]
    pub mounts: BTreeMap<String, String>,
    /// T_read per glob of names (`"/http/*/live/**" = 0`), first match wins (in file order).
    #[serde(default)]
    pub t_read: toml::Table,
    /// TLS choices per `host[:port]`.
    #[serde(default)]
    pub tls: BTreeMap<String, TlsSection>,
    /// Servers and their logins, named by mount targets `NAME:PATH`.
    #[serde(default)]
    pub remote: BTreeMap<String, remote::RemoteSection>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct TlsSection {
    /// PEM file of the certificate authorities to trust for this host.
    pub ca_file: Option<PathBuf>,
    /// Accept any certificate (say so only for a server you trust blindly).
    #[serde(default)]
    pub insecure: bool,
}

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct CacheSection {
    pub dir: Option<PathBuf>,
    /// Seconds (`30`) or a percentage of a file's age (`"10%"`).
    pub t_read: Option<Seconds>,
    /// Ufo's T_write: seconds after the last close that a change is uploaded (default 0:
    /// inside `close`, whose error it then is); repeated saves within it coalesce.
    pub t_write: Option<u64>,
    /// Most bytes of file copies kept (default 10 GiB); least recently used go first.
    pub max_size: Option<u64>,
    /// An extension of the policy kind that picks eviction victims (run as wasm).
    pub policy: Option<String>,
    /// Its arguments.
    #[serde(default)]
    pub policy_args: Vec<String>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ExtensionsSection {
    pub dir: Option<PathBuf>,
    /// The archive extension (default: `archive`, when the extension dir has it).
    pub archive: Option<String>,
}

/// `[[resolver]]`: which extension merges conflicts of which files.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ResolverRule {
    pub glob: String,
    pub ext: String,
    pub tech: Option<String>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct HttpSection {
    pub connect_timeout: Option<u64>,
    pub read_timeout: Option<u64>,
}

/// A T_read as written: a number of seconds, or text (`"30s"`, `"10%"`).
#[derive(Clone, Debug, Deserialize)]
#[serde(untagged)]
pub enum Seconds {
    Number(u64),
    Text(String),
}

impl Seconds {
    fn to_t_read(&self) -> Result<TRead> {
        match self {
            Seconds::Number(n) => Ok(TRead::Fixed(Duration::from_secs(*n))),
            Seconds::Text(t) => Ok(TRead::parse(t)?),
        }
    }
}

/// Default Ufo T_read: long enough that a build stats each header once, short enough that
/// an edit on the server shows up within half a minute.
pub const DEFAULT_T_READ: Duration = Duration::from_secs(30);

/// Default cache size limit: 10 GiB of file copies.
pub const DEFAULT_MAX_CACHE: u64 = 10 << 30;

impl Config {
    /// Loads the user's configuration, or defaults when there is none.
    pub fn load() -> Result<Config> {
        match config_path() {
            Some(p) if p.exists() => Config::from_file(&p),
            _ => Ok(Config::default()),
        }
    }

    pub fn from_file(p: &Path) -> Result<Config> {
        let text =
            std::fs::read_to_string(p).with_context(|| format!("reading {}", p.display()))?;
        toml::from_str(&text).with_context(|| format!("parsing {}", p.display()))
    }

    /// The mount URL of a mount target: a remote's `NAME:PATH` resolved (remote.rs), any
    /// other target as it is.
    pub fn mount_url(&self, target: &str) -> Result<String> {
        remote::resolve(&self.remote, target)
    }

    pub fn max_cache_bytes(&self) -> u64 {
        self.cache.max_size.unwrap_or(DEFAULT_MAX_CACHE)
    }

    pub fn t_write(&self) -> Duration {
        Duration::from_secs(self.cache.t_write.unwrap_or(0))
    }

    /// Ufo's T_read: the default and the per-glob rules.
    pub fn consistency(&self) -> Result<Consistency> {
        let default = match &self.cache.t_read {
            Some(s) => s.to_t_read()?,
            None => TRead::Fixed(DEFAULT_T_READ),
        };
        let mut rules = Vec::new();
        for (glob, v) in &self.t_read {
            let value: Seconds = v
                .clone()
                .try_into()
                .with_context(|| format!("[t_read] {glob:?}"))?;
            rules.push((glob.clone(), value.to_t_read()?));
        }
        Ok(Consistency::new(default, rules))
    }

    /// `$ROAM_CACHE_DIR`, else `[cache] dir`, else `$XDG_CACHE_HOME/roam`, else `~/.cache/roam`.
    pub fn cache_dir(&self) -> PathBuf {
        if let Some(d) = std::env::var_os("ROAM_CACHE_DIR") {
            return d.into();
        }
        if let Some(d) = &self.cache.dir {
            return d.clone();
        }
        xdg_dir("XDG_CACHE_HOME", ".cache").join("roam")
    }
}

impl Config {
    /// Where extensions are: `$ROAM_EXT_DIR`, else `[extensions] dir`, else
    /// `$XDG_CONFIG_HOME/roam/extensions`.
    pub fn extensions_dir(&self) -> PathBuf {
        if let Some(d) = std::env::var_os("ROAM_EXT_DIR") {
            return d.into();
        }
        if let Some(d) = &self.extensions.dir {
            return d.clone();
        }
        xdg_dir("XDG_CONFIG_HOME", ".config")
            .join("roam")
            .join("extensions")
    }

    /// The eviction policy `[cache] policy` names, loaded.
    pub fn eviction_policy(&self) -> Result<Option<roam_vfs::EvictionPolicy>> {
        let Some(name) = &self.cache.policy else {
            return Ok(None);
        };
        let tech = roam_ext::Technology::Wasm;
        let ext =
            roam_ext::Extension::load(&self.extensions_dir(), name, tech, Default::default())?;
        Ok(Some(roam_vfs::EvictionPolicy {
            ext,
            args: self.cache.policy_args.clone(),
        }))
    }
}

impl Config {
    /// The `[[resolver]]` rules with their extensions loaded (native ones refused: they run
    /// inside roam, unisolated).
    pub fn resolvers(&self) -> Result<Option<roam_vfs::ExtResolvers>> {
        if self.resolver.is_empty() {
            return Ok(None);
        }
        let mut rules = Vec::new();
        for rule in &self.resolver {
            let context = || format!("[[resolver]] glob = {:?}", rule.glob);
            let tech: roam_ext::Technology = match &rule.tech {
                Some(t) => t
                    .parse()
                    .map_err(anyhow::Error::msg)
                    .with_context(context)?,
                None => roam_ext::Technology::Wasm,
            };
            if tech == roam_ext::Technology::Native {
                anyhow::bail!("{}: native extensions are for benchmarks only", context());
            }
            let ext = roam_ext::Extension::load(
                &self.extensions_dir(),
                &rule.ext,
                tech,
                Default::default(),
            )
            .with_context(context)?;
            rules.push((rule.glob.clone(), ext));
        }
        Ok(Some(roam_vfs::ExtResolvers::new(rules)))
    }

    /// A loader of the archive extension: the one `[extensions] archive` names (which must
    /// exist), else `archive` if it is installed; none when the setting is empty. Loading
    /// (compiling) waits for the first archive a program opens.
    pub fn archive_extension(&self) -> Result<Option<roam_vfs::LoadExtension>> {
        let tech = roam_ext::Technology::Wasm;
        let dir = self.extensions_dir();
        let name = match self.extensions.archive.as_deref() {
            Some("") => return Ok(None),
            Some(name) => name.to_owned(),
            None => "archive".to_owned(),
        };
        let path = tech.artifact(&dir, &name);
        if !path.is_file() {
            if self.extensions.archive.is_some() {
                anyhow::bail!("archive extension {}: no such file", path.display());
            }
            return Ok(None);
        }
        Ok(Some(Box::new(move || {
            roam_ext::Extension::load(&dir, &name, tech, Default::default())
        })))
    }
}

pub fn config_path() -> Option<PathBuf> {
    if let Some(p) = std::env::var_os("ROAM_CONFIG") {
        return Some(p.into());
    }
    Some(
        xdg_dir("XDG_CONFIG_HOME", ".config")
            .join("roam")
            .join("roam.toml"),
    )
}

fn xdg_dir(var: &str, fallback: &str) -> PathBuf {
    match std::env::var_os(var) {
        Some(d) if !d.is_empty() => d.into(),
        _ => std::env::var_os("HOME")
            .map(PathBuf::from)
            .unwrap_or_else(|| "/tmp".into())
            .join(fallback),
    }
}

#[cfg(test)]
mod fuzz;
#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_a_full_file_and_rejects_typos() {
        let c: Config = toml::from_str(
            "[cache]\nt_read = 5\n[http]\nread_timeout = 3\n[mounts]\n\"/proj\" = \"http://h/src\"\n[t_read]\n\"/http/*/live/**\" = 0\n\"/proj/**\" = \"10%\"\n",
        )
        .unwrap();
        let t = c.consistency().unwrap();
        assert_eq!(t.t_read("/http/h/x"), TRead::Fixed(Duration::from_secs(5)));
        assert_eq!(t.t_read("/http/h/live/x"), TRead::Fixed(Duration::ZERO));
        assert_eq!(t.t_read("/proj/a.c"), TRead::AgePercent(10));
        assert_eq!(c.http.read_timeout, Some(3));
        assert_eq!(c.mounts["/proj"], "http://h/src");
        assert!(toml::from_str::<Config>("[cache]\nt_raed = 5\n").is_err());
        assert!(toml::from_str::<Config>("[cache]\nt_read = \"soon\"\n")
            .unwrap()
            .consistency()
            .is_err());
        assert_eq!(
            Config::default().consistency().unwrap().t_read("/x"),
            TRead::Fixed(DEFAULT_T_READ)
        );
    }

    #[test]
    fn resolver_rules_parse_in_order_and_refuse_native() {
        let c: Config = toml::from_str(
            "[[resolver]]\nglob = \"*.txt\"\next = \"merge3\"\n[[resolver]]\nglob = \"/music/**\"\next = \"id3merge\"\ntech = \"fork\"\n",
        )
        .unwrap();
        let rules: Vec<_> = c
            .resolver
            .iter()
            .map(|r| (&r.glob[..], &r.ext[..]))
            .collect();
        assert_eq!(rules, [("*.txt", "merge3"), ("/music/**", "id3merge")]);
        assert_eq!(c.resolver[1].tech.as_deref(), Some("fork"));
        assert!(
            toml::from_str::<Config>("[[resolver]]\nglob = \"*\"\n").is_err(),
            "no ext"
        );
        let native: Config =
            toml::from_str("[[resolver]]\nglob = \"*\"\next = \"m\"\ntech = \"native\"\n").unwrap();
        let err = native.resolvers().unwrap_err().to_string();
        assert!(err.contains("native"), "{err}");
    }
}
