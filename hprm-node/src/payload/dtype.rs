//! Element types of buffers: [`Dtype`], numpy's dtype string, and
//! [`Element`], the Rust types with a fixed dtype.
//!
//! Python federates describe arrays by `dtype.str` (`<f4`, `|u1`, ...), so
//! the wire format does too: a Rust node can receive any plain numpy dtype
//! (complex, datetime, fixed-width strings) as bytes, and read the ones that
//! have an [`Element`] type as typed slices.

use std::fmt;
use std::hash::{Hash, Hasher};
use std::str::FromStr;
use std::sync::Arc;

use serde::de::DeserializeOwned;
use serde::{Deserialize, Deserializer, Serialize, Serializer};

use super::PayloadError;

/// The byte-order character of multi-byte types on this machine.
const NATIVE: char = if cfg!(target_endian = "little") { '<' } else { '>' };

/// `native!("f4")`: the dtype string of a multi-byte type in native order.
macro_rules! native {
    ($kind_size:literal) => {
        if cfg!(target_endian = "little") {
            concat!("<", $kind_size)
        } else {
            concat!(">", $kind_size)
        }
    };
}

/// A numpy-style dtype string: byte order (`<` little, `>` big, `|` not
/// applicable), kind (`b` bool, `i` signed, `u` unsigned, `f` float, `c`
/// complex, `m`/`M` timedelta/datetime with an optional `[unit]`, `S`
/// bytes, `U` UCS-4 text, `V` raw) and item size in bytes (characters for
/// `U`), e.g. `<f4`, `|u1`, `<M8[ns]`.
///
/// Parsed dtypes are normalized the way numpy writes them (`=` becomes the
/// native order; one-byte and byte-string kinds get `|`), so equal types
/// compare equal. Object dtypes (`O`) are refused: Python pickles those.
/// Cloning is cheap.
#[derive(Clone)]
pub struct Dtype {
    text: Text,
    itemsize: usize,
}

#[derive(Clone)]
enum Text {
    Static(&'static str),
    Shared(Arc<str>),
}

impl Dtype {
    pub const BOOL: Dtype = Dtype::fixed("|b1", 1);
    pub const U8: Dtype = Dtype::fixed("|u1", 1);
    pub const I8: Dtype = Dtype::fixed("|i1", 1);
    pub const U16: Dtype = Dtype::fixed(native!("u2"), 2);
    pub const I16: Dtype = Dtype::fixed(native!("i2"), 2);
    pub const U32: Dtype = Dtype::fixed(native!("u4"), 4);
    pub const I32: Dtype = Dtype::fixed(native!("i4"), 4);
    pub const U64: Dtype = Dtype::fixed(native!("u8"), 8);
    pub const I64: Dtype = Dtype::fixed(native!("i8"), 8);
    pub const F16: Dtype = Dtype::fixed(native!("f2"), 2);
    pub const F32: Dtype = Dtype::fixed(native!("f4"), 4);
    pub const F64: Dtype = Dtype::fixed(native!("f8"), 8);

    /// Every constant, so that parsing a common dtype allocates nothing.
    const KNOWN: [Dtype; 12] = [
        Dtype::BOOL,
        Dtype::U8,
        Dtype::I8,
        Dtype::U16,
        Dtype::I16,
        Dtype::U32,
        Dtype::I32,
        Dtype::U64,
        Dtype::I64,
        Dtype::F16,
        Dtype::F32,
        Dtype::F64,
    ];

    /// Longest dtype string accepted (`<M8[ns]` is 7; this leaves room for
    /// any unit and size, and bounds what a hostile sender can make us keep).
    const MAX_LEN: usize = 32;

    const fn fixed(text: &'static str, itemsize: usize) -> Dtype {
        Dtype { text: Text::Static(text), itemsize }
    }

    /// Parses and normalizes a dtype string (see the type's docs).
    pub fn parse(text: &str) -> Result<Dtype, PayloadError> {
        let bad = || PayloadError::Dtype { text: text.chars().take(Self::MAX_LEN).collect() };
        if text.len() > Self::MAX_LEN || !text.is_ascii() {
            return Err(bad());
        }
        let mut chars = text.chars();
        let order = chars.next().ok_or_else(bad)?;
        let kind = chars.next().ok_or_else(bad)?;
        let rest = chars.as_str();
        let (digits, unit) = match rest.find('[') {
            Some(i) => (&rest[..i], &rest[i..]),
            None => (rest, ""),
        };
        if digits.is_empty() || !digits.bytes().all(|b| b.is_ascii_digit()) {
            return Err(bad());
        }
        let size: usize = digits.parse().map_err(|_| bad())?;
        if size == 0 {
            return Err(bad());
        }
        if !unit.is_empty() {
            let inner = unit.strip_prefix('[').and_then(|u| u.strip_suffix(']')).ok_or_else(bad)?;
            let unit_ok = !inner.is_empty() && inner.bytes().all(|b| b.is_ascii_alphanumeric());
            if !matches!(kind, 'm' | 'M') || !unit_ok {
                return Err(bad());
            }
        }
        let itemsize = match kind {
            'U' => size.checked_mul(4).ok_or_else(bad)?,
            'b' | 'i' | 'u' | 'f' | 'c' | 'm' | 'M' | 'S' | 'V' => size,
            _ => return Err(bad()),
        };
        // Byte order matters only for multi-byte numbers and UCS-4 text;
        // numpy writes `|` for everything else.
        let orderless = matches!(kind, 'b' | 'S' | 'V') || (matches!(kind, 'i' | 'u') && size == 1);
        let order = match order {
            _ if orderless && matches!(order, '<' | '>' | '|' | '=') => '|',
            '<' | '>' => order,
            '=' => NATIVE,
            _ => return Err(bad()),
        };
        let normalized = format!("{order}{kind}{digits}{unit}");
        if let Some(known) = Self::KNOWN.iter().find(|d| d.as_str() == normalized) {
            return Ok(known.clone());
        }
        Ok(Dtype { text: Text::Shared(normalized.into()), itemsize })
    }

