//! HTTP proxies for every request of the HTTP client (HTTP(S), WebDAV(S), S3), chosen from
//! the environment by curl's rules, read once when the client is made:
//!
//! 1. `no_proxy`, else `NO_PROXY`: hosts reached directly ([`NoProxy`]).
//! 2. For an `http://` URL `http_proxy` (lower case only: CGI programs get a request's
//!    `Proxy:` header as `HTTP_PROXY`, so curl never reads it); for `https://`
//!    `https_proxy`, then `HTTPS_PROXY`.
//! 3. Then `all_proxy`, then `ALL_PROXY`.
//!
//! An empty variable counts as unset. A value is `[http://|https://][USER[:PASSWORD]@]HOST[:PORT]`
//! (port 1080 by default as in curl, 443 for `https://`); its credentials are sent as
//! `Proxy-Authorization: Basic` and never shown.
//!
//! An `http://` origin is *forwarded*: the request goes to the proxy with the absolute URL
//! in its request line (RFC 9112 §3.2.2), so that a caching proxy can answer it from its
//! cache. An `https://` origin is *tunnelled* (`CONNECT`), TLS with the origin inside the
//! tunnel and its certificate verified as without a proxy.

use std::fmt;
use std::net::{Ipv4Addr, Ipv6Addr};

use base64::Engine as _;
use ureq::http::header::{HOST, PROXY_AUTHORIZATION};
use ureq::http::{HeaderValue, Request, Uri};
use ureq::unversioned::transport::{Buffers, ConnectionDetails, Connector, NextTimeout, Transport};
use ureq::ProxyProtocol;

/// The proxies of the environment: which one, if any, each URL goes through.
#[derive(Clone, Debug, Default)]
pub struct Proxies {
    http: Option<Choice>,
    https: Option<Choice>,
    no_proxy: NoProxy,
}

/// A proxy variable's value: a proxy, or why it is none (a request it applies to fails
/// with this reason rather than silently going direct).
type Choice = std::result::Result<Proxy, String>;

/// How one request reaches its origin.
pub(crate) enum Route<'a> {
    Direct,
    /// Through an HTTP proxy: forwarded (`http://`) or tunnelled (`https://`).
    Via(&'a Proxy),
    /// A proxy variable applies but cannot be used: the reason.
    Invalid(&'a str),
}

impl Proxies {
    /// The proxies this process's environment names.
    pub fn from_env() -> Proxies {
        Proxies::from_lookup(&|name| std::env::var(name).ok())
    }

    /// The proxies `env` names (a variable's value, `None` when unset).
    pub fn from_lookup(env: &dyn Fn(&str) -> Option<String>) -> Proxies {
        let set = |name: &str| env(name).filter(|v| !v.is_empty());
        let first = |names: &[&'static str]| {
            names
                .iter()
                .find_map(|&name| set(name).map(|value| Proxy::parse(&value, name)))
        };
        Proxies {
            http: first(&["http_proxy", "all_proxy", "ALL_PROXY"]),
            https: first(&["https_proxy", "HTTPS_PROXY", "all_proxy", "ALL_PROXY"]),
            no_proxy: NoProxy(
                set("no_proxy")
                    .or_else(|| set("NO_PROXY"))
                    .unwrap_or_default(),
            ),
        }
    }

    /// No proxy for anything.
    pub fn none() -> Proxies {
        Proxies::default()
    }

    /// Whether requests to `authority` (`host:port`) are requests forwarded to a proxy.
    fn forwards_to(&self, authority: &str) -> bool {
        [&self.http, &self.https]
            .into_iter()
            .any(|choice| matches!(choice, Some(Ok(proxy)) if proxy.authority == authority))
    }

    /// Whether any URL goes through a proxy.
    pub(crate) fn any(&self) -> bool {
        self.http.is_some() || self.https.is_some()
    }

    /// How a request for `uri` goes.
    pub(crate) fn route(&self, uri: &Uri) -> Route<'_> {
        let choice = match uri.scheme_str() {
            Some("http") => &self.http,
            Some("https") => &self.https,
            _ => &None,
        };
        let Some(choice) = choice else {
            return Route::Direct;
        };
        if uri.host().is_some_and(|host| self.no_proxy.matches(host)) {
            return Route::Direct;
        }
        match choice {
            Ok(proxy) => Route::Via(proxy),
            Err(why) => Route::Invalid(why),
        }
    }
}

