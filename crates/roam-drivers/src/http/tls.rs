//! Which certificate authorities roam trusts, found where OpenSSL and curl find them, and
//! how a refused certificate is told in words.
//!
//! The roots, read once per process:
//! 1. `SSL_CERT_FILE` (a PEM bundle) and `SSL_CERT_DIR` (directories of `HASH.N` files as
//!    `openssl rehash` names them, separated by `:`), when either is set and not empty:
//!    only what they hold.
//! 2. Else the system bundle: the first of [`SYSTEM_FILES`] that exists (the paths
//!    `openssl-probe` knows), else the hashed certificates of [`SYSTEM_DIRS`].
//! 3. Else (no bundle on this machine) the Mozilla roots compiled into roam, with a warning.
//!
//! A host's `[tls."HOST:PORT"] ca_file` replaces them for that host, and so does
//! `AWS_CA_BUNDLE` for S3 (see `s3::config`). HTTP, WebDAV and S3 hand them to ureq;
//! protocols on sockets of their own (FTPS) take a rustls configuration built from the
//! same choices ([`client_config`]).

use std::fmt::Write as _;
use std::path::{Path, PathBuf};
use std::sync::{Arc, OnceLock};

use rustls::client::danger::{HandshakeSignatureValid, ServerCertVerified, ServerCertVerifier};
use rustls::crypto::{verify_tls12_signature, verify_tls13_signature, CryptoProvider};
use rustls::pki_types::{CertificateDer, ServerName, UnixTime};
use rustls::{CertificateError, ClientConfig, DigitallySignedStruct, Error as TlsError};
use rustls::{RootCertStore, SignatureScheme};
use ureq::tls::{parse_pem, Certificate, PemItem, RootCerts};

use super::TlsOptions;
use crate::{Error, ErrorKind, Result};

/// CA bundles of the usual Linux and BSD distributions, in `openssl-probe`'s order.
pub const SYSTEM_FILES: &[&str] = &[
    "/etc/ssl/certs/ca-certificates.crt",
    "/etc/pki/tls/certs/ca-bundle.crt",
    "/etc/pki/ca-trust/extracted/pem/tls-ca-bundle.pem",
    "/etc/ssl/ca-bundle.pem",
    "/etc/pki/tls/cacert.pem",
    "/etc/ssl/cert.pem",
    "/usr/local/share/certs/ca-root-nss.crt",
    "/usr/local/ssl/cert.pem",
];

/// Hashed certificate directories, for a system with no bundle file.
pub const SYSTEM_DIRS: &[&str] = &[
    "/etc/ssl/certs",
    "/etc/pki/tls/certs",
    "/usr/local/ssl/certs",
];

/// The roots every host without its own `ca_file` is verified against.
pub(crate) fn platform_roots() -> RootCerts {
    platform().0.clone()
}

/// The platform's roots and where they came from, found once per run.
fn platform() -> &'static (RootCerts, String) {
    static ROOTS: OnceLock<(RootCerts, String)> = OnceLock::new();
    ROOTS.get_or_init(|| {
        let env = |name: &str| std::env::var_os(name).filter(|v| !v.is_empty());
        let found = find_roots(&env, SYSTEM_FILES, SYSTEM_DIRS);
        match found {
            Some((certs, source)) => {
                tracing::debug!("TLS: {} CA certificates from {source}", certs.len());
                (RootCerts::new_with_certs(&certs), source)
            }
            None => {
                tracing::warn!(
                    "TLS: no CA bundle on this machine (SSL_CERT_FILE, SSL_CERT_DIR and \
                     {} are absent): trusting the Mozilla roots built into roam",
                    SYSTEM_FILES[0]
                );
                (
                    RootCerts::WebPki,
                    "the Mozilla roots built into roam".into(),
                )
            }
        }
    })
}

/// Which certificate authorities verify a host with `options`, in words (`roam doctor`).
pub fn authorities(options: &TlsOptions) -> String {
    match (&options.ca_file, options.insecure) {
        (_, true) => "none: insecure = true in roam.toml (certificates are not verified)".into(),
        (Some(ca), false) => format!("{} (ca_file in roam.toml)", ca.display()),
        (None, false) => platform().1.clone(),
    }
}

