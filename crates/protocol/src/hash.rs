//! SHA-256 of a list of byte slices: the `sol_sha256` syscall on SBF, `sha2` on the host.

/// A 32-byte SHA-256 digest.
pub type Digest = [u8; 32];

/// SHA-256 over the concatenation of `parts`.
#[inline]
pub fn hashv(parts: &[&[u8]]) -> Digest {
    solana_sha256_hasher::hashv(parts).to_bytes()
}

/// Reads the first 8 bytes of a digest as a little-endian `u64`.
#[inline]
pub fn digest_u64(d: &Digest) -> u64 {
    let mut b = [0u8; 8];
    b.copy_from_slice(&d[..8]);
    u64::from_le_bytes(b)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn known_vector() {
        // SHA-256("abc")
        let d = hashv(&[b"a", b"bc"]);
        assert_eq!(
            d[..4],
            [0xba, 0x78, 0x16, 0xbf],
            "hashv must be plain SHA-256 of the concatenation"
        );
    }
}