/// One HTTP proxy.
#[derive(Clone)]
pub struct Proxy {
    /// TLS to the proxy itself (`https://` proxy URL).
    secure: bool,
    /// `host:port` (an IPv6 address in brackets).
    authority: String,
    /// The `Proxy-Authorization` value, when the URL carries credentials.
    authorization: Option<HeaderValue>,
    /// The variable that named it, for messages.
    var: &'static str,
    /// The same proxy as ureq tunnels through it.
    tunnel: ureq::Proxy,
}

/// Says where the proxy is and which variable named it, never its credentials.
impl fmt::Display for Proxy {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "the proxy {} (from {})", self.authority, self.var)
    }
}

impl fmt::Debug for Proxy {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "Proxy({self})")
    }
}

impl Proxy {
    /// Reads `value`, the value of `var`; the error says why it is no proxy.
    fn parse(value: &str, var: &'static str) -> Choice {
        let invalid = |why: &str| format!("{var} is not a usable proxy: {why}");
        let (scheme, rest) = match value.split_once("://") {
            Some((scheme, rest)) => (scheme.to_ascii_lowercase(), rest),
            None => ("http".to_owned(), value),
        };
        let secure = match scheme.as_str() {
            "http" => false,
            "https" => true,
            s if s.starts_with("socks") => return Err(invalid("SOCKS proxies are not supported")),
            other => return Err(invalid(&format!("unknown scheme {other}://"))),
        };
        let authority = rest.split(['/', '?', '#']).next().unwrap_or_default();
        let (userinfo, hostport) = match authority.rsplit_once('@') {
            Some((userinfo, hostport)) => (Some(userinfo), hostport),
            None => (None, authority),
        };
        let (host, port) = split_host_port(hostport).ok_or_else(|| invalid("no host"))?;
        let port = match port {
            Some(port) => port.parse::<u16>().map_err(|_| invalid("a bad port"))?,
            None if secure => 443,
            None => 1080,
        };
        let decode = |s: &str| {
            percent_encoding::percent_decode_str(s)
                .decode_utf8()
                .map(|s| s.into_owned())
                .map_err(|_| invalid("credentials that are not UTF-8"))
        };
        let credentials = match userinfo {
            Some(userinfo) => {
                let (user, password) = userinfo.split_once(':').unwrap_or((userinfo, ""));
                Some((decode(user)?, decode(password)?))
            }
            None => None,
        };
        let protocol = if secure {
            ProxyProtocol::Https
        } else {
            ProxyProtocol::Http
        };
        let mut tunnel = ureq::Proxy::builder(protocol).host(host).port(port);
        let mut authorization = None;
        if let Some((user, password)) = &credentials {
            tunnel = tunnel.username(user).password(password);
            let token =
                base64::engine::general_purpose::STANDARD.encode(format!("{user}:{password}"));
            let value = HeaderValue::from_str(&format!("Basic {token}"))
                .map_err(|_| invalid("bad credentials"))?;
            authorization = Some(value);
        }
        let tunnel = tunnel.build().map_err(|e| invalid(&e.to_string()))?;
        Ok(Proxy {
            secure,
            authority: format!("{host}:{port}"),
            authorization,
            var,
            tunnel,
        })
    }

    /// The proxy as ureq's `CONNECT` tunnel takes it.
    pub(crate) fn tunnel(&self) -> ureq::Proxy {
        self.tunnel.clone()
    }

    /// Rewrites `request` (for an `http://` origin) to be sent to this proxy, its `Host`
    /// the origin's; [`Forwarding`] puts the origin's absolute URL in its request line.
    /// `None` when the URL has no host.
    pub(crate) fn forward<B>(&self, mut request: Request<B>) -> Option<Request<B>> {
        let origin = request.uri();
        let host = origin.authority()?.as_str().rsplit('@').next()?.to_owned();
        let target = origin.path_and_query().map_or("/", |p| p.as_str());
        let scheme = if self.secure { "https" } else { "http" };
        let uri = format!("{scheme}://{}{target}", self.authority)
            .parse()
            .ok()?;
        *request.uri_mut() = uri;
        let headers = request.headers_mut();
        headers.insert(HOST, HeaderValue::from_str(&host).ok()?);
        if let Some(authorization) = &self.authorization {
            headers.insert(PROXY_AUTHORIZATION, authorization.clone());
        }
        Some(request)
    }
}

/// `HOST[:PORT]` split; an IPv6 address keeps its brackets. `None` without a host.
fn split_host_port(hostport: &str) -> Option<(&str, Option<&str>)> {
    let (host, port) = if hostport.starts_with('[') {
        let end = hostport.find(']')?;
        let port = hostport[end + 1..].strip_prefix(':');
        (&hostport[..=end], port)
    } else {
        match hostport.rsplit_once(':') {
            Some((host, port)) => (host, Some(port)),
            None => (hostport, None),
        }
    };
    (!host.is_empty()).then_some((host, port))
}

