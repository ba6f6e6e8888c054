//! FTPS end to end: real programs under `roam run` and on `roam mount` read and write
//! `/ftps/HOST/...`, `ftps://HOST/...` and `-m /x=ftps://...` names of a vsftpd that speaks
//! nothing but explicit FTPS, trusting the test's CA through `[tls."HOST:PORT"] ca_file`
//! in roam.toml; without it, the certificate is refused in words.

mod common;

use std::fs;
use std::path::PathBuf;

use common::fuse::FuseMount;
use common::{stderr, stdout, Roam};
use roam_testkit::tls::TestCa;
use roam_testkit::{ftp, noise, write_file, Scratch, Server};

/// vsftpd in FTPS only serving `pub/hello.txt`, and a local file to copy there.
struct Fixture {
    // Declared first so that it is dropped first: the server stops before its files go.
    server: Server,
    ca: TestCa,
    /// 200 kB to upload.
    local: PathBuf,
    scratch: Scratch,
}

impl Fixture {
    fn new() -> Fixture {
        let scratch = Scratch::new("run-ftps");
        let ca = TestCa::new(&scratch.join("ca"));
        write_file(&scratch.join("root/pub/hello.txt"), b"over FTPS\n", 0o644);
        let local = scratch.join("local.bin");
        write_file(&local, &noise(200_000, 5), 0o644);
        let server = ftp::vsftpd_tls(&scratch.join("root"), &scratch.join("run"), &ca);
        Fixture {
            server,
            ca,
            local,
            scratch,
        }
    }

    /// A roam whose roam.toml trusts the test's CA for the server.
    fn trusting(&self) -> Roam {
        let roam = Roam::new();
        let conf = roam.cache.join("roam.toml");
        fs::write(
            &conf,
            format!(
                "[tls.\"{}\"]\nca_file = \"{}\"\n",
                self.server.authority(),
                self.ca.ca_cert.display()
            ),
        )
        .unwrap();
        roam.env("ROAM_CONFIG", &conf)
    }

    /// What the server holds at `pub/REL`.
    fn served(&self, rel: &str) -> Vec<u8> {
        fs::read(self.scratch.join("root/pub").join(rel)).unwrap()
    }
}

#[test]
fn programs_read_and_write_ftps_names_with_the_ca_configured() {
    let fx = Fixture::new();
    let host = fx.server.authority();
    let script = format!(
        "cat /ftps/{host}/pub/hello.txt && cat ftps://{host}/pub/hello.txt && \
         cp {} /ftps/{host}/pub/copy.bin && cmp {} /ftps/{host}/pub/copy.bin && echo same",
        fx.local.display(),
        fx.local.display()
    );
    let o = fx.trusting().sh(&[], &script);
    assert!(o.status.success(), "{}", stderr(&o));
    assert_eq!(stdout(&o), "over FTPS\nover FTPS\nsame\n");
    assert_eq!(fx.served("copy.bin"), fs::read(&fx.local).unwrap());

    // An explicit mount of the same server.
    let mount = format!("/x=ftps://{host}/pub");
    let o = fx
        .trusting()
        .sh(&["-m", &mount], "cat /x/hello.txt && echo new > /x/new.txt");
    assert!(o.status.success(), "{}", stderr(&o));
    assert_eq!(stdout(&o), "over FTPS\n");
    assert_eq!(fx.served("new.txt"), b"new\n");
}

#[test]
fn without_the_ca_the_certificate_is_refused_in_words() {
    let fx = Fixture::new();
    let host = fx.server.authority();
    let o = Roam::new().run(&["cat", &format!("/ftps/{host}/pub/hello.txt")]);
    assert!(!o.status.success());
    assert_eq!(stdout(&o), "");
    let err = stderr(&o);
    assert!(err.contains("Input/output error"), "EIO: {err}");
    let wanted = format!(
        "the TLS certificate of {host} is signed by an authority roam does not trust; to \
         trust its authority, add [tls.\"{host}\"] ca_file = \"/path/ca.pem\" to roam.toml, \
         or set SSL_CERT_FILE"
    );
    assert!(err.contains(&wanted), "{err}");
}

#[test]
fn roam_mount_serves_ftps() {
    let fx = Fixture::new();
    let url = format!("ftps://{}/pub", fx.server.authority());
    let m = FuseMount::start(fx.trusting(), Some(&url), &[]);
    let script = format!(
        "cat /w/hello.txt && cp {} /w/mounted.bin",
        fx.local.display()
    );
    let o = m.sh(&script, &[]);
    assert!(o.status.success(), "{}\n{}", stderr(&o), m.log_text());
    assert_eq!(stdout(&o), "over FTPS\n");
    drop(m);
    assert_eq!(fx.served("mounted.bin"), fs::read(&fx.local).unwrap());
}
