//! `PROPFIND` (RFC 4918 §9.1): the properties roam asks for, and how the `207 Multi-Status`
//! reply becomes one [`Resource`] per `<D:response>`.
//!
//! Servers choose their own namespace prefixes (`D:`, `lp1:`, a default namespace), so
//! elements are matched by namespace (`DAV:`) and local name, never by prefix. A response
//! may split its properties into several `<D:propstat>`s, each with its own status; only
//! those with a success status count (Apache lists the properties it lacks under a `404`).

use std::time::SystemTime;

use quick_xml::escape::resolve_predefined_entity;
use quick_xml::events::{BytesRef, BytesStart, Event};
use quick_xml::name::{Namespace, ResolveResult};
use quick_xml::NsReader;

use crate::{Kind, Meta};

/// The body of every `PROPFIND`: just the properties a [`Meta`] holds, so servers need not
/// compute the expensive ones (`allprop` would include lock discovery, quotas ...).
pub(super) const REQUEST: &str = r#"<?xml version="1.0" encoding="utf-8"?>
<D:propfind xmlns:D="DAV:"><D:prop><D:resourcetype/><D:getcontentlength/><D:getlastmodified/><D:getetag/></D:prop></D:propfind>
"#;

/// One resource of a reply, as the server named it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(super) struct Resource {
    /// The `<D:href>` as sent (XML entities resolved): a percent-encoded path or URL.
    pub href: String,
    pub meta: Meta,
}

/// Reads a `207 Multi-Status` body. Responses whose own status is a failure are left out;
/// a body that is not well-formed XML, or not a multistatus, is an error (its text says why).
pub(super) fn parse(xml: &str) -> Result<Vec<Resource>, String> {
    let mut reader = NsReader::from_str(xml);
    // `<D:collection/>` then arrives as a start and an end, like every other element.
    reader.config_mut().expand_empty_elements = true;
    let mut parser = Parser::default();
    let mut scope = Scope::default();
    loop {
        let (ns, event) = reader.read_resolved_event().map_err(|e| e.to_string())?;
        let dav = matches!(ns, ResolveResult::Bound(Namespace(b"DAV:")));
        match &event {
            Event::Start(e) => scope.open(e)?,
            Event::End(_) => scope.close(),
            _ => {}
        }
        match event {
            Event::Start(e) if dav => parser.start(e.local_name().as_ref()),
            Event::End(e) if dav => parser.end(e.local_name().as_ref()),
            Event::Text(e) => parser.text(&e.decode().map_err(|e| e.to_string())?),
            Event::CData(e) => parser.text(&e.decode().map_err(|e| e.to_string())?),
            Event::GeneralRef(e) => parser.text(&resolve(&e)?),
            Event::Eof => break,
            _ => {}
        }
    }
    if parser.multistatus {
        Ok(parser.resources)
    } else {
        Err("not a DAV:multistatus document".to_owned())
    }
}

/// Deepest nesting accepted: a multistatus nests about eight deep. quick-xml counts levels
/// in a `u16`, which hostile nesting overflows (a panic in debug builds).
const MAX_DEPTH: usize = 256;
/// Most namespace declarations in scope at once: quick-xml resolves each element's prefix
/// by scanning them, so a hostile number of them makes a parse take quadratic time.
const MAX_DECLARATIONS: usize = 1024;

/// The open elements and the namespace declarations they make, checked against the limits.
#[derive(Default)]
struct Scope {
    declared: Vec<usize>,
    total: usize,
}

impl Scope {
    fn open(&mut self, e: &BytesStart) -> Result<(), String> {
        let declared = e
            .attributes()
            .with_checks(false)
            .flatten()
            .filter(|a| a.key.as_namespace_binding().is_some())
            .count();
        self.declared.push(declared);
        self.total += declared;
        if self.declared.len() > MAX_DEPTH || self.total > MAX_DECLARATIONS {
            return Err(format!(
                "more than {MAX_DEPTH} nested elements or {MAX_DECLARATIONS} namespaces"
            ));
        }
        Ok(())
    }

