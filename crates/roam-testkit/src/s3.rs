//! An S3-compatible server for the S3 driver's tests: `moto_server` (PyPI `moto[server]`)
//! on a free loopback port, its log in `run/error.log`.
//!
//! moto starts open: it accepts any request, signed or not. A test prepares its world that
//! way (buckets, and objects a driver would refuse to write, such as `a/../b`), then calls
//! [`enforce_auth`]: from then on moto checks every request's Signature V4 against the
//! secret of an IAM user, as AWS does, so the tests also prove the driver's signing.
//!
//! The helpers speak plain HTTP/1.1 over a socket, since the testkit has no HTTP client;
//! each request carries a dummy `Authorization` header only to tell moto which service
//! (S3 or IAM) it is for: moto does not check it while open.

use std::fs;
use std::io::{Read, Write};
use std::net::TcpStream;
use std::path::Path;
use std::process::{Command, Stdio};
use std::thread;
use std::time::{Duration, Instant};

use crate::{mkdir, required, Server};

/// What werkzeug prints on stderr once bound: ` * Running on http://127.0.0.1:PORT`.
const BANNER: &str = "Running on http://127.0.0.1:";

/// The IAM policy of the test user: everything allowed.
const ALLOW_ALL: &str =
    r#"{"Version":"2012-10-17","Statement":[{"Effect":"Allow","Action":"*","Resource":"*"}]}"#;

/// Access key and secret of the IAM user that [`enforce_auth`] creates.
#[derive(Clone, Debug)]
pub struct Credentials {
    pub access_key: String,
    pub secret_key: String,
}

/// `moto_server`'s `main`, with one fix: moto checks a signature against the URL werkzeug
/// rebuilds for the request, which is decoded (`/b/ü?prefix=d/`), where AWS checks the URL
/// as sent (`/b/%C3%BC?prefix=d%2F`), as every client signs it. Without the fix, moto
/// refuses every correctly signed request for a non-ASCII key or with a `/` in its query
/// (every delimited listing).
///
/// With `--serial` first, werkzeug serves one request at a time (see [`moto_serial`]).
const MOTO_SERVER: &str = r#"
import sys
import flask
import moto.server
from moto.iam import access_control
from werkzeug.serving import run_simple

create = access_control.IAMRequestBase._create_aws_request

def create_from_raw_uri(self):
    self._path = flask.request.environ.get("RAW_URI", self._path)
    return create(self)

access_control.IAMRequestBase._create_aws_request = create_from_raw_uri
args = sys.argv[1:]
if args[:1] == ["--serial"]:
    args = args[1:]
    moto.server.run_simple = lambda *a, **k: run_simple(*a, **{**k, "threaded": False})
moto.server.main(args)
"#;

/// `moto_server` on 127.0.0.1, open to any request. It is started on port 0, so that it
/// binds a free port itself (no other process can take it first), and announces which.
///
/// `AWS_CA_BUNDLE` is removed from its environment: this image exports it, and TESTING.md
/// notes that it breaks S3 tooling against a plain-http endpoint.
pub fn moto(run: &Path) -> Server {
    start_moto(run, false)
}

/// [`moto`] serving one request at a time. moto checks `If-Match`/`If-None-Match` and then
/// stores, in two steps, so on its threaded server two conditional PUTs can both pass; S3
/// (and MinIO) check and store in one. One request at a time makes moto's two steps one,
/// for the tests of races between conditional writes. A request that stalls stalls every
/// other: not for fault tests.
pub fn moto_serial(run: &Path) -> Server {
    start_moto(run, true)
}

fn start_moto(run: &Path, serial: bool) -> Server {
    // The command proves the package is installed; the server runs from its Python.
    required(
        "moto_server",
        "moto[server] from PyPI: pip install 'moto[server]'",
    );
    let python = required("python3", "python3");
    mkdir(run);
    let log = run.join("error.log");
    let serial = serial.then_some("--serial");
    let mut child = Command::new(python)
        .args(["-c", MOTO_SERVER])
        .args(serial)
        .args(["-H", "127.0.0.1", "-p", "0"])
        .env_remove("AWS_CA_BUNDLE")
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(fs::File::create(&log).unwrap())
        .spawn()
        .expect("starting moto_server");
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let text = fs::read_to_string(&log).unwrap_or_default();
        if let Some(port) = announced_port(&text) {
            return Server::running(child, port, run);
        }
        if let Some(status) = child.try_wait().unwrap() {
            panic!("moto_server exited with {status} before listening: {text}");
        }
        if Instant::now() > deadline {
            let _ = child.kill();
            let _ = child.wait();
            panic!("moto_server did not listen within 30 s: {text}");
        }
        thread::sleep(Duration::from_millis(20));
    }
}

/// The port of the banner, once its line is complete (the log may be caught mid-write).
fn announced_port(log: &str) -> Option<u16> {
    let rest = &log[log.find(BANNER)? + BANNER.len()..];
    let (port, _) = rest.split_once('\n')?;
    port.trim().parse().ok()
}

/// Whether `reply` has status `code` (HTTP/1.1, or 1.0 from a [`moto_serial`]).
fn status_is(reply: &str, code: &str) -> bool {
    let status = reply
        .strip_prefix("HTTP/1.1 ")
        .or(reply.strip_prefix("HTTP/1.0 "));
    status.is_some_and(|s| s.starts_with(code))
}

/// Creates `bucket` (before [`enforce_auth`]).
pub fn create_bucket(server: &Server, bucket: &str) {
    let reply = request(server, "PUT", &format!("/{bucket}"), "s3", b"");
    assert!(status_is(&reply, "200"), "creating {bucket}: {reply}");
}

