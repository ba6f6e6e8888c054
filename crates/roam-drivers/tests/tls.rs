//! Which certificate authorities the HTTP and S3 drivers trust, against real servers:
//! nginx on TLS with a certificate of a CA each test makes with `openssl`, and moto (S3)
//! behind such an nginx.
//!
//! The platform's roots are read once per process from the environment, so the cases that
//! set `SSL_CERT_FILE`, `SSL_CERT_DIR` or `AWS_CA_BUNDLE` run this test binary again as a
//! child ([`probe`]) with exactly those variables, which lists the server's root and says
//! how that went.
//!
//! nginx, openssl and moto are required: a machine without them fails these tests.

use std::path::Path;
use std::process::Command;
use std::time::Duration;

use roam_drivers::http::{HttpClient, HttpConfig, HttpDriver, TlsOptions};
use roam_drivers::s3::{S3Config, S3Driver};
use roam_drivers::{Driver, ErrorKind};
use roam_testkit::s3::{create_bucket, moto, put_object};
use roam_testkit::tls::{nginx_tls, nginx_tls_proxy, TestCa, EXPIRED_ON};
use roam_testkit::{write_file, Scratch, Server};

const BUCKET: &str = "tls-bucket";
/// The variables the child reads: what to list, and how.
const CHILD_URL: &str = "ROAM_TLS_TEST_URL";
const CHILD_S3: &str = "ROAM_TLS_TEST_S3";
/// The variables that choose roots, removed from every child's environment first.
const TLS_VARS: &[&str] = &["SSL_CERT_FILE", "SSL_CERT_DIR", "AWS_CA_BUNDLE"];

/// An HTTPS server whose certificate (for 127.0.0.1) is signed by a CA of its own.
struct Https {
    // Declared first so that it is dropped first: the server stops before its files go.
    server: Server,
    ca: TestCa,
    scratch: Scratch,
}

impl Https {
    fn new() -> Https {
        Https::for_names("IP:127.0.0.1")
    }

    fn for_names(names: &str) -> Https {
        Https::with(|dir| TestCa::with_names(dir, names))
    }

    /// A server whose certificate is made by `make` in the directory it is given.
    fn with(make: impl FnOnce(&Path) -> TestCa) -> Https {
        let scratch = Scratch::new("tls-driver");
        let ca = make(&scratch.join("ca"));
        let www = scratch.join("www");
        write_file(&www.join("dir/hello.txt"), b"over TLS\n", 0o644);
        let server = nginx_tls(&www, &scratch.join("run"), &ca);
        Https {
            server,
            ca,
            scratch,
        }
    }

    fn url(&self) -> String {
        format!("https://{}", self.server.authority())
    }
}

fn config() -> HttpConfig {
    HttpConfig {
        connect_timeout: Duration::from_secs(5),
        read_timeout: Duration::from_secs(20),
        netrc: None,
        ..HttpConfig::default()
    }
}

/// The names of a listing, sorted.
fn names(listing: roam_drivers::Listing) -> Vec<String> {
    let mut names: Vec<String> = listing.entries.into_iter().map(|e| e.name).collect();
    names.sort();
    names
}

/// A host's TLS options trusting only the authority of `ca`.
fn only(ca: &TestCa) -> TlsOptions {
    TlsOptions {
        ca_file: Some(ca.ca_cert.clone()),
        insecure: false,
    }
}

/// A client trusting only the authority of `ca`.
fn trusting(ca: &TestCa) -> HttpClient {
    HttpClient::with_tls(&config(), &only(ca)).unwrap()
}

/// Names at the root of `url` (HTTP) or of the bucket (S3, `url` its endpoint), listed
/// with the roots the environment gives; `Err(kind: message)` on failure.
fn list_root(url: &str, s3: bool) -> Result<Vec<String>, String> {
    let shown = |e: roam_drivers::Error| format!("{:?}: {}", e.kind, e.message);
    if s3 {
        let s3 = s3_config(url, &S3Config::from_env());
        // As roam-vfs builds the S3 client: the bundle, else the platform's roots.
        let options = s3.tls_options(None);
        let client = HttpClient::with_tls(&config(), &options).map_err(shown)?;
        let driver = S3Driver::new(client, &s3, BUCKET).map_err(shown)?;
        driver.list("/").map(names).map_err(shown)
    } else {
        let driver = HttpDriver::new(HttpClient::new(&config()), url).map_err(shown)?;
        driver.list("/dir").map(names).map_err(shown)
    }
}

/// An unsigned path-style S3 configuration for `endpoint`, with `from`'s CA bundle.
fn s3_config(endpoint: &str, from: &S3Config) -> S3Config {
    S3Config {
        endpoint: Some(endpoint.to_owned()),
        region: Some("us-east-1".into()),
        path_style: true,
        ca_bundle: from.ca_bundle.clone(),
        ..S3Config::default()
    }
}

/// Not a test of its own: the child side of [`probe`], which does nothing unless run by it.
#[test]
fn child_lists_with_the_environments_roots() {
    let Some(url) = std::env::var_os(CHILD_URL) else {
        return;
    };
    let outcome = list_root(&url.to_string_lossy(), std::env::var_os(CHILD_S3).is_some());
    println!("ROAM_TLS_OUTCOME {outcome:?}");
}

