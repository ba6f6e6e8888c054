//! Where the S3 driver finds its endpoint, region and credentials: the places AWS tools
//! read them, in the same order.
//!
//! - credentials, in aws-cli's order: `AWS_ACCESS_KEY_ID` + `AWS_SECRET_ACCESS_KEY` (+
//!   `AWS_SESSION_TOKEN`); the profile's role (`role_arn` with `source_profile` or
//!   `credential_source`, assumed at STS with the source's credentials; source profiles
//!   may chain, a loop is an error); a web identity (`AWS_WEB_IDENTITY_TOKEN_FILE` +
//!   `AWS_ROLE_ARN`, else the profile's `web_identity_token_file` + `role_arn`); SSO (the
//!   profile's `sso_account_id` + `sso_role_name` with `sso_session` or `sso_start_url`,
//!   the token `aws sso login` cached); the profile's keys in the shared credentials file; its `credential_process`; its keys in
//!   the config file; the EC2 metadata service (unless `AWS_EC2_METADATA_DISABLED=true`).
//!   A pair is always taken whole from one place. A profile named explicitly
//!   ([`S3Config::from_profile`]) comes before the environment, as `aws --profile` does.
//!   What expires is fetched by the driver ([`CredentialSource`]).
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
//! unreadable file is as good as an empty one; a profile other than `default` in neither
//! is an error naming both, as in aws-cli. `[services ...]` sections are not read.
//!
//! A mount may name its own profile, region and endpoint ([`S3Config::for_mount`]): they
//! stand in for `aws --profile`, `AWS_REGION` and `AWS_ENDPOINT_URL_S3` for it alone.

use std::collections::HashMap;
use std::fmt;
use std::path::PathBuf;

use percent_encoding::percent_decode_str;

