//! Where the S3 driver finds its endpoint, region and credentials: the places AWS tools
//! read them, in the same order.
//!
//! - credentials: `AWS_ACCESS_KEY_ID` + `AWS_SECRET_ACCESS_KEY` (+ `AWS_SESSION_TOKEN`), then
//!   the profile in the shared credentials file, then in the config file; a pair is
//!   always taken whole from one place. A profile named explicitly
//!   ([`S3Config::from_profile`]) comes before the environment, as `aws --profile` does.
//! - region: `AWS_REGION`, `AWS_DEFAULT_REGION`, the profile's `region`.
//! - endpoint: `AWS_ENDPOINT_URL_S3`, `AWS_ENDPOINT_URL`, the profile's nested
//!   `s3 = endpoint_url = ...`, the profile's `endpoint_url`.
//! - addressing: the profile's `s3 = addressing_style = path|virtual`; otherwise path-style
//!   for a custom endpoint (MinIO, Ceph, moto ... rarely have wildcard DNS), virtual-hosted
//!   for AWS.
//!
//! - certificate authorities: `AWS_CA_BUNDLE`, the profile's `ca_bundle` (empty: unset).
//!
//! The profile is `AWS_PROFILE`, else `default`. The files are `AWS_SHARED_CREDENTIALS_FILE`
//! and `AWS_CONFIG_FILE`, else `~/.aws/credentials` and `~/.aws/config`. A missing or
//! unreadable file is as good as an empty one. `[services ...]` sections, SSO, assumed
//! roles and `credential_process` are not read.

use std::collections::HashMap;
use std::fmt;
use std::path::PathBuf;

use crate::http::TlsOptions;

/// The region of AWS tools without configuration, and of most S3-compatible servers.
pub const DEFAULT_REGION: &str = "us-east-1";

/// The settings of an S3 mount. Credentials are optional: without them requests go out
/// unsigned, which public buckets allow.
#[derive(Clone, Default, PartialEq, Eq)]
pub struct S3Config {
    /// `http(s)://host[:port][/path]` of an S3-compatible server; `None` for AWS.
    pub endpoint: Option<String>,
    /// `None` means [`DEFAULT_REGION`].
    pub region: Option<String>,
    pub access_key: Option<String>,
    pub secret_key: Option<String>,
    pub session_token: Option<String>,
    /// Address buckets as `endpoint/bucket/key` rather than `bucket.endpoint/key`. The
    /// driver uses path-style anyway where a virtual host cannot work (an IP address, a
    /// bucket name that is no DNS label).
    pub path_style: bool,
    /// The named profile the settings came from, if any.
    pub profile: Option<String>,
    /// A PEM bundle of the certificate authorities to trust instead of the platform's:
    /// `AWS_CA_BUNDLE`, else the profile's `ca_bundle` (as aws-cli reads them). A host's
    /// `[tls."HOST:PORT"] ca_file` in roam.toml wins over it ([`S3Config::tls_options`]).
    pub ca_bundle: Option<PathBuf>,
}

// By hand, so that `{:?}` never prints a key.
impl fmt::Debug for S3Config {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let redacted = |v: &Option<String>| v.as_ref().map(|_| "<redacted>");
        f.debug_struct("S3Config")
            .field("endpoint", &self.endpoint)
            .field("region", &self.region)
            .field("access_key", &redacted(&self.access_key))
            .field("secret_key", &redacted(&self.secret_key))
            .field("session_token", &redacted(&self.session_token))
            .field("path_style", &self.path_style)
            .field("profile", &self.profile)
            .field("ca_bundle", &self.ca_bundle)
            .finish()
    }
}

impl S3Config {
    /// The settings AWS tools would use in this environment.
    pub fn from_env() -> S3Config {
        load(&env_var, None)
    }

    /// The settings of the named profile, as `aws --profile NAME` would use them.
    pub fn from_profile(profile: &str) -> S3Config {
        load(&env_var, Some(profile))
    }

    /// `host[:port]` of the endpoint (AWS's for the region without one): the key of its
    /// `[tls."..."]` options in roam.toml.
    pub fn endpoint_authority(&self) -> Option<String> {
        let url = match &self.endpoint {
            Some(url) => url.clone(),
            None => format!("https://s3.{}.amazonaws.com", self.region_name()),
        };
        let uri: ureq::http::Uri = url.parse().ok()?;
        let host = uri.authority()?.host().to_ascii_lowercase();
        Some(match uri.port_u16() {
            Some(port) => format!("{host}:{port}"),
            None => host,
        })
    }

