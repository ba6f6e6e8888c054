//! S3 credentials that are obtained rather than read, against moto checking every request's
//! signature (`roam-testkit`): a profile's `credential_process`, STS
//! `AssumeRoleWithWebIdentity` and `AssumeRole` (moto's STS, which checks the signature of
//! the latter), an SSO portal's role credentials, and the EC2 metadata service (IMDSv2),
//! with credentials refreshed before they expire.
//!
//! The metadata service and the SSO portal are fake peers run by the test on 127.0.0.1: no
//! real metadata service exists off EC2, and no SSO portal here. The metadata service
//! answers as IMDSv2 does (a session token from `PUT /latest/api/token`, required on every
//! `GET`), the portal as `GetRoleCredentials` does; both hand out the moto IAM user's keys,
//! so that moto's acceptance shows they signed.
//!
//! moto is required: a machine without it fails these tests rather than skipping them.

mod common;

use std::collections::HashMap;
use std::io::{BufRead, BufReader, Write};
use std::net::TcpListener;
use std::path::Path;
use std::process::Command;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::thread;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use roam_drivers::s3::{CredentialSource, S3Config, S3Driver};
use roam_drivers::{Driver, Fetched};
use roam_testkit::s3::{
    create_bucket, create_role, enforce_auth, enforce_auth_after, moto, put_object, Credentials,
};
use roam_testkit::{write_file, Scratch, Server};

const BUCKET: &str = "creds";

/// Keys moto does not know: refused once it checks signatures.
const UNKNOWN_KEYS: &[(&str, &str)] = &[
    ("AWS_ACCESS_KEY_ID", "AKIANOSUCHKEY0000000"),
    ("AWS_SECRET_ACCESS_KEY", "not-a-secret"),
];

/// moto with one object in [`BUCKET`], still open.
fn moto_with_object(scratch: &Scratch) -> Server {
    let server = moto(&scratch.join("run"));
    create_bucket(&server, BUCKET);
    put_object(&server, BUCKET, "hello.txt", b"signed hello");
    server
}

/// The settings of an environment of `vars` only, whose `HOME` is `home`, reaching
/// `server`; the metadata service is off unless `vars` point at one.
fn config(server: &Server, home: &Path, vars: &[(&str, &str)]) -> S3Config {
    config_of(server, home, vars, None)
}

/// [`config`] of a profile named explicitly (`aws --profile`), if any.
fn config_of(
    server: &Server,
    home: &Path,
    vars: &[(&str, &str)],
    profile: Option<&str>,
) -> S3Config {
    let mut env: HashMap<String, String> = vars
        .iter()
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect();
    env.insert("HOME".into(), home.display().to_string());
    env.insert("AWS_ENDPOINT_URL".into(), server.url());
    env.insert("AWS_REGION".into(), "us-east-1".into());
    env.entry("AWS_EC2_METADATA_DISABLED".into())
        .or_insert_with(|| "true".into());
    let config = S3Config::from_vars(&|name| env.get(name).cloned(), profile);
    assert_eq!(config.problem, None);
    config
}

/// The object's bytes, or the errno of the failure.
fn read(config: &S3Config) -> Result<Vec<u8>, i32> {
    let driver = S3Driver::new(common::http_client(Duration::from_secs(20)), config, BUCKET)
        .map_err(|e| e.errno())?;
    read_with(&driver)
}

/// Reads the object three times through one driver made with `cfg`.
fn read_thrice(cfg: &S3Config) {
    let driver = S3Driver::new(common::http_client(Duration::from_secs(20)), cfg, BUCKET).unwrap();
    for _ in 0..3 {
        assert_eq!(read_with(&driver), Ok(b"signed hello".to_vec()));
    }
}

fn read_with(driver: &S3Driver) -> Result<Vec<u8>, i32> {
    let mut bytes = Vec::new();
    match driver.fetch("/hello.txt", &mut bytes, None) {
        Ok(Fetched::Body(_)) => Ok(bytes),
        Ok(Fetched::NotModified) => panic!("nothing was cached"),
        Err(e) => Err(e.errno()),
    }
}