use super::provider::{AssumeRole, CredentialSource, RoleSource, Sso};
use super::sign::sha1_hex;
use crate::http::TlsOptions;
use crate::{Error, ErrorKind};

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
    /// Where credentials come from when they are not a fixed pair.
    pub credential_source: Option<CredentialSource>,
    /// Where the fixed key pair came from, in words (never a key).
    pub keys_from: Option<String>,
    /// Why no S3 mount can be made with these settings (an unknown profile): the
    /// driver refuses to start with it.
    pub problem: Option<String>,
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
            .field("credential_source", &self.credential_source)
            .field("keys_from", &self.keys_from)
            .field("problem", &self.problem)
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

    /// The settings of one mount, from its URL's query (`s3://BUCKET/PREFIX?SETTINGS`):
    /// `profile=NAME` as `aws --profile` names it, `region=R` and `endpoint=URL` as
    /// `AWS_REGION` and `AWS_ENDPOINT_URL_S3` would set them, for this mount only. Values
    /// are percent-encoded; another name is an error.
    pub fn for_mount(query: &str) -> crate::Result<S3Config> {
        let bad = |why: String| Error::new(ErrorKind::InvalidName, format!("s3 mount: {why}"));
        let (mut profile, mut region, mut endpoint) = (None, None, None);
        for pair in query.split('&').filter(|p| !p.is_empty()) {
            let (name, value) = pair
                .split_once('=')
                .ok_or_else(|| bad(format!("{pair:?} is not NAME=VALUE")))?;
            let value = percent_decode_str(value)
                .decode_utf8()
                .map_err(|e| bad(format!("{name}: {e}")))?
                .into_owned();
            let slot = match name {
                "profile" => &mut profile,
                "region" => &mut region,
                "endpoint" => &mut endpoint,
                _ => {
                    return Err(bad(format!(
                        "unknown setting {name:?} (profile, region, endpoint)"
                    )))
                }
            };
            *slot = Some(value).filter(|v| !v.is_empty());
        }
        let vars = |name: &str| match name {
            "AWS_REGION" if region.is_some() => region.clone(),
            "AWS_ENDPOINT_URL_S3" if endpoint.is_some() => endpoint.clone(),
            _ => env_var(name),
        };
        Ok(load(&vars, profile.as_deref()))
    }

    /// The settings AWS tools would use with the environment variables `vars` gives (the
    /// files they name, and `HOME`, included), for the named profile if any.
    pub fn from_vars(vars: &dyn Fn(&str) -> Option<String>, profile: Option<&str>) -> S3Config {
        load(&|name| vars(name).filter(|v| !v.is_empty()), profile)
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

    /// What these settings came from, for `roam doctor`: the profile, region, endpoint
    /// and where the credentials come from (never a key).
    pub fn sources(&self) -> Vec<(String, String)> {
        let credentials = match (&self.keys_from, &self.credential_source) {
            (Some(from), _) => from.clone(),
            (None, Some(source)) => source.to_string(),
            (None, None) => "none: requests go unsigned".into(),
        };
        vec![
            (
                "AWS profile".into(),
                self.profile.clone().unwrap_or("default".into()),
            ),
            ("region".into(), self.region_name().to_owned()),
            (
                "endpoint".into(),
                self.endpoint.clone().unwrap_or("AWS".into()),
            ),
            ("credentials".into(), credentials),
        ]
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
    let files = Files::read(env);
    let unknown = (name != "default" && !files.has(name)).then(|| {
        let via = if explicit.is_some() {
            ""
        } else {
            " (AWS_PROFILE)"
        };
        format!("the AWS profile {name:?}{via} is {}", files.in_neither())
    });
    let config_file = files.profile(name).1;
    let setting = |key: &str| config_file.get(key).cloned();
    let region = env("AWS_REGION")
        .or_else(|| env("AWS_DEFAULT_REGION"))
        .or_else(|| setting("region"));
    let from_env = key_pair(
        env("AWS_ACCESS_KEY_ID"),
        env("AWS_SECRET_ACCESS_KEY"),
        env("AWS_SESSION_TOKEN"),
    )
    .map(|keys| Found::Keys(keys, "AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY".into()));
    let (role, role_problem) = match role(env, &files, name, region.as_deref(), &mut Vec::new()) {
        Ok(role) => (role.map(Found::Source), None),
        Err(problem) => (None, Some(problem)),
    };
    let (own, chain_problem) = match profile_chain(env, &files, name, region.as_deref()) {
        Ok(own) => (own, None),
        Err(problem) => (None, Some(problem)),
    };
    let from_profile = role.or(own);
    // A broken role or SSO profile matters only where its credentials would be used.
    let profile_problem = if explicit.is_none() && from_env.is_some() {
        None
    } else {
        role_problem.or(chain_problem)
    };
    let found = if explicit.is_some() {
        from_profile.or(from_env)
    } else {
        from_env.or(from_profile)
    };
    let found = found.or_else(|| metadata_service(env).map(Found::Source));
    let ((access_key, secret_key, session_token), credential_source, keys_from) = match found {
        Some(Found::Keys(keys, from)) => (keys, None, Some(from)),
        Some(Found::Source(source)) => (KeyPair::default(), Some(source), None),
        None => (KeyPair::default(), None, None),
    };
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
        region,
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
        credential_source,
        keys_from,
        problem: unknown.or(profile_problem),
    }
}

/// The shared credentials and config files, as read (a missing one is empty).
struct Files {
    /// `AWS_SHARED_CREDENTIALS_FILE`, `AWS_CONFIG_FILE` (else their defaults).
    paths: [PathBuf; 2],
    /// `HOME`, where `.aws/sso/cache` is.
    home: PathBuf,
    credentials: String,
    config: String,
}

impl Files {
    fn read(env: &dyn Fn(&str) -> Option<String>) -> Files {
        let home = env("HOME").map(PathBuf::from).unwrap_or_default();
        let path = |var: &str, default: &str| {
            env(var).map_or_else(|| home.join(".aws").join(default), PathBuf::from)
        };
        let paths = [
            path("AWS_SHARED_CREDENTIALS_FILE", "credentials"),
            path("AWS_CONFIG_FILE", "config"),
        ];
        let [credentials, config] = paths
            .clone()
            .map(|p| std::fs::read_to_string(p).unwrap_or_default());
        Files {
            paths,
            home,
            credentials,
            config,
        }
    }

    /// Whether either file has the profile.
    fn has(&self, name: &str) -> bool {
        has_section(&self.credentials, name) || has_section(&self.config, &config_section(name))
    }

    /// The profile's settings in the credentials file and in the config file.
    fn profile(&self, name: &str) -> (HashMap<String, String>, HashMap<String, String>) {
        (
            section(&self.credentials, name),
            section(&self.config, &config_section(name)),
        )
    }

    /// The profile's settings of both files; the credentials file wins, as in botocore.
    fn merged(&self, name: &str) -> HashMap<String, String> {
        let (credentials, mut settings) = self.profile(name);
        settings.extend(credentials);
        settings
    }

