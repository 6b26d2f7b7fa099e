//! Just enough MessagePack, by hand, for the codec's own structures: the
//! contents of its extension values (written byte-exactly, as the wire
//! format specifies) and the walk over a received message that finds them.
//!
//! Everything else in a payload is written and read by rmp-serde. Reading
//! never panics and never trusts a length: every read is bounds-checked
//! against the input, so truncated or hostile bytes give
//! [`PayloadError::Malformed`].

use super::PayloadError;

/// Appends MessagePack values to a `Vec<u8>`, always in the smallest form
/// (as msgpack-python does, so both SDKs write identical bytes).
///
/// Lengths are `u32` on the wire; callers check that what they write fits
/// (see [`fits_u32`]). Public for language bindings, which write the same
/// format by hand (the Python SDK's serializer).
pub struct Writer<'a>(pub &'a mut Vec<u8>);

impl Writer<'_> {
    pub fn nil(&mut self) {
        self.0.push(0xc0);
    }

    pub fn uint(&mut self, v: u64) {
        let out = &mut *self.0;
        match v {
            0..=0x7f => out.push(v as u8),
            0x80..=0xff => out.extend_from_slice(&[0xcc, v as u8]),
            0x100..=0xffff => {
                out.push(0xcd);
                out.extend_from_slice(&(v as u16).to_be_bytes());
            }
            0x1_0000..=0xffff_ffff => {
                out.push(0xce);
                out.extend_from_slice(&(v as u32).to_be_bytes());
            }
            _ => {
                out.push(0xcf);
                out.extend_from_slice(&v.to_be_bytes());
            }
        }
    }

    pub fn int(&mut self, v: i64) {
        if v >= 0 {
            return self.uint(v as u64);
        }
        let out = &mut *self.0;
        if v >= -32 {
            out.push(v as i8 as u8);
        } else if v >= i64::from(i8::MIN) {
            out.extend_from_slice(&[0xd0, v as i8 as u8]);
        } else if v >= i64::from(i16::MIN) {
            out.push(0xd1);
            out.extend_from_slice(&(v as i16).to_be_bytes());
        } else if v >= i64::from(i32::MIN) {
            out.push(0xd2);
            out.extend_from_slice(&(v as i32).to_be_bytes());
        } else {
            out.push(0xd3);
            out.extend_from_slice(&v.to_be_bytes());
        }
    }

    pub fn array_len(&mut self, len: u32) {
        self.container_len(len, [0x90, 0xdc, 0xdd]);
    }

    pub fn map_len(&mut self, len: u32) {
        self.container_len(len, [0x80, 0xde, 0xdf]);
    }

    /// A container header: `markers` are the fix, 16-bit and 32-bit forms.
    fn container_len(&mut self, len: u32, [fix, m16, m32]: [u8; 3]) {
        let out = &mut *self.0;
        match len {
            0..=15 => out.push(fix | len as u8),
            16..=0xffff => {
                out.push(m16);
                out.extend_from_slice(&(len as u16).to_be_bytes());
            }
            _ => {
                out.push(m32);
                out.extend_from_slice(&len.to_be_bytes());
            }
        }
    }

    pub fn str(&mut self, s: &str) {
        let out = &mut *self.0;
        let len = s.len();
        match len {
            0..=31 => out.push(0xa0 | len as u8),
            32..=0xff => out.extend_from_slice(&[0xd9, len as u8]),
            0x100..=0xffff => {
                out.push(0xda);
                out.extend_from_slice(&(len as u16).to_be_bytes());
            }
            _ => {
                out.push(0xdb);
                out.extend_from_slice(&(len as u32).to_be_bytes());
            }
        }
        out.extend_from_slice(s.as_bytes());
    }

    /// `data.len()` must fit in a `u32`.
    pub fn bin(&mut self, data: &[u8]) {
        let out = &mut *self.0;
        let len = data.len();
        match len {
            0..=0xff => out.extend_from_slice(&[0xc4, len as u8]),
            0x100..=0xffff => {
                out.push(0xc5);
                out.extend_from_slice(&(len as u16).to_be_bytes());
            }
            _ => {
                out.push(0xc6);
                out.extend_from_slice(&(len as u32).to_be_bytes());
            }
        }
        out.extend_from_slice(data);
    }

    /// The header of an extension value of `len` data bytes (which must fit
    /// in a `u32`); the data follows.
    pub fn ext_header(&mut self, ty: i8, len: usize) {
        let out = &mut *self.0;
        match len {
            1 => out.push(0xd4),
            2 => out.push(0xd5),
            4 => out.push(0xd6),
            8 => out.push(0xd7),
            16 => out.push(0xd8),
            0..=0xff => out.extend_from_slice(&[0xc7, len as u8]),
            0x100..=0xffff => {
                out.push(0xc8);
                out.extend_from_slice(&(len as u16).to_be_bytes());
            }
            _ => {
                out.push(0xc9);
                out.extend_from_slice(&(len as u32).to_be_bytes());
            }
        }
        out.push(ty as u8);
    }
}

