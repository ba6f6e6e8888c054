//! The FTP driver in explicit FTPS (`ftps://`) against vsftpd speaking nothing else:
//! certificates verified as for HTTPS, every data connection resuming its control
//! connection's TLS session (vsftpd's `require_ssl_reuse`), and no fall back to plain FTP.
//! What every driver does (reads, writes, errnos) runs over FTPS in tests/behaviour.rs.
//!
//! vsftpd and openssl are required: a machine without them fails these tests.

use std::fs;
use std::time::Duration;

use roam_drivers::ftp::{FtpConfig, FtpDriver};
use roam_drivers::http::TlsOptions;
use roam_drivers::{Driver, ErrorKind};
use roam_testkit::tls::TestCa;
use roam_testkit::{ftp, noise, write_file, Scratch, Server};

/// vsftpd in FTPS only, serving `pub/hello.txt`, with a certificate of a CA of its own.
struct Ftps {
    // Declared first so that it is dropped first: the server stops before its files go.
    server: Server,
    ca: TestCa,
    scratch: Scratch,
}

impl Ftps {
    fn new() -> Ftps {
        let scratch = Scratch::new("ftps");
        let ca = TestCa::new(&scratch.join("ca"));
        let root = scratch.join("root");
        write_file(&root.join("pub/hello.txt"), b"over FTPS\n", 0o644);
        let server = ftp::vsftpd_tls(&root, &scratch.join("run"), &ca);
        Ftps {
            server,
            ca,
            scratch,
        }
    }

    fn url(&self) -> String {
        format!("ftps://{}/pub", self.server.authority())
    }

    /// A driver of the served tree with the TLS choices `tls`.
    fn driver(&self, tls: TlsOptions) -> FtpDriver {
        driver(&self.url(), tls)
    }

    /// A driver trusting only the server's own CA.
    fn trusting(&self) -> FtpDriver {
        self.driver(TlsOptions {
            ca_file: Some(self.ca.ca_cert.clone()),
            insecure: false,
        })
    }
}

fn driver(url: &str, tls: TlsOptions) -> FtpDriver {
    let cfg = FtpConfig {
        connect_timeout: Duration::from_secs(5),
        read_timeout: Duration::from_secs(20),
        netrc: None,
        tls,
        ..FtpConfig::default()
    };
    FtpDriver::new(cfg, url).unwrap()
}

fn fetched(d: &dyn Driver, path: &str) -> Vec<u8> {
    let mut out = Vec::new();
    d.fetch(path, &mut out, None).unwrap();
    out
}

#[test]
fn an_unknown_authority_is_refused_with_the_host_and_the_fix() {
    let ftps = Ftps::new();
    // The platform's roots, which do not hold the test's CA.
    let e = ftps.driver(TlsOptions::default()).stat("/").unwrap_err();
    assert_eq!(e.kind, ErrorKind::Io, "{}", e.message);
    let host = ftps.server.authority();
    assert!(
        e.message.starts_with(&format!("connect ftps://{host}: ")),
        "{}",
        e.message
    );
    let wanted = format!(
        "the TLS certificate of {host} is signed by an authority roam does not trust; to \
         trust its authority, add [tls.\"{host}\"] ca_file = \"/path/ca.pem\" to roam.toml, \
         or set SSL_CERT_FILE"
    );
    assert!(e.message.ends_with(&wanted), "{}", e.message);
    // No login followed the refused handshake (vsftpd logs every login).
    let log = ftps.server.error_log();
    assert!(!log.contains("LOGIN"), "{log}");
}

#[test]
fn a_hosts_ca_file_makes_it_trusted_for_reads_and_writes() {
    let ftps = Ftps::new();
    let d = ftps.trusting();
    assert_eq!(fetched(&d, "/hello.txt"), b"over FTPS\n");
    let data = noise(300_000, 7);
    d.put("/up.bin", &mut &data[..], data.len() as u64).unwrap();
    let on_disk = fs::read(ftps.scratch.join("root/pub/up.bin")).unwrap();
    assert!(on_disk == data, "the upload arrived changed");
    assert_eq!(fetched(&d, "/up.bin"), data);
}

#[test]
fn insecure_skips_verification() {
    let ftps = Ftps::new();
    let d = ftps.driver(TlsOptions {
        ca_file: None,
        insecure: true,
    });
    assert_eq!(fetched(&d, "/hello.txt"), b"over FTPS\n");
}

/// Refused transfers, ranges cut short, empty and large uploads on one control connection:
/// each data connection resumes its session (vsftpd refuses one that does not).
#[test]
fn every_data_connection_resumes_the_control_session() {
    let ftps = Ftps::new();
    let d = ftps.trusting();
    let data = noise(100_000, 3);
    for round in 0..6 {
        let name = format!("/f{round}");
        d.put(&name, &mut &data[..], data.len() as u64).unwrap();
        d.put("/empty", &mut &b""[..], 0).unwrap();
        let e = d.fetch("/missing", &mut Vec::new(), None).unwrap_err();
        assert_eq!(e.kind, ErrorKind::NotFound, "{}", e.message);
        let mut part = Vec::new();
        assert_eq!(d.read_range(&name, 1000, 10, None, &mut part).unwrap(), 10);
        assert_eq!(part, data[1000..1010]);
        assert_eq!(fetched(&d, &name), data);
        assert_eq!(d.list("/").unwrap().entries.len(), round + 3);
    }
    let log = ftps.server.error_log();
    let reused = log.matches(", reused,").count();
    assert!(reused >= 6 * 5, "{reused} resumed data connections:\n{log}");
    // 522: vsftpd's refusal of a data connection that did not resume the session.
    assert!(!log.contains("\"522"), "{log}");
}

#[test]
fn a_server_without_tls_is_refused_not_used_in_the_clear() {
    let scratch = Scratch::new("ftps-plain");
    let root = scratch.join("root");
    write_file(&root.join("pub/hello.txt"), b"plain\n", 0o644);
    let server = ftp::vsftpd(&root, &scratch.join("run"));
    let url = format!("ftps://{}/pub", server.authority());
    let e = driver(&url, TlsOptions::default())
        .stat("/hello.txt")
        .unwrap_err();
    assert_eq!(e.kind, ErrorKind::Unsupported, "{}", e.message);
    assert!(
        e.message
            .contains("does not speak FTPS: it refused AUTH TLS (530")
            && e.message.contains("roam does not fall back to plain FTP"),
        "{}",
        e.message
    );
    // vsftpd logs no command before a login, but it logs every login.
    let log = server.error_log();
    assert!(!log.contains("LOGIN"), "{log}");
}
