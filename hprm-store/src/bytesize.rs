//! Byte sizes as operators write them (`512M`, `2G`, `64KiB`) and as we print them.

use std::fmt;
use std::str::FromStr;

/// A number of bytes, parsed from `N`, `N[KMGT]`, `N[KMGT]i?B` (binary units).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub struct ByteSize(pub u64);

/// The text was not a size this parser understands.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("`{text}` is not a size: write a whole number of bytes with an optional unit K, M, G or T (powers of 1024), e.g. 512M or 2G")]
pub struct ParseByteSizeError {
    text: String,
}

impl FromStr for ByteSize {
    type Err = ParseByteSizeError;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        let err = || ParseByteSizeError { text: s.to_owned() };
        let t = s.trim();
        let digits = t.bytes().take_while(u8::is_ascii_digit).count();
        if digits == 0 {
            return Err(err());
        }
        let number: u64 = t[..digits].parse().map_err(|_| err())?;
        let unit = t[digits..].trim().to_ascii_uppercase();
        let shift = match unit.as_str() {
            "" | "B" => 0,
            "K" | "KB" | "KIB" => 10,
            "M" | "MB" | "MIB" => 20,
            "G" | "GB" | "GIB" => 30,
            "T" | "TB" | "TIB" => 40,
            _ => return Err(err()),
        };
        number.checked_mul(1u64 << shift).map(ByteSize).ok_or_else(err)
    }
}

impl fmt::Display for ByteSize {
    /// Exact when the size is a whole number of a unit, one decimal otherwise.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        const UNITS: [(&str, u32); 4] = [("TiB", 40), ("GiB", 30), ("MiB", 20), ("KiB", 10)];
        for (name, shift) in UNITS {
            let unit = 1u64 << shift;
            if self.0 >= unit {
                return if self.0 % unit == 0 {
                    write!(f, "{} {name}", self.0 / unit)
                } else {
                    write!(f, "{:.1} {name}", self.0 as f64 / unit as f64)
                };
            }
        }
        write!(f, "{} B", self.0)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_operator_sizes() {
        assert_eq!("512M".parse::<ByteSize>().unwrap().0, 512 << 20);
        assert_eq!("2G".parse::<ByteSize>().unwrap().0, 2 << 30);
        assert_eq!("64KiB".parse::<ByteSize>().unwrap().0, 64 << 10);
        assert_eq!("4096".parse::<ByteSize>().unwrap().0, 4096);
        assert_eq!("1 gb".parse::<ByteSize>().unwrap().0, 1 << 30);
    }

    #[test]
    fn rejects_nonsense() {
        for bad in ["", "M", "12X", "-1G", "1.5G", "99999999999T"] {
            assert!(bad.parse::<ByteSize>().is_err(), "{bad}");
        }
    }

    #[test]
    fn displays_readably() {
        assert_eq!(ByteSize(512 << 20).to_string(), "512 MiB");
        assert_eq!(ByteSize(1536).to_string(), "1.5 KiB");
        assert_eq!(ByteSize(10).to_string(), "10 B");
    }
}
