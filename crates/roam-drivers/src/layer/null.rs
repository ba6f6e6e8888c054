//! `null:URL`: the layer that changes nothing (puffs' null layer). Over a local directory
//! (`null:/dir`) the files are the local ones, so frontends serve them in place.

use super::{Transform, Way};
use crate::Result;

/// The identity.
#[derive(Debug)]
pub struct Null;

impl Transform for Null {
    const TRANSPARENT: bool = true;

    fn scheme(&self) -> &str {
        "null"
    }

    fn name(&self, s: &str, _way: Way) -> Result<String> {
        Ok(s.to_owned())
    }

    fn bytes(&self, _bytes: &mut [u8], _offset: u64, _way: Way) -> Result<()> {
        Ok(())
    }
}
