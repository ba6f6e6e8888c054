//! Driver tests against scripted servers on loopback: what goes on the wire (encoded
//! paths, credentials, validators) and how each kind of failure comes back. The tests
//! against real nginx and Python servers are in `tests/http_nginx.rs`.

use std::io::{BufRead, BufReader, Write};
use std::net::{TcpListener, TcpStream};
use std::thread::{self, JoinHandle};
use std::time::{Duration, Instant};

use super::*;

/// A server that answers one connection per scripted response, in order, and returns the
/// request heads it saw (lowercased). Responses say `Connection: close`, so each request
/// of the client arrives on a fresh connection.
pub(crate) fn scripted(
    responses: Vec<impl AsRef<str> + Send + 'static>,
) -> (u16, JoinHandle<Vec<String>>) {
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let port = listener.local_addr().unwrap().port();
    let server = thread::spawn(move || {
        let mut seen = Vec::new();
        for response in responses {
            let (mut stream, _) = listener.accept().unwrap();
            seen.push(read_head(&stream));
            stream.write_all(response.as_ref().as_bytes()).unwrap();
        }
        seen
    });
    (port, server)
}

fn read_head(stream: &TcpStream) -> String {
    let mut reader = BufReader::new(stream);
    let mut head = String::new();
    while reader.read_line(&mut head).unwrap() > 2 {}
    head.to_ascii_lowercase()
}

/// A server that accepts, reads the request, sends `prefix` and then stays silent.
fn stalling(prefix: &'static str) -> u16 {
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let port = listener.local_addr().unwrap().port();
    thread::spawn(move || {
        let (mut stream, _) = listener.accept().unwrap();
        read_head(&stream);
        stream.write_all(prefix.as_bytes()).unwrap();
        thread::sleep(Duration::from_secs(5));
    });
    port
}

fn client() -> HttpClient {
    HttpClient::new(&HttpConfig {
        connect_timeout: Duration::from_secs(2),
        read_timeout: Duration::from_millis(300),
        netrc: None,
        ..HttpConfig::default()
    })
}

fn driver(base: &str) -> HttpDriver {
    HttpDriver::new(client(), base).unwrap()
}

const NOT_MODIFIED: &str = "HTTP/1.1 304 Not Modified\r\nConnection: close\r\n\r\n";

/// A page naming a 300-byte file: no real file system holds one (NAME_MAX is 255), hence
/// a scripted server. Listed, it would fail every lookup in the directory (ENAMETOOLONG):
/// it is left out, and the rest of the page stands.
#[test]
fn names_longer_than_name_max_are_left_out_of_listings() {
    let long = "x".repeat(300);
    let page = format!(
        "<html><body><pre><a href=\"../\">../</a>\n\
         <a href=\"{long}\">{long}</a> 22-Nov-2026 06:02 5\n\
         <a href=\"ok.txt\">ok.txt</a> 22-Nov-2026 06:02 2\n</pre></body></html>"
    );
    let reply = format!(
        "HTTP/1.1 200 OK\r\nContent-Type: text/html\r\nContent-Length: {}\r\n\
         Connection: close\r\n\r\n{page}",
        page.len()
    );
    let (port, _server) = scripted(vec![reply]);
    let listing = driver(&format!("http://127.0.0.1:{port}"))
        .list("/dir")
        .unwrap();
    let names: Vec<&str> = listing.entries.iter().map(|e| e.name.as_str()).collect();
    assert_eq!(names, ["ok.txt"]);
}

#[test]
fn requests_carry_encoded_paths_credentials_and_validators() {
    let (port, server) = scripted(vec![NOT_MODIFIED]);
    let d = driver(&format!("http://user:secret@127.0.0.1:{port}/pre"));
    let mtime = httpdate::parse_http_date("Sun, 22 Nov 2026 06:02:00 GMT").unwrap();
    let validator = Validator {
        etag: Some("\"6b02-3\"".into()),
        mtime: Some(mtime),
    };
    let fetched = d
        .fetch("/a b/c#?%.txt", &mut Vec::new(), Some(&validator))
        .unwrap();
    assert_eq!(fetched, Fetched::NotModified);
    let request = server.join().unwrap().remove(0);
    assert!(
        request.starts_with("get /pre/a%20b/c%23%3f%25.txt http/1.1\r\n"),
        "{request}"
    );
    // base64("user:secret")
    assert!(
        request.contains("\r\nauthorization: basic dxnlcjpzzwnyzxq=\r\n"),
        "{request}"
    );
    assert!(
        request.contains("\r\nif-none-match: \"6b02-3\"\r\n"),
        "{request}"
    );
    assert!(
        request.contains("\r\nif-modified-since: sun, 22 nov 2026 06:02:00 gmt\r\n"),
        "{request}"
    );
}

