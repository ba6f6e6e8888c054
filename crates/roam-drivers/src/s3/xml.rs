//! The XML documents S3 answers with: a `ListObjectsV2` page, an `<Error>`, a multipart
//! upload's id, and the body of a `CompleteMultipartUpload` request; and the credentials
//! of an STS reply.
//!
//! Elements are matched by local name and by their parents (a `<Prefix>` inside
//! `<CommonPrefixes>` is a subdirectory, the top-level one only echoes the request). Key
//! text is kept exactly, spaces included: a key may begin or end with one.

use std::time::SystemTime;

use quick_xml::escape::escape;
use quick_xml::events::Event;
use quick_xml::Reader;

use super::sign::Credentials;
use super::time::parse_iso8601;
use crate::dav::multistatus::resolve;

/// One object of a listing page.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub(super) struct Object {
    pub key: String,
    pub size: Option<u64>,
    pub mtime: Option<SystemTime>,
    pub etag: Option<String>,
}

/// One page of a `ListObjectsV2` reply.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub(super) struct ListPage {
    pub objects: Vec<Object>,
    /// The `CommonPrefixes`: full keys ending with the delimiter.
    pub prefixes: Vec<String>,
    /// The token for the next page, when this one is not the last.
    pub next: Option<String>,
}

/// An S3 error document's `Code` and `Message`. Other fields (`StringToSign`,
/// `AWSAccessKeyId` of a signature mismatch) are never read, so never shown.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub(super) struct S3Error {
    pub code: String,
    pub message: String,
}

pub(super) fn list_page(xml: &str) -> Result<ListPage, String> {
    let mut page = ListPage::default();
    let mut object: Option<Object> = None;
    let mut truncated = false;
    let mut token = None;
    let mut result = false;
    walk(xml, |path, text| match (path, object.as_mut()) {
        (["ListBucketResult"], _) => result = true,
        ([.., "Contents"], _) if text.is_none() => object = Some(Object::default()),
        ([.., "Contents"], _) => page.objects.extend(object.take()),
        ([.., "Contents", "Key"], Some(o)) => o.key = text.unwrap_or_default(),
        ([.., "Contents", "Size"], Some(o)) => o.size = text.and_then(|t| t.trim().parse().ok()),
        ([.., "Contents", "LastModified"], Some(o)) => {
            o.mtime = text.as_deref().and_then(parse_iso8601)
        }
        ([.., "Contents", "ETag"], Some(o)) => o.etag = text.filter(|t| !t.is_empty()),
        ([.., "CommonPrefixes", "Prefix"], _) => page.prefixes.extend(text),
        (["ListBucketResult", "IsTruncated"], _) => truncated = text.is_some_and(|t| t == "true"),
        (["ListBucketResult", "NextContinuationToken"], _) => token = text,
        _ => {}
    })?;
    if !result {
        return Err("not a ListBucketResult document".to_owned());
    }
    // A page that says it is truncated without saying where to go on would loop forever.
    page.next = token.filter(|t| truncated && !t.is_empty());
    if truncated && page.next.is_none() {
        return Err("a truncated page without a continuation token".to_owned());
    }
    Ok(page)
}

/// The `<Error>` document in `xml`, if that is what it is.
pub(super) fn error(xml: &str) -> Option<S3Error> {
    let mut found = None;
    let parsed = walk(xml, |path, text| match path {
        ["Error"] if text.is_none() => found = Some(S3Error::default()),
        ["Error", "Code"] => found.iter_mut().for_each(|e| e.code = one_line(&text)),
        ["Error", "Message"] => found.iter_mut().for_each(|e| e.message = one_line(&text)),
        _ => {}
    });
    parsed.ok().and(found)
}

/// The credentials of an STS `AssumeRoleWithWebIdentityResponse`, and their `Expiration`
/// as written; `None` without a whole key pair.
pub(super) fn sts_credentials(xml: &str) -> Option<(Credentials, Option<String>)> {
    let (mut access, mut secret, mut token, mut expires) = (None, None, None, None);
    walk(xml, |path, text| {
        if let [.., "Credentials", field] = path {
            let slot = match *field {
                "AccessKeyId" => &mut access,
                "SecretAccessKey" => &mut secret,
                "SessionToken" => &mut token,
                "Expiration" => &mut expires,
                _ => return,
            };
            *slot = text.map(|t| t.trim().to_owned());
        }
    })
    .ok()?;
    let credentials = Credentials {
        access_key: access.filter(|a| !a.is_empty())?,
        secret_key: secret.filter(|s| !s.is_empty())?,
        session_token: token,
    };
    Some((credentials, expires))
}