/// The certificates the environment (`env`) or the system names, and where they came from;
/// `None` when neither names any. A variable that is set wins even if its file is
/// unreadable (as with OpenSSL: nothing is then trusted), with a warning.
pub(crate) fn find_roots(
    env: &dyn Fn(&str) -> Option<std::ffi::OsString>,
    system_files: &[&str],
    system_dirs: &[&str],
) -> Option<(Vec<Certificate<'static>>, String)> {
    let file = env("SSL_CERT_FILE").map(PathBuf::from);
    let dirs = env("SSL_CERT_DIR");
    if file.is_some() || dirs.is_some() {
        let mut certs = Vec::new();
        let mut source = Vec::new();
        if let Some(file) = file {
            match read_certs(&file) {
                Ok(found) => certs.extend(found),
                Err(e) => tracing::warn!("TLS: SSL_CERT_FILE: {}", e.message),
            }
            source.push(format!("SSL_CERT_FILE={}", file.display()));
        }
        if let Some(dirs) = dirs {
            for dir in std::env::split_paths(&dirs) {
                certs.extend(hashed_certs(&dir));
            }
            source.push(format!("SSL_CERT_DIR={}", dirs.to_string_lossy()));
        }
        return Some((certs, source.join(" ")));
    }
    for file in system_files.iter().map(Path::new) {
        if let Ok(certs) = read_certs(file) {
            return Some((certs, file.display().to_string()));
        }
    }
    for dir in system_dirs.iter().map(Path::new) {
        let certs = hashed_certs(dir);
        if !certs.is_empty() {
            return Some((certs, dir.display().to_string()));
        }
    }
    None
}

/// The certificates of a PEM file; an error if it cannot be read or holds none.
pub(crate) fn read_certs(path: &Path) -> Result<Vec<Certificate<'static>>> {
    let pem = std::fs::read(path)
        .map_err(|e| Error::from_io(format_args!("CA file {}", path.display()), &e))?;
    let certs: Vec<_> = parse_pem(&pem)
        .filter_map(|item| match item {
            Ok(PemItem::Certificate(c)) => Some(c),
            _ => None,
        })
        .collect();
    if certs.is_empty() {
        return Err(Error::new(
            ErrorKind::InvalidName,
            format!("CA file {}: no certificate in it", path.display()),
        ));
    }
    Ok(certs)
}

/// The certificates of `dir`'s files named as OpenSSL looks them up (`HASH.N`: eight hex
/// digits, a dot, a number); other files (bundles, `.rN` revocation lists) are skipped.
fn hashed_certs(dir: &Path) -> Vec<Certificate<'static>> {
    let Ok(entries) = std::fs::read_dir(dir) else {
        return Vec::new();
    };
    let mut names: Vec<PathBuf> = entries
        .filter_map(|e| e.ok())
        .filter(|e| is_hashed_name(&e.file_name().to_string_lossy()))
        .map(|e| e.path())
        .collect();
    names.sort();
    names
        .iter()
        .filter_map(|path| read_certs(path).ok())
        .flatten()
        .collect()
}

fn is_hashed_name(name: &str) -> bool {
    name.split_once('.').is_some_and(|(hash, n)| {
        hash.len() == 8
            && hash.bytes().all(|b| b.is_ascii_hexdigit())
            && !n.is_empty()
            && n.bytes().all(|b| b.is_ascii_digit())
    })
}

/// A rustls client configuration for a host with `options`: its `ca_file`, else the
/// platform's roots; `insecure` verifies nothing. The crypto provider is ureq's (ring).
pub(crate) fn client_config(options: &TlsOptions) -> Result<ClientConfig> {
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let builder = ClientConfig::builder_with_provider(provider.clone())
        .with_safe_default_protocol_versions()
        .map_err(|e| Error::new(ErrorKind::Io, format!("TLS: {e}")))?;
    let builder = match options.insecure {
        true => builder
            .dangerous()
            .with_custom_certificate_verifier(Arc::new(Unverified(provider))),
        false => {
            let roots = match &options.ca_file {
                Some(ca) => RootCerts::new_with_certs(&read_certs(ca)?),
                None => platform_roots(),
            };
            builder.with_root_certificates(root_store(&roots))
        }
    };
    Ok(builder.with_no_client_auth())
}

/// The trust anchors of `roots`, as rustls takes them.
fn root_store(roots: &RootCerts) -> RootCertStore {
    match roots {
        RootCerts::Specific(certs) => {
            let mut store = RootCertStore::empty();
            let ders = certs.iter().map(|c| CertificateDer::from(c.der()));
            let (_, ignored) = store.add_parsable_certificates(ders);
            if ignored > 0 {
                tracing::debug!("TLS: {ignored} CA certificates could not be parsed");
            }
            store
        }
        // `platform_roots` gives nothing else: the built-in Mozilla roots.
        _ => RootCertStore {
            roots: webpki_roots::TLS_SERVER_ROOTS.to_vec(),
        },
    }
}