#[test]
fn statuses_become_errors_without_credentials() {
    let (port, server) = scripted(vec![
        "HTTP/1.1 404 Not Found\r\nConnection: close\r\nContent-Length: 0\r\n\r\n",
        "HTTP/1.1 410 Gone\r\nConnection: close\r\nContent-Length: 0\r\n\r\n",
        "HTTP/1.1 401 Unauthorized\r\nConnection: close\r\nContent-Length: 0\r\n\r\n",
        "HTTP/1.1 403 Forbidden\r\nConnection: close\r\nContent-Length: 0\r\n\r\n",
        "HTTP/1.1 500 Internal Server Error\r\nConnection: close\r\nContent-Length: 0\r\n\r\n",
        // A 304 that nobody asked for is a server fault.
        NOT_MODIFIED,
    ]);
    let d = driver(&format!("http://user:secret@127.0.0.1:{port}"));
    let err = d.stat("/missing").unwrap_err();
    assert_eq!(
        err.message,
        format!("HEAD http://127.0.0.1:{port}/missing: 404 Not Found")
    );
    assert_eq!(err.errno(), libc::ENOENT);
    assert_eq!(d.stat("/gone").unwrap_err().kind, ErrorKind::NotFound);
    assert_eq!(d.stat("/private").unwrap_err().errno(), libc::EACCES);
    assert_eq!(
        d.fetch("/forbidden", &mut Vec::new(), None)
            .unwrap_err()
            .errno(),
        libc::EACCES
    );
    let err = d.fetch("/broken", &mut Vec::new(), None).unwrap_err();
    assert_eq!(
        (err.kind, err.message.contains("500 Internal Server Error")),
        (ErrorKind::Io, true)
    );
    assert_eq!(
        d.fetch("/odd", &mut Vec::new(), None).unwrap_err().kind,
        ErrorKind::Io
    );
    server.join().unwrap();
}

#[test]
fn fetch_streams_the_body_and_reports_fresh_metadata() {
    let (port, server) = scripted(vec![
        // No Content-Length: the body runs until the connection closes.
        "HTTP/1.1 200 OK\r\nConnection: close\r\nLast-Modified: Sun, 22 Nov 2026 06:02:00 GMT\r\n\
         ETag: W/\"v1\"\r\n\r\nhello, world",
    ]);
    let d = driver(&format!("http://127.0.0.1:{port}/"));
    let mut dest = Vec::new();
    let Fetched::Body(meta) = d.fetch("/f", &mut dest, None).unwrap() else {
        panic!("not a body")
    };
    assert_eq!(dest, b"hello, world");
    assert_eq!(meta.kind, Kind::File);
    assert_eq!(meta.size, Some(12));
    assert_eq!(meta.etag.as_deref(), Some("W/\"v1\""));
    assert_eq!(
        meta.mtime,
        httpdate::parse_http_date("Sun, 22 Nov 2026 06:02:00 GMT").ok()
    );
    server.join().unwrap();
}

#[test]
fn a_truncated_body_is_an_error() {
    let (port, server) = scripted(vec![
        "HTTP/1.1 200 OK\r\nConnection: close\r\nContent-Length: 100\r\n\r\nonly this",
    ]);
    let err = driver(&format!("http://127.0.0.1:{port}"))
        .fetch("/f", &mut Vec::new(), None)
        .unwrap_err();
    assert_eq!(err.kind, ErrorKind::Io, "{}", err.message);
    assert!(
        err.message
            .starts_with(&format!("GET http://127.0.0.1:{port}/f: ")),
        "{}",
        err.message
    );
    server.join().unwrap();
}

#[test]
fn a_failing_destination_is_reported_as_a_local_write() {
    struct Full;
    impl Write for Full {
        fn write(&mut self, _: &[u8]) -> io::Result<usize> {
            Err(io::Error::from_raw_os_error(libc::ENOSPC))
        }
        fn flush(&mut self) -> io::Result<()> {
            Ok(())
        }
    }
    let (port, server) = scripted(vec![
        "HTTP/1.1 200 OK\r\nConnection: close\r\nContent-Length: 3\r\n\r\nabc",
    ]);
    let err = driver(&format!("http://127.0.0.1:{port}"))
        .fetch("/f", &mut Full, None)
        .unwrap_err();
    // A full cache disk must reach the program as ENOSPC, not as a vague EIO.
    assert_eq!(err.kind, ErrorKind::NoSpace);
    assert!(err.message.contains("writing the copy"), "{}", err.message);
    server.join().unwrap();
}

