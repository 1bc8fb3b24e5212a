//! The operating system's random source.

use human_plus_core::Entropy;

/// The operating system's random source, as an [`Entropy`].
///
/// If the OS source fails (it does not on any supported platform), the
/// process aborts rather than mint a predictable id or nonce.
#[derive(Debug, Clone, Copy, Default)]
pub struct OsEntropy;

impl Entropy for OsEntropy {
    fn fill_bytes(&mut self, dest: &mut [u8]) {
        if getrandom::fill(dest).is_err() {
            std::process::abort();
        }
    }
}

/// A boxed [`OsEntropy`], as operations take it.
#[must_use]
pub fn os_entropy() -> Box<dyn Entropy + Send> {
    Box::new(OsEntropy)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn os_entropy_is_not_constant() {
        let (mut a, mut b) = ([0u8; 16], [0u8; 16]);
        OsEntropy.fill_bytes(&mut a);
        OsEntropy.fill_bytes(&mut b);
        assert_ne!(a, b);
    }
}
