//! Randomness as an input: the core never reads a random source itself.

/// A source of random bytes the caller passes in.
///
/// Runtimes implement it over the operating system's generator; tests use
/// [`SeededEntropy`] so a run is deterministic end to end. It is used for
/// attachment ids, client ids and the framing nonce, none of which needs
/// more than unpredictability.
pub trait Entropy {
    /// Fills `dest` with random bytes.
    fn fill_bytes(&mut self, dest: &mut [u8]);
}

impl<E: Entropy + ?Sized> Entropy for &mut E {
    fn fill_bytes(&mut self, dest: &mut [u8]) {
        (**self).fill_bytes(dest);
    }
}

impl<E: Entropy + ?Sized> Entropy for Box<E> {
    fn fill_bytes(&mut self, dest: &mut [u8]) {
        (**self).fill_bytes(dest);
    }
}

/// A deterministic [`Entropy`] (SplitMix64 over a `u64` seed), for tests and
/// simulations. It is NOT a cryptographic generator: never use it for real
/// attachments.
///
/// ```
/// use human_plus_core::{Entropy, SeededEntropy};
///
/// let (mut a, mut b) = (SeededEntropy::new(7), SeededEntropy::new(7));
/// let (mut x, mut y) = ([0u8; 12], [0u8; 12]);
/// a.fill_bytes(&mut x);
/// b.fill_bytes(&mut y);
/// assert_eq!(x, y);
/// ```
#[derive(Debug, Clone)]
pub struct SeededEntropy {
    state: u64,
}

impl SeededEntropy {
    /// A generator starting from `seed`.
    #[must_use]
    pub fn new(seed: u64) -> Self {
        SeededEntropy { state: seed }
    }

    fn next_u64(&mut self) -> u64 {
        self.state = self.state.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.state;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }
}

impl Entropy for SeededEntropy {
    fn fill_bytes(&mut self, dest: &mut [u8]) {
        for chunk in dest.chunks_mut(8) {
            let bytes = self.next_u64().to_le_bytes();
            chunk.copy_from_slice(&bytes[..chunk.len()]);
        }
    }
}

/// Lowercase hex of `bytes`.
#[must_use]
pub fn hex(bytes: &[u8]) -> String {
    const DIGITS: &[u8; 16] = b"0123456789abcdef";
    let mut s = String::with_capacity(bytes.len() * 2);
    for &b in bytes {
        s.push(char::from(DIGITS[usize::from(b >> 4)]));
        s.push(char::from(DIGITS[usize::from(b & 0x0f)]));
    }
    s
}

/// `prefix` followed by the hex of `n` random bytes.
pub(crate) fn random_id(entropy: &mut dyn Entropy, prefix: &str, n: usize) -> String {
    let mut buf = vec![0u8; n];
    entropy.fill_bytes(&mut buf);
    let mut s = String::with_capacity(prefix.len() + 2 * n);
    s.push_str(prefix);
    s.push_str(&hex(&buf));
    s
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn hex_and_ids() {
        assert_eq!(hex(&[0x00, 0xab, 0xff]), "00abff");
        let mut e = SeededEntropy::new(1);
        let id = random_id(&mut e, "surface_", 12);
        assert_eq!(id.len(), 8 + 24);
        assert!(id.starts_with("surface_"));
        let other = random_id(&mut e, "surface_", 12);
        assert_ne!(id, other);
    }
}
