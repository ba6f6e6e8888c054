//! HTTP(S) driver: a remote tree served by a plain web server (nginx, Apache, Python's
//! `http.server` ...). `stat` is a `HEAD`, `fetch` a (conditional) `GET` streamed to the
//! destination, and `list` parses the server's HTML directory index ([`autoindex`]).
//!
//! HTTP has no stat: a path is a directory when the server addresses it with a trailing
//! slash, which every index-serving server enforces by redirecting `/dir` to `/dir/`.

mod autoindex;
pub(crate) mod errors;
pub mod proxy;
pub mod tls;
pub(crate) mod url;

use std::io::{self, Read, Write};
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use ureq::config::RedirectAuthHeaders;
use ureq::http::{HeaderMap, Request, Response, StatusCode, Uri};
use ureq::unversioned::resolver::DefaultResolver;
use ureq::unversioned::transport::{Connector, DefaultConnector};
use ureq::{AsSendBody, Body, ResponseExt};

use self::errors::Failure;
use self::proxy::{Proxies, Route};
use self::url::Base;
use crate::{
    is_driver_path, Capabilities, Driver, Error, ErrorKind, Fetched, FreshFor, Kind, Listing, Meta,
    Pinned, Result, Validator,
};

/// Largest index page we read. Pages live in memory while parsed; a million-entry nginx
/// index is about 120 MB.
const MAX_INDEX_PAGE: u64 = 256 << 20;

/// Most redirects one request follows (as ureq's default).
const MAX_REDIRECTS: usize = 10;

/// Timeouts, identity and proxies of the HTTP client.
#[derive(Clone, Debug)]
pub struct HttpConfig {
    pub connect_timeout: Duration,
    pub read_timeout: Duration,
    /// The netrc file to take logins from for URLs without a password, if any
    /// ([`crate::netrc::default_path`] by default).
    pub netrc: Option<PathBuf>,
    /// The default: those the environment names ([`Proxies::from_env`]).
    pub proxies: Proxies,
}

impl Default for HttpConfig {
    fn default() -> Self {
        HttpConfig {
            connect_timeout: Duration::from_secs(10),
            read_timeout: Duration::from_secs(30),
            netrc: crate::netrc::default_path(),
            proxies: Proxies::from_env(),
        }
    }
}

/// One connection pool shared by every HTTP mount (cloning shares it).
#[derive(Clone, Debug)]
pub struct HttpClient {
    pub(crate) agent: ureq::Agent,
    /// Where mounts of this client look up logins ([`HttpConfig::netrc`]).
    netrc: Option<PathBuf>,
    proxies: Arc<Proxies>,
    /// Which certificate authorities verify its servers, in words.
    authorities: String,
}

/// Where a response came from: the origin's URL, also when a proxy forwarded the request
/// (whose own URL is then the proxy's).
#[derive(Clone, Debug)]
struct OriginUri(Uri);

/// TLS choices for one host (`[tls."HOST[:PORT]"]` in roam.toml). The default verifies the
/// server against the platform's certificate authorities (see [`tls`]).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct TlsOptions {
    /// A PEM file of the certificate authorities to trust instead (a self-signed server's
    /// own certificate, a company CA).
    pub ca_file: Option<std::path::PathBuf>,
    /// Accept any certificate. Only for a server the user chose to trust blindly.
    pub insecure: bool,
}

impl HttpClient {
    /// A client that trusts the platform's certificate authorities (see [`tls`]).
    pub fn new(cfg: &HttpConfig) -> HttpClient {
        let tls = ureq::tls::TlsConfig::builder()
            .root_certs(tls::platform_roots())
            .build();
        HttpClient::build(cfg, tls, &TlsOptions::default())
    }

    /// A client for hosts with their own TLS choices: `ca_file` replaces the platform's
    /// authorities.
    pub fn with_tls(cfg: &HttpConfig, options: &TlsOptions) -> Result<HttpClient> {
        use ureq::tls::{RootCerts, TlsConfig};
        let roots = match &options.ca_file {
            Some(ca) => RootCerts::new_with_certs(&tls::read_certs(ca)?),
            None => tls::platform_roots(),
        };
        let config = TlsConfig::builder()
            .disable_verification(options.insecure)
            .root_certs(roots)
            .build();
        Ok(HttpClient::build(cfg, config, options))
    }

