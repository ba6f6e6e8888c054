//! Property tests of the zip and tar parsers against hostile archives: arbitrary bytes,
//! and archives built with hostile fields (sizes that lie or overflow, in octal and
//! base-256; names with `..`, `/`, NUL or over 255 bytes; pax records and GNU long names
//! whose lengths lie; central directories, offsets and comments that point anywhere), then
//! mutated. Each archive is listed the way roam lists it, a step at a time with only the
//! ranges asked for, and its members extracted: never a panic, nor an allocation the
//! supplied bytes do not pay for, and every step asks for something new (issue 14).

use miniz_oxide::deflate::compress_to_vec;
use proptest::prelude::*;
use roam_ext_abi::{Chunk, Files, Member, Reply};
use roam_testkit::fuzz::{
    alloc_bound, bounded, config, mutated, name, number, peak_alloc, CountingAlloc,
};

#[global_allocator]
static ALLOC: CountingAlloc = CountingAlloc;

/// Steps before a listing counts as a hang (roam stops far later, but a fuzz case
/// of a few KiB needs few steps).
const MAX_STEPS: usize = 1000;

/// What `files` roam would supply for `need`: the bytes of each asked range.
fn supply(archive: &[u8], need: &[roam_ext_abi::Range]) -> Files {
    let chunks = need
        .iter()
        .map(|r| {
            let start = (r.off as usize).min(archive.len());
            let end = start.saturating_add(r.len as usize).min(archive.len());
            Chunk {
                file: 0,
                off: r.off,
                data: archive[start..end].to_vec(),
            }
        })
        .collect();
    Files {
        sizes: vec![archive.len() as u64],
        chunks,
    }
}

/// Lists `archive` as roam does; the members, or `None` if the extension failed.
fn list(name: &str, archive: &[u8]) -> Option<Vec<Member>> {
    let mut files = Files {
        sizes: vec![archive.len() as u64],
        chunks: Vec::new(),
    };
    let mut state = Vec::new();
    let mut members = Vec::new();
    for _ in 0..MAX_STEPS {
        let supplied: usize = files.chunks.iter().map(|c| c.data.len()).sum();
        let reply = bounded(supplied + state.len(), || match crate::format(name) {
            Some(crate::Format::Zip) => crate::zip::list(&state, &files),
            _ => crate::tar::list(&files),
        });
        let Ok(Reply::Members {
            members: found,
            state: next,
            need,
        }) = reply
        else {
            return None;
        };
        members.extend(found);
        if need.is_empty() {
            return Some(members);
        }
        for r in &need {
            // roam's own checks (roam-ext's `check_step`): inside the archive, and progress.
            let end = r.off.checked_add(u64::from(r.len));
            if r.len == 0 || end.is_none_or(|e| e > archive.len() as u64) {
                return None;
            }
            let again = files
                .chunks
                .iter()
                .any(|c| c.off == r.off && c.data.len() == r.len as usize);
            assert!(!again, "asked again for {}+{}", r.off, r.len);
        }
        files = supply(archive, &need);
        state = next;
    }
    panic!("still listing after {MAX_STEPS} steps");
}

/// Extracts a zip member as roam does (a few rounds of asked ranges).
fn extract(archive: &[u8], m: &Member) {
    let mut files = Files {
        sizes: vec![archive.len() as u64],
        chunks: Vec::new(),
    };
    for _ in 0..4 {
        let supplied: usize = files.chunks.iter().map(|c| c.data.len()).sum();
        let (reply, peak) = peak_alloc(|| crate::zip::extract(m.at, m.method, m.size, &files));
        // Inflating may produce what the directory announces, as far as deflate can expand
        // what was supplied (1032:1); nothing else may grow beyond the input.
        let inflated = m.size.min(1100 * supplied as u64) as usize;
        assert!(
            peak <= alloc_bound(supplied) + 4 * inflated,
            "extracting held {peak} bytes"
        );
        match reply {
            Ok(Reply::Need(need)) => files = supply(archive, &need),
            _ => return,
        }
    }
}

/// A member as roam would see it: the checks of roam-ext's index never need to hold here,
/// but a listed name must at least be what the archive spelled, tidied.
fn check_members(members: &[Member]) {
    for m in members {
        assert!(
            !m.name.starts_with("./") && !m.name.ends_with('/'),
            "untidy name {:?}",
            m.name
        );
    }
}

