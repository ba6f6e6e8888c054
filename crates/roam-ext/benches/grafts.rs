//! The grafts of codec mounts and read-ahead, per technology, as markdown tables: one
//! 64 KiB frame encoded and decoded by the `zlib` and `seal` codec extensions (what a
//! `codec:NAME:URL` mount pays per frame), and one decision of the `stride` read-ahead
//! policy over a history of 8 reads. Run with `cargo bench -p roam-ext --bench grafts`
//! (release build).

mod common;

use common::per_call;
use roam_ext::codec::{self, Frame};
use roam_ext::{readahead, Extension, Limits, Technology};
use std::time::Duration;

const FRAME: usize = 64 << 10;

fn load(name: &str, tech: Technology) -> Extension {
    let dir = roam_testkit::ext::extensions();
    Extension::load(&dir, name, tech, Limits::default()).expect("load extension")
}

fn us(d: Duration) -> String {
    format!("{:.1}", d.as_secs_f64() * 1e6)
}

/// A frame of text with every fifth byte random (compresses ~3:1, as logs do).
fn plaintext() -> Vec<u8> {
    let text = b"roam plaintext: the quick brown fox jumps over the lazy dog\n";
    let random = roam_testkit::noise(FRAME, 3);
    (0..FRAME)
        .map(|i| {
            if i % 5 == 0 {
                random[i]
            } else {
                text[i % text.len()]
            }
        })
        .collect()
}

fn codecs() {
    println!("\n### A 64 KiB frame through a codec extension (`codec:NAME:URL`)\n");
    println!("| codec | technology | encode µs | decode µs | decode MB/s |");
    println!("|---|---|---:|---:|---:|");
    let plain = plaintext();
    let header = [7u8; 48];
    let key = [9u8; 32];
    for name in ["zlib", "seal"] {
        for tech in Technology::all() {
            let ext = load(name, tech);
            let info = codec::describe(&ext).expect("describe");
            let at = Frame {
                header: &header,
                n: 0,
                last: true,
                key: if info.key { &key } else { &[] },
            };
            let n = if tech == Technology::Fork { 20 } else { 100 };
            let stored = codec::encode(&ext, &at, &plain).expect("encode");
            let enc = per_call(n, 5, || {
                codec::encode(&ext, &at, &plain).expect("encode");
            });
            let dec = per_call(n, 5, || {
                codec::decode(&ext, &at, &stored, FRAME).expect("decode");
            });
            let mbs = FRAME as f64 / dec.as_secs_f64() / 1e6;
            println!("| {name} | {tech} | {} | {} | {mbs:.0} |", us(enc), us(dec));
        }
    }
}

fn stride() {
    println!("\n### A read-ahead decision (`stride`, 8 reads of history)\n");
    println!("| technology | µs per decision |");
    println!("|---|---:|");
    let history: Vec<(u64, u64)> = (0..8).map(|i| (i << 22, 65536)).collect();
    for tech in Technology::all() {
        let ext = load("stride", tech);
        let args = ["ahead=4".to_string()];
        let n = if tech == Technology::Fork { 50 } else { 1000 };
        let d = per_call(n, 5, || {
            let got = readahead::advise(&ext, &args, 1 << 30, 1 << 20, &history).expect("advise");
            assert_eq!(got.len(), 4);
        });
        println!("| {tech} | {} |", us(d));
    }
}

fn main() {
    codecs();
    stride();
}