    fn close(&mut self) {
        self.total -= self.declared.pop().unwrap_or(0);
    }
}

/// The text an entity or character reference stands for (`&amp;`, `&#38;`).
pub(crate) fn resolve(reference: &BytesRef) -> Result<String, String> {
    if let Some(ch) = reference.resolve_char_ref().map_err(|e| e.to_string())? {
        return Ok(ch.to_string());
    }
    let name = reference.decode().map_err(|e| e.to_string())?;
    resolve_predefined_entity(&name)
        .map(str::to_owned)
        .ok_or_else(|| format!("unknown entity &{name};"))
}

/// The `DAV:` elements whose text we keep.
#[derive(Clone, Copy)]
enum Field {
    Href,
    Status,
    Length,
    Modified,
    Etag,
}

/// Properties of one resource, merged from its successful propstats.
#[derive(Default)]
struct Props {
    collection: bool,
    size: Option<u64>,
    mtime: Option<SystemTime>,
    etag: Option<String>,
}

impl Props {
    fn merge(&mut self, other: Props) {
        self.collection |= other.collection;
        self.size = other.size.or(self.size.take());
        self.mtime = other.mtime.or(self.mtime.take());
        self.etag = other.etag.or(self.etag.take());
    }

    /// A size only for files, as for the HTTP driver: a collection's "length" (if a server
    /// gives one) is that of some rendering of it, not of anything a program can read.
    fn into_meta(self) -> Meta {
        let kind = if self.collection {
            Kind::Dir
        } else {
            Kind::File
        };
        let mut meta = Meta::of_kind(kind);
        meta.size = self.size.filter(|_| kind == Kind::File);
        meta.mtime = self.mtime;
        meta.etag = self.etag;
        meta
    }
}

/// One `<D:propstat>` being read.
#[derive(Default)]
struct Propstat {
    props: Props,
    status: Option<u16>,
}

/// One `<D:response>` being read.
#[derive(Default)]
struct Response {
    href: Option<String>,
    props: Props,
    /// The response's own status, which replaces propstats for a resource that failed.
    status: Option<u16>,
}

/// Where the reader is in the document: a stack would be more general, but a multistatus
/// nests responses in one fixed way, so knowing the open response and propstat suffices.
#[derive(Default)]
struct Parser {
    resources: Vec<Resource>,
    multistatus: bool,
    response: Option<Response>,
    propstat: Option<Propstat>,
    field: Option<Field>,
    text: String,
}

impl Parser {
    fn start(&mut self, name: &[u8]) {
        match name {
            b"multistatus" => self.multistatus = true,
            b"response" => self.response = Some(Response::default()),
            b"propstat" if self.response.is_some() => self.propstat = Some(Propstat::default()),
            b"collection" => {
                if let Some(propstat) = &mut self.propstat {
                    propstat.props.collection = true;
                }
            }
            // Hrefs inside properties (a lock's root) are not the resource's own.
            b"href" if self.propstat.is_none() => self.capture(Field::Href),
            b"status" => self.capture(Field::Status),
            b"getcontentlength" => self.capture(Field::Length),
            b"getlastmodified" => self.capture(Field::Modified),
            b"getetag" => self.capture(Field::Etag),
            _ => {}
        }
    }

    fn capture(&mut self, field: Field) {
        self.field = Some(field);
        self.text.clear();
    }

    fn text(&mut self, text: &str) {
        if self.field.is_some() {
            self.text.push_str(text);
        }
    }

    fn end(&mut self, name: &[u8]) {
        match name {
            b"href" | b"status" | b"getcontentlength" | b"getlastmodified" | b"getetag" => {
                self.finish_field()
            }
            b"propstat" => self.finish_propstat(),
            b"response" => self.finish_response(),
            _ => {}
        }
    }