/// Lists `url` in a child process whose only root-choosing variables are `vars`
/// (`s3`: as an S3 endpoint). No AWS setting of this machine reaches the child.
fn probe(url: &str, s3: bool, vars: &[(&str, &Path)], home: &Path) -> Result<Vec<String>, String> {
    let mut child = Command::new(std::env::current_exe().unwrap());
    child
        .args([
            "child_lists_with_the_environments_roots",
            "--exact",
            "--nocapture",
        ])
        .args(["--test-threads", "1"]);
    for (name, _) in std::env::vars_os() {
        let name = name.to_string_lossy();
        if TLS_VARS.contains(&name.as_ref()) || name.starts_with("AWS_") {
            child.env_remove(name.as_ref());
        }
    }
    child.env("HOME", home).env(CHILD_URL, url);
    if s3 {
        child.env(CHILD_S3, "1");
    }
    for (name, value) in vars {
        child.env(name, value);
    }
    let out = child.output().unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    let line = stdout
        .lines()
        // The test harness prints its own words before the line on the same line.
        .find_map(|l| {
            l.split_once("ROAM_TLS_OUTCOME ")
                .map(|(_, outcome)| outcome)
        })
        .unwrap_or_else(|| {
            panic!(
                "the child said nothing: {stdout}{}",
                String::from_utf8_lossy(&out.stderr)
            )
        });
    // `Ok(["a", "b"])` or `Err("kind: message")`, as `{:?}` shows them.
    if let Some(names) = line.strip_prefix("Ok(") {
        let names = names.trim_end_matches(')').trim_matches(['[', ']']);
        Ok(names
            .split(", ")
            .filter(|n| !n.is_empty())
            .map(|n| n.trim_matches('"').to_owned())
            .collect())
    } else {
        let message = line.strip_prefix("Err(").unwrap_or(line);
        let message = message.strip_suffix(')').unwrap_or(message);
        Err(message.trim_matches('"').replace("\\\"", "\""))
    }
}

#[test]
fn ssl_cert_file_makes_its_authorities_trusted() {
    let https = Https::new();
    let home = https.scratch.join("home");
    let listed = probe(
        &https.url(),
        false,
        &[("SSL_CERT_FILE", &https.ca.ca_cert)],
        &home,
    );
    assert_eq!(listed, Ok(vec!["hello.txt".to_owned()]));
}

#[test]
fn ssl_cert_dir_with_hashed_names_makes_its_authorities_trusted() {
    let https = Https::new();
    let dir = https.scratch.join("certs");
    roam_testkit::mkdir(&dir);
    std::fs::copy(&https.ca.ca_cert, dir.join("test-ca.pem")).unwrap();
    let rehash = Command::new("openssl")
        .arg("rehash")
        .arg(&dir)
        .status()
        .unwrap();
    assert!(rehash.success());
    let home = https.scratch.join("home");
    let listed = probe(&https.url(), false, &[("SSL_CERT_DIR", &dir)], &home);
    assert_eq!(listed, Ok(vec!["hello.txt".to_owned()]));

    // Only the hashed names count, as with OpenSSL: the same file under its own name alone
    // is not looked at.
    let plain = https.scratch.join("plain");
    roam_testkit::mkdir(&plain);
    std::fs::copy(&https.ca.ca_cert, plain.join("test-ca.pem")).unwrap();
    let listed = probe(&https.url(), false, &[("SSL_CERT_DIR", &plain)], &home);
    assert!(listed.is_err(), "{listed:?}");
}

#[test]
fn an_unknown_authority_is_refused_with_the_host_and_the_fix() {
    let https = Https::new();
    let home = https.scratch.join("home");
    // No variable: the system bundle, which does not hold the test's CA.
    let err = probe(&https.url(), false, &[], &home).unwrap_err();
    let host = https.server.authority();
    assert!(err.starts_with("Io: GET "), "EIO, as before: {err}");
    let wanted = format!(
        "the TLS certificate of {host} is signed by an authority roam does not trust; to \
         trust its authority, add [tls.\"{host}\"] ca_file = \"/path/ca.pem\" to roam.toml, \
         or set SSL_CERT_FILE"
    );
    assert!(err.ends_with(&wanted), "{err}");
    assert!(!err.contains("UnknownIssuer"), "{err}");

    // In process: the roots of this machine (SSL_CERT_FILE is its system bundle here).
    let driver = HttpDriver::new(HttpClient::new(&config()), &https.url()).unwrap();
    let e = driver.list("/dir").unwrap_err();
    assert_eq!(e.kind, ErrorKind::Io);
    assert!(e.message.ends_with(&wanted), "{}", e.message);
}

#[test]
fn a_hosts_ca_file_replaces_the_platforms_roots() {
    let https = Https::new();
    let driver = HttpDriver::new(trusting(&https.ca), &https.url()).unwrap();
    assert_eq!(names(driver.list("/dir").unwrap()), ["hello.txt"]);
}