/// The last step of the client's connections: a connection to a proxy that requests are
/// forwarded to is wrapped in [`AbsoluteForm`]. (ureq writes a request line's target
/// as a path, and proxies only `CONNECT`.)
#[derive(Debug)]
pub(crate) struct Forwarding(pub(crate) std::sync::Arc<Proxies>);

impl Connector<Box<dyn Transport>> for Forwarding {
    type Out = Box<dyn Transport>;

    fn connect(
        &self,
        details: &ConnectionDetails,
        chained: Option<Box<dyn Transport>>,
    ) -> std::result::Result<Option<Self::Out>, ureq::Error> {
        let Some(transport) = chained else {
            return Ok(None);
        };
        let forwarded = details
            .uri
            .authority()
            .is_some_and(|a| self.0.forwards_to(a.as_str()));
        if !forwarded {
            return Ok(Some(transport));
        }
        let proxy = details
            .uri
            .authority()
            .map(|a| a.to_string())
            .unwrap_or_default();
        Ok(Some(Box::new(AbsoluteForm {
            inner: transport,
            proxy,
            at_request: true,
        })))
    }
}

/// A connection to a forwarding proxy: the request line of each request whose `Host` is
/// not the proxy's own gets the absolute URL `http://HOST/PATH` as its target.
#[derive(Debug)]
struct AbsoluteForm {
    inner: Box<dyn Transport>,
    /// The proxy's `host:port`.
    proxy: String,
    /// Whether the next output starts a request: at first, and after each response was
    /// waited for.
    at_request: bool,
}

impl Transport for AbsoluteForm {
    fn buffers(&mut self) -> &mut dyn Buffers {
        self.inner.buffers()
    }

    fn transmit_output(
        &mut self,
        amount: usize,
        timeout: NextTimeout,
    ) -> std::result::Result<(), ureq::Error> {
        if std::mem::take(&mut self.at_request) {
            let output = &self.inner.buffers().output()[..amount];
            if let Some(rewritten) = absolute_form(output, &self.proxy) {
                // Longer than what ureq wrote: sent in as many bufferfuls as it takes.
                for chunk in rewritten.chunks(self.inner.buffers().output().len()) {
                    self.inner.buffers().output()[..chunk.len()].copy_from_slice(chunk);
                    self.inner.transmit_output(chunk.len(), timeout)?;
                }
                return Ok(());
            }
        }
        self.inner.transmit_output(amount, timeout)
    }

    fn await_input(&mut self, timeout: NextTimeout) -> std::result::Result<bool, ureq::Error> {
        self.at_request = true;
        self.inner.await_input(timeout)
    }

    fn is_open(&mut self) -> bool {
        self.inner.is_open()
    }

    fn is_tls(&self) -> bool {
        self.inner.is_tls()
    }
}

/// `output` (the start of a request) with `http://HOST` before its path, `HOST` its
/// `Host` header; `None` when it is no request with a whole head, or is for `proxy` itself.
fn absolute_form(output: &[u8], proxy: &str) -> Option<Vec<u8>> {
    let head_end = output.windows(4).position(|w| w == b"\r\n\r\n")?;
    let head = std::str::from_utf8(&output[..head_end]).ok()?;
    let (line, headers) = head.split_once("\r\n").unwrap_or((head, ""));
    let (method, rest) = line.split_once(' ')?;
    if !rest.starts_with('/') {
        return None;
    }
    let host = headers.split("\r\n").find_map(|header| {
        let (name, value) = header.split_once(':')?;
        name.trim()
            .eq_ignore_ascii_case("host")
            .then(|| value.trim())
    })?;
    if host.eq_ignore_ascii_case(proxy) {
        return None;
    }
    let mut rewritten = format!("{method} http://{host}").into_bytes();
    rewritten.extend_from_slice(&output[method.len() + 1..]);
    Some(rewritten)
}

/// The hosts reached without a proxy, as curl reads `no_proxy`: entries separated by
/// commas (and blanks); `*` alone means every host. A host name matches an entry equal
/// to it or to one of its parent domains (`example.com` and `.example.com` both match
/// `www.example.com`, never `notexample.com`), trailing dots ignored, case ignored. An
/// IP address matches an equal address or a network in CIDR notation
/// (`192.168.0.0/16`, `fd00::/8`). Ports are not part of entries (as in curl).
#[derive(Clone, Debug, Default)]
struct NoProxy(String);

