//! AWS Signature Version 4 for S3 requests (the `Authorization` header form), written
//! out rather than taken from an SDK: it is a few HMACs over a canonical text.
//!
//! Every request carries the SHA-256 of its real body in `x-amz-content-sha256` (the driver
//! buffers what it sends), never `UNSIGNED-PAYLOAD`: servers then check the body against
//! the signature, and servers that refuse unsigned payloads over plain HTTP accept it.
//! HMAC and SHA-256 come from `ring`, which the TLS stack already builds.

use std::fmt;
use std::time::SystemTime;

use ring::{digest, hmac};

use super::time::amz_date;

/// The algorithm of every signature.
const ALGORITHM: &str = "AWS4-HMAC-SHA256";

/// Long-term or temporary (session) credentials.
#[derive(Clone, PartialEq, Eq)]
pub(super) struct Credentials {
    pub access_key: String,
    pub secret_key: String,
    pub session_token: Option<String>,
}

// By hand, so that `{:?}` of a driver can never print a key.
impl fmt::Debug for Credentials {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("Credentials(<redacted>)")
    }
}

/// A request as it will be sent, minus what signing adds.
pub(super) struct Unsigned<'a> {
    pub method: &'a str,
    /// The URL path, already percent-encoded exactly as sent (S3 signs it as is).
    pub path: &'a str,
    /// The query string as sent: already canonical (encoded, sorted).
    pub query: &'a str,
    /// Lower-case names; `host` included. Every header listed here is signed.
    pub headers: Vec<(String, String)>,
    pub body: &'a [u8],
}

/// Signs requests for one service and region; with no credentials, requests go out
/// anonymous (public buckets).
#[derive(Clone, Debug)]
pub(super) struct Signer {
    pub credentials: Option<Credentials>,
    pub region: String,
    /// The scope's service name: `s3`, or `sts` for obtaining credentials.
    pub service: &'static str,
}

impl Signer {
    /// The headers to send: `request.headers` plus `x-amz-date`, `x-amz-content-sha256`,
    /// the session token if any, and `authorization`.
    pub fn sign(&self, request: Unsigned, now: SystemTime) -> Vec<(String, String)> {
        let Unsigned {
            method,
            path,
            query,
            mut headers,
            body,
        } = request;
        let date = amz_date(now);
        headers.push(("x-amz-date".into(), date.clone()));
        headers.push(("x-amz-content-sha256".into(), sha256_hex(body)));
        let Some(credentials) = &self.credentials else {
            return headers;
        };
        if let Some(token) = &credentials.session_token {
            headers.push(("x-amz-security-token".into(), token.clone()));
        }
        headers.sort();
        let (canonical, signed) = canonical_request(method, path, query, &headers);
        let scope = format!(
            "{}/{}/{}/aws4_request",
            &date[..8],
            self.region,
            self.service
        );
        let to_sign = format!(
            "{ALGORITHM}\n{date}\n{scope}\n{}",
            sha256_hex(canonical.as_bytes())
        );
        let key = signing_key(
            &credentials.secret_key,
            &date[..8],
            &self.region,
            self.service,
        );
        let signature = hex(hmac::sign(&key, to_sign.as_bytes()).as_ref());
        let authorization = format!(
            "{ALGORITHM} Credential={}/{scope}, SignedHeaders={signed}, Signature={signature}",
            credentials.access_key
        );
        headers.push(("authorization".into(), authorization));
        headers
    }
}

/// The canonical request and the `SignedHeaders` list, for headers sorted by name.
fn canonical_request(
    method: &str,
    path: &str,
    query: &str,
    headers: &[(String, String)],
) -> (String, String) {
    let mut canonical = format!("{method}\n{path}\n{query}\n");
    for (name, value) in headers {
        // Values are trimmed and inner runs of spaces collapsed (SigV4's "Trimall").
        let value = value.split_whitespace().collect::<Vec<_>>().join(" ");
        canonical.push_str(&format!("{name}:{value}\n"));
    }
    let names: Vec<&str> = headers.iter().map(|(name, _)| name.as_str()).collect();
    let signed = names.join(";");
    let payload = &headers
        .iter()
        .find(|(name, _)| name == "x-amz-content-sha256")
        .expect("the payload hash is always a header")
        .1;
    canonical.push_str(&format!("\n{signed}\n{payload}"));
    (canonical, signed)
}