    fn build(cfg: &HttpConfig, tls: ureq::tls::TlsConfig, options: &TlsOptions) -> HttpClient {
        let config = ureq::Agent::config_builder()
            .tls_config(tls)
            // A 404 is an answer (ENOENT), not a failed exchange: see every status ourselves.
            .http_status_as_error(false)
            .timeout_resolve(Some(cfg.connect_timeout))
            .timeout_connect(Some(cfg.connect_timeout))
            .timeout_recv_response(Some(cfg.read_timeout))
            // Per read, not per body: a download of many GB may take hours, but never stall.
            .timeout_per_read(Some(cfg.read_timeout))
            // Likewise per write: an upload to a server that stopped reading fails.
            .timeout_per_write(Some(cfg.read_timeout))
            // Credentials of a mount URL must survive its own `/dir` → `/dir/` redirects,
            // and must never be sent to another host.
            .redirect_auth_headers(RedirectAuthHeaders::SameHost)
            .user_agent(concat!("roam/", env!("CARGO_PKG_VERSION")))
            // Proxies are chosen per request by curl's rules ([`proxy`]), not ureq's.
            .proxy(None)
            .build();
        let proxies = Arc::new(cfg.proxies.clone());
        let connector = DefaultConnector::new().chain(proxy::Forwarding(proxies.clone()));
        HttpClient {
            netrc: cfg.netrc.clone(),
            agent: ureq::Agent::with_parts(config, connector, DefaultResolver::default()),
            proxies,
            authorities: tls::authorities(options),
        }
    }

    /// Sends `request` (configured or not with `agent.configure_request`) directly or
    /// through the proxy its URL goes through, and returns the response whatever its
    /// status. A forwarded request follows no redirect: callers that want them use
    /// [`HttpClient::run_following`].
    pub(crate) fn run<B: AsSendBody>(
        &self,
        request: Request<B>,
    ) -> std::result::Result<Response<Body>, Failure> {
        let origin = request.uri().clone();
        let (result, via) = match self.proxies.route(&origin) {
            Route::Direct => (self.agent.run(request), None),
            Route::Invalid(why) => {
                let via = Some(why.to_owned());
                return Err(Failure {
                    err: ureq::Error::InvalidProxyUrl,
                    via,
                });
            }
            Route::Via(proxy) if origin.scheme_str() == Some("https") => {
                let request = self
                    .agent
                    .configure_request(request)
                    .proxy(Some(proxy.tunnel()))
                    .build();
                (self.agent.run(request), Some(proxy))
            }
            Route::Via(proxy) => {
                let Some(request) = proxy.forward(request) else {
                    return Err(ureq::Error::BadUri(origin.to_string()).into());
                };
                let request = self
                    .agent
                    .configure_request(request)
                    .max_redirects(0)
                    .build();
                let result = self.agent.run(request).and_then(|response| {
                    if response.status() == StatusCode::PROXY_AUTHENTICATION_REQUIRED {
                        let why = "proxy server responded 407/Proxy Authentication Required";
                        return Err(ureq::Error::ConnectProxyFailed(why.into()));
                    }
                    Ok(response)
                });
                (result, Some(proxy))
            }
        };
        match result {
            Ok(mut response) => {
                let forwarded = via.is_some() && origin.scheme_str() == Some("http");
                let uri = if forwarded {
                    origin
                } else {
                    response.get_uri().clone()
                };
                response.extensions_mut().insert(OriginUri(uri));
                Ok(response)
            }
            Err(err) => Err(Failure {
                err,
                via: via.map(|proxy| proxy.to_string()),
            }),
        }
    }

    /// [`HttpClient::run`] for a request without a body, following redirects (up to
    /// [`MAX_REDIRECTS`]) through proxies too; credentials (`Authorization`) only to the
    /// host that was asked first.
    pub(crate) fn run_following(
        &self,
        request: Request<()>,
    ) -> std::result::Result<Response<Body>, Failure> {
        if !self.proxies.any() {
            return self.run(request);
        }
        let (parts, ()) = request.into_parts();
        let mut uri = parts.uri.clone();
        for _ in 0..=MAX_REDIRECTS {
            let mut next = Request::builder()
                .method(parts.method.clone())
                .uri(uri.clone());
            for (name, value) in &parts.headers {
                let other_host = uri.authority() != parts.uri.authority();
                if !(other_host && name == ureq::http::header::AUTHORIZATION) {
                    next = next.header(name, value);
                }
            }
            let request = next.body(()).map_err(ureq::Error::Http)?;
            let request = self
                .agent
                .configure_request(request)
                .max_redirects(0)
                .build();
            let response = self.run(request)?;
            match redirect_target(&uri, &response) {
                Some(target) => uri = target,
                None => return Ok(response),
            }
        }
        Err(ureq::Error::TooManyRedirects.into())
    }
}

