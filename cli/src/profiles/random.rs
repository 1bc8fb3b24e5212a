//! Random hex strings for the demo's session ids and tokens and a profile's
//! default name.

use human_plus_core::hex;
use human_plus_runtime::OsEntropy;

/// A fresh random hex string of `bytes` bytes.
#[must_use]
pub fn random_hex(bytes: usize) -> String {
    let mut buf = vec![0u8; bytes];
    human_plus_core::Entropy::fill_bytes(&mut OsEntropy, &mut buf);
    hex(&buf)
}