    /// The TLS options of the endpoint, given the host's own (`[tls."HOST:PORT"]`): its
    /// `ca_file`, else [`S3Config::ca_bundle`], replaces the platform's authorities. A
    /// plain `http://` endpoint ignores the bundle, as aws-cli does (a bundle missing
    /// there does not stop it).
    pub fn tls_options(&self, host: Option<&TlsOptions>) -> TlsOptions {
        let mut options = host.cloned().unwrap_or_default();
        let plain = self.endpoint.as_ref().is_some_and(|url| {
            url.get(..7)
                .is_some_and(|scheme| scheme.eq_ignore_ascii_case("http://"))
        });
        if options.ca_file.is_none() && !plain {
            options.ca_file = self.ca_bundle.clone();
        }
        options
    }

    /// The region requests are signed for (and, without an endpoint, sent to).
    pub(super) fn region_name(&self) -> &str {
        self.region.as_deref().unwrap_or(DEFAULT_REGION)
    }
}

fn env_var(name: &str) -> Option<String> {
    std::env::var(name).ok().filter(|v| !v.is_empty())
}

/// Settings from `env` (a lookup of environment variables) and the files it points to.
fn load(env: &dyn Fn(&str) -> Option<String>, explicit: Option<&str>) -> S3Config {
    let profile = explicit.map(str::to_owned).or_else(|| env("AWS_PROFILE"));
    let name = profile.as_deref().unwrap_or("default");
    let home = env("HOME").map(PathBuf::from).unwrap_or_default();
    let file = |var: &str, default: &str| {
        let path = env(var).map_or_else(|| home.join(".aws").join(default), PathBuf::from);
        std::fs::read_to_string(path).unwrap_or_default()
    };
    let credentials_file = section(&file("AWS_SHARED_CREDENTIALS_FILE", "credentials"), name);
    let config_section = if name == "default" {
        name.to_owned()
    } else {
        format!("profile {name}")
    };
    let config_file = section(&file("AWS_CONFIG_FILE", "config"), &config_section);
    let from_env = key_pair(
        env("AWS_ACCESS_KEY_ID"),
        env("AWS_SECRET_ACCESS_KEY"),
        env("AWS_SESSION_TOKEN"),
    );
    let from_files = file_keys(&credentials_file).or_else(|| file_keys(&config_file));
    let keys = if explicit.is_some() {
        from_files.or(from_env)
    } else {
        from_env.or(from_files)
    };
    let (access_key, secret_key, session_token) = keys.unwrap_or_default();
    let setting = |key: &str| config_file.get(key).cloned();
    let endpoint = env("AWS_ENDPOINT_URL_S3")
        .or_else(|| env("AWS_ENDPOINT_URL"))
        .or_else(|| setting("s3.endpoint_url"))
        .or_else(|| setting("endpoint_url"));
    let path_style = match setting("s3.addressing_style").as_deref() {
        Some("path") => true,
        Some("virtual") => false,
        _ => endpoint.is_some(),
    };
    S3Config {
        region: env("AWS_REGION")
            .or_else(|| env("AWS_DEFAULT_REGION"))
            .or_else(|| setting("region")),
        endpoint,
        access_key,
        secret_key,
        session_token,
        path_style,
        profile,
        // Empty means unset (CI images export `AWS_CA_BUNDLE=`).
        ca_bundle: env("AWS_CA_BUNDLE")
            .filter(|v| !v.is_empty())
            .or_else(|| setting("ca_bundle").filter(|v| !v.is_empty()))
            .map(PathBuf::from),
    }
}

type KeyPair = (Option<String>, Option<String>, Option<String>);

/// Access key, secret and token, if both halves of the pair are there.
fn key_pair(
    access: Option<String>,
    secret: Option<String>,
    token: Option<String>,
) -> Option<KeyPair> {
    match (access, secret) {
        (Some(access), Some(secret)) => Some((Some(access), Some(secret), token)),
        _ => None,
    }
}