/// The `UploadId` of an `InitiateMultipartUploadResult`.
pub(super) fn upload_id(xml: &str) -> Result<String, String> {
    let mut id = None;
    walk(xml, |path, text| {
        if let ["InitiateMultipartUploadResult", "UploadId"] = path {
            id = text;
        }
    })?;
    id.filter(|id| !id.is_empty())
        .ok_or_else(|| "no UploadId in the reply".to_owned())
}

/// The `ETag` of an `UploadPartCopy` reply (`CopyPartResult`).
pub(super) fn copied_part_etag(xml: &str) -> Result<String, String> {
    let mut etag = None;
    walk(xml, |path, text| {
        if let ["CopyPartResult", "ETag"] = path {
            etag = text;
        }
    })?;
    etag.filter(|e| !e.is_empty())
        .ok_or_else(|| "no ETag for the copied part".to_owned())
}

/// The body of `CompleteMultipartUpload`: the parts in order, with their ETags.
pub(super) fn complete_upload(etags: &[String]) -> String {
    let mut xml = String::from("<CompleteMultipartUpload>");
    for (i, etag) in etags.iter().enumerate() {
        xml.push_str(&format!(
            "<Part><PartNumber>{}</PartNumber><ETag>{}</ETag></Part>",
            i + 1,
            escape(etag)
        ));
    }
    xml.push_str("</CompleteMultipartUpload>");
    xml
}

fn one_line(text: &Option<String>) -> String {
    let text = text.as_deref().unwrap_or_default();
    text.split_whitespace().collect::<Vec<_>>().join(" ")
}

/// Calls `on(path, None)` when an element opens and `on(path, Some(text))` when it closes,
/// with the element's own text (entities resolved); `path` runs from the root element to
/// it. The text of an element with children is their surrounding whitespace: unused.
/// Deepest element nesting accepted. S3's documents nest four deep; `on` gets the whole path
/// at every event, so hostile nesting would cost time quadratic in its depth (a hang).
const MAX_DEPTH: usize = 32;

fn walk(xml: &str, mut on: impl FnMut(&[&str], Option<String>)) -> Result<(), String> {
    let mut reader = Reader::from_str(xml);
    reader.config_mut().expand_empty_elements = true;
    let mut names: Vec<String> = Vec::new();
    let mut text = String::new();
    loop {
        match reader.read_event().map_err(|e| e.to_string())? {
            Event::Start(_) if names.len() == MAX_DEPTH => {
                return Err(format!("elements nested deeper than {MAX_DEPTH}"))
            }
            Event::Start(e) => {
                names.push(String::from_utf8_lossy(e.local_name().as_ref()).into_owned());
                text.clear();
                on(&as_path(&names), None);
            }
            Event::End(_) => {
                on(&as_path(&names), Some(std::mem::take(&mut text)));
                names.pop();
            }
            Event::Text(e) => text.push_str(&e.decode().map_err(|e| e.to_string())?),
            Event::CData(e) => text.push_str(&e.decode().map_err(|e| e.to_string())?),
            Event::GeneralRef(e) => text.push_str(&resolve(&e)?),
            // A cut-off reply must not pass for a short listing.
            Event::Eof if names.is_empty() => return Ok(()),
            Event::Eof => return Err(format!("the document ends inside <{}>", names.join("><"))),
            _ => {}
        }
    }
}

