//! Where a bucket's requests go: `https://BUCKET.s3.REGION.amazonaws.com/KEY` (virtual-
//! hosted, AWS's default) or `ENDPOINT/BUCKET/KEY` (path-style, what S3-compatible servers
//! expect), and how keys and query values are percent-encoded. S3 signs the path exactly
//! as sent, so the encoding here is also the canonical one of the signature.

use std::net::IpAddr;

use percent_encoding::{utf8_percent_encode, AsciiSet, NON_ALPHANUMERIC};
use ureq::http::Uri;

use super::S3Config;
use crate::http::url::redact;
use crate::{Error, ErrorKind, Result};

/// Escaped in a query value (and name): all but RFC 3986 "unreserved" characters, as
/// SigV4's canonical query string requires.
const QUERY: &AsciiSet = &NON_ALPHANUMERIC
    .remove(b'-')
    .remove(b'.')
    .remove(b'_')
    .remove(b'~');

/// Escaped in a key within a path: the same, but `/` separates and stays.
const KEY: &AsciiSet = &QUERY.remove(b'/');

/// The bucket's server and how it addresses the bucket.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(super) struct Endpoint {
    scheme: String,
    /// `host[:port]` of the server.
    authority: String,
    /// A path prefix the server lives under (`/s3`), or empty.
    base: String,
    bucket: String,
    virtual_host: bool,
}

impl Endpoint {
    pub fn new(config: &S3Config, bucket: &str) -> Result<Endpoint> {
        check_bucket(bucket)?;
        let url = match &config.endpoint {
            Some(url) => url.clone(),
            None => format!("https://s3.{}.amazonaws.com", config.region_name()),
        };
        let invalid = |why: &str| {
            let shown = redact(&url);
            Error::new(ErrorKind::InvalidName, format!("{shown}: {why}"))
        };
        let uri: Uri = url.parse().map_err(|_| invalid("not a URL"))?;
        let scheme = uri.scheme_str().unwrap_or_default().to_ascii_lowercase();
        if scheme != "http" && scheme != "https" {
            return Err(invalid("an S3 endpoint is an http:// or https:// URL"));
        }
        let authority = uri.authority().ok_or_else(|| invalid("no host"))?;
        if authority.as_str().contains('@') || uri.query().is_some() {
            return Err(invalid("an endpoint takes no credentials or query"));
        }
        let virtual_host = !config.path_style
            && can_be_host_label(bucket, &scheme)
            && !is_literal_address(authority.host());
        Ok(Endpoint {
            authority: authority.as_str().to_ascii_lowercase(),
            base: uri.path().trim_end_matches('/').to_owned(),
            bucket: bucket.to_owned(),
            scheme,
            virtual_host,
        })
    }

    /// `host[:port]` of the server (not of a bucket's virtual host): its `[tls."..."]` key.
    pub fn authority(&self) -> &str {
        &self.authority
    }

    pub fn bucket(&self) -> &str {
        &self.bucket
    }

    /// The `Host` header and the URL path (encoded, as signed) of `key`; the empty key is
    /// the bucket itself.
    pub fn locate(&self, key: &str) -> (String, String) {
        let encoded = utf8_percent_encode(key, KEY);
        if self.virtual_host {
            let host = format!("{}.{}", self.bucket, self.authority);
            (host, format!("{}/{encoded}", self.base))
        } else if key.is_empty() {
            // `/bucket`, not `/bucket/`: the latter reads as the object with the empty key.
            (
                self.authority.clone(),
                format!("{}/{}", self.base, self.bucket),
            )
        } else {
            let path = format!("{}/{}/{encoded}", self.base, self.bucket);
            (self.authority.clone(), path)
        }
    }

    pub fn url(&self, host: &str, path: &str, query: &str) -> String {
        let mut url = format!("{}://{host}{path}", self.scheme);
        if !query.is_empty() {
            url.push('?');
            url.push_str(query);
        }
        url
    }

    /// The `x-amz-copy-source` of `key` in this bucket.
    pub fn copy_source(&self, key: &str) -> String {
        format!("{}/{}", self.bucket, utf8_percent_encode(key, KEY))
    }
}

/// A canonical query string: pairs encoded, then sorted by name and value.
pub(super) fn query_string(pairs: &[(&str, &str)]) -> String {
    let mut encoded: Vec<(String, String)> = pairs
        .iter()
        .map(|(name, value)| {
            let encode = |text| utf8_percent_encode(text, QUERY).to_string();
            (encode(name), encode(value))
        })
        .collect();
    // By name, then value: sorting the joined `name=value` texts would put `a-b=` before `a=`.
    encoded.sort();
    let pairs: Vec<String> = encoded
        .into_iter()
        .map(|(name, value)| format!("{name}={value}"))
        .collect();
    pairs.join("&")
}