impl NoProxy {
    fn matches(&self, host: &str) -> bool {
        if self.0.trim() == "*" {
            return true;
        }
        let host = host.trim_start_matches('[').trim_end_matches(']');
        let entries = self.0.split([',', ' ', '\t']).filter(|e| !e.is_empty());
        if let Ok(ip) = host.parse::<Ipv4Addr>() {
            return entries.into_iter().any(|e| matches_v4(ip, e));
        }
        if let Ok(ip) = host.parse::<Ipv6Addr>() {
            return entries.into_iter().any(|e| matches_v6(ip, e));
        }
        let host = host.strip_suffix('.').unwrap_or(host).to_ascii_lowercase();
        entries.into_iter().any(|entry| {
            let entry = entry.strip_suffix('.').unwrap_or(entry);
            let entry = entry
                .strip_prefix('.')
                .unwrap_or(entry)
                .to_ascii_lowercase();
            !entry.is_empty()
                && (host == entry
                    || host
                        .strip_suffix(&entry)
                        .is_some_and(|rest| rest.ends_with('.')))
        })
    }
}

/// An entry `ADDRESS[/BITS]` split; `None` when it is no address of the kind `T`.
fn network<T: std::str::FromStr>(entry: &str) -> Option<(T, Option<u32>)> {
    let (address, bits) = match entry.split_once('/') {
        Some((address, bits)) => (address, Some(bits.parse().ok()?)),
        None => (entry, None),
    };
    Some((address.parse().ok()?, bits))
}

fn matches_v4(ip: Ipv4Addr, entry: &str) -> bool {
    match network::<Ipv4Addr>(entry) {
        Some((net, Some(bits @ 1..=31))) => {
            let mask = u32::MAX << (32 - bits);
            u32::from(ip) & mask == u32::from(net) & mask
        }
        Some((net, None | Some(0 | 32))) => ip == net,
        _ => false,
    }
}