// --- tar ---------------------------------------------------------------------------------

/// A field of `width` bytes: `value` cut to fit, NUL padded.
fn field(value: &[u8], width: usize) -> Vec<u8> {
    let mut f = value[..value.len().min(width)].to_vec();
    f.resize(width, 0);
    f
}

/// A size field: octal (true or huge), base-256 (any value), or garbage.
fn size_field(true_size: usize) -> impl Strategy<Value = Vec<u8>> {
    prop_oneof![
        4 => Just(format!("{true_size:011o}\0").into_bytes()),
        1 => Just(b"77777777777\0".to_vec()),
        1 => proptest::collection::vec(any::<u8>(), 11).prop_map(|mut b| { b.insert(0, 0x80); b }),
        1 => number().prop_map(String::into_bytes),
    ]
}

/// One 512-byte header with a correct checksum (so parsing goes past it).
#[allow(clippy::too_many_arguments)]
fn tar_header(
    name: &[u8],
    mode: &[u8],
    size: &[u8],
    mtime: &[u8],
    kind: u8,
    link: &[u8],
    ustar: bool,
    prefix: &[u8],
) -> Vec<u8> {
    let mut h = Vec::with_capacity(512);
    h.extend(field(name, 100));
    h.extend(field(mode, 8));
    h.extend(field(b"0000000\0", 8));
    h.extend(field(b"0000000\0", 8));
    h.extend(field(size, 12));
    h.extend(field(mtime, 12));
    h.extend(b"        ");
    h.push(kind);
    h.extend(field(link, 100));
    h.extend(field(if ustar { b"ustar\x0000" } else { b"" }, 8));
    h.extend(field(b"", 80));
    h.extend(field(prefix, 155));
    h.resize(512, 0);
    let sum: u32 = h.iter().map(|b| u32::from(*b)).sum();
    h[148..156].copy_from_slice(format!("{sum:06o}\0 ").as_bytes());
    h
}

/// Data padded to whole blocks.
fn blocks(data: &[u8]) -> Vec<u8> {
    let mut d = data.to_vec();
    d.resize(data.len().div_ceil(512) * 512, 0);
    d
}

/// A pax body whose records' lengths are true, or lie.
fn pax_body() -> impl Strategy<Value = Vec<u8>> {
    let record = (
        prop_oneof![Just("path"), Just("linkpath"), Just("size"), Just("mtime")],
        prop_oneof![name(), number()],
        -3i64..3,
        any::<bool>(),
    )
        .prop_map(|(k, v, skew, lie)| {
            let body = format!(" {k}={v}\n");
            let mut len = body.len() + 1;
            len += (body.len() + 1 + len.to_string().len()).to_string().len() - 1;
            let len = if lie {
                (len as i64 + skew).max(0) as usize
            } else {
                len
            };
            format!("{len}{body}").into_bytes()
        });
    proptest::collection::vec(record, 0..4).prop_map(|r| r.concat())
}

fn tar_entry() -> impl Strategy<Value = Vec<u8>> {
    let kind = prop_oneof![
        Just(b'0'),
        Just(0u8),
        Just(b'5'),
        Just(b'2'),
        Just(b'7'),
        Just(b'1'),
        Just(b'g'),
        any::<u8>()
    ];
    let data = proptest::collection::vec(any::<u8>(), 0..1500);
    let plain = (
        name(),
        kind,
        data,
        name(),
        any::<bool>(),
        name(),
        number(),
        number(),
    )
        .prop_flat_map(|(n, kind, data, link, ustar, prefix, mode, mtime)| {
            size_field(data.len()).prop_map(move |size| {
                let mut e = tar_header(
                    n.as_bytes(),
                    mode.as_bytes(),
                    &size,
                    mtime.as_bytes(),
                    kind,
                    link.as_bytes(),
                    ustar,
                    prefix.as_bytes(),
                );
                e.extend(blocks(&data));
                e
            })
        });
    let extended = (
        prop_oneof![Just(b'x'), Just(b'L'), Just(b'K')],
        pax_body(),
        name(),
    )
        .prop_flat_map(|(kind, body, long)| {
            let body = if kind == b'x' {
                body
            } else {
                long.into_bytes()
            };
            size_field(body.len()).prop_map(move |size| {
                let mut e = tar_header(
                    b"././@LongLink",
                    b"0000644\0",
                    &size,
                    b"0\0",
                    kind,
                    b"",
                    true,
                    b"",
                );
                e.extend(blocks(&body));
                e
            })
        });
    prop_oneof![3 => plain, 1 => extended]
}