/// Bucket names are DNS-like, with the legacy names of us-east-1 (capitals, `_`) allowed.
fn check_bucket(bucket: &str) -> Result<()> {
    let valid_char = |c: char| c.is_ascii_alphanumeric() || matches!(c, '.' | '-' | '_');
    if (1..=255).contains(&bucket.len()) && bucket.chars().all(valid_char) {
        Ok(())
    } else {
        Err(Error::new(
            ErrorKind::InvalidName,
            format!("s3://{bucket}: not a valid bucket name"),
        ))
    }
}

/// Whether `bucket.host` is a name TLS and DNS accept: a lower-case DNS label, and no dots
/// over https, since AWS's wildcard certificate covers one label only.
fn can_be_host_label(bucket: &str, scheme: &str) -> bool {
    let edge_ok = |c: Option<char>| c.is_some_and(|c| c.is_ascii_lowercase() || c.is_ascii_digit());
    (3..=63).contains(&bucket.len())
        && bucket
            .chars()
            .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '-' || c == '.')
        && edge_ok(bucket.chars().next())
        && edge_ok(bucket.chars().last())
        && !bucket.contains("..")
        && !(scheme == "https" && bucket.contains('.'))
}

/// An IP address or `localhost`, which cannot carry a bucket as a subdomain.
fn is_literal_address(host: &str) -> bool {
    host.eq_ignore_ascii_case("localhost")
        || host.trim_matches(['[', ']']).parse::<IpAddr>().is_ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn endpoint(url: Option<&str>, path_style: bool, bucket: &str) -> Result<Endpoint> {
        let config = S3Config {
            endpoint: url.map(str::to_owned),
            region: Some("eu-west-1".into()),
            path_style,
            ..S3Config::default()
        };
        Endpoint::new(&config, bucket)
    }

    #[test]
    fn aws_buckets_are_virtual_hosts() {
        let e = endpoint(None, false, "my-bucket").unwrap();
        let (host, path) = e.locate("dir/a b+c.txt");
        assert_eq!(host, "my-bucket.s3.eu-west-1.amazonaws.com");
        assert_eq!(path, "/dir/a%20b%2Bc.txt");
        assert_eq!(e.locate(""), (host.clone(), "/".to_owned()));
        assert_eq!(
            e.url(&host, &path, "x=1"),
            "https://my-bucket.s3.eu-west-1.amazonaws.com/dir/a%20b%2Bc.txt?x=1"
        );
    }

    #[test]
    fn other_servers_and_odd_buckets_are_path_style() {
        let e = endpoint(Some("http://127.0.0.1:9000/"), false, "b").unwrap();
        assert_eq!(
            e.locate("k/\u{fc}"),
            ("127.0.0.1:9000".to_owned(), "/b/k/%C3%BC".to_owned())
        );
        assert_eq!(e.locate("").1, "/b");
        let e = endpoint(Some("https://Minio.Example/s3"), true, "bkt").unwrap();
        assert_eq!(
            e.locate("k"),
            ("minio.example".to_owned(), "/s3/bkt/k".to_owned())
        );
        for bucket in ["with.dots", "Legacy_Name", "ab"] {
            let e = endpoint(None, false, bucket).unwrap();
            assert_eq!(e.locate("k").0, "s3.eu-west-1.amazonaws.com", "{bucket}");
        }
        let e = endpoint(Some("http://localhost:9000"), false, "bkt").unwrap();
        assert_eq!(e.locate("k").1, "/bkt/k");
    }

    #[test]
    fn bad_endpoints_and_buckets_are_refused() {
        for url in ["ftp://h", "http://u:p@h", "http://h/?q", "not a url"] {
            let err = endpoint(Some(url), true, "b").unwrap_err();
            assert_eq!(err.kind, ErrorKind::InvalidName, "{url}");
            assert!(!err.message.contains("u:p"), "{}", err.message);
        }
        for bucket in ["", "a/b", "a b", "a?"] {
            assert!(endpoint(None, false, bucket).is_err(), "{bucket:?}");
        }
    }

    #[test]
    fn queries_are_canonical() {
        let query = query_string(&[
            ("prefix", "a b/ü"),
            ("list-type", "2"),
            ("delimiter", "/"),
            ("uploads", ""),
            ("a-b", "1"),
            ("a", "2"),
        ]);
        assert_eq!(
            query,
            "a=2&a-b=1&delimiter=%2F&list-type=2&prefix=a%20b%2F%C3%BC&uploads="
        );
        let e = endpoint(None, false, "bkt").unwrap();
        assert_eq!(e.copy_source("a b/c"), "bkt/a%20b/c");
    }
}