    /// "in neither FILE nor FILE", for messages.
    fn in_neither(&self) -> String {
        format!(
            "in neither {} nor {}",
            self.paths[0].display(),
            self.paths[1].display()
        )
    }

    /// Where a profile's keys were found, in words.
    fn place(&self, config: bool, name: &str) -> String {
        let (path, section) = if config {
            (&self.paths[1], config_section(name))
        } else {
            (&self.paths[0], name.to_owned())
        };
        format!("{} [{section}]", path.display())
    }
}

/// The config file's section of a profile: `default`, else `profile NAME`.
fn config_section(name: &str) -> String {
    if name == "default" {
        name.to_owned()
    } else {
        format!("profile {name}")
    }
}

/// A profile's own credentials after its role, in aws-cli's order: a web identity, SSO,
/// the credentials file's keys, `credential_process`, the config file's keys.
fn profile_chain(
    env: &dyn Fn(&str) -> Option<String>,
    files: &Files,
    name: &str,
    region: Option<&str>,
) -> Result<Option<Found>, String> {
    if let Some(source) = web_identity(env, &files.profile(name).1, region) {
        return Ok(Some(Found::Source(source)));
    }
    if let Some(source) = sso(env, files, name)? {
        return Ok(Some(Found::Source(source)));
    }
    let (credentials_file, config_file) = files.profile(name);
    let process = config_file
        .get("credential_process")
        .or_else(|| credentials_file.get("credential_process"))
        .map(|command| Found::Source(CredentialSource::Process(command.clone())));
    Ok(file_keys(&credentials_file)
        .map(|k| Found::Keys(k, files.place(false, name)))
        .or(process)
        .or_else(|| file_keys(&config_file).map(|k| Found::Keys(k, files.place(true, name)))))
}

/// The profile's SSO role: `sso_account_id` + `sso_role_name`, with `sso_session` (whose
/// `[sso-session NAME]` has `sso_region` and `sso_start_url`) or the legacy
/// `sso_start_url` + `sso_region` of the profile. The token is the cache file named by the
/// SHA-1 of the session's name (legacy: of the start URL), as botocore names it.
fn sso(
    env: &dyn Fn(&str) -> Option<String>,
    files: &Files,
    name: &str,
) -> Result<Option<CredentialSource>, String> {
    let settings = files.profile(name).1;
    let get = |key: &str| settings.get(key).filter(|v| !v.is_empty()).cloned();
    let (session, key) = match (get("sso_session"), get("sso_start_url")) {
        (Some(session), _) => {
            let section = section(&files.config, &format!("sso-session {session}"));
            let region = section.get("sso_region").filter(|v| !v.is_empty()).cloned();
            (
                region.ok_or(format!("[sso-session {session}] has no sso_region")),
                session,
            )
        }
        (None, Some(url)) => (
            get("sso_region").ok_or(format!(
                "AWS profile {name:?} has sso_start_url but no sso_region"
            )),
            url,
        ),
        (None, None) => return Ok(None),
    };
    let region = session?;
    let (Some(account_id), Some(role_name)) = (get("sso_account_id"), get("sso_role_name")) else {
        return Err(format!(
            "AWS profile {name:?} uses SSO but lacks sso_account_id or sso_role_name"
        ));
    };
    let portal = env("AWS_ENDPOINT_URL_SSO")
        .or_else(|| env("AWS_ENDPOINT_URL"))
        .unwrap_or_else(|| format!("https://portal.sso.{region}.amazonaws.com"));
    let token_file = files
        .home
        .join(".aws/sso/cache")
        .join(format!("{}.json", sha1_hex(key.as_bytes())));
    Ok(Some(CredentialSource::Sso(Box::new(Sso {
        token_file,
        portal,
        account_id,
        role_name,
        profile: name.to_owned(),
    }))))
}

