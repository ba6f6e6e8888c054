//! Credentials S3 obtains rather than reads, as aws-cli obtains them: the output of a
//! profile's `credential_process`, STS `AssumeRoleWithWebIdentity` for a web identity token
//! (Kubernetes service accounts, CI providers), STS `AssumeRole` signed with a source's
//! credentials (a profile's `role_arn`), an SSO portal's role credentials for the token
//! `aws sso login` cached, and the instance role of the EC2 metadata service (IMDSv2). Each comes with an expiry; [`Keys`] fetches anew five minutes before
//! it, so a request is never signed with credentials about to lapse.
//!
//! Our own code on the blocking HTTP client the driver already has, not `aws-config` (see
//! docs/ARCHITECTURE.md "Credentials").

use std::fmt;
use std::path::PathBuf;
use std::process::{Command, Stdio};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Mutex;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use percent_encoding::{utf8_percent_encode, NON_ALPHANUMERIC};
use ureq::http::Response;
use ureq::Body;

use super::sign::{Credentials, Signer, Unsigned};
use super::time::parse_iso8601;
use crate::http::HttpClient;
use crate::{Error, ErrorKind, Result};

/// How long before their expiry credentials are fetched again.
const REFRESH_AHEAD: Duration = Duration::from_secs(5 * 60);

/// The metadata service's timeout, per request: off EC2 nothing answers there, and
/// anonymous requests should not wait long for that (botocore waits one second too).
const IMDS_TIMEOUT: Duration = Duration::from_secs(1);

/// Where credentials that expire come from.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum CredentialSource {
    /// A profile's `credential_process`, run by `/bin/sh -c`; it prints aws-cli's JSON
    /// (`Version` 1, `AccessKeyId`, `SecretAccessKey`, optional `SessionToken` and
    /// `Expiration`).
    Process(String),
    /// `AWS_WEB_IDENTITY_TOKEN_FILE` and `AWS_ROLE_ARN` (or the profile's
    /// `web_identity_token_file` and `role_arn`): the token, read anew at each fetch,
    /// exchanged at STS for the role's credentials.
    WebIdentity {
        token_file: PathBuf,
        role_arn: String,
        session_name: String,
        /// STS's URL: `AWS_ENDPOINT_URL_STS`, `AWS_ENDPOINT_URL`, else AWS's regional one.
        sts: String,
    },
    /// The EC2 instance metadata service, IMDSv2: a session token (`PUT`), then the role's
    /// credentials. `endpoint`: `AWS_EC2_METADATA_SERVICE_ENDPOINT`, else
    /// `http://169.254.169.254`.
    Imds { endpoint: String },
    /// A profile's SSO account and role: the token `aws sso login` left in `token_file`
    /// (read at each fetch), exchanged at the portal for the role's credentials.
    Sso(Box<Sso>),
    /// A profile's `role_arn` with `source_profile` or `credential_source`: STS
    /// `AssumeRole`, signed with the source's credentials.
    AssumeRole(Box<AssumeRole>),
}

/// An SSO role, as aws-cli reads it from a profile.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Sso {
    /// `~/.aws/sso/cache/SHA1.json`.
    pub token_file: PathBuf,
    /// The portal's URL: `AWS_ENDPOINT_URL_SSO`, `AWS_ENDPOINT_URL`, else
    /// `https://portal.sso.REGION.amazonaws.com`.
    pub portal: String,
    pub account_id: String,
    pub role_name: String,
    /// The profile, for telling the user how to log in again.
    pub profile: String,
}

/// A role to assume, as aws-cli reads it from a profile.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct AssumeRole {
    pub role_arn: String,
    /// `role_session_name`, else `roam`.
    pub session_name: String,
    pub external_id: Option<String>,
    pub duration_seconds: Option<u32>,
    /// STS's URL, as for [`CredentialSource::WebIdentity`].
    pub sts: String,
    /// The region the request to STS is signed for.
    pub region: String,
    /// What signs the request to STS.
    pub source: RoleSource,
}

/// The credentials a role is assumed with.
#[derive(Clone, PartialEq, Eq)]
pub enum RoleSource {
    /// A fixed key pair: the source profile's, or the environment's.
    Keys {
        access_key: String,
        secret_key: String,
        session_token: Option<String>,
    },
    /// Credentials obtained in turn (a chain of roles, a process, the metadata service).
    Obtained(CredentialSource),
}