#[test]
fn silent_servers_time_out() {
    let started = Instant::now();
    let err = driver(&format!("http://127.0.0.1:{}", stalling("")))
        .stat("/f")
        .unwrap_err();
    assert_eq!(err.errno(), libc::ETIMEDOUT, "{}", err.message);
    let port = stalling("HTTP/1.1 200 OK\r\nContent-Length: 100\r\n\r\nsome");
    let err = driver(&format!("http://127.0.0.1:{port}"))
        .fetch("/f", &mut Vec::new(), None)
        .unwrap_err();
    assert_eq!(err.errno(), libc::ETIMEDOUT, "{}", err.message);
    assert!(
        started.elapsed() < Duration::from_secs(4),
        "timeouts took {:?}",
        started.elapsed()
    );
}

#[test]
fn unreachable_hosts() {
    let port = TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let err = driver(&format!("http://127.0.0.1:{port}"))
        .stat("/f")
        .unwrap_err();
    assert_eq!(err.errno(), libc::EHOSTUNREACH, "{}", err.message);
    assert!(
        err.message
            .starts_with(&format!("HEAD http://127.0.0.1:{port}/f: ")),
        "{}",
        err.message
    );
    let err = driver("http://roam-test.invalid").stat("/f").unwrap_err();
    assert_eq!(err.errno(), libc::EHOSTUNREACH, "{}", err.message);
}

#[test]
fn listing_a_file_is_not_a_directory() {
    let (port, server) = scripted(vec![
        "HTTP/1.1 404 Not Found\r\nConnection: close\r\nContent-Length: 0\r\n\r\n",
        "HTTP/1.1 200 OK\r\nConnection: close\r\nContent-Length: 3\r\n\r\n",
    ]);
    let err = driver(&format!("http://127.0.0.1:{port}"))
        .list("/f")
        .unwrap_err();
    assert_eq!(err.errno(), libc::ENOTDIR, "{}", err.message);
    assert_eq!(
        err.message,
        format!("GET http://127.0.0.1:{port}/f/: not a directory")
    );
    let requests = server.join().unwrap();
    assert!(requests[0].starts_with("get /f/ "), "{}", requests[0]);
    assert!(requests[1].starts_with("head /f "), "{}", requests[1]);
}

#[test]
fn paths_that_are_not_driver_paths_are_refused_without_a_request() {
    let d = driver("http://127.0.0.1:9");
    for bad in ["relative", "/a/../b", "/a/", "//"] {
        assert_eq!(
            d.stat(bad).unwrap_err().kind,
            ErrorKind::InvalidName,
            "{bad}"
        );
        assert_eq!(
            d.list(bad).unwrap_err().kind,
            ErrorKind::InvalidName,
            "{bad}"
        );
        assert_eq!(
            d.fetch(bad, &mut Vec::new(), None).unwrap_err().kind,
            ErrorKind::InvalidName,
            "{bad}"
        );
    }
}

#[test]
fn mount_urls_are_checked_and_never_shown_with_credentials() {
    let err = HttpDriver::new(client(), "ftp://h/x").unwrap_err();
    assert_eq!(err.kind, ErrorKind::InvalidName);
    let d = driver("https://user:secret@example.org:8443/pre/");
    assert_eq!(d.describe("/"), "https://example.org:8443/pre/");
    assert_eq!(d.describe("/a b"), "https://example.org:8443/pre/a%20b");
    assert!(!format!("{d:?}").contains("secret"));
}

#[test]
fn cache_control_says_how_long_contents_stay_fresh() {
    let fresh = |pairs: &[(&'static str, &str)]| {
        let mut headers = HeaderMap::new();
        for &(name, value) in pairs {
            headers.append(name, value.parse().unwrap());
        }
        super::freshness(&headers)
    };
    let secs = |s| Some(Duration::from_secs(s));
    assert_eq!(fresh(&[]), None);
    assert_eq!(fresh(&[("cache-control", "public")]), None);
    assert_eq!(fresh(&[("cache-control", "public, max-age=60")]), secs(60));
    assert_eq!(
        fresh(&[("cache-control", "max-age=\"60\""), ("age", "45")]),
        secs(15)
    );
    assert_eq!(
        fresh(&[("cache-control", "max-age=60"), ("age", "90")]),
        secs(0)
    );
    assert_eq!(
        fresh(&[
            ("cache-control", "max-age=60"),
            ("cache-control", "No-Cache")
        ]),
        secs(0)
    );
    assert_eq!(fresh(&[("cache-control", "no-store")]), secs(0));
    // A no-cache about some fields only leaves the contents alone.
    assert_eq!(
        fresh(&[("cache-control", "no-cache=\"set-cookie\", max-age=5")]),
        secs(5)
    );
}