/// The profile's role to assume, as aws-cli reads it: `role_arn` with `source_profile`
/// or `credential_source` (with `web_identity_token_file` it is a web identity instead).
/// `visited`: the profiles whose role led here, to refuse a loop.
fn role(
    env: &dyn Fn(&str) -> Option<String>,
    files: &Files,
    name: &str,
    region: Option<&str>,
    visited: &mut Vec<String>,
) -> Result<Option<CredentialSource>, String> {
    let settings = files.merged(name);
    let get = |key: &str| settings.get(key).filter(|v| !v.is_empty()).cloned();
    let Some(role_arn) = get("role_arn").filter(|_| get("web_identity_token_file").is_none())
    else {
        return Ok(None);
    };
    visited.push(name.to_owned());
    let source = match (get("source_profile"), get("credential_source")) {
        (Some(source), _) => source_profile(env, files, name, &source, region, visited)?,
        (None, Some(source)) => named_source(env, &source)?,
        (None, None) => return Ok(None),
    };
    let duration_seconds = get("duration_seconds")
        .map(|v| {
            v.parse()
                .map_err(|_| format!("duration_seconds = {v} of AWS profile {name:?} is no number"))
        })
        .transpose()?;
    Ok(Some(CredentialSource::AssumeRole(Box::new(AssumeRole {
        role_arn,
        session_name: get("role_session_name").unwrap_or_else(|| "roam".into()),
        external_id: get("external_id"),
        duration_seconds,
        sts: sts_endpoint(env, region),
        region: region.unwrap_or(DEFAULT_REGION).to_owned(),
        source,
    }))))
}

/// The credentials of `parent`'s `source_profile` `name`: its own keys if it has some (a
/// profile may name itself to assume a role with them), else its role, else the rest of
/// its chain, never the environment's credentials (as in botocore).
fn source_profile(
    env: &dyn Fn(&str) -> Option<String>,
    files: &Files,
    parent: &str,
    name: &str,
    region: Option<&str>,
    visited: &mut Vec<String>,
) -> Result<RoleSource, String> {
    if !files.has(name) {
        return Err(format!(
            "the source_profile {name:?} of AWS profile {parent:?} is {}",
            files.in_neither()
        ));
    }
    let (credentials_file, config_file) = files.profile(name);
    let has_keys = file_keys(&credentials_file)
        .or_else(|| file_keys(&config_file))
        .is_some();
    if visited.iter().any(|v| v == name) && !(name == parent && has_keys) {
        return Err(format!(
            "the AWS profiles {} -> {name} lead to each other in a loop (source_profile)",
            visited.join(" -> ")
        ));
    }
    if !has_keys {
        if let Some(role) = role(env, files, name, region, visited)? {
            return Ok(RoleSource::Obtained(role));
        }
    }
    let without_env_identity = |var: &str| match var {
        "AWS_WEB_IDENTITY_TOKEN_FILE" | "AWS_ROLE_ARN" | "AWS_ROLE_SESSION_NAME" => None,
        _ => env(var),
    };
    match profile_chain(&without_env_identity, files, name, region)? {
        Some(Found::Keys(keys, _)) => role_keys(keys),
        Some(Found::Source(source)) => Some(RoleSource::Obtained(source)),
        None => None,
    }
    .ok_or_else(|| {
        format!("the source_profile {name:?} of AWS profile {parent:?} has no credentials")
    })
}

/// A `credential_source`: `Environment` or `Ec2InstanceMetadata` (roam runs in no ECS
/// container of its own, so `EcsContainer` is refused).
fn named_source(env: &dyn Fn(&str) -> Option<String>, name: &str) -> Result<RoleSource, String> {
    match name {
        "Environment" => key_pair(
            env("AWS_ACCESS_KEY_ID"),
            env("AWS_SECRET_ACCESS_KEY"),
            env("AWS_SESSION_TOKEN"),
        )
        .and_then(role_keys)
        .ok_or_else(|| {
            "credential_source = Environment, but AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY \
             are not both set"
                .into()
        }),
        "Ec2InstanceMetadata" => Ok(RoleSource::Obtained(CredentialSource::Imds {
            endpoint: imds_endpoint(env),
        })),
        other => Err(format!(
            "credential_source = {other} is not supported (Environment, Ec2InstanceMetadata)"
        )),
    }
}

/// A whole key pair as a role's source.
fn role_keys((access, secret, token): KeyPair) -> Option<RoleSource> {
    Some(RoleSource::Keys {
        access_key: access?,
        secret_key: secret?,
        session_token: token,
    })
}

/// STS's URL: `AWS_ENDPOINT_URL_STS`, `AWS_ENDPOINT_URL`, else AWS's in the region.
fn sts_endpoint(env: &dyn Fn(&str) -> Option<String>, region: Option<&str>) -> String {
    env("AWS_ENDPOINT_URL_STS")
        .or_else(|| env("AWS_ENDPOINT_URL"))
        .unwrap_or_else(|| {
            format!(
                "https://sts.{}.amazonaws.com",
                region.unwrap_or(DEFAULT_REGION)
            )
        })
}

