//! Property tests of the extension wire codec, which roam decodes from extensions it does
//! not trust and extensions decode from roam: arbitrary bytes and mutated encodings of
//! valid messages (lengths and counts that lie, truncations, unknown tags) decode to a
//! message or an error, never a panic nor an allocation beyond the buffer's size; whatever
//! decodes is canonical: it encodes back to the very bytes (issue 14).

use proptest::prelude::*;
use roam_ext_abi::{
    Candidate, Chunk, Edit, Files, LayerOp, Member, MemberKind, Range, Reply, Request,
};
use roam_testkit::fuzz::{bounded, config, mutated, CountingAlloc};

#[global_allocator]
static ALLOC: CountingAlloc = CountingAlloc;

fn bytes() -> impl Strategy<Value = Vec<u8>> {
    proptest::collection::vec(any::<u8>(), 0..32)
}

fn text() -> impl Strategy<Value = String> {
    "[a-z./]{0,12}"
}

fn range() -> impl Strategy<Value = Range> {
    (any::<u8>(), any::<u64>(), any::<u32>()).prop_map(|(file, off, len)| Range { file, off, len })
}

fn files() -> impl Strategy<Value = Files> {
    let chunk = (any::<u8>(), any::<u64>(), bytes()).prop_map(|(file, off, data)| Chunk {
        file,
        off,
        data,
    });
    (
        proptest::collection::vec(any::<u64>(), 0..4),
        proptest::collection::vec(chunk, 0..4),
    )
        .prop_map(|(sizes, chunks)| Files { sizes, chunks })
}

fn member() -> impl Strategy<Value = Member> {
    let kind = prop_oneof![
        Just(MemberKind::File),
        Just(MemberKind::Dir),
        Just(MemberKind::Symlink)
    ];
    (
        text(),
        kind,
        any::<u64>(),
        any::<u32>(),
        any::<u64>(),
        text(),
        any::<u64>(),
        any::<u16>(),
    )
        .prop_map(
            |(name, kind, size, mode, mtime, target, at, method)| Member {
                name,
                kind,
                size,
                mode,
                mtime,
                target,
                at,
                method,
            },
        )
}

fn request() -> impl Strategy<Value = Request> {
    let op = prop_oneof![
        Just(LayerOp::Decode),
        Just(LayerOp::Encode),
        Just(LayerOp::DecodeName),
        Just(LayerOp::EncodeName)
    ];
    let candidate =
        (text(), any::<u64>(), any::<u64>()).prop_map(|(name, size, last_use)| Candidate {
            name,
            size,
            last_use,
        });
    prop_oneof![
        (
            text(),
            proptest::collection::vec((text(), text()), 0..4),
            files()
        )
            .prop_map(|(name, args, files)| Request::Query { name, args, files }),
        (text(), files()).prop_map(|(name, files)| Request::Resolve { name, files }),
        (op, any::<u64>(), bytes()).prop_map(|(op, off, data)| Request::Layer { op, off, data }),
        (
            proptest::collection::vec(text(), 0..4),
            proptest::collection::vec(candidate, 0..4)
        )
            .prop_map(|(args, candidates)| Request::Policy { args, candidates }),
        (text(), bytes()).prop_map(|(op, data)| Request::Compute { op, data }),
        (text(), bytes(), files()).prop_map(|(name, state, files)| Request::ArchiveList {
            name,
            state,
            files
        }),
        (text(), any::<u64>(), any::<u16>(), any::<u64>(), files()).prop_map(
            |(name, at, method, size, files)| Request::ArchiveExtract {
                name,
                at,
                method,
                size,
                files
            }
        ),
    ]
}

fn reply() -> impl Strategy<Value = Reply> {
    let edit =
        (any::<u64>(), any::<u64>(), bytes()).prop_map(|(off, del, ins)| Edit { off, del, ins });
    prop_oneof![
        proptest::collection::vec(range(), 0..4).prop_map(Reply::Need),
        any::<bool>().prop_map(Reply::Match),
        proptest::collection::vec(edit, 0..4).prop_map(Reply::Patch),
        bytes().prop_map(Reply::Bytes),
        any::<u32>().prop_map(Reply::Victim),
        text().prop_map(Reply::Fail),
        (
            proptest::collection::vec(member(), 0..4),
            bytes(),
            proptest::collection::vec(range(), 0..4)
        )
            .prop_map(|(members, state, need)| Reply::Members {
                members,
                state,
                need
            }),
        (any::<u64>(), any::<u64>()).prop_map(|(off, len)| Reply::Extent { off, len }),
    ]
}

/// Decodes `buf` both ways; what decodes must encode back to `buf`.
fn check(buf: &[u8]) {
    if let Ok(req) = bounded(buf.len(), || Request::decode(buf)) {
        assert_eq!(req.encode(), buf, "{req:?} is not canonical");
    }
    if let Ok(reply) = bounded(buf.len(), || Reply::decode(buf)) {
        assert_eq!(reply.encode(), buf, "{reply:?} is not canonical");
    }
}

proptest! {
    #![proptest_config(config())]

    #[test]
    fn any_bytes_decode_safely(buf in proptest::collection::vec(any::<u8>(), 0..512)) {
        check(&buf);
    }

    #[test]
    fn mutated_requests_decode_safely(buf in mutated(request().prop_map(|r| r.encode()))) {
        check(&buf);
    }

    #[test]
    fn mutated_replies_decode_safely(buf in mutated(reply().prop_map(|r| r.encode()))) {
        check(&buf);
    }

    #[test]
    fn messages_round_trip(req in request(), reply in reply()) {
        prop_assert_eq!(Request::decode(&req.encode()), Ok(req));
        prop_assert_eq!(Reply::decode(&reply.encode()), Ok(reply));
    }

    /// Counts that announce more items than the buffer holds are refused before any
    /// reservation: every count field set to a huge value.
    #[test]
    fn lying_counts_reserve_nothing(reply in reply(), count in prop_oneof![Just(u32::MAX), any::<u32>()], at in any::<proptest::sample::Index>()) {
        let mut buf = reply.encode();
        if buf.len() > 5 {
            let i = 1 + at.index(buf.len() - 4);
            buf[i..i + 4].copy_from_slice(&count.to_le_bytes());
            check(&buf);
        }
    }
}
