//! One bucket's requests: each is addressed ([`Endpoint`]), signed ([`Signer`]) and sent
//! on the shared HTTP agent, and retried with backoff when the server or the connection
//! failed in passing (5xx, a reset). Every S3 request the driver sends is idempotent
//! except the `POST`s of multipart uploads, which are never retried.

use std::thread;
use std::time::{Duration, SystemTime};

use ureq::http::{Request, Response};
use ureq::Body;

use super::endpoint::{query_string, Endpoint};
use super::errors;
use super::provider::Keys;
use super::sign::{Signer, Unsigned};
use super::xml;
use crate::http::errors::transport_for;
use crate::http::tls::Service;
use crate::http::HttpClient;
use crate::{Error, ErrorKind, Result};

/// Attempts per request, and the pause before the second (each later one waits 4× more).
const ATTEMPTS: u32 = 3;
const BACKOFF: Duration = Duration::from_millis(100);

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum Method {
    Get,
    Head,
    Put,
    Post,
    Delete,
}

impl Method {
    pub fn as_str(self) -> &'static str {
        match self {
            Method::Get => "GET",
            Method::Head => "HEAD",
            Method::Put => "PUT",
            Method::Post => "POST",
            Method::Delete => "DELETE",
        }
    }
}

/// A request before addressing and signing.
pub(super) struct Req<'a> {
    method: Method,
    key: &'a str,
    query: Vec<(&'a str, &'a str)>,
    headers: Vec<(&'static str, String)>,
    body: &'a [u8],
}

impl<'a> Req<'a> {
    /// `method` on the object `key` (the empty key: the bucket).
    pub fn new(method: Method, key: &'a str) -> Req<'a> {
        Req {
            method,
            key,
            query: Vec::new(),
            headers: Vec::new(),
            body: b"",
        }
    }

    pub fn query(mut self, name: &'a str, value: &'a str) -> Req<'a> {
        self.query.push((name, value));
        self
    }