/// Where credentials were found: a fixed pair (and where, in words), or a source of
/// expiring ones.
enum Found {
    Keys(KeyPair, String),
    Source(CredentialSource),
}

/// `AWS_WEB_IDENTITY_TOKEN_FILE` + `AWS_ROLE_ARN` (+ `AWS_ROLE_SESSION_NAME`), else the
/// profile's `web_identity_token_file` + `role_arn` (+ `role_session_name`); STS at
/// `AWS_ENDPOINT_URL_STS`, `AWS_ENDPOINT_URL`, else AWS's in the region.
fn web_identity(
    env: &dyn Fn(&str) -> Option<String>,
    profile: &HashMap<String, String>,
    region: Option<&str>,
) -> Option<CredentialSource> {
    let setting = |key: &str| profile.get(key).filter(|v| !v.is_empty()).cloned();
    let (token_file, role_arn, session_name) =
        match (env("AWS_WEB_IDENTITY_TOKEN_FILE"), env("AWS_ROLE_ARN")) {
            (Some(file), Some(role)) => (file, role, env("AWS_ROLE_SESSION_NAME")),
            _ => (
                setting("web_identity_token_file")?,
                setting("role_arn")?,
                setting("role_session_name"),
            ),
        };
    Some(CredentialSource::WebIdentity {
        token_file: PathBuf::from(token_file),
        role_arn,
        session_name: session_name.unwrap_or_else(|| "roam".into()),
        sts: sts_endpoint(env, region),
    })
}

/// The EC2 metadata service, unless `AWS_EC2_METADATA_DISABLED` is `true`.
fn metadata_service(env: &dyn Fn(&str) -> Option<String>) -> Option<CredentialSource> {
    if env("AWS_EC2_METADATA_DISABLED").is_some_and(|v| v.eq_ignore_ascii_case("true")) {
        return None;
    }
    Some(CredentialSource::Imds {
        endpoint: imds_endpoint(env),
    })
}