fn tar_archive() -> impl Strategy<Value = Vec<u8>> {
    (proptest::collection::vec(tar_entry(), 0..8), any::<bool>()).prop_map(|(entries, end)| {
        let mut a = entries.concat();
        if end {
            a.extend([0u8; 1024]);
        }
        a
    })
}

// --- zip ---------------------------------------------------------------------------------

/// A zip member: its name, data, whether deflated, and lies its central entry tells.
#[derive(Clone, Debug)]
struct ZipMember {
    name: String,
    data: Vec<u8>,
    deflate: bool,
    descriptor: bool,
    size_lie: Option<u32>,
    offset_lie: Option<u32>,
    name_len_lie: Option<u16>,
    extra_len: u16,
}

fn zip_member() -> impl Strategy<Value = ZipMember> {
    let lie32 = proptest::option::weighted(0.2, any::<u32>());
    let lie16 = proptest::option::weighted(0.2, any::<u16>());
    (
        name(),
        proptest::collection::vec(0u8..4, 0..2000),
        any::<bool>(),
        any::<bool>(),
        lie32.clone(),
        lie32,
        lie16,
        prop_oneof![4 => Just(0u16), 1 => any::<u16>()],
    )
        .prop_map(
            |(name, data, deflate, descriptor, size_lie, offset_lie, name_len_lie, extra_len)| {
                ZipMember {
                    name,
                    data,
                    deflate,
                    descriptor,
                    size_lie,
                    offset_lie,
                    name_len_lie,
                    extra_len,
                }
            },
        )
}

fn le16(v: u16) -> [u8; 2] {
    v.to_le_bytes()
}

fn le32(v: u32) -> [u8; 4] {
    v.to_le_bytes()
}

/// A zip of `members` whose end record may lie about the directory and its comment.
fn zip_bytes(
    members: &[ZipMember],
    cd_lie: Option<(u32, u32)>,
    comment: &[u8],
    comment_len_lie: Option<u16>,
) -> Vec<u8> {
    let mut out = Vec::new();
    let mut cd = Vec::new();
    for m in members {
        let offset = out.len() as u32;
        let packed = if m.deflate {
            compress_to_vec(&m.data, 6)
        } else {
            m.data.clone()
        };
        let (method, flags) = (
            if m.deflate { 8 } else { 0 },
            if m.descriptor { 8 } else { 0 },
        );
        let name = m.name.as_bytes();
        out.extend(le32(0x0403_4b50));
        out.extend(le16(20));
        out.extend(le16(flags));
        out.extend(le16(method));
        out.extend([0; 8]);
        out.extend(le32(packed.len() as u32));
        out.extend(le32(m.data.len() as u32));
        out.extend(le16(name.len() as u16));
        out.extend(le16(0));
        out.extend(name);
        out.extend(&packed);
        cd.extend(le32(0x0201_4b50));
        cd.extend(le16(3 << 8 | 20));
        cd.extend(le16(20));
        cd.extend(le16(flags));
        cd.extend(le16(method));
        cd.extend(le16(0x6000));
        cd.extend(le16(0x5b76));
        cd.extend(le32(0));
        cd.extend(le32(packed.len() as u32));
        cd.extend(le32(m.size_lie.unwrap_or(m.data.len() as u32)));
        cd.extend(le16(m.name_len_lie.unwrap_or(name.len() as u16)));
        cd.extend(le16(m.extra_len));
        cd.extend(le16(0));
        cd.extend([0; 4]);
        cd.extend(le32(0o100644 << 16));
        cd.extend(le32(m.offset_lie.unwrap_or(offset)));
        cd.extend(name);
    }
    let (cd_size, cd_off) = cd_lie.unwrap_or((cd.len() as u32, out.len() as u32));
    out.extend(&cd);
    out.extend(le32(0x0605_4b50));
    out.extend([0; 4]);
    out.extend(le16(members.len() as u16));
    out.extend(le16(members.len() as u16));
    out.extend(le32(cd_size));
    out.extend(le32(cd_off));
    out.extend(le16(comment_len_lie.unwrap_or(comment.len() as u16)));
    out.extend(comment);
    out
}

