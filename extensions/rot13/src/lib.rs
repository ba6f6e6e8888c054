//! The `rot13` layer extension (a stream graft): rotates ASCII letters by 13 in contents and
//! names, both ways (rot13 is its own inverse), preserving length as layers must.

use roam_ext_abi::{Reply, Request};

roam_ext_abi::export!(handle);

fn handle(req: Request) -> Reply {
    match req {
        Request::Layer { data, .. } => Reply::Bytes(data.into_iter().map(rot13).collect()),
        _ => Reply::Fail("rot13 only transforms layers".into()),
    }
}

fn rot13(b: u8) -> u8 {
    match b {
        b'a'..=b'z' => (b - b'a' + 13) % 26 + b'a',
        b'A'..=b'Z' => (b - b'A' + 13) % 26 + b'A',
        _ => b,
    }
}