/// `kSigning = HMAC(HMAC(HMAC(HMAC("AWS4" + secret, day), region), service), "aws4_request")`.
fn signing_key(secret: &str, day: &str, region: &str, service: &str) -> hmac::Key {
    let mut key = hmac::Key::new(hmac::HMAC_SHA256, format!("AWS4{secret}").as_bytes());
    for part in [day, region, service, "aws4_request"] {
        key = hmac::Key::new(
            hmac::HMAC_SHA256,
            hmac::sign(&key, part.as_bytes()).as_ref(),
        );
    }
    key
}

pub(super) fn sha256_hex(data: &[u8]) -> String {
    hex(digest::digest(&digest::SHA256, data).as_ref())
}

/// SHA-1, for naming files as AWS tools name them (the SSO token cache), not for security.
pub(super) fn sha1_hex(data: &[u8]) -> String {
    hex(digest::digest(&digest::SHA1_FOR_LEGACY_USE_ONLY, data).as_ref())
}

fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::{Duration, UNIX_EPOCH};

    /// AWS's own worked example "GET Object" (S3 API reference, "Signature Calculations for
    /// the Authorization Header"): a ranged GET of `test.txt` in `examplebucket`, signed on
    /// 2013-05-24 with the documentation's example keys.
    #[test]
    fn matches_the_aws_documentation_example() {
        let signer = Signer {
            credentials: Some(Credentials {
                access_key: "AKIAIOSFODNN7EXAMPLE".into(),
                secret_key: "wJalrXUtnFEMI/K7MDENG/bPxRfiCYEXAMPLEKEY".into(),
                session_token: None,
            }),
            region: "us-east-1".into(),
            service: "s3",
        };
        let request = Unsigned {
            method: "GET",
            path: "/test.txt",
            query: "",
            headers: vec![
                ("host".into(), "examplebucket.s3.amazonaws.com".into()),
                ("range".into(), "bytes=0-9".into()),
            ],
            body: b"",
        };
        let now = UNIX_EPOCH + Duration::from_secs(1_369_353_600);
        let headers = signer.sign(request, now);
        let authorization = &headers
            .iter()
            .find(|(n, _)| n == "authorization")
            .unwrap()
            .1;
        assert_eq!(
            authorization,
            "AWS4-HMAC-SHA256 Credential=AKIAIOSFODNN7EXAMPLE/20130524/us-east-1/s3/aws4_request, \
             SignedHeaders=host;range;x-amz-content-sha256;x-amz-date, \
             Signature=f0e8bdb87c964420e857bd35b5d6ed310bd44f0170aba48dd91039c6036bdb41"
        );
    }

    #[test]
    fn anonymous_requests_carry_no_authorization() {
        let signer = Signer {
            credentials: None,
            region: "us-east-1".into(),
            service: "s3",
        };
        let request = Unsigned {
            method: "HEAD",
            path: "/b/k",
            query: "",
            headers: vec![("host".into(), "h".into())],
            body: b"",
        };
        let headers = signer.sign(request, SystemTime::now());
        assert!(headers.iter().all(|(name, _)| name != "authorization"));
    }

    #[test]
    fn session_tokens_are_signed_and_secrets_never_shown() {
        let credentials = Credentials {
            access_key: "AK".into(),
            secret_key: "SECRET".into(),
            session_token: Some("TOKEN".into()),
        };
        assert!(!format!("{credentials:?}").contains("SECRET"));
        let signer = Signer {
            credentials: Some(credentials),
            region: "eu-west-1".into(),
            service: "s3",
        };
        let request = Unsigned {
            method: "GET",
            path: "/",
            query: "",
            headers: vec![("host".into(), "h".into())],
            body: b"",
        };
        let headers = signer.sign(request, SystemTime::now());
        let authorization = &headers
            .iter()
            .find(|(n, _)| n == "authorization")
            .unwrap()
            .1;
        assert!(
            authorization.contains("x-amz-security-token"),
            "{authorization}"
        );
        assert!(!authorization.contains("SECRET"));
    }

    #[test]
    fn empty_bodies_hash_to_the_well_known_value() {
        assert_eq!(
            sha256_hex(b""),
            "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855"
        );
    }
}