/// `AWS_EC2_METADATA_SERVICE_ENDPOINT`, else the link-local address of EC2's.
fn imds_endpoint(env: &dyn Fn(&str) -> Option<String>) -> String {
    env("AWS_EC2_METADATA_SERVICE_ENDPOINT").unwrap_or_else(|| "http://169.254.169.254".into())
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

/// The name of the section a line opens (`[ profile  x ]` is `profile x`), if it opens one.
fn section_header(trimmed: &str) -> Option<String> {
    let name = trimmed.strip_prefix('[')?.strip_suffix(']')?;
    Some(name.split_whitespace().collect::<Vec<_>>().join(" "))
}

/// Whether an AWS shared file has a section `[wanted]`.
fn has_section(text: &str, wanted: &str) -> bool {
    text.lines()
        .any(|line| section_header(line.trim()).is_some_and(|name| name == wanted))
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
        if let Some(name) = section_header(trimmed) {
            inside = name == wanted;
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
[profile looped]
role_arn = arn:aws:iam::1:role/r
source_profile = looped
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

    #[test]
    fn a_broken_role_is_an_error_where_it_would_be_used() {
        let problem = load_with(&[("AWS_PROFILE", "looped")], None).problem;
        assert!(problem.is_some_and(|p| p.contains("loop")));
        let keys = [
            ("AWS_PROFILE", "looped"),
            ("AWS_ACCESS_KEY_ID", "AKENV"),
            ("AWS_SECRET_ACCESS_KEY", "SECRETENV"),
        ];
        let config = load_with(&keys, None);
        assert_eq!(config.problem, None, "the environment's keys come first");
        assert_eq!(config.access_key.as_deref(), Some("AKENV"));
        assert!(load_with(&keys, Some("looped")).problem.is_some());
    }

    #[test]
    fn an_unknown_profile_is_an_error_naming_it_and_the_files() {
        let config = load_with(&[("AWS_PROFILE", "nosuch")], None);
        let problem = config.problem.expect("an unknown profile is refused");
        assert!(problem.contains("\"nosuch\" (AWS_PROFILE)"), "{problem}");
        assert!(problem.contains(".aws/credentials") && problem.contains(".aws/config"));
        for known in ["work", "minio", "default"] {
            assert_eq!(load_with(&[("AWS_PROFILE", known)], None).problem, None);
        }
        assert!(load_with(&[], Some("nosuch")).problem.is_some());
    }

    /// The role of `profile` in a config file of `text` only, with `vars`.
    fn role_of(text: &str, profile: &str, vars: &[(&str, &str)]) -> Result<AssumeRole, String> {
        let files = Files {
            paths: ["/c".into(), "/f".into()],
            home: "/h".into(),
            credentials: String::new(),
            config: text.into(),
        };
        let env = |name: &str| {
            vars.iter()
                .find(|(k, _)| *k == name)
                .map(|(_, v)| v.to_string())
        };
        match role(&env, &files, profile, None, &mut Vec::new())? {
            Some(CredentialSource::AssumeRole(role)) => Ok(*role),
            other => panic!("no role: {other:?}"),
        }
    }

    #[test]
    fn roles_take_their_settings_and_source_as_aws_cli_does() {
        let text = "\
[profile base]
aws_access_key_id = AKBASE
aws_secret_access_key = SKBASE
[profile admin]
role_arn = arn:aws:iam::1:role/admin
source_profile = base
role_session_name = me
external_id = ext
duration_seconds = 900
[profile deep]
role_arn = arn:aws:iam::2:role/deep
source_profile = admin
[profile itself]
role_arn = arn:aws:iam::1:role/self
source_profile = itself
aws_access_key_id = AKSELF
aws_secret_access_key = SKSELF
[profile env]
role_arn = arn:aws:iam::1:role/env
credential_source = Environment
[profile ecs]
role_arn = arn:aws:iam::1:role/ecs
credential_source = EcsContainer
[profile a]
role_arn = arn:aws:iam::1:role/a
source_profile = b
[profile b]
role_arn = arn:aws:iam::1:role/b
source_profile = a
[profile orphan]
role_arn = arn:aws:iam::1:role/o
source_profile = missing
";
        let sts = [("AWS_ENDPOINT_URL_STS", "http://sts.local")];
        let admin = role_of(text, "admin", &sts).unwrap();
        assert_eq!(
            (admin.session_name.as_str(), admin.external_id.as_deref()),
            ("me", Some("ext"))
        );
        assert_eq!(admin.duration_seconds, Some(900));
        assert_eq!(
            (admin.sts.as_str(), admin.region.as_str()),
            ("http://sts.local", "us-east-1")
        );
        let base = RoleSource::Keys {
            access_key: "AKBASE".into(),
            secret_key: "SKBASE".into(),
            session_token: None,
        };
        assert_eq!(admin.source, base);
        assert!(!format!("{admin:?}").contains("SKBASE"), "Debug hides keys");
        let deep = role_of(text, "deep", &[]).unwrap();
        assert_eq!(deep.session_name, "roam");
        assert_eq!(
            deep.source,
            RoleSource::Obtained(CredentialSource::AssumeRole(Box::new(
                role_of(text, "admin", &[]).unwrap()
            )))
        );
        // A profile naming itself assumes the role with its own keys.
        let itself = role_of(text, "itself", &[]).unwrap();
        assert!(
            matches!(itself.source, RoleSource::Keys { ref access_key, .. } if access_key == "AKSELF")
        );
        let keys = [
            ("AWS_ACCESS_KEY_ID", "AKENV"),
            ("AWS_SECRET_ACCESS_KEY", "SKENV"),
        ];
        let env = role_of(text, "env", &keys).unwrap();
        assert!(
            matches!(env.source, RoleSource::Keys { ref access_key, .. } if access_key == "AKENV")
        );
        let refused = |profile: &str, vars: &[(&str, &str)], words: &str| {
            let problem = role_of(text, profile, vars).unwrap_err();
            assert!(problem.contains(words), "{profile}: {problem}");
        };
        refused("env", &[], "AWS_ACCESS_KEY_ID");
        refused("ecs", &keys, "EcsContainer is not supported");
        refused("a", &keys, "a -> b -> a lead to each other in a loop");
        refused(
            "orphan",
            &keys,
            "\"missing\" of AWS profile \"orphan\" is in neither /c nor /f",
        );
    }

    #[test]
    fn mount_settings_are_profile_region_and_endpoint_only() {
        let err = S3Config::for_mount("profile=x&bucket=y").unwrap_err();
        assert!(
            err.message.contains("unknown setting \"bucket\""),
            "{}",
            err.message
        );
        assert!(S3Config::for_mount("region").is_err());
        let config = S3Config::for_mount("region=eu-west-3&endpoint=http%3A%2F%2Fh%3A1").unwrap();
        assert_eq!(config.region.as_deref(), Some("eu-west-3"));
        assert_eq!(config.endpoint.as_deref(), Some("http://h:1"));
    }

    #[test]
    fn sso_profiles_name_botocores_token_cache_files() {
        let text = "\
[profile dev]
sso_session = my-sso
sso_account_id = 111122223333
sso_role_name = Reader
[sso-session my-sso]
sso_region = eu-west-1
sso_start_url = https://example.awsapps.com/start
[profile legacy]
sso_start_url = https://example.awsapps.com/start
sso_region = us-east-2
sso_account_id = 444455556666
sso_role_name = Admin
[profile partial]
sso_session = my-sso
sso_role_name = Reader
";
        let files = Files {
            paths: ["/c".into(), "/f".into()],
            home: "/h".into(),
            credentials: String::new(),
            config: text.into(),
        };
        let sso_of = |name: &str, vars: &[(&str, &str)]| {
            let env = |var: &str| {
                vars.iter()
                    .find(|(k, _)| *k == var)
                    .map(|(_, v)| v.to_string())
            };
            match sso(&env, &files, name) {
                Ok(Some(CredentialSource::Sso(sso))) => Ok(*sso),
                Ok(other) => panic!("{name}: {other:?}"),
                Err(problem) => Err(problem),
            }
        };
        let dev = sso_of("dev", &[]).unwrap();
        assert_eq!(
            dev.token_file,
            PathBuf::from("/h/.aws/sso/cache/0ad374308c5a4e22f723adf10145eafad7c4031c.json")
        );
        assert_eq!(dev.portal, "https://portal.sso.eu-west-1.amazonaws.com");
        assert_eq!(
            (dev.account_id.as_str(), dev.role_name.as_str()),
            ("111122223333", "Reader")
        );
        let legacy = sso_of("legacy", &[("AWS_ENDPOINT_URL_SSO", "http://portal.local")]).unwrap();
        assert_eq!(
            legacy.token_file,
            PathBuf::from("/h/.aws/sso/cache/e8be5486177c5b5392bd9aa76563515b29358e6e.json")
        );
        assert_eq!(legacy.portal, "http://portal.local");
        let problem = sso_of("partial", &[]).unwrap_err();
        assert!(problem.contains("sso_account_id"), "{problem}");
    }

    #[test]
    fn obtained_credentials_follow_aws_clis_order() {
        let web = [
            ("AWS_WEB_IDENTITY_TOKEN_FILE", "/run/token"),
            ("AWS_ROLE_ARN", "arn:aws:iam::1:role/r"),
            ("AWS_ENDPOINT_URL_STS", "http://sts.local"),
        ];
        let config = load_with(&web, None);
        assert_eq!(
            config.access_key, None,
            "web identity comes before the files"
        );
        assert_eq!(
            config.credential_source,
            Some(CredentialSource::WebIdentity {
                token_file: "/run/token".into(),
                role_arn: "arn:aws:iam::1:role/r".into(),
                session_name: "roam".into(),
                sts: "http://sts.local".into(),
            })
        );
        let with_env = [
            web[0],
            web[1],
            ("AWS_ACCESS_KEY_ID", "AK"),
            ("AWS_SECRET_ACCESS_KEY", "SK"),
        ];
        let config = load_with(&with_env, None);
        assert_eq!(config.access_key.as_deref(), Some("AK"));
        assert_eq!(
            config.credential_source, None,
            "the environment's keys come first"
        );
        // No keys anywhere (a profile without them): the metadata service, unless disabled.
        let config = load_with(
            &[
                ("AWS_SHARED_CREDENTIALS_FILE", "/none"),
                ("AWS_CONFIG_FILE", "/none"),
            ],
            None,
        );
        assert_eq!(
            config.credential_source,
            Some(CredentialSource::Imds {
                endpoint: "http://169.254.169.254".into()
            })
        );
        let config = load_with(
            &[
                ("AWS_SHARED_CREDENTIALS_FILE", "/none"),
                ("AWS_CONFIG_FILE", "/none"),
                ("AWS_EC2_METADATA_DISABLED", "true"),
            ],
            None,
        );
        assert_eq!(config.credential_source, None);
        assert_eq!(config.access_key, None);
    }
}