fn file_keys(section: &HashMap<String, String>) -> Option<KeyPair> {
    let get = |key: &str| section.get(key).filter(|v| !v.is_empty()).cloned();
    key_pair(
        get("aws_access_key_id"),
        get("aws_secret_access_key"),
        get("aws_session_token"),
    )
}

/// The settings of section `[wanted]` of an AWS shared file. A key with an empty value
/// followed by indented lines (`s3 =` / `  endpoint_url = ...`) is a nested block, whose
/// settings are returned as `s3.endpoint_url`.
fn section(text: &str, wanted: &str) -> HashMap<String, String> {
    let mut settings = HashMap::new();
    let mut inside = false;
    let mut block: Option<String> = None;
    for line in text.lines() {
        let trimmed = line.trim();
        if trimmed.is_empty() || trimmed.starts_with(['#', ';']) {
            continue;
        }
        if let Some(name) = trimmed.strip_prefix('[').and_then(|l| l.strip_suffix(']')) {
            inside = name.split_whitespace().collect::<Vec<_>>().join(" ") == wanted;
            block = None;
            continue;
        }
        let Some((key, value)) = trimmed.split_once('=') else {
            continue;
        };
        let (key, value) = (key.trim(), value.trim());
        let nested = line.starts_with([' ', '\t']);
        match &block {
            Some(parent) if nested && inside => {
                settings.insert(format!("{parent}.{key}"), value.to_owned());
            }
            _ if nested => {}
            _ => {
                block = value.is_empty().then(|| key.to_owned());
                if inside && !value.is_empty() {
                    settings.insert(key.to_owned(), value.to_owned());
                }
            }
        }
    }
    settings
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::fs;
    use std::sync::atomic::{AtomicUsize, Ordering};

    const CREDENTIALS: &str = "\
[default]
aws_access_key_id = AKDEFAULT
aws_secret_access_key = SECRETDEFAULT

# a comment
[work]
aws_access_key_id=AKWORK
aws_secret_access_key=SECRETWORK
aws_session_token = TOKENWORK
";

    const CONFIG: &str = "\
[default]
region = eu-central-1

[profile work]
region = us-west-2
endpoint_url = http://generic:1
s3 =
  endpoint_url = http://127.0.0.1:9000
  addressing_style = virtual
[profile  minio]
region = local
endpoint_url = https://minio.example:9000
aws_access_key_id = AKCONFIG
aws_secret_access_key = SECRETCONFIG
";

    /// Loads with an environment of `vars`, a HOME holding the two files above.
    fn load_with(vars: &[(&str, &str)], explicit: Option<&str>) -> S3Config {
        // One HOME per call: the tests run in parallel threads of one process.
        static NEXT: AtomicUsize = AtomicUsize::new(0);
        let n = NEXT.fetch_add(1, Ordering::Relaxed);
        let home = std::env::temp_dir().join(format!("roam-s3-config-{}-{n}", std::process::id()));
        fs::create_dir_all(home.join(".aws")).unwrap();
        fs::write(home.join(".aws/credentials"), CREDENTIALS).unwrap();
        fs::write(home.join(".aws/config"), CONFIG).unwrap();
        let mut env: HashMap<String, String> = vars
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect();
        env.insert("HOME".into(), home.display().to_string());
        let config = load(&|name| env.get(name).cloned(), explicit);
        fs::remove_dir_all(home).unwrap();
        config
    }

    #[test]
    fn the_default_profile_serves_aws() {
        let config = load_with(&[], None);
        assert_eq!(config.access_key.as_deref(), Some("AKDEFAULT"));
        assert_eq!(config.secret_key.as_deref(), Some("SECRETDEFAULT"));
        assert_eq!(config.region.as_deref(), Some("eu-central-1"));
        assert_eq!(config.endpoint, None);
        assert!(!config.path_style);
        assert_eq!(config.profile, None);
    }

    #[test]
    fn the_environment_wins_over_files() {
        let vars = [
            ("AWS_ACCESS_KEY_ID", "AKENV"),
            ("AWS_SECRET_ACCESS_KEY", "SECRETENV"),
            ("AWS_REGION", "ap-south-1"),
            ("AWS_DEFAULT_REGION", "ignored"),
            ("AWS_ENDPOINT_URL", "http://generic:2"),
            ("AWS_ENDPOINT_URL_S3", "http://s3only:3"),
        ];
        let config = load_with(&vars, None);
        assert_eq!(config.access_key.as_deref(), Some("AKENV"));
        assert_eq!(config.session_token, None);
        assert_eq!(config.region.as_deref(), Some("ap-south-1"));
        assert_eq!(config.endpoint.as_deref(), Some("http://s3only:3"));
        assert!(config.path_style, "custom endpoints are path-style");
    }

    #[test]
    fn a_half_pair_in_the_environment_is_ignored() {
        let config = load_with(&[("AWS_ACCESS_KEY_ID", "AKENV")], None);
        assert_eq!(config.access_key.as_deref(), Some("AKDEFAULT"));
        assert_eq!(config.secret_key.as_deref(), Some("SECRETDEFAULT"));
    }

    #[test]
    fn profiles_read_nested_s3_settings() {
        let config = load_with(&[("AWS_PROFILE", "work")], None);
        assert_eq!(config.profile.as_deref(), Some("work"));
        assert_eq!(config.access_key.as_deref(), Some("AKWORK"));
        assert_eq!(config.session_token.as_deref(), Some("TOKENWORK"));
        assert_eq!(config.region.as_deref(), Some("us-west-2"));
        assert_eq!(config.endpoint.as_deref(), Some("http://127.0.0.1:9000"));
        assert!(!config.path_style, "addressing_style = virtual");
    }

    #[test]
    fn keys_may_live_in_the_config_file() {
        let config = load_with(&[("AWS_PROFILE", "minio")], None);
        assert_eq!(config.access_key.as_deref(), Some("AKCONFIG"));
        assert_eq!(
            config.endpoint.as_deref(),
            Some("https://minio.example:9000")
        );
        assert!(config.path_style);
    }

    #[test]
    fn an_explicit_profile_wins_over_the_environment() {
        let vars = [
            ("AWS_PROFILE", "minio"),
            ("AWS_ACCESS_KEY_ID", "AKENV"),
            ("AWS_SECRET_ACCESS_KEY", "SECRETENV"),
        ];
        let config = load_with(&vars, Some("work"));
        assert_eq!(config.profile.as_deref(), Some("work"));
        assert_eq!(config.access_key.as_deref(), Some("AKWORK"));
        let config = load_with(&vars, None);
        assert_eq!(config.access_key.as_deref(), Some("AKENV"));
    }

    #[test]
    fn the_ca_bundle_yields_to_the_hosts_own_ca_file() {
        let config = load_with(&[("AWS_CA_BUNDLE", "/aws/ca.pem")], None);
        assert_eq!(config.ca_bundle, Some(PathBuf::from("/aws/ca.pem")));
        assert_eq!(
            config.tls_options(None).ca_file,
            Some(PathBuf::from("/aws/ca.pem"))
        );
        let own = TlsOptions {
            ca_file: Some("/own/ca.pem".into()),
            insecure: false,
        };
        assert_eq!(config.tls_options(Some(&own)), own);
        let mut plain = config.clone();
        plain.endpoint = Some("HTTP://127.0.0.1:9000".into());
        assert_eq!(plain.tls_options(None), TlsOptions::default());
        // Set but empty, as CI images export it: unset.
        let config = load_with(&[("AWS_CA_BUNDLE", "")], None);
        assert_eq!(config.ca_bundle, None);
        assert_eq!(config.tls_options(None), TlsOptions::default());
    }

    #[test]
    fn endpoints_are_tls_keys() {
        let mut config = load_with(&[("AWS_PROFILE", "minio")], None);
        assert_eq!(
            config.endpoint_authority().as_deref(),
            Some("minio.example:9000")
        );
        config.endpoint = Some("https://S3.Example/base".into());
        assert_eq!(config.endpoint_authority().as_deref(), Some("s3.example"));
        config.endpoint = None;
        config.region = Some("eu-west-3".into());
        assert_eq!(
            config.endpoint_authority().as_deref(),
            Some("s3.eu-west-3.amazonaws.com")
        );
    }

    #[test]
    fn debug_output_hides_keys() {
        let config = load_with(&[("AWS_PROFILE", "work")], None);
        let shown = format!("{config:?}");
        assert!(
            !shown.contains("SECRETWORK") && !shown.contains("AKWORK"),
            "{shown}"
        );
        assert!(!shown.contains("TOKENWORK"), "{shown}");
    }
}