fn matches_v6(ip: Ipv6Addr, entry: &str) -> bool {
    let entry = entry.trim_start_matches('[');
    let entry = entry.replacen(']', "", 1);
    match network::<Ipv6Addr>(&entry) {
        Some((net, Some(bits @ 1..=127))) => {
            let mask = u128::MAX << (128 - bits);
            u128::from(ip) & mask == u128::from(net) & mask
        }
        Some((net, None | Some(0 | 128))) => ip == net,
        _ => false,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn proxies(vars: &[(&str, &str)]) -> Proxies {
        Proxies::from_lookup(&|name| {
            vars.iter()
                .find(|(n, _)| *n == name)
                .map(|(_, v)| v.to_string())
        })
    }

    /// The proxy `url` goes through, as `host:port (from VAR)`, or "direct".
    fn via(p: &Proxies, url: &str) -> String {
        match p.route(&url.parse().unwrap()) {
            Route::Direct => "direct".into(),
            Route::Via(proxy) => proxy.to_string().replace("the proxy ", ""),
            Route::Invalid(why) => why.to_owned(),
        }
    }

    #[test]
    fn variables_are_read_in_curls_order() {
        let all = [
            ("http_proxy", "h:1"),
            ("HTTP_PROXY", "H:2"),
            ("https_proxy", "s:3"),
            ("HTTPS_PROXY", "S:4"),
            ("all_proxy", "a:5"),
            ("ALL_PROXY", "A:6"),
        ];
        let p = proxies(&all);
        assert_eq!(via(&p, "http://o/x"), "h:1 (from http_proxy)");
        assert_eq!(via(&p, "https://o/x"), "s:3 (from https_proxy)");
        let p = proxies(&all[1..]);
        // HTTP_PROXY is never read: all_proxy comes next.
        assert_eq!(via(&p, "http://o/x"), "a:5 (from all_proxy)");
        let p = proxies(&all[3..]);
        assert_eq!(via(&p, "https://o/x"), "S:4 (from HTTPS_PROXY)");
        let p = proxies(&all[5..]);
        assert_eq!(via(&p, "http://o/x"), "A:6 (from ALL_PROXY)");
        assert_eq!(via(&p, "https://o/x"), "A:6 (from ALL_PROXY)");
        // Empty counts as unset.
        let p = proxies(&[("https_proxy", ""), ("HTTPS_PROXY", "S:4")]);
        assert_eq!(via(&p, "https://o/x"), "S:4 (from HTTPS_PROXY)");
        assert!(!proxies(&[("HTTP_PROXY", "H:2")]).any());
    }

    #[test]
    fn proxy_urls_are_read_as_curl_reads_them() {
        let one = |value: &str| via(&proxies(&[("all_proxy", value)]), "http://o/");
        assert_eq!(one("proxy"), "proxy:1080 (from all_proxy)");
        assert_eq!(one("http://proxy:3128/"), "proxy:3128 (from all_proxy)");
        assert_eq!(one("HTTPS://proxy"), "proxy:443 (from all_proxy)");
        assert_eq!(
            one("http://u:p%40ss@[::1]:8080"),
            "[::1]:8080 (from all_proxy)"
        );
        assert!(one("socks5://proxy:1080").contains("SOCKS proxies are not supported"));
        assert!(one("ftp://proxy").contains("unknown scheme ftp://"));
        assert!(one("http://proxy:99999").contains("a bad port"));
        assert!(one("http://:8080").contains("no host"));
    }

    #[test]
    fn credentials_become_proxy_authorization_and_are_never_shown() {
        let p = proxies(&[("http_proxy", "http://user:p%40ss@proxy:3128")]);
        let Route::Via(proxy) = p.route(&"http://o:8080/a/b?c".parse().unwrap()) else {
            panic!("no proxy")
        };
        let shown = format!("{proxy} {proxy:?} {p:?}");
        assert!(
            !shown.contains("p@ss") && !shown.contains("user"),
            "{shown}"
        );
        let request = Request::get("http://o:8080/a/b?c").body(()).unwrap();
        let forwarded = proxy.forward(request).unwrap();
        assert_eq!(forwarded.uri(), "http://proxy:3128/a/b?c");
        assert_eq!(forwarded.headers()[HOST], "o:8080");
        let token = base64::engine::general_purpose::STANDARD.encode("user:p@ss");
        assert_eq!(
            forwarded.headers()[PROXY_AUTHORIZATION],
            format!("Basic {token}").as_str()
        );
    }

    #[test]
    fn request_lines_to_a_forwarding_proxy_carry_the_absolute_url() {
        let head = b"GET /a/b?c HTTP/1.1\r\nhost: o:8080\r\naccept: */*\r\n\r\nbody";
        let rewritten = absolute_form(head, "proxy:3128").unwrap();
        assert_eq!(
            String::from_utf8(rewritten).unwrap(),
            "GET http://o:8080/a/b?c HTTP/1.1\r\nhost: o:8080\r\naccept: */*\r\n\r\nbody"
        );
        // The proxy's own resources, bodies, and heads not whole are left alone.
        assert!(
            absolute_form(b"GET / HTTP/1.1\r\nHost: proxy:3128\r\n\r\n", "proxy:3128").is_none()
        );
        assert!(absolute_form(b"GET /a HTTP/1.1\r\nHost: o\r\n", "proxy:3128").is_none());
        assert!(absolute_form(b"binary\r\n\r\n", "proxy:3128").is_none());
    }

    #[test]
    fn no_proxy_follows_curls_rules() {
        let with = |list: &str| proxies(&[("all_proxy", "p:1"), ("no_proxy", list)]);
        let direct = |list: &str, url: &str| via(&with(list), url) == "direct";
        assert!(direct("*", "http://anything/"));
        assert!(direct("example.com", "http://example.com/"));
        assert!(direct("example.com", "https://www.Example.COM./"));
        assert!(direct(".example.com", "http://example.com/"));
        assert!(!direct("example.com", "http://notexample.com/"));
        assert!(!direct("www.example.com", "http://example.com/"));
        assert!(direct("a.b, , example.com", "http://x.example.com:8080/"));
        assert!(direct("127.0.0.1", "http://127.0.0.1:8080/"));
        assert!(direct("10.0.0.0/8", "http://10.1.2.3/"));
        assert!(!direct("10.0.0.0/8", "http://11.1.2.3/"));
        assert!(!direct("127.0.0.1:8080", "http://127.0.0.1:8080/"));
        assert!(direct("::1", "http://[::1]:8080/"));
        assert!(direct("fd00::/8", "http://[fd12::1]/"));
        assert!(!direct("fd00::/8", "http://[fe80::1]/"));
        // An address never matches as a domain suffix.
        assert!(!direct("0.0.1", "http://127.0.0.1/"));
        assert!(!direct("", "http://example.com/"));
        // NO_PROXY when no_proxy is unset.
        let p = proxies(&[("all_proxy", "p:1"), ("NO_PROXY", "example.com")]);
        assert_eq!(via(&p, "http://example.com/"), "direct");
    }
}