    fn finish_field(&mut self) {
        let Some(field) = self.field.take() else {
            return;
        };
        let text = self.text.trim();
        match (field, &mut self.propstat, &mut self.response) {
            (Field::Status, Some(propstat), _) => propstat.status = status_code(text),
            (Field::Status, None, Some(response)) => response.status = status_code(text),
            (Field::Href, None, Some(response)) => response.href = Some(text.to_owned()),
            (Field::Length, Some(propstat), _) => propstat.props.size = text.parse().ok(),
            (Field::Modified, Some(propstat), _) => {
                propstat.props.mtime = httpdate::parse_http_date(text).ok()
            }
            (Field::Etag, Some(propstat), _) if !text.is_empty() => {
                propstat.props.etag = Some(text.to_owned())
            }
            _ => {}
        }
    }

    fn finish_propstat(&mut self) {
        if let (Some(propstat), Some(response)) = (self.propstat.take(), &mut self.response) {
            // A propstat without a status is malformed; its properties are taken anyway.
            if propstat.status.is_none_or(is_success) {
                response.props.merge(propstat.props);
            }
        }
    }

    fn finish_response(&mut self) {
        let Some(response) = self.response.take() else {
            return;
        };
        match response.href {
            Some(href) if response.status.is_none_or(is_success) => self.resources.push(Resource {
                href,
                meta: response.props.into_meta(),
            }),
            _ => {}
        }
    }
}

/// The code of a status line: `HTTP/1.1 200 OK` → 200.
fn status_code(line: &str) -> Option<u16> {
    line.split_whitespace().nth(1)?.parse().ok()
}

