//! Stable fingerprints of text (FNV-1a 64): the same value across runs and
//! versions, unlike std's hasher, so a loop file can keep them.

/// The fingerprint of the reply with its whitespace collapsed (the same
/// value as `fingerprint(&promise::normalise(text))`), without the copy.
pub fn fingerprint_words(text: &str) -> String {
    let mut hash = Fnv::default();
    for (i, word) in text.split_whitespace().enumerate() {
        if i > 0 {
            hash.write(b" ");
        }
        hash.write(word.as_bytes());
    }
    format!("{:016x}", hash.0)
}

struct Fnv(u64);

impl Default for Fnv {
    fn default() -> Self {
        Self(0xcbf2_9ce4_8422_2325)
    }
}

impl Fnv {
    fn write(&mut self, bytes: &[u8]) {
        for byte in bytes {
            self.0 ^= u64::from(*byte);
            self.0 = self.0.wrapping_mul(0x0000_0100_0000_01b3);
        }
    }
}

/// FNV-1a 64: stable across runs and versions, unlike std's hasher.
pub fn fingerprint(text: &str) -> String {
    let mut hash = Fnv::default();
    hash.write(text.as_bytes());
    format!("{:016x}", hash.0)
}