    /// The dtype string, as numpy's `dtype.str`.
    pub fn as_str(&self) -> &str {
        match &self.text {
            Text::Static(s) => s,
            Text::Shared(s) => s,
        }
    }

    /// Bytes per element.
    pub fn itemsize(&self) -> usize {
        self.itemsize
    }
}

impl PartialEq for Dtype {
    fn eq(&self, other: &Dtype) -> bool {
        self.as_str() == other.as_str()
    }
}

impl Eq for Dtype {}

impl Hash for Dtype {
    fn hash<H: Hasher>(&self, state: &mut H) {
        self.as_str().hash(state);
    }
}

impl fmt::Display for Dtype {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

impl fmt::Debug for Dtype {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "Dtype({})", self.as_str())
    }
}

impl FromStr for Dtype {
    type Err = PayloadError;

    fn from_str(s: &str) -> Result<Dtype, PayloadError> {
        Dtype::parse(s)
    }
}

/// As its string, e.g. in configuration files.
impl Serialize for Dtype {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(self.as_str())
    }
}

impl<'de> Deserialize<'de> for Dtype {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Dtype, D::Error> {
        let text = <std::borrow::Cow<'de, str>>::deserialize(d)?;
        Dtype::parse(&text).map_err(serde::de::Error::custom)
    }
}

mod sealed {
    pub trait Sealed {}
}

/// A Rust type whose values are buffer elements of a fixed [`Dtype`].
///
/// Sealed: the dtype and the Rust layout must agree byte for byte (that is
/// what makes [`super::Buffer::as_slice`] a plain cast), so the set is
/// closed: `u8 i8 u16 i16 u32 i32 u64 i64 f32 f64`, in native byte order.
pub trait Element: bytemuck::Pod + Serialize + DeserializeOwned + Send + Sync + sealed::Sealed {
    /// The dtype of a buffer of these.
    const DTYPE: Dtype;
}

macro_rules! elements {
    ($($t:ty => $d:ident),* $(,)?) => {$(
        impl sealed::Sealed for $t {}
        impl Element for $t {
            const DTYPE: Dtype = Dtype::$d;
        }
    )*};
}

elements!(u8 => U8, i8 => I8, u16 => U16, i16 => I16, u32 => U32, i32 => I32, u64 => U64, i64 => I64, f32 => F32, f64 => F64);

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn constants_match_their_rust_types() {
        fn check<T: Element>() {
            assert_eq!(T::DTYPE.itemsize(), std::mem::size_of::<T>(), "{}", T::DTYPE);
            assert_eq!(Dtype::parse(T::DTYPE.as_str()).unwrap(), T::DTYPE);
        }
        check::<u8>();
        check::<i8>();
        check::<u16>();
        check::<i16>();
        check::<u32>();
        check::<i32>();
        check::<u64>();
        check::<i64>();
        check::<f32>();
        check::<f64>();
        if cfg!(target_endian = "little") {
            assert_eq!(Dtype::F32.as_str(), "<f4");
        }
    }

    #[test]
    fn parses_and_normalizes_numpy_strings() {
        let cases = [
            ("<f8", "<f8", 8),
            ("|u1", "|u1", 1),
            ("<u1", "|u1", 1),
            ("|b1", "|b1", 1),
            (">i4", ">i4", 4),
            ("<c16", "<c16", 16),
            ("<M8[ns]", "<M8[ns]", 8),
            ("<m8", "<m8", 8),
            ("|S10", "|S10", 10),
            ("<U3", "<U3", 12),
            ("|V16", "|V16", 16),
        ];
        for (text, normal, size) in cases {
            let d = Dtype::parse(text).unwrap_or_else(|e| panic!("{text}: {e}"));
            assert_eq!(d.as_str(), normal);
            assert_eq!(d.itemsize(), size, "{text}");
        }
        assert_eq!(Dtype::parse("=f4").unwrap().as_str(), format!("{NATIVE}f4"));
    }

    #[test]
    fn refuses_what_is_not_a_plain_dtype() {
        for text in [
            "",
            "<",
            "<f",
            "f4",
            "|f4",
            "<O8",
            "|O",
            "<f0",
            "<i4[ns]",
            "<M8[",
            "<M8[]",
            "<x4",
            "<f4 ",
            "<f99999999999999999999",
            "<é4",
        ] {
            let e = Dtype::parse(text).expect_err(text);
            assert!(matches!(e, PayloadError::Dtype { .. }), "{text}: {e}");
            assert!(e.to_string().contains("dtype"), "{e}");
        }
    }
}
