//! `rot13:URL`: names and contents with their letters rotated by 13 (puffs' rot13 layer);
//! applying it twice gives the original, so the same function reads and writes.

use super::{Transform, Way};
use crate::Result;

/// ROT13 on ASCII letters; every other byte (`/`, `.`, digits, UTF-8) is left alone.
#[derive(Debug)]
pub struct Rot13;

fn rot(b: u8) -> u8 {
    match b {
        b'a'..=b'z' => (b - b'a' + 13) % 26 + b'a',
        b'A'..=b'Z' => (b - b'A' + 13) % 26 + b'A',
        _ => b,
    }
}

impl Transform for Rot13 {
    const TRANSPARENT: bool = false;

    fn scheme(&self) -> &str {
        "rot13"
    }

    fn name(&self, s: &str, _way: Way) -> Result<String> {
        Ok(s.chars()
            .map(|c| {
                if c.is_ascii() {
                    rot(c as u8) as char
                } else {
                    c
                }
            })
            .collect())
    }

    fn bytes(&self, bytes: &mut [u8], _offset: u64, _way: Way) -> Result<()> {
        for b in bytes {
            *b = rot(*b);
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use super::*;
    use crate::layer::Stacked;
    use crate::mem::MemDriver;
    use crate::Driver;

    #[test]
    fn rotates_names_and_contents_both_ways() {
        assert_eq!(
            Rot13.name("/Hello/wörld.txt", Way::Encode).unwrap(),
            "/Uryyb/jöeyq.gkg"
        );
        let lower = Arc::new(MemDriver::new());
        let top = Stacked::new(Rot13, lower.clone());
        top.mkdir("/Dir", 0o755).unwrap();
        top.put("/Dir/a.txt", &mut &b"Hello, World"[..], 12)
            .unwrap();
        let mut raw = Vec::new();
        lower.fetch("/Qve/n.gkg", &mut raw, None).unwrap();
        assert_eq!(raw, b"Uryyb, Jbeyq");
        let mut back = Vec::new();
        top.fetch("/Dir/a.txt", &mut back, None).unwrap();
        assert_eq!(back, b"Hello, World");
        let names: Vec<String> = top
            .list("/")
            .unwrap()
            .entries
            .into_iter()
            .map(|e| e.name)
            .collect();
        assert_eq!(names, ["Dir"]);
    }
}