fn is_success(code: u16) -> bool {
    (200..300).contains(&code)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn date(s: &str) -> Option<SystemTime> {
        Some(httpdate::parse_http_date(s).unwrap())
    }

    /// What nginx's dav-ext module sends (abridged): a `D:` prefix, hrefs escaped in both
    /// URL and XML, no getetag, and no size for collections.
    #[test]
    fn nginx_reply() {
        let xml = r#"<?xml version="1.0" encoding="utf-8" ?>
<D:multistatus xmlns:D="DAV:">
<D:response>
<D:href>/dir/</D:href>
<D:propstat><D:prop>
<D:displayname>dir</D:displayname>
<D:getlastmodified>Sun, 22 Nov 2026 06:27:20 GMT</D:getlastmodified>
<D:resourcetype><D:collection/></D:resourcetype>
<D:lockdiscovery/><D:supportedlock>
</D:supportedlock>
</D:prop><D:status>HTTP/1.1 200 OK</D:status></D:propstat>
</D:response>
<D:response>
<D:href>/dir/a:b&amp;c;+=.txt</D:href>
<D:propstat><D:prop>
<D:getcontentlength>6</D:getcontentlength>
<D:getlastmodified>Sun, 22 Nov 2026 06:27:21 GMT</D:getlastmodified>
<D:resourcetype></D:resourcetype>
</D:prop><D:status>HTTP/1.1 200 OK</D:status></D:propstat>
</D:response>
</D:multistatus>
"#;
        let resources = parse(xml).unwrap();
        let mut dir = Meta::of_kind(Kind::Dir);
        dir.mtime = date("Sun, 22 Nov 2026 06:27:20 GMT");
        let mut file = Meta::of_kind(Kind::File);
        file.size = Some(6);
        file.mtime = date("Sun, 22 Nov 2026 06:27:21 GMT");
        assert_eq!(
            resources,
            [
                Resource {
                    href: "/dir/".into(),
                    meta: dir
                },
                Resource {
                    href: "/dir/a:b&c;+=.txt".into(),
                    meta: file
                },
            ]
        );
    }

    /// Apache mod_dav's style: per-response namespace prefixes for the same `DAV:`, an
    /// absolute href, and the properties it lacks under a 404 propstat.
    #[test]
    fn apache_style_reply() {
        let xml = r#"<?xml version="1.0" encoding="utf-8"?>
<D:multistatus xmlns:D="DAV:" xmlns:ns0="DAV:">
<D:response xmlns:lp1="DAV:" xmlns:lp2="http://apache.org/dav/props/">
<D:href>http://h/dav/sub/</D:href>
<D:propstat><D:prop>
<lp1:resourcetype><D:collection/></lp1:resourcetype>
<lp1:getetag>"1000-5f"</lp1:getetag>
<lp2:executable>F</lp2:executable>
</D:prop><D:status>HTTP/1.1 200 OK</D:status></D:propstat>
<D:propstat><D:prop><ns0:getcontentlength/></D:prop>
<D:status>HTTP/1.1 404 Not Found</D:status></D:propstat>
</D:response>
<D:response xmlns:lp1="DAV:">
<D:href>/dav/sub/f&#32;g</D:href>
<D:propstat><D:prop>
<lp1:getcontentlength>12</lp1:getcontentlength>
<lp1:getetag>W/"c-5f"</lp1:getetag>
<D:lockdiscovery><D:activelock><D:lockroot><D:href>/elsewhere</D:href></D:lockroot></D:activelock></D:lockdiscovery>
</D:prop><D:status>HTTP/1.1 200 OK</D:status></D:propstat>
</D:response>
</D:multistatus>"#;
        let resources = parse(xml).unwrap();
        assert_eq!(resources.len(), 2);
        assert_eq!(resources[0].href, "http://h/dav/sub/");
        assert_eq!(resources[0].meta.kind, Kind::Dir);
        assert_eq!(resources[0].meta.etag.as_deref(), Some("\"1000-5f\""));
        assert_eq!(resources[1].href, "/dav/sub/f g");
        assert_eq!(resources[1].meta.kind, Kind::File);
        assert_eq!(resources[1].meta.size, Some(12));
        assert_eq!(resources[1].meta.etag.as_deref(), Some("W/\"c-5f\""));
    }

    #[test]
    fn default_namespace_and_failed_responses() {
        let xml = r#"<multistatus xmlns="DAV:">
<response><href>/gone</href><status>HTTP/1.1 404 Not Found</status></response>
<response><href>/kept</href><propstat><prop><resourcetype/></prop>
<status>HTTP/1.1 200 OK</status></propstat></response>
<x:response xmlns:x="urn:other"><x:href>/foreign</x:href></x:response>
</multistatus>"#;
        let resources = parse(xml).unwrap();
        assert_eq!(resources.len(), 1);
        assert_eq!(resources[0].href, "/kept");
        assert_eq!(resources[0].meta, Meta::of_kind(Kind::File));
    }

    #[test]
    fn malformed_replies_are_errors() {
        for bad in [
            "<html><body>It works!</body></html>",
            r#"<D:multistatus xmlns:D="DAV:"><D:response></D:multistatus>"#,
            r#"<D:multistatus xmlns:D="DAV:"><D:href>&bogus;</D:href></D:multistatus>"#,
            "",
        ] {
            assert!(parse(bad).is_err(), "{bad}");
        }
    }

    /// Found probing for deep nesting (issue 14): past 65 535 levels quick-xml's depth counter
    /// overflowed (a panic), and 20 000 nested namespace declarations took 30 s.
    #[test]
    fn deep_nesting_and_many_namespaces_are_refused_quickly() {
        let start = std::time::Instant::now();
        for element in ["<D:prop>", "<x:a xmlns:p=\"u\">"] {
            let depth = 70_000;
            let xml = format!(
                "<D:multistatus xmlns:D=\"DAV:\" xmlns:x=\"X:\">{}",
                element.repeat(depth)
            );
            assert!(parse(&xml).unwrap_err().contains("nested elements"));
        }
        let many: String = (0..20_000).map(|i| format!(" xmlns:p{i}=\"u\"")).collect();
        let xml = format!("<D:multistatus xmlns:D=\"DAV:\"><D:response{many}>");
        assert!(parse(&xml).unwrap_err().contains("namespaces"));
        assert!(start.elapsed() < std::time::Duration::from_secs(5));
    }

    #[test]
    fn status_lines() {
        assert_eq!(status_code("HTTP/1.1 200 OK"), Some(200));
        assert_eq!(status_code(" HTTP/1.1 423 Locked "), Some(423));
        assert_eq!(status_code("garbage"), None);
    }
}