#[test]
fn a_certificate_for_other_names_says_which() {
    let https = Https::for_names("DNS:a.example,DNS:b.example");
    let driver = HttpDriver::new(trusting(&https.ca), &https.url()).unwrap();
    let e = driver.list("/dir").unwrap_err();
    assert_eq!(e.kind, ErrorKind::Io);
    let host = https.server.authority();
    assert!(
        e.message.contains(&format!(
            "the TLS certificate of {host} is issued for other names: a.example, b.example; \
             connect by one of those names"
        )),
        "{}",
        e.message
    );
}

#[test]
fn an_expired_certificate_says_when() {
    let https = Https::with(TestCa::expired);
    let driver = HttpDriver::new(trusting(&https.ca), &https.url()).unwrap();
    let e = driver.list("/dir").unwrap_err();
    assert_eq!(e.kind, ErrorKind::Io);
    let host = https.server.authority();
    let wanted = format!("the TLS certificate of {host} expired on {EXPIRED_ON}");
    assert!(e.message.contains(&wanted), "{}", e.message);
    assert!(
        e.message.contains("the server must renew it"),
        "{}",
        e.message
    );
}

#[test]
fn a_ca_certificate_as_the_servers_own_is_told_in_words() {
    // The CA's own (self-signed, CA:TRUE) certificate served as the server's, trusted.
    let scratch = Scratch::new("tls-ca-leaf");
    let ca = TestCa::new(&scratch.join("ca"));
    let as_leaf = TestCa {
        ca_cert: ca.ca_cert.clone(),
        cert: ca.ca_cert.clone(),
        key: scratch.join("ca/ca.key"),
    };
    let www = scratch.join("www");
    write_file(&www.join("dir/x"), b"x", 0o644);
    let server = nginx_tls(&www, &scratch.join("run"), &as_leaf);
    let url = format!("https://{}", server.authority());
    let e = HttpDriver::new(trusting(&ca), &url)
        .unwrap()
        .list("/dir")
        .unwrap_err();
    assert!(
        e.message.contains("is a CA certificate") && !e.message.contains("CaUsedAsEndEntity"),
        "{}",
        e.message
    );
}

/// moto with a bucket holding `a.txt`, behind nginx on TLS with a certificate of a CA of
/// the test's own.
struct S3Tls {
    // Declared first so that they are dropped first: the servers stop before their files.
    proxy: Server,
    _moto: Server,
    ca: TestCa,
    scratch: Scratch,
}

impl S3Tls {
    fn new() -> S3Tls {
        let scratch = Scratch::new("tls-s3");
        let moto = moto(&scratch.join("moto"));
        create_bucket(&moto, BUCKET);
        put_object(&moto, BUCKET, "a.txt", b"a");
        let ca = TestCa::new(&scratch.join("ca"));
        let proxy = nginx_tls_proxy(&scratch.join("proxy"), &ca, moto.port);
        S3Tls {
            proxy,
            _moto: moto,
            ca,
            scratch,
        }
    }

    fn endpoint(&self) -> String {
        format!("https://{}", self.proxy.authority())
    }
}

#[test]
fn s3_trusts_aws_ca_bundle() {
    let s3 = S3Tls::new();
    let home = s3.scratch.join("home");
    let listed = probe(
        &s3.endpoint(),
        true,
        &[("AWS_CA_BUNDLE", &s3.ca.ca_cert)],
        &home,
    );
    assert_eq!(listed, Ok(vec!["a.txt".to_owned()]));
}

#[test]
fn s3_refuses_an_unknown_authority_naming_aws_ca_bundle() {
    let s3 = S3Tls::new();
    let home = s3.scratch.join("home");
    // An empty AWS_CA_BUNDLE, as CI images export it, is no bundle.
    let err = probe(
        &s3.endpoint(),
        true,
        &[("AWS_CA_BUNDLE", Path::new(""))],
        &home,
    )
    .unwrap_err();
    let host = s3.proxy.authority();
    assert!(err.starts_with("Io: "), "{err}");
    assert!(
        err.ends_with(&format!(
            "the TLS certificate of {host} is signed by an authority roam does not trust; to \
             trust its authority, add [tls.\"{host}\"] ca_file = \"/path/ca.pem\" to \
             roam.toml, or set AWS_CA_BUNDLE or SSL_CERT_FILE"
        )),
        "{err}"
    );
}

#[test]
fn s3_honours_the_endpoint_hosts_ca_file() {
    let s3 = S3Tls::new();
    let s3_settings = s3_config(&s3.endpoint(), &S3Config::default());
    let host = s3_settings.endpoint_authority().unwrap();
    assert_eq!(host, s3.proxy.authority());
    // As roam-vfs does: the `[tls."HOST:PORT"]` options of the endpoint's host.
    let options = s3_settings.tls_options(Some(&only(&s3.ca)));
    let client = HttpClient::with_tls(&config(), &options).unwrap();
    let driver = S3Driver::new(client, &s3_settings, BUCKET).unwrap();
    assert_eq!(names(driver.list("/").unwrap()), ["a.txt"]);
}
