//! MessagePack for the codec's own structures, on `rmp`: the contents of
//! its extension values (written byte-exactly, as the wire format
//! specifies), the walk over a received message that finds them, and the
//! token reader the Python SDK builds its values from.
//!
//! `rmp` is the one source of the format: [`Writer`] calls its encoders,
//! which write the smallest form (as msgpack-python does, so both SDKs
//! write identical bytes), and [`Reader`] classifies every byte with its
//! [`Marker`] table. What `rmp` does not offer is a zero-copy reader over a
//! slice that never trusts a length, so that part is here: every read is
//! bounds-checked against the input, and truncated or hostile bytes give
//! [`PayloadError::Malformed`], never a panic.
//!
//! Everything else in a payload (a Rust port's value) is written and read
//! by rmp-serde.

use rmp::Marker;

use super::PayloadError;

/// Appends MessagePack values to a `Vec<u8>`, always in the smallest form.
///
/// Lengths are `u32` on the wire; callers check that what they write fits
/// (see [`fits_u32`]). Public for language bindings, which write the same
/// format value by value (the Python SDK's serializer).
pub struct Writer<'a>(pub &'a mut Vec<u8>);

// rmp's encoders return `Result`s for writers that can fail; a `Vec` grows
// instead, so every result below is discarded.
impl Writer<'_> {
    pub fn nil(&mut self) {
        let _ = rmp::encode::write_nil(self.0);
    }

    pub fn uint(&mut self, v: u64) {
        let _ = rmp::encode::write_uint(self.0, v);
    }

    pub fn int(&mut self, v: i64) {
        let _ = rmp::encode::write_sint(self.0, v);
    }

    pub fn array_len(&mut self, len: u32) {
        let _ = rmp::encode::write_array_len(self.0, len);
    }

    pub fn map_len(&mut self, len: u32) {
        let _ = rmp::encode::write_map_len(self.0, len);
    }

    /// `s.len()` must fit in a `u32`.
    pub fn str(&mut self, s: &str) {
        let _ = rmp::encode::write_str(self.0, s);
    }

    /// `data.len()` must fit in a `u32`.
    pub fn bin(&mut self, data: &[u8]) {
        let _ = rmp::encode::write_bin(self.0, data);
    }

    /// The header of an extension value of `len` data bytes (which must fit
    /// in a `u32`); the data follows.
    pub fn ext_header(&mut self, ty: i8, len: usize) {
        let _ = rmp::encode::write_ext_meta(self.0, len as u32, ty);
    }
}

/// Whether a length can be written as a MessagePack str/bin/ext length.
pub fn fits_u32(len: usize) -> bool {
    u32::try_from(len).is_ok()
}