    /// A header (lower-case name), signed like every header the driver sets.
    pub fn header(mut self, name: &'static str, value: impl Into<String>) -> Req<'a> {
        self.headers.push((name, value.into()));
        self
    }

    pub fn body(mut self, body: &'a [u8]) -> Req<'a> {
        self.body = body;
        self
    }
}

/// The reply to a request, whatever its status.
pub(super) struct Reply {
    method: Method,
    url: String,
    response: Response<Body>,
}

impl Reply {
    pub fn status(&self) -> u16 {
        self.response.status().as_u16()
    }

    pub fn header(&self, name: &str) -> Option<&str> {
        self.response.headers().get(name)?.to_str().ok()
    }

    /// The HTTP response itself, for the helpers S3 shares with the HTTP driver.
    pub fn response(&self) -> &Response<Body> {
        &self.response
    }

    pub fn url(&self) -> &str {
        &self.url
    }

    /// The reply if it is a success, else the error it stands for.
    pub fn success(self) -> Result<Reply> {
        if self.response.status().is_success() {
            Ok(self)
        } else {
            Err(self.into_error())
        }
    }

    /// The error a failure reply stands for, from its status and `<Error>` body.
    pub fn into_error(self) -> Error {
        let status = self.response.status();
        let region = self.header("x-amz-bucket-region").map(str::to_owned);
        let method = self.method.as_str();
        // An unreadable error body leaves the status to speak.
        let body = crate::http::read_page(self.response, method, &self.url).ok();
        let document = body.as_deref().and_then(xml::error);
        errors::reply(method, &self.url, status, document, region.as_deref())
    }

    /// The XML body of a successful reply. `CopyObject` and `CompleteMultipartUpload`
    /// may fail after their `200 OK` is sent: the body is then an `<Error>`.
    pub fn document(self) -> Result<String> {
        let reply = self.success()?;
        let (method, status) = (reply.method.as_str(), reply.response.status());
        let text = crate::http::read_page(reply.response, method, &reply.url)?;
        match xml::error(&text) {
            Some(error) => Err(errors::reply(method, &reply.url, status, Some(error), None)),
            None => Ok(text),
        }
    }

    pub fn into_body(self) -> Body {
        self.response.into_body()
    }
}

/// Sends requests to one bucket.
#[derive(Debug)]
pub(super) struct Client {
    http: HttpClient,
    pub endpoint: Endpoint,
    keys: Keys,
    /// The region requests are signed for.
    region: String,
}

impl Client {
    pub fn new(http: HttpClient, endpoint: Endpoint, keys: Keys, region: String) -> Client {
        Client {
            http,
            endpoint,
            keys,
            region,
        }
    }

    /// Sends `req`, again after a pause if it failed in passing, and returns the reply
    /// whatever its status (callers decide what a 404 or a 304 means).
    pub fn send(&self, req: &Req) -> Result<Reply> {
        let mut pause = BACKOFF;
        for _ in 1..ATTEMPTS {
            let outcome = self.attempt(req);
            if !worth_retrying(req.method, &outcome) {
                return outcome;
            }
            if let Err(e) = &outcome {
                tracing::debug!("retrying: {e}");
            }
            thread::sleep(pause);
            pause *= 4;
        }
        self.attempt(req)
    }

    fn attempt(&self, req: &Req) -> Result<Reply> {
        let method = req.method.as_str();
        let (host, path) = self.endpoint.locate(req.key);
        let query = query_string(&req.query);
        let url = self.endpoint.url(&host, &path, &query);
        // `RUST_LOG=roam_requests=debug` counts the requests an operation costs.
        tracing::debug!(target: "roam_requests", "s3 {method} {path}?{query}");
        let mut headers = vec![("host".to_owned(), host)];
        headers.extend(req.headers.iter().map(|(n, v)| (n.to_string(), v.clone())));
        let unsigned = Unsigned {
            method,
            path: &path,
            query: &query,
            headers,
            body: req.body,
        };
        let mut request = Request::builder().method(method).uri(&url);
        let signer = Signer {
            credentials: self.keys.current()?,
            region: self.region.clone(),
            service: "s3",
        };
        for (name, value) in signer.sign(unsigned, SystemTime::now()) {
            request = request.header(name, value);
        }
        if matches!(req.method, Method::Put | Method::Post) {
            // S3 wants a length even for an empty body, where ureq would send none.
            request = request.header("content-length", req.body.len());
        }
        let request = request
            .body(req.body)
            .map_err(|e| Error::new(ErrorKind::InvalidName, format!("{method} {url}: {e}")))?;
        let agent = &self.http.agent;
        // A redirect is a wrong region or endpoint: following it would only fail the
        // signature, so it is reported as it is.
        let request = agent.configure_request(request).max_redirects(0).build();
        let key = self.endpoint.authority();
        let response = self
            .http
            .run(request)
            .map_err(|e| transport_for(method, &url, e, key, Service::S3))?;
        Ok(Reply {
            method: req.method,
            url,
            response,
        })
    }
}

/// Whether an outcome may be a passing failure that a second attempt would not meet:
/// a 5xx reply, or a connection that broke (not one refused, nor a timeout, which a
/// retry would only make the caller wait for longer).
fn worth_retrying(method: Method, outcome: &Result<Reply>) -> bool {
    method != Method::Post
        && match outcome {
            Ok(reply) => matches!(reply.status(), 500 | 502 | 503 | 504),
            Err(e) => e.kind == ErrorKind::Io,
        }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_passing_failures_of_idempotent_requests_are_retried() {
        let broken = || Err(Error::new(ErrorKind::Io, "GET u: connection reset"));
        let refused = || Err(Error::new(ErrorKind::Unreachable, "GET u: refused"));
        assert!(worth_retrying(Method::Get, &broken()));
        assert!(worth_retrying(Method::Put, &broken()));
        assert!(!worth_retrying(Method::Post, &broken()));
        assert!(!worth_retrying(Method::Get, &refused()));
        let slow = Err(Error::new(ErrorKind::TimedOut, "GET u: timeout"));
        assert!(!worth_retrying(Method::Head, &slow));
    }
}