/// The verifier of `insecure = true`: any certificate, but handshake signatures are still
/// checked (they prove the peer holds the key it presented).
#[derive(Debug)]
struct Unverified(Arc<CryptoProvider>);

impl ServerCertVerifier for Unverified {
    fn verify_server_cert(
        &self,
        _end_entity: &CertificateDer<'_>,
        _intermediates: &[CertificateDer<'_>],
        _server_name: &ServerName<'_>,
        _ocsp_response: &[u8],
        _now: UnixTime,
    ) -> std::result::Result<ServerCertVerified, TlsError> {
        Ok(ServerCertVerified::assertion())
    }

    fn verify_tls12_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> std::result::Result<HandshakeSignatureValid, TlsError> {
        verify_tls12_signature(
            message,
            cert,
            dss,
            &self.0.signature_verification_algorithms,
        )
    }

    fn verify_tls13_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> std::result::Result<HandshakeSignatureValid, TlsError> {
        verify_tls13_signature(
            message,
            cert,
            dss,
            &self.0.signature_verification_algorithms,
        )
    }

    fn supported_verify_schemes(&self) -> Vec<SignatureScheme> {
        self.0.signature_verification_algorithms.supported_schemes()
    }
}

/// Which settings can make roam trust a server: the S3 driver also reads `AWS_CA_BUNDLE`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Service {
    /// HTTP, WebDAV and FTP: `[tls]` and the platform's settings only.
    Http,
    S3,
}

/// The refused certificate behind `err`, if that is what it is, told in words:
/// `the certificate of HOST:PORT REASON; FIX`. `authority` is the `[tls."..."]` key of
/// the host.
pub(crate) fn describe(err: &ureq::Error, authority: &str, service: Service) -> Option<String> {
    let tls = match err {
        ureq::Error::Rustls(e) => e,
        ureq::Error::Io(e) => e.get_ref()?.downcast_ref::<TlsError>()?,
        _ => return None,
    };
    describe_tls(tls, authority, service)
}

/// [`describe`] of a rustls error, for protocols that run rustls themselves.
pub(crate) fn describe_tls(err: &TlsError, authority: &str, service: Service) -> Option<String> {
    let TlsError::InvalidCertificate(cert) = err else {
        return None;
    };
    Some(describe_certificate(cert, authority, service))
}

fn describe_certificate(cert: &CertificateError, authority: &str, service: Service) -> String {
    let trust_fix = {
        let mut fix = format!(
            "to trust its authority, add [tls.\"{authority}\"] ca_file = \"/path/ca.pem\" to \
             roam.toml, or set "
        );
        if service == Service::S3 {
            fix.push_str("AWS_CA_BUNDLE or ");
        }
        fix.push_str("SSL_CERT_FILE");
        fix
    };
    let date = |t: &rustls::pki_types::UnixTime| {
        let when = std::time::UNIX_EPOCH + std::time::Duration::from_secs(t.as_secs());
        httpdate::fmt_http_date(when)
    };
    let clock = "(or this machine's clock is wrong)";
    let (reason, fix) = match cert {
        CertificateError::UnknownIssuer => (
            "is signed by an authority roam does not trust".to_owned(),
            trust_fix,
        ),
        CertificateError::BadSignature => (
            "has a signature its issuer's key does not match".to_owned(),
            trust_fix,
        ),
        CertificateError::NotValidForNameContext { presented, .. } if !presented.is_empty() => (
            format!(
                "is issued for other names: {}",
                presented
                    .iter()
                    .map(|n| bare_name(n))
                    .collect::<Vec<_>>()
                    .join(", ")
            ),
            "connect by one of those names, or have the certificate reissued for this one"
                .to_owned(),
        ),
        CertificateError::NotValidForName | CertificateError::NotValidForNameContext { .. } => (
            "is issued for other names".to_owned(),
            "connect by a name the certificate is issued for, or have it reissued for this one"
                .to_owned(),
        ),
        CertificateError::ExpiredContext { not_after, .. } => (
            format!("expired on {}", date(not_after)),
            format!("the server must renew it {clock}"),
        ),
        CertificateError::Expired => (
            "has expired".to_owned(),
            format!("the server must renew it {clock}"),
        ),
        CertificateError::NotValidYetContext { not_before, .. } => (
            format!("is not valid before {}", date(not_before)),
            "wait, or check this machine's clock".to_owned(),
        ),
        CertificateError::NotValidYet => (
            "is not valid yet".to_owned(),
            "wait, or check this machine's clock".to_owned(),
        ),
        CertificateError::Revoked => (
            "has been revoked by its authority".to_owned(),
            "the server needs a new certificate".to_owned(),
        ),
        other if format!("{other:?}").contains("CaUsedAsEndEntity") => (
            "is a CA certificate (CA:TRUE, such as a self-signed one), which no server may \
             present as its own"
                .to_owned(),
            "give the server a certificate with CA:FALSE signed by a CA, and trust that CA \
             with [tls.\"HOST:PORT\"] ca_file"
                .replace("HOST:PORT", authority),
        ),
        other => (format!("is refused ({other})"), trust_fix),
    };
    let mut text = format!("the TLS certificate of {authority} {reason}");
    let _ = write!(text, "; {fix}");
    text
}

