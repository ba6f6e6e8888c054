//! Shared pieces of the property tests ("fuzzing") of roam's parsers of untrusted input
//! (issue 14: never a panic, never an allocation the input does not pay for):
//!
//! - [`config`]: the proptest configuration every such test uses. Cases come from
//!   `PROPTEST_CASES` (the CI default is small; `bench/fuzz.sh` raises it) and failures are
//!   not persisted: each bug found keeps a deterministic regression test beside its parser.
//! - [`CountingAlloc`] and [`bounded`]: a test binary installs the allocator, and a parse
//!   run under `bounded` fails if it ever held more than [`alloc_bound`] of its input.
//! - Generators of the hostile fields every format shares: [`name`], [`number`], and
//!   [`mutated`] documents (truncated, cut, repeated, spliced with noise).

use std::alloc::{GlobalAlloc, Layout, System};
use std::cell::Cell;

use proptest::prelude::*;
use proptest::sample::Index;
use proptest::test_runner::Config;

/// Cases per property when `PROPTEST_CASES` is unset: the whole fuzz set stays well under
/// 90 seconds of a debug `cargo test` on two cores.
pub const DEFAULT_CASES: u32 = 256;

/// The configuration of every fuzz property: `PROPTEST_CASES` or [`DEFAULT_CASES`], and no
/// regression files (a failure prints its minimal input, which becomes a unit test).
pub fn config() -> Config {
    let cases = std::env::var("PROPTEST_CASES")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(DEFAULT_CASES);
    Config {
        cases,
        failure_persistence: None,
        ..Config::default()
    }
}

/// A global allocator that counts the bytes each thread holds, so that one parse can be
/// measured while other tests of the same binary run on other threads.
pub struct CountingAlloc;

thread_local! {
    // `const` thread-locals without destructors: reading them never allocates.
    static LIVE: Cell<isize> = const { Cell::new(0) };
    static PEAK: Cell<isize> = const { Cell::new(0) };
}

fn account(delta: isize) {
    // `try_with`: a thread being torn down still frees memory.
    let _ = LIVE.try_with(|live| {
        let now = live.get() + delta;
        live.set(now);
        let _ = PEAK.try_with(|peak| peak.set(peak.get().max(now)));
    });
}

// SAFETY: every call is forwarded to `System` unchanged; only counters are updated.
unsafe impl GlobalAlloc for CountingAlloc {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        let p = unsafe { System.alloc(layout) };
        if !p.is_null() {
            account(layout.size() as isize);
        }
        p
    }

    unsafe fn alloc_zeroed(&self, layout: Layout) -> *mut u8 {
        let p = unsafe { System.alloc_zeroed(layout) };
        if !p.is_null() {
            account(layout.size() as isize);
        }
        p
    }

    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        unsafe { System.dealloc(ptr, layout) };
        account(-(layout.size() as isize));
    }

    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        let p = unsafe { System.realloc(ptr, layout, new_size) };
        if !p.is_null() {
            account(new_size as isize - layout.size() as isize);
        }
        p
    }
}

fn live() -> isize {
    LIVE.with(Cell::get)
}

/// Whether this binary counts allocations (it installed [`CountingAlloc`]): without it a
/// bound would pass vacuously.
fn counting() -> bool {
    let before = live();
    let probe = std::hint::black_box(Box::new([0u8; 64]));
    let counted = live() > before;
    drop(probe);
    counted
}

/// Runs `f` and returns its result with the most bytes this thread held at once beyond
/// what it held before.
pub fn peak_alloc<R>(f: impl FnOnce() -> R) -> (R, usize) {
    assert!(
        counting(),
        "the test binary must install roam_testkit::fuzz::CountingAlloc as #[global_allocator]"
    );
    let base = live();
    PEAK.with(|p| p.set(base));
    let out = f();
    let peak = PEAK.with(Cell::get) - base;
    (out, peak.max(0) as usize)
}

/// The most a parse of `input_len` bytes may hold: proportional to what it was given, never
/// to a length or count the input merely announces.
pub fn alloc_bound(input_len: usize) -> usize {
    64 * input_len + (1 << 20)
}

/// Runs the parse `f` of an `input_len`-byte input and fails if it allocated beyond
/// [`alloc_bound`].
pub fn bounded<R>(input_len: usize, f: impl FnOnce() -> R) -> R {
    let (out, peak) = peak_alloc(f);
    let bound = alloc_bound(input_len);
    assert!(
        peak <= bound,
        "parsing {input_len} bytes held {peak} bytes at once (bound {bound})"
    );
    out
}