/// Where a redirect leads (its `Location` resolved against `uri`); `None` for any other
/// response.
fn redirect_target(uri: &Uri, response: &Response<Body>) -> Option<Uri> {
    if !matches!(response.status().as_u16(), 301 | 302 | 303 | 307 | 308) {
        return None;
    }
    let location = response.headers().get("location")?.to_str().ok()?;
    if location.contains("://") {
        return location.parse().ok();
    }
    let base = format!("{}://{}", uri.scheme_str()?, uri.authority()?);
    let path = if location.starts_with('/') {
        location.to_owned()
    } else {
        let dir = uri.path().rsplit_once('/').map_or("", |(dir, _)| dir);
        format!("{dir}/{location}")
    };
    format!("{base}{path}").parse().ok()
}

#[derive(Clone, Copy)]
pub(crate) enum Method {
    Head,
    Get,
}

impl Method {
    fn as_str(self) -> &'static str {
        match self {
            Method::Head => "HEAD",
            Method::Get => "GET",
        }
    }
}

/// A remote tree rooted at `base` (`http://host:port/prefix`).
#[derive(Debug)]
pub struct HttpDriver {
    pub(crate) client: HttpClient,
    pub(crate) base: Base,
}

impl HttpDriver {
    /// A driver for `base`: `http://` or `https://`, an optional `user:pass@` (sent as
    /// Basic authorization, never shown), host, optional port and path prefix. Without a
    /// password in the URL, the client's netrc file may give the login.
    pub fn new(client: HttpClient, base: &str) -> Result<HttpDriver> {
        let base = Base::parse(base, client.netrc.as_deref())?;
        Ok(HttpDriver { client, base })
    }

    /// The URL of `path`, after checking that it is a driver path.
    pub(crate) fn checked_url(&self, method: Method, path: &str, dir: bool) -> Result<String> {
        let url = if dir {
            self.base.dir_url(path)
        } else {
            self.base.url(path)
        };
        if is_driver_path(path) {
            Ok(url)
        } else {
            Err(Error::new(
                ErrorKind::InvalidName,
                format!("{} {url}: not a normalised path", method.as_str()),
            ))
        }
    }

    /// Sends one request and returns its final (post-redirect) response, whatever its status.
    pub(crate) fn call(
        &self,
        method: Method,
        url: &str,
        headers: &[(&str, String)],
    ) -> Result<Response<Body>> {
        let mut request = Request::builder().method(method.as_str()).uri(url);
        if let Some(authorization) = self.base.authorization() {
            request = request.header("authorization", authorization);
        }
        for (name, value) in headers {
            request = request.header(*name, value.as_str());
        }
        let request = request
            .body(())
            .map_err(|e| Error::new(ErrorKind::InvalidName, format!("{url}: {e}")))?;
        self.client
            .run_following(request)
            .map_err(|e| errors::transport(method.as_str(), url, e))
    }

    /// A 404 for `path/` may mean that `path` is a file: say ENOTDIR then, as a kernel would.
    fn refine_missing_dir(&self, path: &str, url: &str, err: Error) -> Error {
        if err.kind != ErrorKind::NotFound {
            return err;
        }
        match self.stat(path) {
            Ok(meta) if meta.kind == Kind::File => Error::new(
                ErrorKind::NotADirectory,
                format!("GET {url}: not a directory"),
            ),
            _ => err,
        }
    }
}

/// Fails unless the final status is a success.
fn expect_success(method: Method, url: &str, response: &Response<Body>) -> Result<()> {
    match response.status() {
        status if status.is_success() => Ok(()),
        status => Err(errors::status(method.as_str(), url, status)),
    }
}

/// Whether the response is about a directory: its final URL ends with a slash.
pub(crate) fn is_dir_response(response: &Response<Body>) -> bool {
    let uri = match response.extensions().get::<OriginUri>() {
        Some(OriginUri(uri)) => uri,
        None => response.get_uri(),
    };
    uri.path().ends_with('/')
}