// By hand, so that `{:?}` never prints a key.
impl fmt::Debug for RoleSource {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            RoleSource::Keys { .. } => f.write_str("Keys(<redacted>)"),
            RoleSource::Obtained(source) => f.debug_tuple("Obtained").field(source).finish(),
        }
    }
}

impl fmt::Display for CredentialSource {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            CredentialSource::Process(_) => f.write_str("credential_process"),
            CredentialSource::WebIdentity { role_arn, sts, .. } => {
                write!(f, "web identity for {role_arn} at {sts}")
            }
            CredentialSource::Imds { endpoint } => write!(f, "the metadata service {endpoint}"),
            CredentialSource::Sso(sso) => write!(
                f,
                "SSO role {} of account {} at {}",
                sso.role_name, sso.account_id, sso.portal
            ),
            CredentialSource::AssumeRole(role) => {
                write!(f, "role {} at {}, assumed with ", role.role_arn, role.sts)?;
                match &role.source {
                    RoleSource::Keys { .. } => f.write_str("a key pair"),
                    RoleSource::Obtained(source) => write!(f, "{source}"),
                }
            }
        }
    }
}

/// Credentials as issued, with their expiry (none: they do not expire). `Debug` shows no key.
#[derive(Debug)]
struct Issued {
    credentials: Credentials,
    expires: Option<SystemTime>,
}

impl Issued {
    fn fresh(&self, now: SystemTime) -> bool {
        self.expires.is_none_or(|at| now + REFRESH_AHEAD < at)
    }
}

/// The credentials requests are signed with: fixed ones, none (anonymous), or those of a
/// [`CredentialSource`], fetched at first use and again before they expire.
pub(super) struct Keys {
    fixed: Option<Credentials>,
    source: Option<CredentialSource>,
    http: HttpClient,
    issued: Mutex<Option<Issued>>,
    /// The metadata service did not answer: requests stay anonymous from then on, rather
    /// than each waiting for it again.
    no_metadata: AtomicBool,
}

impl fmt::Debug for Keys {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Keys")
            .field("fixed", &self.fixed.is_some())
            .field("source", &self.source.as_ref().map(ToString::to_string))
            .finish()
    }
}

impl Keys {
    pub fn new(
        fixed: Option<Credentials>,
        source: Option<CredentialSource>,
        http: HttpClient,
    ) -> Keys {
        Keys {
            fixed,
            source,
            http,
            issued: Mutex::new(None),
            no_metadata: AtomicBool::new(false),
        }
    }

    /// The credentials to sign with now; `None`: anonymous. The metadata service failing
    /// leaves requests anonymous (public buckets), as there is nothing else to try; every
    /// other source failing fails the request with its reason.
    pub fn current(&self) -> Result<Option<Credentials>> {
        let Some(source) = &self.source else {
            return Ok(self.fixed.clone());
        };
        if self.no_metadata.load(Ordering::Relaxed) {
            return Ok(None);
        }
        let mut issued = self.issued.lock().unwrap_or_else(|e| e.into_inner());
        let now = SystemTime::now();
        if let Some(held) = issued.as_ref().filter(|held| held.fresh(now)) {
            return Ok(Some(held.credentials.clone()));
        }
        match fetch(source, &self.http) {
            Ok(new) => {
                tracing::debug!("S3 credentials from {source}, until {:?}", new.expires);
                let credentials = new.credentials.clone();
                *issued = Some(new);
                Ok(Some(credentials))
            }
            Err(e) if matches!(source, CredentialSource::Imds { .. }) => {
                tracing::debug!("no credentials from {source}, requests go anonymous: {e}");
                self.no_metadata.store(true, Ordering::Relaxed);
                Ok(None)
            }
            Err(e) => Err(e),
        }
    }
}

fn fetch(source: &CredentialSource, http: &HttpClient) -> Result<Issued> {
    match source {
        CredentialSource::Process(command) => process(command),
        CredentialSource::WebIdentity {
            token_file,
            role_arn,
            session_name,
            sts,
        } => web_identity(http, token_file, role_arn, session_name, sts),
        CredentialSource::Imds { endpoint } => imds(endpoint),
        CredentialSource::Sso(sso) => sso_role(http, sso, SystemTime::now()),
        CredentialSource::AssumeRole(role) => assume_role(http, role),
    }
}

fn failure(source: &str, why: impl fmt::Display) -> Error {
    Error::new(
        ErrorKind::PermissionDenied,
        format!("S3 credentials from {source}: {why}"),
    )
}

