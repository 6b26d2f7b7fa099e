//! HMAC authentication of federates (LF's FED_NONCE / RTI_RESPONSE /
//! FED_RESPONSE exchange), before a federate may identify itself.
//!
//! Both sides hold a shared key. The federate sends its id and a random
//! nonce; the RTI proves it knows the key by answering with its own nonce
//! and `HMAC-SHA256(key, [RTI_RESPONSE] ++ fed_id ++ fed_nonce)`; the
//! federate proves it in turn with `HMAC-SHA256(key, [FED_RESPONSE] ++
//! rti_nonce)`. Lingua Franca uses the federation id as the key; an HPRM RTI
//! reads it from a key file, so LF federates interoperate by putting their
//! federation id in that file.

use hmac::{Hmac, Mac};
use sha2::Sha256;

use crate::grant::FedId;
use crate::wire::{kind, HMAC_LEN, NONCE_LEN};

type HmacSha256 = Hmac<Sha256>;

fn mac(key: &[u8], parts: &[&[u8]]) -> HmacSha256 {
    // HMAC takes keys of any length; this cannot fail.
    let mut m = HmacSha256::new_from_slice(key).expect("HMAC accepts any key length");
    for p in parts {
        m.update(p);
    }
    m
}

/// What the RTI sends back for a federate's nonce.
pub fn rti_response(key: &[u8], fed: FedId, fed_nonce: &[u8; NONCE_LEN]) -> [u8; HMAC_LEN] {
    mac(key, &[&[kind::RTI_RESPONSE], &fed.to_le_bytes(), fed_nonce]).finalize().into_bytes().into()
}

/// What the federate answers to the RTI's nonce.
pub fn fed_response(key: &[u8], rti_nonce: &[u8; NONCE_LEN]) -> [u8; HMAC_LEN] {
    mac(key, &[&[kind::FED_RESPONSE], rti_nonce]).finalize().into_bytes().into()
}

/// Checks a federate's answer in constant time.
pub fn verify_fed_response(key: &[u8], rti_nonce: &[u8; NONCE_LEN], answer: &[u8; HMAC_LEN]) -> bool {
    mac(key, &[&[kind::FED_RESPONSE], rti_nonce]).verify_slice(answer).is_ok()
}

/// Checks the RTI's answer in constant time (the federate's side).
pub fn verify_rti_response(key: &[u8], fed: FedId, fed_nonce: &[u8; NONCE_LEN], answer: &[u8; HMAC_LEN]) -> bool {
    mac(key, &[&[kind::RTI_RESPONSE], &fed.to_le_bytes(), fed_nonce]).verify_slice(answer).is_ok()
}

/// A fresh random nonce.
pub fn nonce() -> [u8; NONCE_LEN] {
    let mut n = [0u8; NONCE_LEN];
    // Only fails without any OS entropy source, which a process cannot run without.
    getrandom::fill(&mut n).expect("the OS random source is unavailable");
    n
}

/// A fresh shared key, as a key file holds it (`hprm-rti --auth-key-file`,
/// `HPRM_AUTH_KEY_FILE`): 32 random bytes in hex, newline-terminated.
pub fn generate_key() -> String {
    let mut k = [0u8; 32];
    // As in `nonce`.
    getrandom::fill(&mut k).expect("the OS random source is unavailable");
    let mut hex: String = k.iter().map(|b| format!("{b:02x}")).collect();
    hex.push('\n');
    hex
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn both_sides_agree_and_a_wrong_key_fails() {
        let (fed_nonce, rti_nonce) = (nonce(), nonce());
        let h1 = rti_response(b"secret", 3, &fed_nonce);
        assert!(verify_rti_response(b"secret", 3, &fed_nonce, &h1));
        assert!(!verify_rti_response(b"other", 3, &fed_nonce, &h1));
        assert!(!verify_rti_response(b"secret", 4, &fed_nonce, &h1), "bound to the federate id");
        let h2 = fed_response(b"secret", &rti_nonce);
        assert!(verify_fed_response(b"secret", &rti_nonce, &h2));
        assert!(!verify_fed_response(b"secret", &nonce(), &h2), "bound to the nonce");
    }

    #[test]
    fn matches_hmac_sha256_test_vector() {
        // RFC 4231, test case 2: key "Jefe", data "what do ya want for nothing?".
        let m = mac(b"Jefe", &[b"what do ya want ", b"for nothing?"]).finalize().into_bytes();
        let hex: String = m.iter().map(|b| format!("{b:02x}")).collect();
        assert_eq!(hex, "5bdcc146bf60754e6a042426089575c75a003f089d2739839dec58b964ec3843");
    }
}