/// `a.example` of `DnsName("a.example")`, as webpki shows a certificate's names.
fn bare_name(shown: &str) -> &str {
    match (shown.find('('), shown.rfind(')')) {
        (Some(open), Some(close)) if open < close => shown[open + 1..close].trim_matches('"'),
        _ => shown,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::ffi::OsString;

    #[test]
    fn hashed_names_are_those_openssl_looks_up() {
        for good in ["9d66eef0.0", "ABCDEF01.12"] {
            assert!(is_hashed_name(good), "{good}");
        }
        for bad in [
            "ca-certificates.crt",
            "9d66eef0.r0",
            "9d66eef.0",
            "9d66eef0.",
            "x.pem",
        ] {
            assert!(!is_hashed_name(bad), "{bad}");
        }
    }

    #[test]
    fn variables_replace_the_system_bundle() {
        let none = |_: &str| None::<OsString>;
        // Nothing anywhere: no roots found.
        assert!(find_roots(&none, &["/nonexistent/a.pem"], &["/nonexistent"]).is_none());
        // A set variable wins, even when its file is missing (nothing trusted).
        let missing =
            |name: &str| (name == "SSL_CERT_FILE").then(|| OsString::from("/nonexistent.pem"));
        let (certs, source) = find_roots(&missing, SYSTEM_FILES, SYSTEM_DIRS).unwrap();
        assert!(certs.is_empty());
        assert_eq!(source, "SSL_CERT_FILE=/nonexistent.pem");
    }

    #[test]
    fn names_are_shown_bare() {
        assert_eq!(bare_name("DnsName(\"a.example\")"), "a.example");
        assert_eq!(bare_name("IpAddress(127.0.0.1)"), "127.0.0.1");
        assert_eq!(bare_name("b.example"), "b.example");
    }

    #[test]
    fn refusals_are_told_in_words() {
        let unknown = describe_certificate(
            &CertificateError::UnknownIssuer,
            "h.example:8443",
            Service::S3,
        );
        assert_eq!(
            unknown,
            "the TLS certificate of h.example:8443 is signed by an authority roam does not \
             trust; to trust its authority, add [tls.\"h.example:8443\"] ca_file = \
             \"/path/ca.pem\" to roam.toml, or set AWS_CA_BUNDLE or SSL_CERT_FILE"
        );
        let expired = describe_certificate(
            &CertificateError::ExpiredContext {
                time: rustls::pki_types::UnixTime::since_unix_epoch(
                    std::time::Duration::from_secs(1_800_000_000),
                ),
                not_after: rustls::pki_types::UnixTime::since_unix_epoch(
                    std::time::Duration::from_secs(1_700_000_000),
                ),
            },
            "h:1",
            Service::Http,
        );
        assert!(
            expired.contains("expired on Tue, 14 Nov 2023 22:13:20 GMT"),
            "{expired}"
        );
        let err = ureq::Error::Io(std::io::Error::new(
            std::io::ErrorKind::InvalidData,
            TlsError::InvalidCertificate(CertificateError::UnknownIssuer),
        ));
        assert!(describe(&err, "h:1", Service::Http).is_some());
        let other = ureq::Error::Io(std::io::Error::from(std::io::ErrorKind::InvalidData));
        assert!(describe(&other, "h:1", Service::Http).is_none());
    }
}
