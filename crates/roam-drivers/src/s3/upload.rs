//! Writing an object: one `PUT` up to [`MULTIPART_THRESHOLD`], a multipart upload beyond
//! (initiate, parts of [`PART_SIZE`], complete; abort on any failure). Either way readers
//! see the old object or the new one, never a part: S3 publishes an object whole. A copy
//! on the server too large for one `CopyObject` is such a multipart upload, of ranges of
//! the source (`UploadPartCopy`).
//!
//! A precondition ([`Precondition`]) goes with the request that publishes the object, the
//! `PUT` or the `CompleteMultipartUpload`, as `If-Match: ETAG` or `If-None-Match: *`: S3
//! checks it and stores the object in one step (412 otherwise). moto 5.2.1 ignores
//! `If-Match` on `CompleteMultipartUpload`, so the object's ETag is also asked for
//! (`HEAD`) right before completing.
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

/// What the object must be for a write to go ahead.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(super) enum Precondition {
    None,
    /// `If-None-Match: *`: no object has the key.
    Absent,
    /// `If-Match`: the object has this ETag.
    Matches(String),
}

impl Precondition {
    fn header(&self) -> Option<(&'static str, String)> {
        match self {
            Precondition::None => None,
            Precondition::Absent => Some(("if-none-match", "*".to_owned())),
            Precondition::Matches(etag) => Some(("if-match", etag.clone())),
        }
    }

    /// The error of a reply to a conditional request: a 404 to `If-Match` means the
    /// object is gone, which is a change too (a 412 is one already).
    fn refine(&self, err: Error) -> Error {
        match (self, err.kind) {
            (Precondition::Matches(_), ErrorKind::NotFound) => Error::new(
                ErrorKind::Changed,
                format!(
                    "{}: {}: it is gone",
                    err.message,
                    ErrorKind::Changed.reason()
                ),
            ),
            _ => err,
        }
    }
}

/// Stores the `len` bytes of `src` as `key` if `pre` holds. Returns the stored object's
/// metadata when the reply tells all of it (its ETag and Last-Modified: moto and Ceph RGW
/// send both with a `PUT`; AWS sends no time, nor does a multipart upload), else `None`.
/// `created` hears of a multipart upload's id before any part is sent (see
/// [`crate::Upload::leftovers`]); `head` asks for the object's ETag now (`None`: none).
pub(super) fn upload(
    client: &Client,
    (key, src, len): (&str, &mut dyn Read, u64),
    pre: &Precondition,
    created: &dyn Fn(&str) -> Result<()>,
    head: &dyn Fn() -> Result<Option<String>>,
) -> Result<Option<Meta>> {
    if len <= MULTIPART_THRESHOLD {
        let body = read_exactly(src, len, key)?;
        let req = Req::new(Method::Put, key).body(&body);
        let req = match pre.header() {
            Some((name, value)) => req.header(name, value),
            None => req,
        };
        let reply = client.send(&req)?.success().map_err(|e| pre.refine(e))?;
        let meta = meta_of(reply.response().headers(), Kind::File);
        return Ok(
            (meta.etag.is_some() && meta.mtime.is_some()).then_some(Meta {
                size: Some(len),
                ..meta
            }),
        );
    }
    let id = initiate(client, key)?;
    let stored = created(&id)
        .and_then(|()| send_parts(client, key, &id, src, len))
        .and_then(|etags| {
            recheck(key, pre, head)?;
            complete(client, key, &id, &etags, pre)
        });
    if stored.is_err() {
        abort(client, key, &id);
    }
    stored.map(|()| None)
}

/// Copies the `len` bytes of `source` (an `x-amz-copy-source`) to `key` on the server,
/// as a multipart upload whose parts are ranges of the source (`UploadPartCopy`) of at
/// least `part` bytes: for objects larger than one `CopyObject` may copy. Aborted on any
/// failure.
pub(super) fn copy_in_parts(
    client: &Client,
    (source, key, len): (&str, &str, u64),
    part: u64,
) -> Result<()> {
    let part = part.max(len.div_ceil(MAX_PARTS));
    let id = initiate(client, key)?;
    let copied = (0..len.div_ceil(part))
        .map(|i| {
            let (start, end) = (i * part, ((i + 1) * part).min(len) - 1);
            let number = (i + 1).to_string();
            let req = Req::new(Method::Put, key)
                .query("partNumber", &number)
                .query("uploadId", &id)
                .header("x-amz-copy-source", source.to_owned())
                .header("x-amz-copy-source-range", format!("bytes={start}-{end}"));
            let reply = client.send(&req)?;
            let url = reply.url().to_owned();
            xml::copied_part_etag(&reply.document()?)
                .map_err(|why| Error::new(ErrorKind::Io, format!("PUT {url}: {why}")))
        })
        .collect::<Result<Vec<String>>>()
        .and_then(|etags| complete(client, key, &id, &etags, &Precondition::None));
    if copied.is_err() {
        abort(client, key, &id);
    }
    copied
}

/// Checks `pre` against the object's ETag now, for servers that ignore `If-Match` on
/// `CompleteMultipartUpload`.
fn recheck(key: &str, pre: &Precondition, head: &dyn Fn() -> Result<Option<String>>) -> Result<()> {
    let now = match pre {
        Precondition::None => return Ok(()),
        _ => head()?,
    };
    let holds = match (pre, now.as_deref()) {
        (Precondition::Absent, now) => now.is_none(),
        (Precondition::Matches(etag), Some(now)) => now == etag,
        _ => false,
    };
    match holds {
        true => Ok(()),
        false => Err(crate::changed(
            &format!("PUT {key}"),
            "another version is there now",
        )),
    }
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

fn complete(
    client: &Client,
    key: &str,
    id: &str,
    etags: &[String],
    pre: &Precondition,
) -> Result<()> {
    let body = xml::complete_upload(etags);
    let req = Req::new(Method::Post, key)
        .query("uploadId", id)
        .header("content-type", "application/xml")
        .body(body.as_bytes());
    let req = match pre.header() {
        Some((name, value)) => req.header(name, value),
        None => req,
    };
    client
        .send(&req)?
        .document()
        .map(drop)
        .map_err(|e| pre.refine(e))
}

/// Aborts a failed upload, so its parts stop taking space (and being billed). Failing to
/// is logged, not returned in place of the upload's own error.
fn abort(client: &Client, key: &str, id: &str) {
    if let Err(e) = abort_upload(client, key, id) {
        tracing::warn!("S3: leaving an incomplete multipart upload behind: {e}");
    }
}

/// `AbortMultipartUpload`; an upload already gone (aborted, completed: `NoSuchUpload`)
/// counts as aborted.
pub(super) fn abort_upload(client: &Client, key: &str, id: &str) -> Result<()> {
    let req = Req::new(Method::Delete, key).query("uploadId", id);
    match client.send(&req)?.success() {
        Err(e) if e.kind != ErrorKind::NotFound => Err(e),
        _ => Ok(()),
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
