//! The wire format shared by roam and its extensions.
//!
//! Every invocation of an extension is a pure function: roam encodes a [`Request`], the
//! extension answers one [`Reply`], and nothing else survives the call (Sprockets' transaction
//! that is always rolled back). Kinds that need file data converse: the extension answers
//! [`Reply::Need`] with the byte ranges it wants and roam calls it again with those ranges
//! supplied in [`Files`], until it answers a final reply. The same encoding is used by every
//! technology (wasm, fork, worker, native), so an extension is one Rust source built twice.
//!
//! This crate has no dependencies so that it builds for `wasm32-wasip1` inside extensions.

mod msg;
mod wire;

pub mod guest;

pub use msg::{
    Candidate, Chunk, Edit, Files, FrameOp, LayerOp, Member, MemberKind, Range, Reply, Request,
    SourceEntry, SourceFile, Span, SpanData,
};
pub use wire::DecodeError;

/// Bytes of the little-endian length that prefixes the result buffer an extension returns.
pub const LEN_PREFIX: usize = 4;