/// Whether a length can be written as a MessagePack str/bin/ext length.
pub fn fits_u32(len: usize) -> bool {
    u32::try_from(len).is_ok()
}

/// One step of a walk over a MessagePack value tree: a leaf is consumed
/// whole; a container's elements follow it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Item<'a> {
    /// nil, bool, int, float, str or bin (its bytes skipped).
    Leaf,
    Array(u32),
    /// `n` key/value pairs: `2n` values follow.
    Map(u32),
    Ext(i8, &'a [u8]),
}

/// A bounds-checked cursor over MessagePack bytes.
pub(crate) struct Reader<'a> {
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
        PayloadError::malformed(format!("truncated: {what} at byte {} runs past the end ({} bytes)", self.pos, self.buf.len()))
    }

    fn unexpected(&self, marker: u8, what: &str) -> PayloadError {
        PayloadError::malformed(format!("expected {what} at byte {}, found MessagePack marker 0x{marker:02x}", self.pos.saturating_sub(1)))
    }

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

    /// Consumes a nil if one is next.
    pub fn nil(&mut self) -> bool {
        if self.peek() == Some(0xc0) {
            self.pos += 1;
            true
        } else {
            false
        }
    }

    /// Any integer, as an `i128` (holds every MessagePack integer).
    fn integer(&mut self, what: &str) -> Result<i128, PayloadError> {
        let m = self.byte(what)?;
        Ok(match m {
            0x00..=0x7f => i128::from(m),
            0xe0..=0xff => i128::from(m as i8),
            0xcc => i128::from(self.byte(what)?),
            0xcd => i128::from(u16::from_be_bytes(self.be(what)?)),
            0xce => i128::from(u32::from_be_bytes(self.be(what)?)),
            0xcf => i128::from(u64::from_be_bytes(self.be(what)?)),
            0xd0 => i128::from(self.byte(what)? as i8),
            0xd1 => i128::from(i16::from_be_bytes(self.be(what)?)),
            0xd2 => i128::from(i32::from_be_bytes(self.be(what)?)),
            0xd3 => i128::from(i64::from_be_bytes(self.be(what)?)),
            _ => return Err(self.unexpected(m, what)),
        })
    }

    /// A non-negative integer (in any integer encoding).
    pub fn uint(&mut self, what: &str) -> Result<u64, PayloadError> {
        let v = self.integer(what)?;
        u64::try_from(v).map_err(|_| PayloadError::malformed(format!("{what} is {v}, expected a non-negative integer")))
    }

    pub fn int(&mut self, what: &str) -> Result<i64, PayloadError> {
        let v = self.integer(what)?;
        i64::try_from(v).map_err(|_| PayloadError::malformed(format!("{what} is {v}, out of the 64-bit signed range")))
    }

    pub fn array_len(&mut self, what: &str) -> Result<usize, PayloadError> {
        let m = self.byte(what)?;
        match m {
            0x90..=0x9f => Ok(usize::from(m & 0x0f)),
            0xdc => self.len16(what),
            0xdd => self.len32(what),
            _ => Err(self.unexpected(m, what)),
        }
    }

    pub fn str(&mut self, what: &str) -> Result<&'a str, PayloadError> {
        let m = self.byte(what)?;
        let len = match m {
            0xa0..=0xbf => usize::from(m & 0x1f),
            0xd9 => self.len8(what)?,
            0xda => self.len16(what)?,
            0xdb => self.len32(what)?,
            _ => return Err(self.unexpected(m, what)),
        };
        let bytes = self.take(len, what)?;
        std::str::from_utf8(bytes).map_err(|_| PayloadError::malformed(format!("{what} is not valid UTF-8")))
    }

    pub fn bin(&mut self, what: &str) -> Result<&'a [u8], PayloadError> {
        let m = self.byte(what)?;
        let len = match m {
            0xc4 => self.len8(what)?,
            0xc5 => self.len16(what)?,
            0xc6 => self.len32(what)?,
            _ => return Err(self.unexpected(m, what)),
        };
        self.take(len, what)
    }

    /// The next value's header; see [`Item`].
    pub fn item(&mut self) -> Result<Item<'a>, PayloadError> {
        const WHAT: &str = "a value";
        let m = self.byte(WHAT)?;
        let skip = match m {
            0x00..=0x7f | 0xe0..=0xff | 0xc0 | 0xc2 | 0xc3 => 0,
            0x80..=0x8f => return Ok(Item::Map(u32::from(m & 0x0f))),
            0x90..=0x9f => return Ok(Item::Array(u32::from(m & 0x0f))),
            0xa0..=0xbf => usize::from(m & 0x1f),
            0xc4 | 0xd9 => self.len8(WHAT)?,
            0xc5 | 0xda => self.len16(WHAT)?,
            0xc6 | 0xdb => self.len32(WHAT)?,
            0xcc | 0xd0 => 1,
            0xcd | 0xd1 => 2,
            0xca | 0xce | 0xd2 => 4,
            0xcb | 0xcf | 0xd3 => 8,
            0xdc => return Ok(Item::Array(u16::from_be_bytes(self.be(WHAT)?).into())),
            0xdd => return Ok(Item::Array(u32::from_be_bytes(self.be(WHAT)?))),
            0xde => return Ok(Item::Map(u16::from_be_bytes(self.be(WHAT)?).into())),
            0xdf => return Ok(Item::Map(u32::from_be_bytes(self.be(WHAT)?))),
            0xd4..=0xd8 | 0xc7..=0xc9 => {
                let len = match m {
                    0xd4 => 1,
                    0xd5 => 2,
                    0xd6 => 4,
                    0xd7 => 8,
                    0xd8 => 16,
                    0xc7 => self.len8("an extension")?,
                    0xc8 => self.len16("an extension")?,
                    _ => self.len32("an extension")?,
                };
                let ty = self.byte("an extension type")? as i8;
                return Ok(Item::Ext(ty, self.take(len, "an extension's data")?));
            }
            // 0xc1 is never used.
            _ => return Err(PayloadError::malformed(format!("byte 0x{m:02x} at {} is not a MessagePack marker", self.pos - 1))),
        };
        self.take(skip, WHAT)?;
        Ok(Item::Leaf)
    }

    /// Reads a whole extension value as the next value, if it is one.
    pub fn ext(&mut self) -> Result<Option<(i8, &'a [u8])>, PayloadError> {
        let start = self.pos;
        match self.item()? {
            Item::Ext(ty, data) => Ok(Some((ty, data))),
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
        for v in [0i64, -1, -32, -33, -128, -129, -32768, -32769, i32::MIN as i64, i32::MIN as i64 - 1, i64::MIN, 5, i64::MAX] {
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
