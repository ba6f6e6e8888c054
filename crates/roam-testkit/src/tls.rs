//! nginx over TLS with a certificate authority of the test's own (made with `openssl`), to
//! check that roam verifies certificates and honours per-host TLS choices.

use std::path::{Path, PathBuf};
use std::process::Command;

use crate::{mkdir, required, NginxExtra, Server};

/// When [`TestCa::expired`]'s certificate expired, as HTTP writes dates.
pub const EXPIRED_ON: &str = "Thu, 02 Jan 2025 00:00:00 GMT";

/// A CA made for one test, and a certificate for 127.0.0.1 that it signed.
pub struct TestCa {
    pub ca_cert: PathBuf,
    pub cert: PathBuf,
    pub key: PathBuf,
}

impl TestCa {
    /// Makes the CA and the server certificate in `dir`.
    pub fn new(dir: &Path) -> TestCa {
        TestCa::with_names(dir, "IP:127.0.0.1")
    }

    /// Makes the CA and a server certificate for `names` (a `subjectAltName` value:
    /// `DNS:a.example,IP:127.0.0.1`) in `dir`.
    pub fn with_names(dir: &Path, names: &str) -> TestCa {
        TestCa::make(dir, names, None)
    }

    /// Makes the CA and a server certificate for 127.0.0.1 valid from 1 January 2025 to
    /// [`EXPIRED_ON`] only.
    pub fn expired(dir: &Path) -> TestCa {
        TestCa::make(
            dir,
            "IP:127.0.0.1",
            Some(("20250101000000Z", "20250102000000Z")),
        )
    }

    /// The CA and a server certificate for `names`, valid for two days from now, or
    /// between the two dates of `validity` (`openssl ca`, which alone takes dates).
    fn make(dir: &Path, names: &str, validity: Option<(&str, &str)>) -> TestCa {
        mkdir(dir);
        let openssl = required("/usr/bin/openssl", "openssl");
        let run = |args: &[&str]| {
            let st = Command::new(&openssl)
                .args(args)
                .current_dir(dir)
                .output()
                .expect("running openssl");
            assert!(
                st.status.success(),
                "openssl {args:?}: {}",
                String::from_utf8_lossy(&st.stderr)
            );
        };
        run(&[
            "req",
            "-x509",
            "-newkey",
            "rsa:2048",
            "-nodes",
            "-keyout",
            "ca.key",
            "-out",
            "ca.pem",
            "-days",
            "2",
            "-subj",
            "/CN=roam test CA",
        ]);
        run(&[
            "req",
            "-newkey",
            "rsa:2048",
            "-nodes",
            "-keyout",
            "server.key",
            "-out",
            "server.csr",
            "-subj",
            "/CN=127.0.0.1",
        ]);
        std::fs::write(
            dir.join("san.ext"),
            format!("subjectAltName={names}\nbasicConstraints=CA:FALSE\n"),
        )
        .unwrap();
        if let Some((start, end)) = validity {
            std::fs::write(dir.join("index.txt"), "").unwrap();
            std::fs::write(dir.join("serial"), "01\n").unwrap();
            std::fs::write(
                dir.join("ca.cnf"),
                "[ca]\ndefault_ca = t\n[t]\ndatabase = index.txt\nnew_certs_dir = .\n\
                 serial = serial\ndefault_md = sha256\npolicy = p\n[p]\ncommonName = supplied\n",
            )
            .unwrap();
            run(&[
                "ca",
                "-batch",
                "-config",
                "ca.cnf",
                "-cert",
                "ca.pem",
                "-keyfile",
                "ca.key",
                "-in",
                "server.csr",
                "-out",
                "server.pem",
                "-notext",
                "-extfile",
                "san.ext",
                "-startdate",
                start,
                "-enddate",
                end,
            ]);
        } else {
            run(&[
                "x509",
                "-req",
                "-in",
                "server.csr",
                "-CA",
                "ca.pem",
                "-CAkey",
                "ca.key",
                "-CAcreateserial",
                "-out",
                "server.pem",
                "-days",
                "2",
                "-extfile",
                "san.ext",
            ]);
        }
        TestCa {
            ca_cert: dir.join("ca.pem"),
            cert: dir.join("server.pem"),
            key: dir.join("server.key"),
        }
    }
}

/// nginx serving `www` over HTTPS with `ca`'s server certificate.
pub fn nginx_tls(www: &Path, run: &Path, ca: &TestCa) -> Server {
    let extra = NginxExtra {
        main: String::new(),
        http: String::new(),
        server: format!(
            "ssl on;\nssl_certificate {};\nssl_certificate_key {};\n",
            ca.cert.display(),
            ca.key.display()
        ),
    };
    Server::nginx_with(www, run, &extra)
}

/// nginx on TLS with `ca`'s server certificate, passing every request on to the plain HTTP
/// server on 127.0.0.1:`upstream` (moto, for S3 over HTTPS), `Host` header included.
pub fn nginx_tls_proxy(run: &Path, ca: &TestCa, upstream: u16) -> Server {
    let extra = NginxExtra {
        main: String::new(),
        http: String::new(),
        server: format!(
            "ssl on;\nssl_certificate {};\nssl_certificate_key {};\n\
             client_max_body_size 0;\n\
             location / {{\n\
             proxy_pass http://127.0.0.1:{upstream};\n\
             proxy_set_header Host $http_host;\n\
             proxy_http_version 1.1;\n\
             proxy_request_buffering off;\n\
             }}\n",
            ca.cert.display(),
            ca.key.display()
        ),
    };
    Server::nginx_with(run, run, &extra)
}
