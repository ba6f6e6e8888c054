//! `roam.toml` (the `.uforc` of roam): cache location and consistency, HTTP timeouts, and
//! explicit mounts. Found at `$ROAM_CONFIG`, else `$XDG_CONFIG_HOME/roam/roam.toml`, else
//! `~/.config/roam/roam.toml`; a missing file means defaults.
//!
//! Sizes and durations take units (`max_size = "10G"`, `t_write = "5m"`; see [`units`]); a
//! plain number is bytes or seconds. Global flags (`--cache-dir`, `--cache-size`, `--t-read`,
//! `--t-write`) win over the environment, which wins over the file. `roam config` prints
//! each effective value and where it came from; `roam config example` prints an annotated
//! file (`config/example.toml`, every section) that parses back.

pub mod show;
pub mod units;

mod remote;

use std::collections::BTreeMap;
use std::fmt;
use std::path::{Path, PathBuf};
use std::sync::OnceLock;
use std::time::Duration;

use anyhow::{Context, Result};
use roam_drivers::http::HttpConfig;
use roam_vfs::{Consistency, TRead};
use serde::Deserialize;

use units::{Size, Span};

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Config {
    /// The file this was read from (none: defaults only).
    #[serde(skip)]
    pub file: Option<PathBuf>,
    /// The command line's settings, which win over the rest.
    #[serde(skip)]
    pub flags: Flags,
    #[serde(default)]
    pub cache: CacheSection,
    #[serde(default)]
    pub http: HttpSection,
    #[serde(default)]
    pub extensions: ExtensionsSection,
    #[serde(default)]
    pub access: AccessSection,
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
    /// A duration (`30`, `"5m"`) or a percentage of a file's age (`"10%"`).
    pub t_read: Option<Seconds>,
    /// Ufo's T_write: how long after the last close a change is uploaded (default 0:
    /// inside `close`, whose error it then is); repeated saves within it coalesce.
    pub t_write: Option<Span>,
    /// How long `roam run --fuse`, once its program has ended, waits for the uploads its
    /// closes are making (default 10 minutes); what is still under way stays journaled.
    pub settle: Option<Span>,
    /// Most bytes of file copies kept (default 10 GiB); least recently used go first.
    pub max_size: Option<Size>,
    /// An extension of the policy kind that picks eviction victims (run as wasm).
    pub policy: Option<String>,
    /// Its arguments.
    #[serde(default)]
    pub policy_args: Vec<String>,
    /// An extension of the read-ahead kind that picks ranges of large files to fetch ahead
    /// of reads (run as wasm).
    pub readahead: Option<String>,
    /// Its arguments.
    #[serde(default)]
    pub readahead_args: Vec<String>,
}

/// The access policy's extension loader and its `FIELD=VALUE` arguments.
pub type AccessPolicy = (roam_vfs::LoadExtension, Vec<(String, String)>);

/// `[access]`: an access-control policy extension (of the query kind), asked about every
/// roam name a program looks up.
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct AccessSection {
    pub policy: Option<String>,
    /// Its `FIELD=VALUE` arguments (the `acl` example: `allow=PATTERN`, `deny=PATTERN`).
    #[serde(default)]
    pub args: Vec<String>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ExtensionsSection {
    pub dir: Option<PathBuf>,
    /// The archive extension (default: `archive`, when the extension dir has it).
    pub archive: Option<String>,
    /// The digest extension, for fingerprints (default: `digest`, when installed).
    pub digest: Option<String>,
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
    pub connect_timeout: Option<Span>,
    pub read_timeout: Option<Span>,
}

/// A T_read as written: a number of seconds, or text (`"5m"`, `"10%"`).
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
            Seconds::Text(t) if t.trim_end().ends_with('%') => Ok(TRead::parse(t)?),
            Seconds::Text(t) => Ok(TRead::Fixed(units::parse_duration(t)?)),
        }
    }
}

impl std::str::FromStr for Seconds {
    type Err = anyhow::Error;
    /// A flag's T_read: checked now, so that a typo fails before anything starts.
    fn from_str(s: &str) -> Result<Seconds> {
        let t = Seconds::Text(s.to_owned());
        t.to_t_read()?;
        Ok(t)
    }
}