/// Runs `credential_process` and reads its JSON. Its stderr is the user's to see.
fn process(command: &str) -> Result<Issued> {
    let what = "credential_process";
    let out = Command::new("/bin/sh")
        .args(["-c", command])
        .stdin(Stdio::null())
        .stderr(Stdio::inherit())
        .output()
        .map_err(|e| failure(what, e))?;
    if !out.status.success() {
        return Err(failure(
            what,
            format!("the command failed ({})", out.status),
        ));
    }
    let json: serde_json::Value =
        serde_json::from_slice(&out.stdout).map_err(|e| failure(what, e))?;
    if json["Version"] != 1 {
        return Err(failure(what, "its output is not Version 1"));
    }
    issued_from_json(&json, "SessionToken").ok_or_else(|| failure(what, "no key pair in it"))
}

/// The non-empty string at `key` of `json`.
fn json_text(json: &serde_json::Value, key: &str) -> Option<String> {
    json[key]
        .as_str()
        .filter(|v| !v.is_empty())
        .map(str::to_owned)
}

/// Credentials of a JSON document (`credential_process`, the metadata service) whose
/// session token is `token`.
fn issued_from_json(json: &serde_json::Value, token: &str) -> Option<Issued> {
    let text = |key: &str| json_text(json, key);
    Some(Issued {
        credentials: Credentials {
            access_key: text("AccessKeyId")?,
            secret_key: text("SecretAccessKey")?,
            session_token: text(token),
        },
        expires: text("Expiration").and_then(|at| parse_iso8601(&at)),
    })
}

/// STS `AssumeRoleWithWebIdentity`: unsigned, the token is the proof.
fn web_identity(
    http: &HttpClient,
    token_file: &std::path::Path,
    role_arn: &str,
    session_name: &str,
    sts: &str,
) -> Result<Issued> {
    let what = format!("web identity at {sts}");
    let token = std::fs::read_to_string(token_file)
        .map_err(|e| failure(&what, format!("{}: {e}", token_file.display())))?;
    let form = format!(
        "Action=AssumeRoleWithWebIdentity&Version=2011-06-15&RoleArn={}&RoleSessionName={}&WebIdentityToken={}",
        enc(role_arn),
        enc(session_name),
        enc(token.trim())
    );
    sts_call(http, sts, &what, &form, None)
}

/// STS `AssumeRole`, signed with the source's credentials (fetched anew each time: a
/// role's credentials outlive few of its source's refreshes).
fn assume_role(http: &HttpClient, role: &AssumeRole) -> Result<Issued> {
    let what = format!("role {} at {}", role.role_arn, role.sts);
    let credentials = match &role.source {
        RoleSource::Keys {
            access_key,
            secret_key,
            session_token,
        } => Credentials {
            access_key: access_key.clone(),
            secret_key: secret_key.clone(),
            session_token: session_token.clone(),
        },
        RoleSource::Obtained(source) => fetch(source, http)?.credentials,
    };
    let mut form = format!(
        "Action=AssumeRole&Version=2011-06-15&RoleArn={}&RoleSessionName={}",
        enc(&role.role_arn),
        enc(&role.session_name)
    );
    if let Some(id) = &role.external_id {
        form.push_str(&format!("&ExternalId={}", enc(id)));
    }
    if let Some(seconds) = role.duration_seconds {
        form.push_str(&format!("&DurationSeconds={seconds}"));
    }
    let signer = Signer {
        credentials: Some(credentials),
        region: role.region.clone(),
        service: "sts",
    };
    sts_call(http, &role.sts, &what, &form, Some(signer))
}

/// POSTs `form` to STS, signed by `signer` if any, and reads the credentials of the reply.
fn sts_call(
    http: &HttpClient,
    sts: &str,
    what: &str,
    form: &str,
    signer: Option<Signer>,
) -> Result<Issued> {
    let content_type = "application/x-www-form-urlencoded";
    let mut request = http.agent.post(sts).header("content-type", content_type);
    if let Some(signer) = signer {
        let uri: ureq::http::Uri = sts.parse().map_err(|e| failure(what, e))?;
        let host = uri
            .authority()
            .ok_or_else(|| failure(what, "no host in the URL"))?
            .to_string();
        let unsigned = Unsigned {
            method: "POST",
            path: uri.path(),
            query: "",
            headers: vec![
                ("content-type".into(), content_type.into()),
                ("host".into(), host),
            ],
            body: form.as_bytes(),
        };
        for (name, value) in signer.sign(unsigned, SystemTime::now()) {
            if name != "content-type" && name != "host" {
                request = request.header(name, value);
            }
        }
    }
    let response = request
        .send(form.as_bytes())
        .map_err(|e| failure(what, e))?;
    let body = body_text(response, what)?;
    super::xml::sts_credentials(&body)
        .map(|(credentials, expires)| Issued {
            credentials,
            expires: expires.and_then(|at| parse_iso8601(&at)),
        })
        .ok_or_else(|| {
            failure(
                what,
                format!("no credentials in the reply: {}", one_line(&body)),
            )
        })
}

