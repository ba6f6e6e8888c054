//! Logins from netrc for the HTTP and WebDAV drivers, against nginx asking for Basic
//! authorization (`auth_basic` with an htpasswd file, from `roam-testkit`): the machine
//! entry of the host logs in when the URL has no password, a password in a file others may
//! read is refused (as ftp(1) refuses it), and without a login nginx's 401 is `EACCES`.
//!
//! nginx (with Debian's dav-ext module) is required: a machine without it fails these tests.

use std::fs;
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::time::Duration;

use roam_drivers::dav::DavDriver;
use roam_drivers::http::{HttpClient, HttpConfig, HttpDriver};
use roam_drivers::{Driver, Fetched};
use roam_testkit::dav::nginx_dav_with_login;
use roam_testkit::{write_file, Scratch, Server};

const USER: &str = "alice";
const PASSWORD: &str = "wonder land";

/// A client whose mounts take logins from `netrc`.
fn client(netrc: Option<&Path>) -> HttpClient {
    HttpClient::new(&HttpConfig {
        connect_timeout: Duration::from_secs(5),
        read_timeout: Duration::from_secs(20),
        netrc: netrc.map(Path::to_path_buf),
        ..HttpConfig::default()
    })
}

/// A netrc file in `scratch` with `text` and `mode`.
fn netrc(scratch: &Scratch, text: &str, mode: u32) -> PathBuf {
    let file = scratch.join("netrc");
    fs::write(&file, text).unwrap();
    fs::set_permissions(&file, fs::Permissions::from_mode(mode)).unwrap();
    file
}

/// The whole file `path`, or the errno of the failure.
fn read(driver: &dyn Driver, path: &str) -> Result<Vec<u8>, i32> {
    let mut bytes = Vec::new();
    match driver.fetch(path, &mut bytes, None) {
        Ok(Fetched::Body(_)) => Ok(bytes),
        Ok(Fetched::NotModified) => panic!("nothing was cached"),
        Err(e) => Err(e.errno()),
    }
}

#[test]
fn http_logs_in_with_the_hosts_netrc_entry() {
    let scratch = Scratch::new("netrc-http");
    let www = scratch.join("www");
    write_file(&www.join("private/report.txt"), b"for alice\n", 0o644);
    write_file(&www.join("open.txt"), b"for all\n", 0o644);
    let server = Server::nginx_with_login(&www, &scratch.join("run"), USER, PASSWORD);
    let url = server.url();
    let entry = format!("machine 127.0.0.1 login {USER} password \"{PASSWORD}\"\n");

    let file = netrc(&scratch, &entry, 0o600);
    let driver = HttpDriver::new(client(Some(&file)), &url).unwrap();
    assert_eq!(
        read(&driver, "/private/report.txt"),
        Ok(b"for alice\n".to_vec())
    );
    assert!(
        !format!("{driver:?}").contains("wonder"),
        "the password never shows in the driver's Debug"
    );

    // No netrc, or another host's entry only: nginx's 401 is EACCES; open files still read.
    for file in [
        None,
        Some(netrc(&scratch, "machine other login u password p\n", 0o600)),
    ] {
        let driver = HttpDriver::new(client(file.as_deref()), &url).unwrap();
        assert_eq!(read(&driver, "/private/report.txt"), Err(libc::EACCES));
        assert_eq!(read(&driver, "/open.txt"), Ok(b"for all\n".to_vec()));
    }

    // The `default` entry serves any host without a machine entry, as for curl.
    let file = netrc(
        &scratch,
        &entry.replace("machine 127.0.0.1", "default"),
        0o600,
    );
    let driver = HttpDriver::new(client(Some(&file)), &url).unwrap();
    assert_eq!(
        read(&driver, "/private/report.txt"),
        Ok(b"for alice\n".to_vec())
    );

    // A password in a file others may read is not used.
    let file = netrc(&scratch, &entry, 0o644);
    let driver = HttpDriver::new(client(Some(&file)), &url).unwrap();
    assert_eq!(read(&driver, "/private/report.txt"), Err(libc::EACCES));

    // The URL's own login wins over the file: a wrong password there is refused.
    let file = netrc(&scratch, &entry, 0o600);
    let wrong = url.replace("://", &format!("://{USER}:nope@"));
    let driver = HttpDriver::new(client(Some(&file)), &wrong).unwrap();
    assert_eq!(read(&driver, "/private/report.txt"), Err(libc::EACCES));
    drop(server);
}

#[test]
fn webdav_reads_and_writes_with_the_hosts_netrc_entry() {
    let scratch = Scratch::new("netrc-dav");
    let www = scratch.join("www");
    write_file(&www.join("notes.txt"), b"dav notes\n", 0o644);
    let server = nginx_dav_with_login(&www, &scratch.join("run"), USER, PASSWORD);
    let url = server.url();
    let file = netrc(
        &scratch,
        &format!("machine 127.0.0.1\n  login {USER}\n  password \"{PASSWORD}\"\n"),
        0o600,
    );
    let driver = DavDriver::new(client(Some(&file)), &url).unwrap();
    assert_eq!(read(&driver, "/notes.txt"), Ok(b"dav notes\n".to_vec()));
    let names: Vec<String> = driver
        .list("/")
        .unwrap()
        .entries
        .into_iter()
        .map(|e| e.name)
        .collect();
    assert_eq!(names, ["notes.txt"]);
    let body = b"written with netrc's login";
    driver
        .put("/new.txt", &mut &body[..], body.len() as u64)
        .unwrap();
    assert_eq!(fs::read(www.join("new.txt")).unwrap(), body);

    let anonymous = DavDriver::new(client(None), &url).unwrap();
    assert_eq!(read(&anonymous, "/notes.txt"), Err(libc::EACCES));
    drop(server);
}