#[test]
fn credential_process_output_signs_requests() {
    let scratch = Scratch::new("s3-process");
    let server = moto_with_object(&scratch);
    let keys = enforce_auth(&server);
    let runs = scratch.join("runs");
    let json = format!(
        r#"{{"Version": 1, "AccessKeyId": "{}", "SecretAccessKey": "{}"}}"#,
        keys.access_key, keys.secret_key
    );
    let profile = format!(
        "[profile tool]\ncredential_process = sh -c 'echo run >> {}; echo \"$0\"' '{json}'\n",
        runs.display()
    );
    write_file(&scratch.join("home/.aws/config"), profile.as_bytes(), 0o600);
    let home = scratch.join("home");
    read_thrice(&config(&server, &home, &[("AWS_PROFILE", "tool")]));
    let runs = std::fs::read_to_string(runs).unwrap();
    assert_eq!(
        runs.lines().count(),
        1,
        "credentials without expiry are kept"
    );

    // Other keys moto refuses: the process's keys were what signed.
    assert_eq!(
        read(&config(&server, &home, UNKNOWN_KEYS)),
        Err(libc::EACCES)
    );
}

#[test]
fn web_identity_credentials_come_from_sts() {
    let scratch = Scratch::new("s3-web-identity");
    let server = moto_with_object(&scratch);
    let role = create_role(&server, "roam-reader");
    // moto checks signatures from now on, but for the next request: the unsigned STS call.
    enforce_auth_after(&server, 1);
    let token = scratch.join("token");
    write_file(&token, b"a-web-identity-token\n", 0o600);
    let token = token.display().to_string();
    let vars = [
        ("AWS_WEB_IDENTITY_TOKEN_FILE", token.as_str()),
        ("AWS_ROLE_ARN", role.as_str()),
        ("AWS_ROLE_SESSION_NAME", "roam-test"),
    ];
    let home = scratch.join("home");
    assert_eq!(
        read(&config(&server, &home, &vars)),
        Ok(b"signed hello".to_vec())
    );
    assert_eq!(
        read(&config(&server, &home, UNKNOWN_KEYS)),
        Err(libc::EACCES)
    );
}

#[test]
fn roles_are_assumed_with_a_source_profiles_keys() {
    let scratch = Scratch::new("s3-assume-role");
    let server = moto_with_object(&scratch);
    let role = create_role(&server, "roam-reader");
    let keys = enforce_auth(&server);
    // moto hands out credentials of any role, even one of another account, where this
    // bucket is not: reading fails with those, which only the role's credentials can be.
    let foreign = "arn:aws:iam::111111111111:role/elsewhere";
    let profiles = format!(
        "[profile base]\n\
         aws_access_key_id = {}\n\
         aws_secret_access_key = {}\n\
         [profile reader]\n\
         role_arn = {role}\n\
         source_profile = base\n\
         role_session_name = roam-test\n\
         external_id = shared-secret\n\
         duration_seconds = 900\n\
         [profile chained]\n\
         role_arn = {role}\n\
         source_profile = reader\n\
         [profile from-env]\n\
         role_arn = {role}\n\
         credential_source = Environment\n\
         [profile foreign]\n\
         role_arn = {foreign}\n\
         source_profile = base\n\
         [profile stranger]\n\
         role_arn = {role}\n\
         source_profile = unknown-keys\n\
         [profile unknown-keys]\n\
         aws_access_key_id = {}\n\
         aws_secret_access_key = {}\n",
        keys.access_key, keys.secret_key, UNKNOWN_KEYS[0].1, UNKNOWN_KEYS[1].1
    );
    write_file(
        &scratch.join("home/.aws/config"),
        profiles.as_bytes(),
        0o600,
    );
    let home = scratch.join("home");
    for profile in ["reader", "chained"] {
        let cfg = config(&server, &home, &[("AWS_PROFILE", profile)]);
        assert!(
            matches!(cfg.credential_source, Some(CredentialSource::AssumeRole(_))),
            "{profile}: {cfg:?}"
        );
        read_thrice(&cfg);
    }
    let env_keys = [
        ("AWS_ACCESS_KEY_ID", keys.access_key.as_str()),
        ("AWS_SECRET_ACCESS_KEY", keys.secret_key.as_str()),
    ];
    read_thrice(&config_of(&server, &home, &env_keys, Some("from-env")));

    let foreign = read(&config(&server, &home, &[("AWS_PROFILE", "foreign")]));
    assert!(foreign.is_err(), "another account's role read the bucket");
    // STS refuses a request signed with keys it does not know.
    assert_eq!(
        read(&config(&server, &home, &[("AWS_PROFILE", "stranger")])),
        Err(libc::EACCES)
    );
}

