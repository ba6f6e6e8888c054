//! What the driver tests share: the client the tests over HTTP (plain, WebDAV, S3) talk
//! through, and the driver calls several files make ([`calls`]).

pub mod calls;

use std::time::Duration;

use roam_drivers::http::{HttpClient, HttpConfig};

/// A client with a 5 s connect timeout and the given read timeout.
pub fn http_client(read_timeout: Duration) -> HttpClient {
    HttpClient::new(&HttpConfig {
        connect_timeout: Duration::from_secs(5),
        read_timeout,
        netrc: None,
        ..HttpConfig::default()
    })
}