/// The metadata a response's headers give; a size only for files, as a directory's
/// "size" would be that of its index page.
pub(crate) fn meta_of(headers: &HeaderMap, kind: Kind) -> Meta {
    let text = |name: &str| headers.get(name).and_then(|v| v.to_str().ok());
    let mut meta = Meta::of_kind(kind);
    if kind == Kind::File {
        meta.size = text("content-length").and_then(|v| v.trim().parse().ok());
    }
    meta.mtime = text("last-modified").and_then(|v| httpdate::parse_http_date(v).ok());
    meta.etag = text("etag").map(str::to_owned);
    meta.fresh_for = freshness(headers).map(|d| FreshFor::from_secs(d.as_secs()));
    meta
}

/// How long a response may be used without asking again, as its `Cache-Control` says
/// (RFC 9111 §5.2.2): zero for `no-cache` and `no-store`, else `max-age` less the `Age` a
/// cache on the way (a proxy) has held it for; `None` when it says neither.
pub(crate) fn freshness(headers: &HeaderMap) -> Option<Duration> {
    let mut max_age = None;
    let directives = headers
        .get_all("cache-control")
        .iter()
        .filter_map(|v| v.to_str().ok())
        .flat_map(|v| v.split(','));
    for directive in directives {
        let (name, arg) = match directive.split_once('=') {
            Some((name, arg)) => (name.trim(), Some(arg.trim().trim_matches('"'))),
            None => (directive.trim(), None),
        };
        match (name.to_ascii_lowercase().as_str(), arg) {
            // `no-cache="field"` is about those fields only.
            ("no-cache", None) | ("no-store", _) => return Some(Duration::ZERO),
            ("max-age", Some(secs)) => max_age = secs.parse::<u64>().ok(),
            _ => {}
        }
    }
    let age = headers
        .get("age")
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.trim().parse::<u64>().ok())
        .unwrap_or(0);
    max_age.map(|secs| Duration::from_secs(secs.saturating_sub(age)))
}

/// `If-None-Match` / `If-Modified-Since` for what the cache holds.
pub(crate) fn conditional_headers(validator: Option<&Validator>) -> Vec<(&'static str, String)> {
    let Some(validator) = validator else {
        return Vec::new();
    };
    let mut headers = Vec::new();
    if let Some(etag) = &validator.etag {
        headers.push(("if-none-match", etag.clone()));
    }
    if let Some(mtime) = validator.mtime {
        headers.push(("if-modified-since", httpdate::fmt_http_date(mtime)));
    }
    headers
}

/// Streams `body` into `dest` and returns the byte count. A failed read is the server's
/// (or the network's) fault, a failed write is ours: they are told apart.
pub(crate) fn copy_body(mut body: impl Read, dest: &mut dyn Write, url: &str) -> Result<u64> {
    let mut buf = vec![0u8; 64 * 1024];
    let mut written = 0u64;
    loop {
        let n = match body.read(&mut buf) {
            Ok(0) => return Ok(written),
            Ok(n) => n,
            Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
            Err(e) => return Err(errors::body("GET", url, e)),
        };
        dest.write_all(&buf[..n])
            .map_err(|e| Error::from_io(format_args!("GET {url}: writing the copy"), &e))?;
        written += n as u64;
    }
}

/// The body of an index page (or of a WebDAV `PROPFIND` reply), as text (names are
/// percent-encoded in links and hrefs, so a stray byte that is not UTF-8 can only be in
/// text we do not use). `method` names the request in messages.
pub(crate) fn read_page(response: Response<Body>, method: &str, url: &str) -> Result<String> {
    let bytes = response
        .into_body()
        .into_with_config()
        .limit(MAX_INDEX_PAGE)
        .read_to_vec()
        .map_err(|e| errors::transport(method, url, e))?;
    Ok(String::from_utf8_lossy(&bytes).into_owned())
}

impl Driver for HttpDriver {
    /// Read-only (every change: `EROFS`); `GET` with `Range`.
    fn capabilities(&self) -> Capabilities {
        Capabilities::READ_ONLY.with_ranges()
    }