/// The session of [`SSO_PROFILES`]: `aws sso login` caches its token under the SHA-1 of
/// this name (computed by `hashlib.sha1`, as botocore does).
const SSO_CACHE: &str = "home/.aws/sso/cache/0ad374308c5a4e22f723adf10145eafad7c4031c.json";
const SSO_PROFILES: &str = "\
[profile dev]
sso_session = my-sso
sso_account_id = 111122223333
sso_role_name = Reader
[sso-session my-sso]
sso_region = eu-west-1
sso_start_url = https://example.awsapps.com/start
";
const SSO_TOKEN: &str = "sso-access-token";

#[test]
fn sso_role_credentials_come_from_the_portal_with_the_cached_token() {
    let scratch = Scratch::new("s3-sso");
    let server = moto_with_object(&scratch);
    let keys = enforce_auth(&server);
    let portal = Portal::start(keys);
    write_file(
        &scratch.join("home/.aws/config"),
        SSO_PROFILES.as_bytes(),
        0o600,
    );
    let home = scratch.join("home");
    let vars = [
        ("AWS_PROFILE", "dev"),
        ("AWS_ENDPOINT_URL_SSO", portal.url.as_str()),
    ];
    let token = |expires: &str| {
        let json = format!(r#"{{"accessToken": "{SSO_TOKEN}", "expiresAt": "{expires}"}}"#);
        write_file(&scratch.join(SSO_CACHE), json.as_bytes(), 0o600);
    };
    token(&iso8601_in(Duration::from_secs(3600), "Z"));
    read_thrice(&config(&server, &home, &vars));
    assert_eq!(
        portal.fetches.load(Ordering::SeqCst),
        1,
        "valid for an hour"
    );
    assert_eq!(portal.refused.load(Ordering::SeqCst), 0);

    // An expired token is not sent: the user must log in again.
    token(&iso8601_at(Duration::from_secs(60), true, "UTC"));
    assert_eq!(read(&config(&server, &home, &vars)), Err(libc::EACCES));
    assert_eq!(portal.fetches.load(Ordering::SeqCst), 1);
    assert_eq!(portal.refused.load(Ordering::SeqCst), 0);
}

/// A fake SSO portal (no real one exists here), answering `GetRoleCredentials` as AWS's
/// does for account 111122223333 and role `Reader` of [`SSO_PROFILES`] to the bearer of
/// [`SSO_TOKEN`], with the moto IAM user's keys valid for an hour.
struct Portal {
    url: String,
    /// Credentials handed out.
    fetches: Arc<AtomicUsize>,
    /// Requests refused for a wrong token, account or role.
    refused: Arc<AtomicUsize>,
}

impl Portal {
    fn start(keys: Credentials) -> Portal {
        let fetches = Arc::new(AtomicUsize::new(0));
        let refused = Arc::new(AtomicUsize::new(0));
        let (f, r) = (fetches.clone(), refused.clone());
        let url = serve(move |method, path, headers| {
            let wanted = "/federation/credentials?role_name=Reader&account_id=111122223333";
            let bearer = headers.get("x-amz-sso_bearer_token").map(String::as_str);
            if method != "GET" || path != wanted || bearer != Some(SSO_TOKEN) {
                r.fetch_add(1, Ordering::SeqCst);
                return ("401 Unauthorized", String::new());
            }
            f.fetch_add(1, Ordering::SeqCst);
            let expiration = (SystemTime::now() + Duration::from_secs(3600))
                .duration_since(UNIX_EPOCH)
                .unwrap()
                .as_millis();
            // No session token: the moto IAM user's keys have none.
            let body = format!(
                r#"{{"roleCredentials": {{"accessKeyId": "{}", "secretAccessKey": "{}", "sessionToken": null, "expiration": {expiration}}}}}"#,
                keys.access_key, keys.secret_key
            );
            ("200 OK", body)
        });
        Portal {
            url,
            fetches,
            refused,
        }
    }
}

#[test]
fn instance_role_credentials_come_from_imdsv2_and_are_refreshed() {
    let scratch = Scratch::new("s3-imds");
    let server = moto_with_object(&scratch);
    let keys = enforce_auth(&server);
    let home = scratch.join("home");
    let through = |imds: &Imds| {
        let vars = [
            ("AWS_EC2_METADATA_DISABLED", "false"),
            ("AWS_EC2_METADATA_SERVICE_ENDPOINT", imds.url.as_str()),
        ];
        read_thrice(&config(&server, &home, &vars));
    };
    // Valid for an hour: fetched once for many requests.
    let imds = Imds::start(keys.clone(), Duration::from_secs(3600));
    through(&imds);
    assert_eq!(imds.fetches.load(Ordering::SeqCst), 1);
    assert_eq!(imds.refused.load(Ordering::SeqCst), 0);

    // Expiring within the five minutes of margin: fetched again before each request.
    let imds = Imds::start(keys, Duration::from_secs(120));
    through(&imds);
    assert!(imds.fetches.load(Ordering::SeqCst) >= 3);
}

/// A fake EC2 metadata service (see the module's comment), one request per connection.
struct Imds {
    url: String,
    /// Credentials documents served.
    fetches: Arc<AtomicUsize>,
    /// Requests refused for a missing or wrong session token.
    refused: Arc<AtomicUsize>,
}

const IMDS_TOKEN: &str = "imds-session-token";
const ROLE: &str = "roam-instance-role";

impl Imds {
    fn start(keys: Credentials, lifetime: Duration) -> Imds {
        let fetches = Arc::new(AtomicUsize::new(0));
        let refused = Arc::new(AtomicUsize::new(0));
        let (f, r) = (fetches.clone(), refused.clone());
        let url = serve(move |method, path, headers| {
            let token = headers.get("x-aws-ec2-metadata-token");
            let credentials_path = "/latest/meta-data/iam/security-credentials/";
            match (method, path) {
                ("PUT", "/latest/api/token") => ("200 OK", IMDS_TOKEN.to_owned()),
                ("GET", _) if token.map(String::as_str) != Some(IMDS_TOKEN) => {
                    r.fetch_add(1, Ordering::SeqCst);
                    ("401 Unauthorized", String::new())
                }
                ("GET", p) if p == credentials_path => ("200 OK", ROLE.to_owned()),
                ("GET", p) if p == format!("{credentials_path}{ROLE}") => {
                    f.fetch_add(1, Ordering::SeqCst);
                    ("200 OK", document(&keys, lifetime))
                }
                _ => ("404 Not Found", String::new()),
            }
        });
        Imds {
            url,
            fetches,
            refused,
        }
    }
}

/// What a fake peer answers a request (method, path with query, lower-case headers):
/// status line and body.
type Reply = (&'static str, String);

/// Serves `answer` on 127.0.0.1, one request per connection, until the test ends; its URL.
fn serve(
    answer: impl Fn(&str, &str, &HashMap<String, String>) -> Reply + Send + 'static,
) -> String {
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let url = format!("http://{}", listener.local_addr().unwrap());
    thread::spawn(move || {
        for stream in listener.incoming() {
            let Ok(mut stream) = stream else { return };
            let mut reader = BufReader::new(stream.try_clone().unwrap());
            let mut request = String::new();
            reader.read_line(&mut request).unwrap();
            let mut headers = HashMap::new();
            loop {
                let mut line = String::new();
                reader.read_line(&mut line).unwrap();
                if line.trim().is_empty() {
                    break;
                }
                if let Some((name, value)) = line.split_once(':') {
                    headers.insert(name.trim().to_ascii_lowercase(), value.trim().to_owned());
                }
            }
            let mut words = request.split_whitespace();
            let (method, path) = (words.next().unwrap_or(""), words.next().unwrap_or(""));
            let (status, body) = answer(method, path, &headers);
            let reply = format!(
                "HTTP/1.1 {status}\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
                body.len()
            );
            let _ = stream.write_all(reply.as_bytes());
        }
    });
    url
}

/// The metadata service's credentials document, expiring `lifetime` from now.
fn document(keys: &Credentials, lifetime: Duration) -> String {
    format!(
        r#"{{"Code": "Success", "Type": "AWS-HMAC", "AccessKeyId": "{}", "SecretAccessKey": "{}", "Token": "", "Expiration": "{}"}}"#,
        keys.access_key,
        keys.secret_key,
        iso8601_in(lifetime, "Z")
    )
}

/// The time `offset` from now (backwards if `past`) as ISO 8601 seconds with `zone`
/// written after them.
fn iso8601_at(offset: Duration, past: bool, zone: &str) -> String {
    let now = SystemTime::now();
    let at = if past { now - offset } else { now + offset };
    let secs = at.duration_since(UNIX_EPOCH).unwrap().as_secs();
    let out = Command::new("date")
        .args(["-u", "-d", &format!("@{secs}"), "+%Y-%m-%dT%H:%M:%S"])
        .output()
        .unwrap();
    format!("{}{zone}", String::from_utf8(out.stdout).unwrap().trim())
}

fn iso8601_in(offset: Duration, zone: &str) -> String {
    iso8601_at(offset, false, zone)
}