/// The portal's `GetRoleCredentials` with the cached token, refused before asking if the
/// token expired by `now`.
fn sso_role(http: &HttpClient, sso: &Sso, now: SystemTime) -> Result<Issued> {
    let what = format!("SSO at {}", sso.portal);
    let login = format!("run `aws sso login --profile {}`", sso.profile);
    let file = sso.token_file.display();
    let text = std::fs::read_to_string(&sso.token_file)
        .map_err(|e| failure(&what, format!("no token in {file} ({e}): {login}")))?;
    let token: serde_json::Value =
        serde_json::from_str(&text).map_err(|e| failure(&what, format!("{file}: {e}")))?;
    let field = |key: &str| token[key].as_str().filter(|v| !v.is_empty());
    let (Some(access_token), Some(expires)) = (field("accessToken"), field("expiresAt")) else {
        return Err(failure(
            &what,
            format!("no accessToken and expiresAt in {file}: {login}"),
        ));
    };
    if parse_iso8601(expires).is_none_or(|at| at <= now) {
        return Err(failure(
            &what,
            format!("the token expired ({expires}): {login}"),
        ));
    }
    let url = format!(
        "{}/federation/credentials?role_name={}&account_id={}",
        sso.portal.trim_end_matches('/'),
        enc(&sso.role_name),
        enc(&sso.account_id)
    );
    let response = http
        .agent
        .get(&url)
        .header("x-amz-sso_bearer_token", access_token)
        .call()
        .map_err(|e| failure(&what, e))?;
    let reply: serde_json::Value =
        serde_json::from_str(&body_text(response, &what)?).map_err(|e| failure(&what, e))?;
    role_credentials(&reply["roleCredentials"])
        .ok_or_else(|| failure(&what, "no roleCredentials in the reply"))
}

/// The portal's `roleCredentials`, whose `expiration` is in milliseconds since 1970.
fn role_credentials(json: &serde_json::Value) -> Option<Issued> {
    let text = |key: &str| json_text(json, key);
    Some(Issued {
        credentials: Credentials {
            access_key: text("accessKeyId")?,
            secret_key: text("secretAccessKey")?,
            session_token: text("sessionToken"),
        },
        expires: json["expiration"]
            .as_u64()
            .map(|ms| UNIX_EPOCH + Duration::from_millis(ms)),
    })
}

/// A value percent-encoded for a form.
fn enc(value: &str) -> String {
    utf8_percent_encode(value, NON_ALPHANUMERIC).to_string()
}

/// IMDSv2: a session token, the role's name, then its credentials.
fn imds(endpoint: &str) -> Result<Issued> {
    let what = format!("the metadata service {endpoint}");
    let agent: ureq::Agent = ureq::Agent::config_builder()
        .timeout_global(Some(IMDS_TIMEOUT))
        .http_status_as_error(false)
        .build()
        .into();
    let base = endpoint.trim_end_matches('/');
    let token = agent
        .put(format!("{base}/latest/api/token"))
        .header("x-aws-ec2-metadata-token-ttl-seconds", "21600")
        .send_empty()
        .map_err(|e| failure(&what, e))
        .and_then(|r| body_text(r, &what))?;
    let get = |path: &str| {
        agent
            .get(format!(
                "{base}/latest/meta-data/iam/security-credentials/{path}"
            ))
            .header("x-aws-ec2-metadata-token", token.trim())
            .call()
            .map_err(|e| failure(&what, e))
            .and_then(|r| body_text(r, &what))
    };
    let roles = get("")?;
    let role = roles
        .lines()
        .next()
        .filter(|r| !r.trim().is_empty())
        .ok_or_else(|| failure(&what, "no instance role"))?;
    let json: serde_json::Value =
        serde_json::from_str(&get(role.trim())?).map_err(|e| failure(&what, e))?;
    issued_from_json(&json, "Token").ok_or_else(|| failure(&what, "no key pair in the reply"))
}

