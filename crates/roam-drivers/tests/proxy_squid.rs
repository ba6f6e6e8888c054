//! The HTTP client through a real caching proxy: squid (roam-testkit) in front of a real
//! nginx origin. Each test starts its own origin and proxy on free loopback ports and
//! gives the client its proxy variables directly ([`Proxies::from_lookup`]), as the
//! environment would.
//!
//! nginx, squid and openssl are required: a machine without them fails these tests.

use std::fs::{self, File};
use std::time::{Duration, Instant, SystemTime};

use roam_drivers::http::proxy::Proxies;
use roam_drivers::http::{HttpClient, HttpConfig, HttpDriver, TlsOptions};
use roam_drivers::{Driver, ErrorKind, Fetched, Kind, Validator};
use roam_testkit::squid::squid;
use roam_testkit::tls::{nginx_tls, TestCa};
use roam_testkit::{free_port, noise, write_file, Scratch, Server};

/// An origin and a proxy in front of it, each with its own run directory.
struct Site {
    // Declared first so that they stop before their files go.
    origin: Server,
    proxy: Server,
    scratch: Scratch,
}

/// The file every test reads, made ten days old so that squid's heuristic (a fifth of
/// its age) keeps it fresh for two days.
const FILE: &str = "data/f.bin";

impl Site {
    fn new(name: &str) -> Site {
        let scratch = Scratch::new(name);
        write_file(&scratch.join("www").join(FILE), &noise(200_000, 7), 0o644);
        let old = SystemTime::now() - Duration::from_secs(10 * 86400);
        File::open(scratch.join("www").join(FILE))
            .unwrap()
            .set_modified(old)
            .unwrap();
        let origin = Server::nginx(&scratch.join("www"), &scratch.join("origin"));
        let proxy = squid(&scratch.join("squid"));
        Site {
            origin,
            proxy,
            scratch,
        }
    }

    /// A client (a pool of its own, as on another node) with these proxy variables.
    fn client(&self, vars: &[(&str, String)]) -> HttpClient {
        HttpClient::new(&config(vars))
    }

    fn via_proxy(&self) -> Vec<(&'static str, String)> {
        vec![("http_proxy", self.proxy.url())]
    }

    fn driver(&self, client: HttpClient) -> HttpDriver {
        HttpDriver::new(client, &self.origin.url()).unwrap()
    }

    /// The origin's access-log lines that name `path`, once there are `count`.
    fn origin_requests(&self, path: &str, count: usize) -> Vec<String> {
        eventually_naming(&|| self.origin.access_log(), path, count)
    }

    /// squid's access log, without the line of the probe that saw it listening.
    fn proxy_log(&self) -> String {
        let log = fs::read_to_string(self.scratch.join("squid/access.log")).unwrap_or_default();
        log.lines()
            .filter(|line| !line.contains("error:transaction-end-before-headers"))
            .map(|line| format!("{line}\n"))
            .collect()
    }

    /// squid's log lines naming `path`, once there are `count`.
    fn proxied(&self, path: &str, count: usize) -> Vec<String> {
        eventually_naming(&|| self.proxy_log(), path, count)
    }
}

fn config(vars: &[(&str, String)]) -> HttpConfig {
    HttpConfig {
        connect_timeout: Duration::from_secs(5),
        read_timeout: Duration::from_secs(10),
        proxies: Proxies::from_lookup(&|name| {
            vars.iter()
                .find(|(n, _)| *n == name)
                .map(|(_, v)| v.clone())
        }),
        netrc: None,
    }
}

/// The lines of `log()` naming `path`, once there are `count` or 10 s have passed: servers
/// log a request when it ends, a moment after the client has its answer (squid a tunnel
/// when it closes).
fn eventually_naming(log: &dyn Fn() -> String, path: &str, count: usize) -> Vec<String> {
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let lines = lines_naming(&log(), path);
        if lines.len() >= count || Instant::now() > deadline {
            return lines;
        }
        std::thread::sleep(Duration::from_millis(20));
    }
}

fn lines_naming(log: &str, path: &str) -> Vec<String> {
    log.lines()
        .filter(|line| line.contains(path))
        .map(str::to_owned)
        .collect()
}

fn read(driver: &HttpDriver, path: &str, validator: Option<&Validator>) -> (Fetched, Vec<u8>) {
    let mut bytes = Vec::new();
    let fetched = driver.fetch(path, &mut bytes, validator).unwrap();
    (fetched, bytes)
}

#[test]
fn a_second_client_is_served_by_the_proxy_not_the_origin() {
    let site = Site::new("proxy-cache");
    let path = format!("/{FILE}");
    let first = site.driver(site.client(&site.via_proxy()));
    let (fetched, bytes) = read(&first, &path, None);
    assert_eq!(bytes, noise(200_000, 7));
    let Fetched::Body(meta) = fetched else {
        panic!("no body")
    };
    assert_eq!(site.origin_requests(&path, 1).len(), 1);

    // Another node: its own connections, nothing cached of its own.
    let second = site.driver(site.client(&site.via_proxy()));
    let (_, bytes) = read(&second, &path, None);
    assert_eq!(bytes, noise(200_000, 7));
    assert_eq!(second.stat(&path).unwrap().size, Some(200_000));
    // A revalidation goes through the proxy as well, which answers it.
    let validator = Validator {
        etag: meta.etag.clone(),
        mtime: meta.mtime,
    };
    let (revalidated, _) = read(&second, &path, Some(&validator));
    assert_eq!(revalidated, Fetched::NotModified);

    let origin = site.origin_requests(&path, 1);
    assert_eq!(origin.len(), 1, "the origin saw: {origin:#?}");
    let proxied = site.proxied(&path, 4);
    assert_eq!(proxied.len(), 4, "squid saw: {proxied:#?}");
    assert!(proxied[1].contains("HIT/200"), "{proxied:#?}");
    assert!(proxied[0].contains(&format!("GET {}{path}", site.origin.url())));
}