fn zip_archive() -> impl Strategy<Value = Vec<u8>> {
    let comment =
        prop_oneof![4 => Just(Vec::new()), 1 => proptest::collection::vec(any::<u8>(), 0..5000)];
    (
        proptest::collection::vec(zip_member(), 0..6),
        proptest::option::weighted(0.2, (any::<u32>(), any::<u32>())),
        comment,
        proptest::option::weighted(0.2, any::<u16>()),
    )
        .prop_map(|(members, cd_lie, comment, len_lie)| {
            zip_bytes(&members, cd_lie, &comment, len_lie)
        })
}

fn check_zip(archive: &[u8]) {
    if let Some(members) = list("a.zip", archive) {
        check_members(&members);
        members.iter().for_each(|m| extract(archive, m));
    }
}

proptest! {
    #![proptest_config(config())]

    #[test]
    fn any_bytes_list_safely(archive in proptest::collection::vec(any::<u8>(), 0..4096)) {
        list("a.tar", &archive).iter().for_each(|m| check_members(m));
        check_zip(&archive);
    }

    #[test]
    fn mutated_tars_list_safely(archive in mutated(tar_archive())) {
        list("a.tar", &archive).iter().for_each(|m| check_members(m));
    }

    #[test]
    fn mutated_zips_list_and_extract_safely(archive in mutated(zip_archive())) {
        check_zip(&archive);
    }

    /// An honest zip lists every member with its true size, and each extracts to its data.
    #[test]
    fn honest_zips_read_back(members in proptest::collection::btree_map("[a-z]{1,12}", (proptest::collection::vec(0u8..4, 0..3000), any::<bool>()), 0..6)) {
        let members: Vec<ZipMember> = members.into_iter().map(|(name, (data, deflate))| ZipMember {
            name, data, deflate, descriptor: false, size_lie: None, offset_lie: None, name_len_lie: None, extra_len: 0,
        }).collect();
        let archive = zip_bytes(&members, None, b"", None);
        let listed = list("a.zip", &archive).expect("an honest zip lists");
        prop_assert_eq!(listed.len(), members.len());
        for (l, m) in listed.iter().zip(&members) {
            prop_assert_eq!(&l.name, &m.name);
            prop_assert_eq!(l.size, m.data.len() as u64);
            let files = supply(&archive, &[crate::range(&Files { sizes: vec![archive.len() as u64], chunks: vec![] }, l.at, archive.len() as u64)]);
            let data = match crate::zip::extract(l.at, l.method, l.size, &files) {
                Ok(Reply::Extent { off, len }) => archive[off as usize..(off + len) as usize].to_vec(),
                Ok(Reply::Bytes(b)) => b,
                other => panic!("extracting {}: {other:?}", l.name),
            };
            prop_assert_eq!(&data, &m.data);
        }
    }
}

// --- regressions found by fuzzing ----------------------------------------------------------

/// A base-256 size field of `size`.
fn base256(size: u64) -> Vec<u8> {
    let mut f = vec![0x80, 0, 0, 0];
    f.extend(size.to_be_bytes());
    f
}

/// A pax header whose body runs past the end of the archive was asked for again and again
/// (roam refuses the repeated range: the listing failed as the extension's fault); it is
/// now a truncated tar.
#[test]
fn an_extended_header_past_the_end_is_truncation() {
    for size in [format!("{:011o}\0", 4096).into_bytes(), base256(u64::MAX)] {
        let archive = tar_header(b"x", b"0000644\0", &size, b"0\0", b'x', b"", true, b"");
        let step = crate::tar::list(&supply(
            &archive,
            &[crate::range(&supply(&archive, &[]), 0, 65536)],
        ));
        assert!(step.unwrap_err().contains("truncated"));
    }
}

/// A member whose size is near 2^64 saturated the next header's offset, and the next step
/// overflowed adding a block to it (a panic).
#[test]
fn a_member_size_near_2_64_ends_the_listing() {
    let mut archive = tar_header(
        b"big",
        b"0000644\0",
        &base256(u64::MAX - 100),
        b"0\0",
        b'0',
        b"",
        true,
        b"",
    );
    archive.extend([0u8; 1024]);
    let members = list("a.tar", &archive).expect("the member before the end is listed");
    assert_eq!(members[0].name, "big");
}