/// The body of a successful reply; another status is the failure.
fn body_text(response: Response<Body>, what: &str) -> Result<String> {
    let status = response.status();
    let text = response
        .into_body()
        .read_to_string()
        .map_err(|e| failure(what, e))?;
    if !status.is_success() {
        return Err(failure(what, format!("{status}: {}", one_line(&text))));
    }
    Ok(text)
}

/// A reply's text on one line, shortened: for messages.
fn one_line(text: &str) -> String {
    text.split_whitespace()
        .collect::<Vec<_>>()
        .join(" ")
        .chars()
        .take(200)
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn json(text: &str) -> serde_json::Value {
        serde_json::from_str(text).unwrap()
    }

    #[test]
    fn process_output_is_read_as_aws_cli_reads_it() {
        let issued = issued_from_json(
            &json(
                r#"{"Version":1,"AccessKeyId":"AK","SecretAccessKey":"SK",
                    "SessionToken":"T","Expiration":"2030-01-02T03:04:05Z"}"#,
            ),
            "SessionToken",
        )
        .unwrap();
        assert_eq!(issued.credentials.access_key, "AK");
        assert_eq!(issued.credentials.session_token.as_deref(), Some("T"));
        assert_eq!(issued.expires, parse_iso8601("2030-01-02T03:04:05Z"));
        assert!(issued_from_json(&json(r#"{"AccessKeyId":"AK"}"#), "Token").is_none());
    }

    #[test]
    fn credentials_are_fetched_again_five_minutes_before_they_expire() {
        let now = SystemTime::now();
        let at = |secs: u64| Issued {
            credentials: Credentials {
                access_key: "a".into(),
                secret_key: "s".into(),
                session_token: None,
            },
            expires: Some(now + Duration::from_secs(secs)),
        };
        assert!(at(3600).fresh(now));
        assert!(!at(299).fresh(now));
        let forever = Issued {
            expires: None,
            ..at(0)
        };
        assert!(forever.fresh(now));
    }

    #[test]
    fn an_expired_or_missing_sso_token_asks_for_a_login() {
        let dir = std::env::temp_dir().join(format!("roam-sso-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let sso = Sso {
            token_file: dir.join("token.json"),
            // Nothing listens there: a token that is refused is never sent.
            portal: "http://127.0.0.1:9".into(),
            account_id: "1".into(),
            role_name: "r".into(),
            profile: "dev".into(),
        };
        let http = HttpClient::new(&crate::http::HttpConfig::default());
        let now = parse_iso8601("2026-01-01T00:00:00Z").unwrap();
        let message = |token: Option<&str>| {
            if let Some(token) = token {
                std::fs::write(&sso.token_file, token).unwrap();
            }
            let err = sso_role(&http, &sso, now).unwrap_err();
            assert_eq!(err.kind, ErrorKind::PermissionDenied);
            err.message
        };
        let login = "run `aws sso login --profile dev`";
        assert!(message(None).contains(login));
        let expired = r#"{"accessToken": "t", "expiresAt": "2025-12-31T23:59:59UTC"}"#;
        let text = message(Some(expired));
        assert!(text.contains("expired") && text.contains(login), "{text}");
        let valid = r#"{"accessToken": "t", "expiresAt": "2026-01-01T01:00:00Z"}"#;
        let text = message(Some(valid));
        assert!(!text.contains(login), "a valid token is sent: {text}");
        std::fs::remove_dir_all(dir).unwrap();
    }

    #[test]
    fn sso_role_credentials_expire_in_milliseconds() {
        let issued = role_credentials(&json(
            r#"{"accessKeyId":"AK","secretAccessKey":"SK","sessionToken":"T","expiration":1767225600000}"#,
        ))
        .unwrap();
        assert_eq!(issued.credentials.session_token.as_deref(), Some("T"));
        assert_eq!(issued.expires, parse_iso8601("2026-01-01T00:00:00Z"));
    }

    #[test]
    fn a_failing_process_is_an_error_naming_it() {
        let err = process("echo nope >&2; exit 3").unwrap_err();
        assert_eq!(err.kind, ErrorKind::PermissionDenied);
        assert!(
            err.message.contains("credential_process"),
            "{}",
            err.message
        );
        let err = process("echo '{\"Version\": 2}'").unwrap_err();
        assert!(err.message.contains("Version 1"), "{}", err.message);
        let ok =
            process("printf '{\"Version\":1,\"AccessKeyId\":\"AK\",\"SecretAccessKey\":\"SK\"}'")
                .unwrap();
        assert_eq!(ok.credentials.secret_key, "SK");
        assert_eq!(ok.expires, None);
    }
}
