//! Writing an object: one `PUT` up to [`MULTIPART_THRESHOLD`], a multipart upload beyond
//! (initiate, parts of [`PART_SIZE`], complete; abort on any failure). Either way readers
//! see the old object or the new one, never a part: S3 publishes an object whole.
//!
//! Bodies are read into memory before they are sent (at most the threshold for a `PUT`,
//! one part for a multipart upload), because each is signed with its SHA-256 and may
//! have to be sent again; the server checks the hash, so nothing corrupted is stored.

use std::io::Read;

use super::client::{Client, Method, Req};
use super::xml;
use crate::http::meta_of;
use crate::{Error, ErrorKind, Kind, Meta, Result};

/// Objects larger than this go up in parts.
pub(super) const MULTIPART_THRESHOLD: u64 = 64 << 20;
/// The size of each part but the last, unless the object would need more than
/// [`MAX_PARTS`] of them.
const PART_SIZE: u64 = 16 << 20;
/// S3's limit on the number of parts of one upload.
const MAX_PARTS: u64 = 10_000;

/// Stores the `len` bytes of `src` as `key`. Returns the stored object's metadata when
/// the reply tells all of it (its ETag and Last-Modified: moto and Ceph RGW send both with
/// a `PUT`; AWS sends no time, nor does a multipart upload), else `None`.
pub(super) fn upload(
    client: &Client,
    key: &str,
    src: &mut dyn Read,
    len: u64,
) -> Result<Option<Meta>> {
    if len <= MULTIPART_THRESHOLD {
        let body = read_exactly(src, len, key)?;
        let reply = client
            .send(&Req::new(Method::Put, key).body(&body))?
            .success()?;
        let meta = meta_of(reply.response().headers(), Kind::File);
        return Ok(
            (meta.etag.is_some() && meta.mtime.is_some()).then_some(Meta {
                size: Some(len),
                ..meta
            }),
        );
    }
    let id = initiate(client, key)?;
    let stored =
        send_parts(client, key, &id, src, len).and_then(|etags| complete(client, key, &id, &etags));
    if stored.is_err() {
        abort(client, key, &id);
    }
    stored.map(|()| None)
}

fn initiate(client: &Client, key: &str) -> Result<String> {
    let reply = client.send(&Req::new(Method::Post, key).query("uploads", ""))?;
    let url = reply.url().to_owned();
    xml::upload_id(&reply.document()?)
        .map_err(|why| Error::new(ErrorKind::Io, format!("POST {url}: {why}")))
}

/// Sends the parts in order; returns their ETags.
fn send_parts(
    client: &Client,
    key: &str,
    id: &str,
    src: &mut dyn Read,
    len: u64,
) -> Result<Vec<String>> {
    let size = part_size(len);
    let mut etags = Vec::new();
    let mut left = len;
    while left > 0 {
        let body = read_exactly(src, left.min(size), key)?;
        left -= body.len() as u64;
        let number = (etags.len() + 1).to_string();
        let req = Req::new(Method::Put, key)
            .query("partNumber", &number)
            .query("uploadId", id)
            .body(&body);
        let reply = client.send(&req)?.success()?;
        let etag = reply.header("etag").map(str::to_owned).ok_or_else(|| {
            let why = format!("PUT {}: no ETag for part {number}", reply.url());
            Error::new(ErrorKind::Io, why)
        })?;
        etags.push(etag);
    }
    Ok(etags)
}

fn complete(client: &Client, key: &str, id: &str, etags: &[String]) -> Result<()> {
    let body = xml::complete_upload(etags);
    let req = Req::new(Method::Post, key)
        .query("uploadId", id)
        .header("content-type", "application/xml")
        .body(body.as_bytes());
    client.send(&req)?.document().map(drop)
}

/// Aborts a failed upload, so its parts stop taking space (and being billed). Failing to
/// is logged, not returned in place of the upload's own error.
fn abort(client: &Client, key: &str, id: &str) {
    let req = Req::new(Method::Delete, key).query("uploadId", id);
    if let Err(e) = client.send(&req).and_then(|reply| reply.success()) {
        tracing::warn!("S3: leaving an incomplete multipart upload behind: {e}");
    }
}

/// [`PART_SIZE`], or larger (in whole MiB) for an object that would need more than
/// [`MAX_PARTS`] parts.
fn part_size(len: u64) -> u64 {
    const MIB: u64 = 1 << 20;
    PART_SIZE.max(len.div_ceil(MAX_PARTS).div_ceil(MIB) * MIB)
}

/// Exactly `len` bytes of `src` (for `key`, named in messages); a source that ends early
/// fails the upload instead of storing a truncated object.
fn read_exactly(src: &mut dyn Read, len: u64, key: &str) -> Result<Vec<u8>> {
    let mut body = Vec::with_capacity(usize::try_from(len).unwrap_or(0));
    src.take(len)
        .read_to_end(&mut body)
        .map_err(|e| Error::from_io(format_args!("PUT {key}: reading the data to upload"), &e))?;
    let short = len - body.len() as u64;
    if short > 0 {
        let why = format!("PUT {key}: the data to upload ended {short} bytes short");
        return Err(Error::new(ErrorKind::Io, why));
    }
    Ok(body)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parts_grow_only_for_huge_objects() {
        assert_eq!(part_size(70 << 20), PART_SIZE);
        assert_eq!(part_size(PART_SIZE * MAX_PARTS), PART_SIZE);
        let huge = 1u64 << 40;
        let size = part_size(huge);
        assert!(huge.div_ceil(size) <= MAX_PARTS, "{size}");
        assert_eq!(size % (1 << 20), 0);
    }

    #[test]
    fn sources_must_hold_what_was_announced() {
        let mut src: &[u8] = b"0123456789";
        assert_eq!(read_exactly(&mut src, 4, "k").unwrap(), b"0123");
        let err = read_exactly(&mut src, 10, "k").unwrap_err();
        assert_eq!(err.kind, ErrorKind::Io);
        assert_eq!(err.message, "PUT k: the data to upload ended 4 bytes short");
    }
}