#[test]
fn directories_and_their_redirects_are_read_through_the_proxy() {
    let site = Site::new("proxy-dirs");
    let driver = site.driver(site.client(&site.via_proxy()));
    // nginx redirects /data to /data/: the redirect is followed through the proxy.
    assert_eq!(driver.stat("/data").unwrap().kind, Kind::Dir);
    let listing = driver.list("/data").unwrap();
    let names: Vec<_> = listing.entries.iter().map(|e| e.name.as_str()).collect();
    assert_eq!(names, ["f.bin"]);
    // HEAD /data, HEAD /data/, GET /data/: each through squid.
    let origin = site.origin_requests("/data", 3);
    assert_eq!(origin.len(), 3, "{origin:#?}");
    let proxied = site.proxied("/data", 3);
    assert_eq!(proxied.len(), 3, "{proxied:#?}");
    assert!(proxied[2].contains("GET http://127.0.0.1"), "{proxied:#?}");
}

#[test]
fn no_proxy_hosts_are_reached_directly() {
    let site = Site::new("proxy-bypass");
    let mut vars = site.via_proxy();
    vars.push(("no_proxy", "localhost, 127.0.0.0/8".to_owned()));
    let driver = site.driver(site.client(&vars));
    let (_, bytes) = read(&driver, &format!("/{FILE}"), None);
    assert_eq!(bytes, noise(200_000, 7));
    assert_eq!(site.origin_requests(FILE, 1).len(), 1);
    assert_eq!(site.proxy_log(), "", "squid was asked");
}

#[test]
fn a_dead_proxy_fails_at_once_naming_it() {
    let site = Site::new("proxy-dead");
    let dead = free_port();
    let vars = [("http_proxy", format!("http://127.0.0.1:{dead}"))];
    let driver = site.driver(site.client(&vars));
    let started = Instant::now();
    let err = driver.stat(&format!("/{FILE}")).unwrap_err();
    assert!(
        started.elapsed() < Duration::from_secs(5),
        "{:?}",
        started.elapsed()
    );
    assert_eq!(err.kind, ErrorKind::Unreachable, "{err}");
    let named = format!("through the proxy 127.0.0.1:{dead} (from http_proxy)");
    assert!(err.message.contains(&named), "{}", err.message);
    assert!(site.origin_requests(FILE, 0).is_empty());
}

#[test]
fn a_proxy_refusing_a_tunnel_is_named_with_its_reason() {
    // squid answers a CONNECT to port 0 with an error status instead of a tunnel.
    let site = Site::new("proxy-refuses");
    let vars = [("https_proxy", site.proxy.url())];
    let driver = HttpDriver::new(site.client(&vars), "https://127.0.0.1:0").unwrap();
    let err = driver.stat("/x").unwrap_err();
    let named = format!(
        "through the proxy {} (from https_proxy)",
        site.proxy.authority()
    );
    assert!(err.message.contains(&named), "{}", err.message);
    assert!(
        err.message.contains("proxy server responded"),
        "{}",
        err.message
    );
}

#[test]
fn an_https_origin_is_reached_through_a_connect_tunnel_and_verified() {
    let site = Site::new("proxy-https");
    let ca = TestCa::new(&site.scratch.join("ca"));
    let origin = nginx_tls(&site.scratch.join("www"), &site.scratch.join("tls"), &ca);
    let base = format!("https://127.0.0.1:{}", origin.port);
    let vars = [("https_proxy", site.proxy.url())];
    let trusted = TlsOptions {
        ca_file: Some(ca.ca_cert.clone()),
        insecure: false,
    };
    let client = HttpClient::with_tls(&config(&vars), &trusted).unwrap();
    let driver = HttpDriver::new(client, &base).unwrap();
    let (_, bytes) = read(&driver, &format!("/{FILE}"), None);
    assert_eq!(bytes, noise(200_000, 7));
    assert_eq!(eventually_naming(&|| origin.access_log(), FILE, 1).len(), 1);
    drop(driver);
    let tunnels = site.proxied(&format!("CONNECT 127.0.0.1:{}", origin.port), 1);
    assert_eq!(tunnels.len(), 1, "{}", site.proxy_log());

    // The origin's certificate is checked inside the tunnel: untrusted, it is refused.
    let untrusting = HttpDriver::new(HttpClient::new(&config(&vars)), &base).unwrap();
    let err = untrusting.stat(&format!("/{FILE}")).unwrap_err();
    assert!(err.message.contains("not trust"), "{}", err.message);
}