/// Settings that the command line can give for any subcommand (`roam --cache-dir D run ..`).
#[derive(Clone, Debug, Default, clap::Args)]
pub struct Flags {
    /// The cache directory (copies and the upload journal) instead of
    /// $ROAM_CACHE_DIR, `[cache] dir` or $XDG_CACHE_HOME/roam.
    #[arg(long, global = true, display_order = 100, value_name = "DIR")]
    pub cache_dir: Option<PathBuf>,
    /// Most bytes of file copies kept (`10G`, `512M`), instead of `[cache] max_size`.
    #[arg(long, global = true, display_order = 100, value_name = "SIZE")]
    pub cache_size: Option<Size>,
    /// How long cached data and metadata are used without asking (`30s`, `5m`, `10%`),
    /// instead of `[cache] t_read` (per-glob `[t_read]` rules still apply).
    #[arg(long, global = true, display_order = 100, value_name = "DURATION")]
    pub t_read: Option<Seconds>,
    /// How long after the last close a change is uploaded (`0`, `30s`), instead of
    /// `[cache] t_write`.
    #[arg(long, global = true, display_order = 100, value_name = "DURATION")]
    pub t_write: Option<Span>,
}

/// The command line's settings, set once by `main` before any configuration is loaded.
static FLAGS: OnceLock<Flags> = OnceLock::new();

pub fn set_flags(flags: Flags) {
    FLAGS.set(flags).expect("flags are set once");
}

/// Where an effective setting came from.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Source {
    Default,
    File(PathBuf),
    Env(&'static str),
    Flag(&'static str),
}

impl fmt::Display for Source {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Source::Default => f.write_str("default"),
            Source::File(p) => write!(f, "file {}", p.display()),
            Source::Env(v) => write!(f, "env {v}"),
            Source::Flag(n) => write!(f, "flag {n}"),
        }
    }
}

/// An effective setting and its source.
#[derive(Clone, Debug)]
pub struct Setting<T> {
    pub value: T,
    pub from: Source,
}

/// `roam config example`: an annotated file with every section.
pub const EXAMPLE: &str = include_str!("config/example.toml");

/// Default Ufo T_read: long enough that a build stats each header once, short enough that
/// an edit on the server shows up within half a minute.
pub const DEFAULT_T_READ: Duration = Duration::from_secs(30);

/// Default cache size limit: 10 GiB of file copies.
/// `[cache] settle`: uploads seldom take longer, and each also ends at its driver's
/// timeouts; a run's end should not wait for ever on a server that stalls.
pub const DEFAULT_SETTLE: Duration = Duration::from_secs(600);

pub const DEFAULT_MAX_CACHE: u64 = 10 << 30;

impl Config {
    /// Loads the user's configuration, or defaults when there is none.
    pub fn load() -> Result<Config> {
        let path = config_path();
        let mut cfg = if path.exists() {
            Config::from_file(&path)?
        } else {
            Config::default()
        };
        cfg.flags = FLAGS.get().cloned().unwrap_or_default();
        Ok(cfg)
    }

    pub fn from_file(p: &Path) -> Result<Config> {
        let text =
            std::fs::read_to_string(p).with_context(|| format!("reading {}", p.display()))?;
        let mut cfg: Config =
            toml::from_str(&text).with_context(|| format!("parsing {}", p.display()))?;
        cfg.file = Some(p.to_owned());
        Ok(cfg)
    }