    /// A `GET` with `Range`. A server may ignore the range and send the whole file with
    /// 200 (RFC 9110 §14.2): the bytes before the range are then read and discarded, which
    /// is always correct and costly only with such servers (nginx honours ranges).
    fn read_range(
        &self,
        path: &str,
        offset: u64,
        len: u64,
        of: Option<&Pinned>,
        dest: &mut dyn Write,
    ) -> Result<u64> {
        let url = self.checked_url(Method::Get, path, false)?;
        if len == 0 {
            return Ok(0);
        }
        let range = format!("bytes={offset}-{}", offset.saturating_add(len - 1));
        let response = self.call(Method::Get, &url, &[("range", range)])?;
        let status = response.status();
        if status == StatusCode::RANGE_NOT_SATISFIABLE {
            // The range starts at or past the end of the file, where read(2) returns 0.
            return Ok(0);
        }
        if !status.is_success() {
            return Err(errors::status("GET", &url, status));
        }
        if is_dir_response(&response) {
            return Err(Error::new(
                ErrorKind::IsADirectory,
                format!("GET {url}: is a directory"),
            ));
        }
        if let Some(of) = of {
            of.check(
                &meta_of(response.headers(), Kind::File),
                &format!("GET {url}"),
            )?;
        }
        let skip = if status == StatusCode::PARTIAL_CONTENT {
            check_range_start(&response, offset, &url)?;
            0
        } else {
            offset
        };
        let mut body = response.into_body().into_reader();
        let skipped = io::copy(&mut body.by_ref().take(skip), &mut io::sink())
            .map_err(|e| errors::body("GET", &url, e))?;
        if skipped < skip {
            return Ok(0);
        }
        copy_body(body.take(len), dest, &url)
    }

    fn describe(&self, path: &str) -> String {
        self.base.url(path)
    }

    fn sources(&self) -> Vec<(String, String)> {
        let netrc = self.client.netrc.as_ref();
        let netrc = netrc.map_or("none".to_owned(), |f| f.display().to_string());
        let mut sources = vec![
            ("netrc file".into(), netrc),
            ("login".into(), self.base.login_source().to_owned()),
        ];
        if self.base.url("/").starts_with("https:") {
            sources.push(("CA".into(), self.client.authorities.clone()));
        }
        sources
    }

    fn stat(&self, path: &str) -> Result<Meta> {
        let url = self.checked_url(Method::Head, path, false)?;
        let response = self.call(Method::Head, &url, &[])?;
        expect_success(Method::Head, &url, &response)?;
        let kind = if path == "/" || is_dir_response(&response) {
            Kind::Dir
        } else {
            Kind::File
        };
        Ok(meta_of(response.headers(), kind))
    }

    fn list(&self, path: &str) -> Result<Listing> {
        let url = self.checked_url(Method::Get, path, true)?;
        let response = self.call(Method::Get, &url, &[])?;
        if let Err(err) = expect_success(Method::Get, &url, &response) {
            return Err(self.refine_missing_dir(path, &url, err));
        }
        let page = read_page(response, Method::Get.as_str(), &url)?;
        Ok(autoindex::parse(&page, &url))
    }

    fn fetch(
        &self,
        path: &str,
        dest: &mut dyn Write,
        validator: Option<&Validator>,
    ) -> Result<Fetched> {
        let url = self.checked_url(Method::Get, path, false)?;
        let response = self.call(Method::Get, &url, &conditional_headers(validator))?;
        if validator.is_some() && response.status() == StatusCode::NOT_MODIFIED {
            return Ok(Fetched::NotModified);
        }
        expect_success(Method::Get, &url, &response)?;
        if is_dir_response(&response) {
            return Err(Error::new(
                ErrorKind::IsADirectory,
                format!("GET {url}: is a directory"),
            ));
        }
        let mut meta = meta_of(response.headers(), Kind::File);
        let written = copy_body(response.into_body().into_reader(), dest, &url)?;
        // What arrived is the truth; Content-Length only announced it (and ureq has
        // already failed the read if the two disagree).
        meta.size = Some(written);
        Ok(Fetched::Body(meta))
    }
}

#[cfg(test)]
pub(crate) mod tests;

/// Checks that a 206 reply starts where asked (`Content-Range: bytes START-END/SIZE`):
/// bytes from elsewhere would be silently wrong data.
pub(crate) fn check_range_start(response: &Response<Body>, offset: u64, url: &str) -> Result<()> {
    let header = response
        .headers()
        .get("content-range")
        .and_then(|v| v.to_str().ok())
        .unwrap_or("");
    let start = header
        .strip_prefix("bytes ")
        .and_then(|range| range.split_once('-'))
        .and_then(|(start, _)| start.trim().parse::<u64>().ok());
    if start == Some(offset) {
        Ok(())
    } else {
        Err(Error::new(
            ErrorKind::Io,
            format!("GET {url}: asked for bytes from {offset}, got {header:?}"),
        ))
    }
}