/// One MessagePack value as read: a scalar whole, a string's or binary's
/// bytes (borrowed, not validated), a container's length (its elements
/// follow), or an extension's type and data.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Token<'a> {
    Nil,
    Bool(bool),
    /// Every integer that fits an `i64` (all but `u64` above `i64::MAX`).
    Int(i64),
    /// An unsigned 64-bit integer above `i64::MAX`.
    Uint(u64),
    Float(f64),
    /// UTF-8 by the format's rules, not checked here.
    Str(&'a [u8]),
    Bin(&'a [u8]),
    Array(usize),
    /// `n` key/value pairs: `2n` values follow.
    Map(usize),
    Ext(i8, &'a [u8]),
}

/// One step of a walk over a MessagePack value tree: a leaf is consumed
/// whole; a container's elements follow it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Item<'a> {
    /// nil, bool, int, float, str or bin.
    Leaf,
    Array(u32),
    /// `n` key/value pairs: `2n` values follow.
    Map(u32),
    Ext(i8, &'a [u8]),
}

/// A bounds-checked cursor over MessagePack bytes.
pub struct Reader<'a> {
    buf: &'a [u8],
    pos: usize,
}

impl<'a> Reader<'a> {
    pub fn new(buf: &'a [u8]) -> Reader<'a> {
        Reader { buf, pos: 0 }
    }

    /// Bytes not read yet.
    pub fn remaining(&self) -> usize {
        self.buf.len() - self.pos
    }

    fn truncated(&self, what: &str) -> PayloadError {
        PayloadError::malformed(format!(
            "truncated: {what} at byte {} runs past the end ({} bytes)",
            self.pos,
            self.buf.len()
        ))
    }

    /// The next byte, not consumed.
    pub fn peek(&self) -> Option<u8> {
        self.buf.get(self.pos).copied()
    }

    fn byte(&mut self, what: &str) -> Result<u8, PayloadError> {
        let b = self.peek().ok_or_else(|| self.truncated(what))?;
        self.pos += 1;
        Ok(b)
    }

    /// The next `n` bytes.
    pub fn take(&mut self, n: usize, what: &str) -> Result<&'a [u8], PayloadError> {
        if n > self.remaining() {
            return Err(self.truncated(what));
        }
        let s = &self.buf[self.pos..self.pos + n];
        self.pos += n;
        Ok(s)
    }

    fn be<const N: usize>(&mut self, what: &str) -> Result<[u8; N], PayloadError> {
        let s = self.take(N, what)?;
        let mut a = [0u8; N];
        a.copy_from_slice(s);
        Ok(a)
    }

    fn len8(&mut self, what: &str) -> Result<usize, PayloadError> {
        Ok(usize::from(self.byte(what)?))
    }

    fn len16(&mut self, what: &str) -> Result<usize, PayloadError> {
        Ok(usize::from(u16::from_be_bytes(self.be(what)?)))
    }

    fn len32(&mut self, what: &str) -> Result<usize, PayloadError> {
        Ok(u32::from_be_bytes(self.be(what)?) as usize)
    }

    /// The next value's token; see [`Token`].
    pub fn token(&mut self) -> Result<Token<'a>, PayloadError> {
        const WHAT: &str = "a value";
        let m = self.byte(WHAT)?;
        Ok(match Marker::from_u8(m) {
            Marker::FixPos(v) => Token::Int(i64::from(v)),
            Marker::FixNeg(v) => Token::Int(i64::from(v)),
            Marker::FixMap(n) => Token::Map(usize::from(n)),
            Marker::FixArray(n) => Token::Array(usize::from(n)),
            Marker::FixStr(n) => Token::Str(self.take(usize::from(n), WHAT)?),
            Marker::Null => Token::Nil,
            Marker::False => Token::Bool(false),
            Marker::True => Token::Bool(true),
            Marker::Bin8 => {
                let n = self.len8(WHAT)?;
                Token::Bin(self.take(n, WHAT)?)
            }
            Marker::Bin16 => {
                let n = self.len16(WHAT)?;
                Token::Bin(self.take(n, WHAT)?)
            }
            Marker::Bin32 => {
                let n = self.len32(WHAT)?;
                Token::Bin(self.take(n, WHAT)?)
            }
            Marker::Str8 => {
                let n = self.len8(WHAT)?;
                Token::Str(self.take(n, WHAT)?)
            }
            Marker::Str16 => {
                let n = self.len16(WHAT)?;
                Token::Str(self.take(n, WHAT)?)
            }
            Marker::Str32 => {
                let n = self.len32(WHAT)?;
                Token::Str(self.take(n, WHAT)?)
            }
            Marker::F32 => Token::Float(f64::from(f32::from_be_bytes(self.be(WHAT)?))),
            Marker::F64 => Token::Float(f64::from_be_bytes(self.be(WHAT)?)),
            Marker::U8 => Token::Int(i64::from(self.byte(WHAT)?)),
            Marker::U16 => Token::Int(i64::from(u16::from_be_bytes(self.be(WHAT)?))),
            Marker::U32 => Token::Int(i64::from(u32::from_be_bytes(self.be(WHAT)?))),
            Marker::U64 => {
                let v = u64::from_be_bytes(self.be(WHAT)?);
                i64::try_from(v).map_or(Token::Uint(v), Token::Int)
            }
            Marker::I8 => Token::Int(i64::from(self.byte(WHAT)? as i8)),
            Marker::I16 => Token::Int(i64::from(i16::from_be_bytes(self.be(WHAT)?))),
            Marker::I32 => Token::Int(i64::from(i32::from_be_bytes(self.be(WHAT)?))),
            Marker::I64 => Token::Int(i64::from_be_bytes(self.be(WHAT)?)),
            Marker::Array16 => Token::Array(self.len16(WHAT)?),
            Marker::Array32 => Token::Array(self.len32(WHAT)?),
            Marker::Map16 => Token::Map(self.len16(WHAT)?),
            Marker::Map32 => Token::Map(self.len32(WHAT)?),
            Marker::FixExt1 => self.ext_data(1)?,
            Marker::FixExt2 => self.ext_data(2)?,
            Marker::FixExt4 => self.ext_data(4)?,
            Marker::FixExt8 => self.ext_data(8)?,
            Marker::FixExt16 => self.ext_data(16)?,
            Marker::Ext8 => {
                let n = self.len8("an extension")?;
                self.ext_data(n)?
            }
            Marker::Ext16 => {
                let n = self.len16("an extension")?;
                self.ext_data(n)?
            }
            Marker::Ext32 => {
                let n = self.len32("an extension")?;
                self.ext_data(n)?
            }
            Marker::Reserved => {
                return Err(PayloadError::malformed(format!(
                    "byte 0x{m:02x} at {} is not a MessagePack marker",
                    self.pos - 1
                )))
            }
        })
    }

    fn ext_data(&mut self, len: usize) -> Result<Token<'a>, PayloadError> {
        let ty = self.byte("an extension type")? as i8;
        Ok(Token::Ext(ty, self.take(len, "an extension's data")?))
    }

    /// The next token, which must be of the kind `what` names.
    fn expect<T>(&mut self, what: &str, want: impl FnOnce(Token<'a>) -> Option<T>) -> Result<T, PayloadError> {
        let at = self.pos;
        let token = self.token().map_err(|e| match e {
            PayloadError::Malformed { detail } if detail.starts_with("truncated") => self.truncated(what),
            other => other,
        })?;
        want(token).ok_or_else(|| {
            PayloadError::malformed(format!(
                "expected {what} at byte {at}, found MessagePack marker 0x{:02x}",
                self.buf[at]
            ))
        })
    }

    /// Consumes a nil if one is next.
    pub fn nil(&mut self) -> bool {
        if self.peek() == Some(0xc0) {
            self.pos += 1;
            true
        } else {
            false
        }
    }

    /// A non-negative integer (in any integer encoding).
    pub fn uint(&mut self, what: &str) -> Result<u64, PayloadError> {
        match self.expect(what, |t| match t {
            Token::Int(i) => Some(Err(i)),
            Token::Uint(u) => Some(Ok(u)),
            _ => None,
        })? {
            Ok(u) => Ok(u),
            Err(i) => u64::try_from(i)
                .map_err(|_| PayloadError::malformed(format!("{what} is {i}, expected a non-negative integer"))),
        }
    }

    pub fn int(&mut self, what: &str) -> Result<i64, PayloadError> {
        match self.expect(what, |t| match t {
            Token::Int(i) => Some(Ok(i)),
            Token::Uint(u) => Some(Err(u)),
            _ => None,
        })? {
            Ok(i) => Ok(i),
            Err(u) => Err(PayloadError::malformed(format!("{what} is {u}, out of the 64-bit signed range"))),
        }
    }

    pub fn array_len(&mut self, what: &str) -> Result<usize, PayloadError> {
        self.expect(what, |t| if let Token::Array(n) = t { Some(n) } else { None })
    }

    pub fn str(&mut self, what: &str) -> Result<&'a str, PayloadError> {
        let bytes = self.expect(what, |t| if let Token::Str(b) = t { Some(b) } else { None })?;
        std::str::from_utf8(bytes).map_err(|_| PayloadError::malformed(format!("{what} is not valid UTF-8")))
    }

    pub fn bin(&mut self, what: &str) -> Result<&'a [u8], PayloadError> {
        self.expect(what, |t| if let Token::Bin(b) = t { Some(b) } else { None })
    }

    /// The next value's header; see [`Item`].
    pub(crate) fn item(&mut self) -> Result<Item<'a>, PayloadError> {
        Ok(match self.token()? {
            Token::Array(n) => Item::Array(n as u32),
            Token::Map(n) => Item::Map(n as u32),
            Token::Ext(ty, data) => Item::Ext(ty, data),
            Token::Nil
            | Token::Bool(_)
            | Token::Int(_)
            | Token::Uint(_)
            | Token::Float(_)
            | Token::Str(_)
            | Token::Bin(_) => Item::Leaf,
        })
    }

    /// Reads a whole extension value as the next value, if it is one.
    pub fn ext(&mut self) -> Result<Option<(i8, &'a [u8])>, PayloadError> {
        let start = self.pos;
        match self.token()? {
            Token::Ext(ty, data) => Ok(Some((ty, data))),
            _ => {
                self.pos = start;
                Ok(None)
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn written(f: impl FnOnce(&mut Writer)) -> Vec<u8> {
        let mut v = Vec::new();
        f(&mut Writer(&mut v));
        v
    }

    #[test]
    fn writes_the_smallest_forms_as_rmp_does() {
        for v in [0u64, 1, 127, 128, 255, 256, 65535, 65536, u32::MAX as u64, u32::MAX as u64 + 1, u64::MAX] {
            let mut expected = Vec::new();
            rmp::encode::write_uint(&mut expected, v).unwrap();
            assert_eq!(written(|w| w.uint(v)), expected, "{v}");
            assert_eq!(Reader::new(&expected).uint("v").unwrap(), v);
        }
        for v in [
            0i64,
            -1,
            -32,
            -33,
            -128,
            -129,
            -32768,
            -32769,
            i32::MIN as i64,
            i32::MIN as i64 - 1,
            i64::MIN,
            5,
            i64::MAX,
        ] {
            let mut expected = Vec::new();
            rmp::encode::write_sint(&mut expected, v).unwrap();
            assert_eq!(written(|w| w.int(v)), expected, "{v}");
            assert_eq!(Reader::new(&expected).int("v").unwrap(), v);
        }
        for len in [0usize, 15, 16, 65535, 65536] {
            let mut expected = Vec::new();
            rmp::encode::write_array_len(&mut expected, len as u32).unwrap();
            assert_eq!(written(|w| w.array_len(len as u32)), expected, "{len}");
        }
        for len in [0usize, 31, 32, 255, 256, 65536] {
            let s = "x".repeat(len);
            let mut expected = Vec::new();
            rmp::encode::write_str(&mut expected, &s).unwrap();
            assert_eq!(written(|w| w.str(&s)), expected, "{len}");
            assert_eq!(Reader::new(&expected).str("s").unwrap(), s);
            let b = vec![7u8; len];
            let mut expected = Vec::new();
            rmp::encode::write_bin(&mut expected, &b).unwrap();
            assert_eq!(written(|w| w.bin(&b)), expected, "{len}");
            assert_eq!(Reader::new(&expected).bin("b").unwrap(), &b[..]);
        }
        for len in [0usize, 1, 2, 3, 4, 8, 16, 17, 255, 256, 65536] {
            let mut expected = Vec::new();
            rmp::encode::write_ext_meta(&mut expected, len as u32, 5).unwrap();
            assert_eq!(written(|w| w.ext_header(5, len)), expected, "{len}");
        }
    }

    #[test]
    fn walks_every_marker_and_refuses_truncation() {
        #[derive(serde::Serialize)]
        struct All {
            a: Option<u8>,
            b: bool,
            c: Vec<i64>,
            d: f32,
            e: f64,
            f: String,
            #[serde(with = "serde_bytes")]
            g: Vec<u8>,
            h: std::collections::BTreeMap<String, u16>,
        }
        let v = All {
            a: None,
            b: true,
            c: vec![0, -1, -100, 300, -70000, 1 << 40, -(1 << 40)],
            d: 1.5,
            e: 2.5,
            f: "x".repeat(40),
            g: vec![1; 300],
            h: [("k".into(), 65535)].into(),
        };
        let bytes = rmp_serde::to_vec_named(&v).unwrap();
        // Walk it whole: every value is consumed exactly.
        let mut r = Reader::new(&bytes);
        let mut pending = 1u64;
        while pending > 0 {
            pending -= 1;
            match r.item().unwrap() {
                Item::Leaf => {}
                Item::Array(n) => pending += u64::from(n),
                Item::Map(n) => pending += 2 * u64::from(n),
                Item::Ext(..) => panic!("no ext here"),
            }
        }
        assert_eq!(r.remaining(), 0);
        // Every strict prefix runs out somewhere, with an error, not a panic.
        for cut in 0..bytes.len() {
            let mut r = Reader::new(&bytes[..cut]);
            let mut pending = 1u64;
            let mut failed = false;
            while pending > 0 {
                pending -= 1;
                match r.item() {
                    Ok(Item::Array(n)) => pending += u64::from(n),
                    Ok(Item::Map(n)) => pending += 2 * u64::from(n),
                    Ok(_) => {}
                    Err(e) => {
                        assert!(matches!(e, PayloadError::Malformed { .. }));
                        failed = true;
                        break;
                    }
                }
            }
            assert!(failed, "prefix of {cut} bytes was read as complete");
        }
    }
}
