//! Content ids: the BLAKE3 hash of an object's encoded bytes. Equal ids mean equal content,
//! which is what makes dedup, O(1) forks and subtree-pruning diffs possible.

use std::fmt;

use serde::{Deserialize, Deserializer, Serialize, Serializer};

/// A 32-byte BLAKE3 object id.
#[derive(Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct ObjectId(pub [u8; 32]);

impl ObjectId {
    /// Hash `bytes` into an id.
    pub fn of(bytes: &[u8]) -> Self {
        ObjectId(*blake3::hash(bytes).as_bytes())
    }

    pub fn from_slice(bytes: &[u8]) -> Option<Self> {
        <[u8; 32]>::try_from(bytes).ok().map(ObjectId)
    }

    pub fn to_hex(&self) -> String {
        hex::encode(self.0)
    }

    /// Parse the 64 hex digits `to_hex` writes.
    pub fn from_hex(text: &str) -> Option<Self> {
        Self::from_slice(&hex::decode(text).ok()?)
    }

    /// The first 12 hex digits, enough to tell ids apart in human output.
    pub fn short(&self) -> String {
        hex::encode(&self.0[..6])
    }
}

impl fmt::Debug for ObjectId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "ObjectId({})", self.short())
    }
}

impl fmt::Display for ObjectId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.to_hex())
    }
}

// Hex in JSON, raw bytes in the binary object encoding.
impl Serialize for ObjectId {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        if s.is_human_readable() {
            s.serialize_str(&self.to_hex())
        } else {
            self.0.serialize(s)
        }
    }
}

impl<'de> Deserialize<'de> for ObjectId {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        if d.is_human_readable() {
            let s = String::deserialize(d)?;
            let v = hex::decode(&s).map_err(serde::de::Error::custom)?;
            ObjectId::from_slice(&v)
                .ok_or_else(|| serde::de::Error::custom("object id must be 32 bytes"))
        } else {
            Ok(ObjectId(<[u8; 32]>::deserialize(d)?))
        }
    }
}
