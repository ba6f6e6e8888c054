//! `null:URL`: the layer that changes nothing (puffs' null layer). Over a local directory
//! (`null:/dir`) the files are the local ones, so frontends serve them in place.

use super::Transform;

/// The identity.
#[derive(Debug)]
pub struct Null;

impl Transform for Null {
    const NAME: &'static str = "null";
    const TRANSPARENT: bool = true;

    fn name(&self, s: &str) -> String {
        s.to_owned()
    }

    fn bytes(&self, _bytes: &mut [u8], _offset: u64) {}
}