fn as_path(names: &[String]) -> Vec<&str> {
    names.iter().map(String::as_str).collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::{Duration, UNIX_EPOCH};

    const PAGE: &str = r#"<?xml version="1.0" encoding="UTF-8"?>
<ListBucketResult xmlns="http://s3.amazonaws.com/doc/2006-03-01/">
  <Name>bucket</Name><Prefix>dir/</Prefix><KeyCount>3</KeyCount><MaxKeys>1000</MaxKeys>
  <Delimiter>/</Delimiter><IsTruncated>true</IsTruncated>
  <NextContinuationToken>1ueGcxLPRx1Tr/XYExHnhbYLgveDs2J/wm36Hy4vbOwM=</NextContinuationToken>
  <Contents>
    <Key>dir/ a &amp; b </Key><LastModified>2013-05-24T00:00:01.000Z</LastModified>
    <ETag>&quot;9b2cf535f27731c974343645a3985328&quot;</ETag><Size>434234</Size>
    <StorageClass>STANDARD</StorageClass>
  </Contents>
  <Contents><Key>dir/&#252;</Key><Size>0</Size></Contents>
  <CommonPrefixes><Prefix>dir/sub/</Prefix></CommonPrefixes>
</ListBucketResult>"#;

    /// Found probing for deep nesting (issue 14): 20 000 nested elements took 24 s, 200 000
    /// forty minutes.
    #[test]
    fn deep_nesting_is_refused_quickly() {
        let depth = 200_000;
        let xml = format!(
            "<ListBucketResult>{}{}</ListBucketResult>",
            "<a>".repeat(depth),
            "</a>".repeat(depth)
        );
        let start = std::time::Instant::now();
        assert!(list_page(&xml).unwrap_err().contains("nested deeper"));
        assert!(start.elapsed() < Duration::from_secs(5));
    }

    #[test]
    fn reads_a_listing_page() {
        let page = list_page(PAGE).unwrap();
        assert_eq!(page.prefixes, ["dir/sub/"]);
        assert_eq!(
            page.next.as_deref(),
            Some("1ueGcxLPRx1Tr/XYExHnhbYLgveDs2J/wm36Hy4vbOwM=")
        );
        assert_eq!(
            page.objects[0],
            Object {
                key: "dir/ a & b ".into(),
                size: Some(434_234),
                mtime: Some(UNIX_EPOCH + Duration::from_secs(1_369_353_601)),
                etag: Some("\"9b2cf535f27731c974343645a3985328\"".into()),
            }
        );
        assert_eq!(page.objects[1].key, "dir/\u{fc}");
        assert_eq!(page.objects.len(), 2);
    }

    #[test]
    fn the_last_page_has_no_token_and_a_truncated_one_needs_one() {
        let last = PAGE.replace("<IsTruncated>true", "<IsTruncated>false");
        assert_eq!(list_page(&last).unwrap().next, None);
        let broken = PAGE.replace("NextContinuationToken", "Other");
        assert!(list_page(&broken).is_err());
        assert!(list_page("<ListBucketResult><Key>").is_err());
        assert!(list_page("").is_err());
        assert!(list_page("<Other/>").is_err());
    }

    #[test]
    fn reads_errors_but_only_code_and_message() {
        let xml = "<?xml version=\"1.0\"?><Error><Code>SignatureDoesNotMatch</Code>\
            <Message>The request signature we calculated does not match\n the signature \
            you provided.</Message><AWSAccessKeyId>AKIDSECRETISH</AWSAccessKeyId>\
            <StringToSign>x</StringToSign></Error>";
        let e = error(xml).unwrap();
        assert_eq!(e.code, "SignatureDoesNotMatch");
        assert_eq!(
            e.message,
            "The request signature we calculated does not match the signature you provided."
        );
        assert_eq!(
            error("<CopyObjectResult><ETag>x</ETag></CopyObjectResult>"),
            None
        );
        assert_eq!(error("not xml <"), None);
        assert_eq!(error(""), None);
    }

    #[test]
    fn reads_upload_ids_and_writes_completions() {
        let xml = "<InitiateMultipartUploadResult><Bucket>b</Bucket><Key>k</Key>\
            <UploadId>VXBsb2FkIElE</UploadId></InitiateMultipartUploadResult>";
        assert_eq!(upload_id(xml).unwrap(), "VXBsb2FkIElE");
        assert!(upload_id("<InitiateMultipartUploadResult/>").is_err());
        assert_eq!(
            complete_upload(&["\"a\"".into(), "\"b\"".into()]),
            "<CompleteMultipartUpload>\
             <Part><PartNumber>1</PartNumber><ETag>&quot;a&quot;</ETag></Part>\
             <Part><PartNumber>2</PartNumber><ETag>&quot;b&quot;</ETag></Part>\
             </CompleteMultipartUpload>"
        );
    }
}