    /// The first of: the flag, the environment variable, the file's value, the default.
    fn pick<T>(
        &self,
        flag: Option<(&'static str, T)>,
        env: Option<(&'static str, T)>,
        file: Option<T>,
        default: T,
    ) -> Setting<T> {
        let file = file.map(|v| {
            let path = self.file.clone().unwrap_or_default();
            (v, Source::File(path))
        });
        flag.map(|(n, v)| (v, Source::Flag(n)))
            .or(env.map(|(n, v)| (v, Source::Env(n))))
            .or(file)
            .map_or(
                Setting {
                    value: default,
                    from: Source::Default,
                },
                |(value, from)| Setting { value, from },
            )
    }

    /// The mount URL of a mount target: a remote's `NAME:PATH` resolved (remote.rs), any
    /// other target as it is.
    pub fn mount_url(&self, target: &str) -> Result<String> {
        remote::resolve(&self.remote, target)
    }

    pub fn max_cache_bytes(&self) -> u64 {
        self.max_cache().value
    }

    pub fn max_cache(&self) -> Setting<u64> {
        let flag = self.flags.cache_size.map(|s| ("--cache-size", s.0));
        let file = self.cache.max_size.map(|s| s.0);
        self.pick(flag, None, file, DEFAULT_MAX_CACHE)
    }

    pub fn t_write(&self) -> Duration {
        self.t_write_setting().value
    }

    pub fn t_write_setting(&self) -> Setting<Duration> {
        let flag = self.flags.t_write.map(|s| ("--t-write", s.0));
        let file = self.cache.t_write.map(|s| s.0);
        self.pick(flag, None, file, Duration::ZERO)
    }

    /// `[cache] settle` ([`DEFAULT_SETTLE`]).
    pub fn settle_setting(&self) -> Setting<Duration> {
        let file = self.cache.settle.map(|s| s.0);
        self.pick(None, None, file, DEFAULT_SETTLE)
    }

    /// The T_read of names no `[t_read]` rule matches.
    pub fn t_read_default(&self) -> Result<Setting<TRead>> {
        let flag = match &self.flags.t_read {
            Some(s) => Some(("--t-read", s.to_t_read()?)),
            None => None,
        };
        let file = self
            .cache
            .t_read
            .as_ref()
            .map(Seconds::to_t_read)
            .transpose()?;
        Ok(self.pick(flag, None, file, TRead::Fixed(DEFAULT_T_READ)))
    }

    /// The HTTP connect and read timeouts (WebDAV and S3 too).
    pub fn http_timeouts(&self) -> [Setting<Duration>; 2] {
        let d = HttpConfig::default();
        let h = &self.http;
        [
            self.pick(
                None,
                None,
                h.connect_timeout.map(|s| s.0),
                d.connect_timeout,
            ),
            self.pick(None, None, h.read_timeout.map(|s| s.0), d.read_timeout),
        ]
    }

    /// Ufo's T_read: the default and the per-glob rules.
    pub fn consistency(&self) -> Result<Consistency> {
        let default = self.t_read_default()?.value;
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

    pub fn cache_dir(&self) -> PathBuf {
        self.cache_dir_setting().value
    }

    /// `--cache-dir`, else `$ROAM_CACHE_DIR`, else `[cache] dir`, else
    /// `$XDG_CACHE_HOME/roam`, else `~/.cache/roam`.
    pub fn cache_dir_setting(&self) -> Setting<PathBuf> {
        let flag = self.flags.cache_dir.clone().map(|d| ("--cache-dir", d));
        let env = env_path("ROAM_CACHE_DIR");
        let default = xdg_dir("XDG_CACHE_HOME", ".cache").join("roam");
        self.pick(flag, env, self.cache.dir.clone(), default)
    }
}

impl Config {
    /// Where extensions are: `$ROAM_EXT_DIR`, else `[extensions] dir`, else
    /// `$XDG_CONFIG_HOME/roam/extensions`.
    pub fn extensions_dir(&self) -> PathBuf {
        self.extensions_dir_setting().value
    }

    pub fn extensions_dir_setting(&self) -> Setting<PathBuf> {
        let env = env_path("ROAM_EXT_DIR");
        let default = xdg_dir("XDG_CONFIG_HOME", ".config")
            .join("roam")
            .join("extensions");
        self.pick(None, env, self.extensions.dir.clone(), default)
    }

    /// The extension `name` of the extension directory, loaded; a missing one is told with
    /// where roam looked and how to get roam's examples.
    pub fn load_extension(
        &self,
        dir: &Path,
        name: &str,
        tech: roam_ext::Technology,
        limits: roam_ext::Limits,
    ) -> Result<roam_ext::Extension> {
        let path = tech.artifact(dir, name);
        if !path.is_file() {
            anyhow::bail!(
                "extension {name}: {} does not exist ({})",
                path.display(),
                HOW_TO_GET_EXTENSIONS
            );
        }
        Ok(roam_ext::Extension::load(dir, name, tech, limits)?)
    }

    /// The eviction policy `[cache] policy` names, loaded.
    pub fn eviction_policy(&self) -> Result<Option<roam_vfs::EvictionPolicy>> {
        let Some(name) = &self.cache.policy else {
            return Ok(None);
        };
        let tech = roam_ext::Technology::Wasm;
        let ext = self.load_extension(&self.extensions_dir(), name, tech, Default::default())?;
        Ok(Some(roam_vfs::EvictionPolicy {
            ext,
            args: self.cache.policy_args.clone(),
        }))
    }

    /// The read-ahead policy `[cache] readahead` names, loaded with its short deadline.
    pub fn readahead_policy(&self) -> Result<Option<roam_vfs::ReadAheadPolicy>> {
        let Some(name) = &self.cache.readahead else {
            return Ok(None);
        };
        let limits = roam_ext::Limits {
            timeout: roam_vfs::READAHEAD_DEADLINE,
            ..Default::default()
        };
        let tech = roam_ext::Technology::Wasm;
        let ext = self.load_extension(&self.extensions_dir(), name, tech, limits)?;
        Ok(Some(roam_vfs::ReadAheadPolicy {
            ext,
            args: self.cache.readahead_args.clone(),
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
            let ext = self
                .load_extension(&self.extensions_dir(), &rule.ext, tech, Default::default())
                .with_context(context)?;
            rules.push((rule.glob.clone(), ext));
        }
        Ok(Some(roam_vfs::ExtResolvers::new(rules)))
    }

    /// A loader of the archive extension: the one `[extensions] archive` names (which must
    /// exist), else `archive` if it is installed; none when the setting is empty. Loading
    /// (compiling) waits for the first archive a program opens.
    pub fn archive_extension(&self) -> Result<Option<roam_vfs::LoadExtension>> {
        self.installed("archive", self.extensions.archive.as_deref())
    }

    /// The access policy's extension loader (which must exist) and its arguments.
    pub fn access_policy(&self) -> Result<Option<AccessPolicy>> {
        let Some(name) = &self.access.policy else {
            return Ok(None);
        };
        let args = self
            .access
            .args
            .iter()
            .map(|a| a.split_once('=').map(|(k, v)| (k.to_owned(), v.to_owned())))
            .collect::<Option<Vec<_>>>()
            .context("[access] args are FIELD=VALUE")?;
        let load = self
            .installed(name, Some(name))?
            .context("[access] policy: no such extension")?;
        Ok(Some((load, args)))
    }

    /// A loader of the digest extension (fingerprints), chosen as the archive extension is
    /// (`[extensions] digest`, default `digest`); loaded at the first fingerprint asked for.
    pub fn digest_extension(&self) -> Result<Option<roam_vfs::LoadExtension>> {
        self.installed("digest", self.extensions.digest.as_deref())
    }

    /// The extension `setting` names (which must exist), else `default` if installed; none
    /// when the setting is empty.
    fn installed(
        &self,
        default: &str,
        setting: Option<&str>,
    ) -> Result<Option<roam_vfs::LoadExtension>> {
        let tech = roam_ext::Technology::Wasm;
        let dir = self.extensions_dir();
        let name = match setting {
            Some("") => return Ok(None),
            Some(name) => name.to_owned(),
            None => default.to_owned(),
        };
        let path = tech.artifact(&dir, &name);
        if !path.is_file() {
            if setting.is_some() {
                anyhow::bail!(
                    "{default} extension {}: no such file ({HOW_TO_GET_EXTENSIONS})",
                    path.display()
                );
            }
            return Ok(None);
        }
        Ok(Some(Box::new(move || {
            roam_ext::Extension::load(&dir, &name, tech, Default::default())
        })))
    }
}

/// How to get the example extensions, for a message about a missing one.
pub const HOW_TO_GET_EXTENSIONS: &str = "roam's examples archive, id3, id3merge, merge3, \
rot13 and hotlist are installed by install.sh, or alone by scripts/install-extensions.sh [DIR] \
of roam's source";

/// `$ROAM_CONFIG`, else `$XDG_CONFIG_HOME/roam/roam.toml`, else `~/.config/roam/roam.toml`.
pub fn config_path() -> PathBuf {
    match std::env::var_os("ROAM_CONFIG") {
        Some(p) => p.into(),
        None => xdg_dir("XDG_CONFIG_HOME", ".config")
            .join("roam")
            .join("roam.toml"),
    }
}

/// An environment variable naming a path, with its name (as for [`Config::pick`]).
fn env_path(var: &'static str) -> Option<(&'static str, PathBuf)> {
    std::env::var_os(var).map(|d| (var, d.into()))
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
        assert_eq!(c.http.read_timeout, Some(Span(Duration::from_secs(3))));
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
