//! HTTP(S) driver (to be implemented: see the helper task).

use std::io::Write;
use std::time::Duration;

use crate::{Driver, Error, ErrorKind, Fetched, Listing, Meta, Result, Validator};

/// Timeouts and identity of the HTTP client.
#[derive(Clone, Debug)]
pub struct HttpConfig {
    pub connect_timeout: Duration,
    pub read_timeout: Duration,
}

impl Default for HttpConfig {
    fn default() -> Self {
        HttpConfig { connect_timeout: Duration::from_secs(10), read_timeout: Duration::from_secs(30) }
    }
}

/// One connection pool shared by every HTTP mount.
#[derive(Clone, Debug)]
pub struct HttpClient {
    cfg: HttpConfig,
}

impl HttpClient {
    pub fn new(cfg: &HttpConfig) -> HttpClient {
        HttpClient { cfg: cfg.clone() }
    }
}

/// A remote tree rooted at `base` (`http://host:port/prefix`).
#[derive(Debug)]
pub struct HttpDriver {
    client: HttpClient,
    base: String,
}

impl HttpDriver {
    pub fn new(client: HttpClient, base: &str) -> Result<HttpDriver> {
        Ok(HttpDriver { client, base: base.trim_end_matches('/').to_owned() })
    }
}

impl Driver for HttpDriver {
    fn describe(&self, path: &str) -> String {
        format!("{}{}", self.base, path)
    }
    fn stat(&self, path: &str) -> Result<Meta> {
        let _ = &self.client.cfg;
        Err(Error::new(ErrorKind::Unsupported, format!("HEAD {}: not yet", self.describe(path))))
    }
    fn list(&self, path: &str) -> Result<Listing> {
        Err(Error::new(ErrorKind::Unsupported, format!("GET {}: not yet", self.describe(path))))
    }
    fn fetch(&self, path: &str, _dest: &mut dyn Write, _v: Option<&Validator>) -> Result<Fetched> {
        Err(Error::new(ErrorKind::Unsupported, format!("GET {}: not yet", self.describe(path))))
    }
}
