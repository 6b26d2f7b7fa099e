//! Object ids: 20 opaque bytes, as in Plasma, shown as 40 hex digits.

use std::fmt;
use std::str::FromStr;

/// The name of an object in the store: 20 bytes chosen by the creator.
///
/// Random ids ([`ObjectId::random`]) never collide in practice; callers that
/// need reproducible names derive them from their own data with
/// [`ObjectId::from_bytes`].
#[derive(Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct ObjectId(pub [u8; ObjectId::LEN]);

impl ObjectId {
    /// Length of an id in bytes.
    pub const LEN: usize = 20;

    /// A fresh id from the operating system's random source.
    pub fn random() -> ObjectId {
        let mut bytes = [0u8; Self::LEN];
        // getrandom only fails when the kernel has no entropy source at all
        // (no getrandom(2), no /dev/urandom): not a state a process can run in.
        getrandom::fill(&mut bytes).expect("the OS random source is unavailable");
        ObjectId(bytes)
    }

    /// An id made of exactly these bytes.
    pub const fn from_bytes(bytes: [u8; Self::LEN]) -> ObjectId {
        ObjectId(bytes)
    }

    /// The id's bytes.
    pub const fn as_bytes(&self) -> &[u8; Self::LEN] {
        &self.0
    }
}

impl fmt::Display for ObjectId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        for b in self.0 {
            write!(f, "{b:02x}")?;
        }
        Ok(())
    }
}

impl fmt::Debug for ObjectId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "ObjectId({self})")
    }
}

/// The text was not 40 hex digits.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("`{text}` is not an object id: expected {} hex digits", ObjectId::LEN * 2)]
pub struct ParseObjectIdError {
    text: String,
}

impl FromStr for ObjectId {
    type Err = ParseObjectIdError;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        let err = || ParseObjectIdError { text: s.to_owned() };
        let s_bytes = s.as_bytes();
        if s_bytes.len() != Self::LEN * 2 {
            return Err(err());
        }
        let mut out = [0u8; Self::LEN];
        for (i, pair) in s_bytes.chunks_exact(2).enumerate() {
            let hi = (pair[0] as char).to_digit(16).ok_or_else(err)?;
            let lo = (pair[1] as char).to_digit(16).ok_or_else(err)?;
            out[i] = (hi * 16 + lo) as u8;
        }
        Ok(ObjectId(out))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn hex_round_trip() {
        let id = ObjectId::random();
        let text = id.to_string();
        assert_eq!(text.len(), 40);
        assert_eq!(text.parse::<ObjectId>().unwrap(), id);
    }

    #[test]
    fn rejects_bad_text() {
        assert!("abc".parse::<ObjectId>().is_err());
        assert!("zz".repeat(20).parse::<ObjectId>().is_err());
    }

    #[test]
    fn random_ids_differ() {
        assert_ne!(ObjectId::random(), ObjectId::random());
    }
}