/// A file name as a hostile or sloppy server might send it: ordinary ones most often (so
/// parsing goes on past them), then `.`, `..`, slashes, NUL, over-long, empty and odd Unicode.
pub fn name() -> impl Strategy<Value = String> {
    prop_oneof![
        4 => "[a-zA-Z0-9._-]{1,24}",
        1 => Just("..".to_string()),
        1 => Just(".".to_string()),
        1 => Just(String::new()),
        1 => "[a-z]{1,8}/[a-z./]{0,8}",
        1 => "\\.\\./[a-z./]{0,12}",
        1 => "[a-z]{0,4}\0[a-z]{0,4}",
        1 => "[a-z]{250,300}",
        1 => "[ \t]{0,2}[^\n]{0,16}[ \t]{0,2}",
        1 => any::<String>(),
    ]
}

/// A decimal field as a hostile server might fill it: any 64-bit value, one past it,
/// far past it, negative, empty, signed, hexadecimal or in exponent form.
pub fn number() -> impl Strategy<Value = String> {
    prop_oneof![
        3 => (0u64..100_000).prop_map(|n| n.to_string()),
        1 => any::<u64>().prop_map(|n| n.to_string()),
        1 => any::<i64>().prop_map(|n| n.to_string()),
        1 => Just("18446744073709551616".to_string()),
        1 => "[0-9]{20,40}",
        1 => Just("-0".to_string()),
        1 => Just(String::new()),
        1 => "[+-][0-9]{1,5}",
        1 => "0x[0-9a-f]{1,8}",
        1 => "[0-9]{1,3}[eE][0-9]{1,3}",
        1 => "[0-9 .,]{1,6}",
    ]
}

/// One change to a document.
#[derive(Clone, Debug)]
enum Mutation {
    /// Cut it short at a point (a connection closed mid-reply).
    Truncate(Index),
    /// Delete a span.
    Delete(Index, usize),
    /// Repeat a span in place.
    Repeat(Index, usize, usize),
    /// Insert noise at a point.
    Insert(Index, Vec<u8>),
    /// Overwrite one byte.
    Flip(Index, u8),
}

fn mutation() -> impl Strategy<Value = Mutation> {
    prop_oneof![
        any::<Index>().prop_map(Mutation::Truncate),
        (any::<Index>(), 1usize..64).prop_map(|(i, n)| Mutation::Delete(i, n)),
        (any::<Index>(), 1usize..64, 1usize..8).prop_map(|(i, n, k)| Mutation::Repeat(i, n, k)),
        (
            any::<Index>(),
            proptest::collection::vec(any::<u8>(), 1..16)
        )
            .prop_map(|(i, b)| Mutation::Insert(i, b)),
        (any::<Index>(), any::<u8>()).prop_map(|(i, b)| Mutation::Flip(i, b)),
    ]
}

fn apply(mut doc: Vec<u8>, m: &Mutation) -> Vec<u8> {
    let at = |i: &Index, len: usize| if len == 0 { 0 } else { i.index(len + 1) };
    let len = doc.len();
    match m {
        Mutation::Truncate(i) => doc.truncate(at(i, len)),
        Mutation::Delete(i, n) => {
            let start = at(i, len);
            doc.drain(start..(start + n).min(len));
        }
        Mutation::Repeat(i, n, k) => {
            let start = at(i, len);
            let span = doc[start..(start + n).min(len)].to_vec();
            for _ in 0..*k {
                doc.splice(start..start, span.iter().copied());
            }
        }
        Mutation::Insert(i, bytes) => {
            let start = at(i, len);
            doc.splice(start..start, bytes.iter().copied());
        }
        Mutation::Flip(i, b) => {
            if len > 0 {
                doc[i.index(len)] = *b;
            }
        }
    }
    doc
}

/// Documents of `valid` with up to three mutations each: near-valid input that gets past a
/// parser's first checks. One case in four is left intact.
pub fn mutated(valid: impl Strategy<Value = Vec<u8>>) -> impl Strategy<Value = Vec<u8>> {
    (valid, proptest::collection::vec(mutation(), 0..=3), 0u8..4).prop_map(
        |(doc, mutations, intact)| match intact {
            0 => doc,
            _ => mutations.iter().fold(doc, apply),
        },
    )
}

/// [`mutated`] for parsers of text: invalid UTF-8 is replaced, as a caller's lossy decode does.
pub fn mutated_text(valid: impl Strategy<Value = String>) -> impl Strategy<Value = String> {
    mutated(valid.prop_map(String::into_bytes))
        .prop_map(|b| String::from_utf8_lossy(&b).into_owned())
}