/// Stores `data` as object `key` of `bucket` (before [`enforce_auth`]), whatever the key:
/// the way to plant names that the driver must refuse to pass on.
pub fn put_object(server: &Server, bucket: &str, key: &str, data: &[u8]) {
    let path = format!("/{bucket}/{}", percent_encode(key));
    let reply = request(server, "PUT", &path, "s3", data);
    assert!(status_is(&reply, "200"), "storing {key}: {reply}");
}

/// The ids of the multipart uploads of `bucket` neither completed nor aborted (before
/// [`enforce_auth`]): what interrupted uploads leave behind.
pub fn multipart_uploads(server: &Server, bucket: &str) -> Vec<String> {
    let reply = request(server, "GET", &format!("/{bucket}?uploads"), "s3", b"");
    assert!(status_is(&reply, "200"), "listing uploads: {reply}");
    reply
        .split("<UploadId>")
        .skip(1)
        .filter_map(|rest| Some(rest.split_once('<')?.0.to_owned()))
        .collect()
}

/// Creates an IAM role allowed everything, which anyone may assume (before
/// [`enforce_auth`]); returns its ARN.
pub fn create_role(server: &Server, name: &str) -> String {
    let trust = r#"{"Version":"2012-10-17","Statement":[{"Effect":"Allow","Principal":{"Federated":"*"},"Action":"sts:AssumeRoleWithWebIdentity"},{"Effect":"Allow","Principal":{"AWS":"*"},"Action":"sts:AssumeRole"}]}"#;
    let reply = iam(
        server,
        &format!(
            "Action=CreateRole&RoleName={name}&AssumeRolePolicyDocument={}",
            percent_encode(trust)
        ),
    );
    let policy = format!(
        "Action=PutRolePolicy&RoleName={name}&PolicyName=all&PolicyDocument={}",
        percent_encode(ALLOW_ALL)
    );
    iam(server, &policy);
    element(&reply, "Arn")
}

/// Creates an IAM user allowed everything, and makes moto check every later request
/// against its credentials, which it returns.
pub fn enforce_auth(server: &Server) -> Credentials {
    enforce_auth_after(server, 0)
}

/// [`enforce_auth`], letting the next `unchecked` requests through unchecked: an unsigned
/// STS `AssumeRoleWithWebIdentity`, which moto would otherwise refuse as unsigned.
pub fn enforce_auth_after(server: &Server, unchecked: u32) -> Credentials {
    iam(server, "Action=CreateUser&UserName=roam");
    let policy = format!(
        "Action=PutUserPolicy&UserName=roam&PolicyName=all&PolicyDocument={}",
        percent_encode(ALLOW_ALL)
    );
    iam(server, &policy);
    let reply = iam(server, "Action=CreateAccessKey&UserName=roam");
    let credentials = Credentials {
        access_key: element(&reply, "AccessKeyId"),
        secret_key: element(&reply, "SecretAccessKey"),
    };
    // moto's switch: the number of requests it still lets through unchecked.
    let count = unchecked.to_string();
    let reply = request(
        server,
        "POST",
        "/moto-api/reset-auth",
        "s3",
        count.as_bytes(),
    );
    assert!(status_is(&reply, "200"), "enabling auth: {reply}");
    credentials
}

/// One IAM query-API call; returns the whole reply.
fn iam(server: &Server, form: &str) -> String {
    let body = format!("{form}&Version=2010-05-08");
    let reply = request(server, "POST", "/", "iam", body.as_bytes());
    assert!(status_is(&reply, "200"), "IAM {form}: {reply}");
    reply
}

/// The text of the first `<name>` element of an XML reply.
fn element(reply: &str, name: &str) -> String {
    let open = format!("<{name}>");
    let start = reply
        .find(&open)
        .unwrap_or_else(|| panic!("no {name}: {reply}"))
        + open.len();
    let end = start + reply[start..].find('<').unwrap();
    reply[start..end].to_owned()
}

/// Sends one request with `Connection: close` and returns the raw reply (status line,
/// headers and body). `service` names the AWS service moto should route it to.
fn request(server: &Server, method: &str, path: &str, service: &str, body: &[u8]) -> String {
    let mut stream = TcpStream::connect(("127.0.0.1", server.port)).unwrap();
    stream
        .set_read_timeout(Some(Duration::from_secs(30)))
        .unwrap();
    let content_type = if service == "iam" {
        "content-type: application/x-www-form-urlencoded\r\n"
    } else {
        ""
    };
    let head = format!(
        "{method} {path} HTTP/1.1\r\nhost: {}\r\nconnection: close\r\n\
         authorization: AWS4-HMAC-SHA256 Credential=test/20240101/us-east-1/{service}/aws4_request, \
         SignedHeaders=host, Signature=0\r\n{content_type}content-length: {}\r\n\r\n",
        server.authority(),
        body.len()
    );
    stream.write_all(head.as_bytes()).unwrap();
    stream.write_all(body).unwrap();
    let mut reply = Vec::new();
    stream.read_to_end(&mut reply).unwrap();
    String::from_utf8_lossy(&reply).into_owned()
}

/// Percent-encodes every byte but RFC 3986's unreserved ones and `/`.
fn percent_encode(text: &str) -> String {
    text.bytes()
        .map(|b| match b {
            b'A'..=b'Z' | b'a'..=b'z' | b'0'..=b'9' | b'-' | b'.' | b'_' | b'~' | b'/' => {
                (b as char).to_string()
            }
            _ => format!("%{b:02X}"),
        })
        .collect()
}
