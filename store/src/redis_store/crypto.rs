//! Encryption at rest: the keyring and the sealed envelope.
//!
//! A record is serialised to JSON (its relay token included) and sealed
//! with XChaCha20-Poly1305 under the keyring's current key:
//!
//! ```text
//! envelope = version (1 byte, = 1)
//!          | key id length (1 byte, 1..=64) | key id (ASCII)
//!          | nonce (24 bytes, random)
//!          | ciphertext | tag (16 bytes)
//!
//! aad      = "human-plus/attachment/v1"
//!          | u32 BE length | record name      (prefix + attachment id)
//!          | u32 BE length | attachment id
//!          | u32 BE length | key id
//!          | u64 BE generation
//! ```
//!
//! The associated data binds the ciphertext to where it is stored, to the
//! attachment it belongs to, to the key that sealed it and to the
//! generation the store keeps beside it: a record copied to another key or
//! id, relabelled with another key id, or paired with another generation
//! fails authentication, exactly like flipped bytes. The record name is
//! the prefix and the id whatever the key layout (`prefix<id>` or the
//! cluster's `prefix{<id>}`), so a record moved from one layout to the
//! other under the same prefix and id still opens.

use std::collections::BTreeMap;
use std::fmt;
use std::sync::Mutex;

use chacha20poly1305::aead::{Aead, KeyInit, Payload};
use chacha20poly1305::{Key, XChaCha20Poly1305, XNonce};
use human_plus_core::{Entropy, Error, StoreError};
use zeroize::Zeroizing;

/// The envelope format this version writes and reads.
pub const ENVELOPE_VERSION: u8 = 1;

/// The longest key id, in bytes.
pub const MAX_KEY_ID_LEN: usize = 64;

const NONCE_LEN: usize = 24;
const TAG_LEN: usize = 16;
const AAD_LABEL: &[u8] = b"human-plus/attachment/v1";

fn store_error(message: impl AsRef<str>) -> Error {
    Error::Store(StoreError::new(message))
}

fn valid_key_id(id: &str) -> bool {
    !id.is_empty()
        && id.len() <= MAX_KEY_ID_LEN
        && id
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'_' | b'-' | b'.' | b':'))
}

/// The encryption keys of a Redis store, by id: one current key that seals
/// every write, and any number of older keys kept to read records sealed
/// before a rotation.
///
/// Key material is held in [`Zeroizing`] buffers (wiped when the keyring
/// is dropped) and never shown by `Debug`, which lists only the ids.
///
/// Rotating: add the new key with [`Keyring::rotate`] (the previous
/// current key stays, for reading). Records are re-sealed under the new key
/// at their next write; once every record has been written since (or has
/// expired, 24 h by default), the old key can be dropped.
///
/// ```
/// use human_plus_store::Keyring;
///
/// let old = Keyring::new("2026-10", [7u8; 32])?;
/// let rotated = old.clone().rotate("2026-11", Keyring::key_from_hex(&"ab".repeat(32))?)?;
/// assert_eq!(rotated.current_id(), "2026-11");
/// assert_eq!(rotated.ids().collect::<Vec<_>>(), ["2026-10", "2026-11"]);
/// assert!(!format!("{rotated:?}").contains("171717"));
/// # Ok::<(), human_plus_core::Error>(())
/// ```
#[derive(Clone)]
pub struct Keyring {
    current: String,
    keys: BTreeMap<String, Zeroizing<[u8; 32]>>,
}

impl Keyring {
    /// A keyring whose current key is `key`, under `id` (1 to 64 ASCII
    /// letters, digits, `_`, `-`, `.` or `:`).
    ///
    /// # Errors
    /// [`Error::Store`] when the id is not valid.
    pub fn new(id: impl Into<String>, key: impl Into<Zeroizing<[u8; 32]>>) -> Result<Self, Error> {
        let id = id.into();
        if !valid_key_id(&id) {
            return Err(store_error(
                "a key id must be 1 to 64 ASCII letters, digits, '_', '-', '.' or ':'",
            ));
        }
        let mut keys = BTreeMap::new();
        keys.insert(id.clone(), key.into());
        Ok(Keyring { current: id, keys })
    }

    /// A keyring with a fresh key from the operating system's generator,
    /// for development and tests (a key that is not kept anywhere cannot
    /// read the records after a restart).
    ///
    /// ```
    /// let keyring = human_plus_store::Keyring::generate("dev")?;
    /// assert_eq!(keyring.current_id(), "dev");
    /// # Ok::<(), human_plus_core::Error>(())
    /// ```
    ///
    /// # Errors
    /// [`Error::Store`] when the id is not valid or the generator fails.
    pub fn generate(id: impl Into<String>) -> Result<Self, Error> {
        let mut key = Zeroizing::new([0u8; 32]);
        getrandom::fill(key.as_mut_slice())
            .map_err(|_| store_error("the operating system's random generator failed"))?;
        Keyring::new(id, key)
    }

    /// Parses 64 hex digits into a key.
    ///
    /// ```
    /// let key = human_plus_store::Keyring::key_from_hex(&"0f".repeat(32))?;
    /// assert_eq!(key[0], 0x0f);
    /// # Ok::<(), human_plus_core::Error>(())
    /// ```
    ///
    /// # Errors
    /// [`Error::Store`] when `hex` is not exactly 64 hex digits (the message
    /// never repeats the input).
    pub fn key_from_hex(hex: &str) -> Result<Zeroizing<[u8; 32]>, Error> {
        let bad = || store_error("an encryption key must be exactly 64 hex digits");
        let hex = hex.trim().as_bytes();
        if hex.len() != 64 {
            return Err(bad());
        }
        let nibble = |c: u8| {
            char::from(c)
                .to_digit(16)
                .and_then(|d| u8::try_from(d).ok())
        };
        let mut key = Zeroizing::new([0u8; 32]);
        for (i, pair) in hex.chunks_exact(2).enumerate() {
            let (Some(hi), Some(lo)) = (nibble(pair[0]), nibble(pair[1])) else {
                return Err(bad());
            };
            key[i] = (hi << 4) | lo;
        }
        Ok(key)
    }

    /// Adds an old key, kept for reading only.
    ///
    /// # Errors
    /// [`Error::Store`] when the id is not valid or already held.
    pub fn with_old_key(
        mut self,
        id: impl Into<String>,
        key: impl Into<Zeroizing<[u8; 32]>>,
    ) -> Result<Self, Error> {
        let id = id.into();
        if !valid_key_id(&id) {
            return Err(store_error(
                "a key id must be 1 to 64 ASCII letters, digits, '_', '-', '.' or ':'",
            ));
        }
        if self.keys.contains_key(&id) {
            return Err(store_error(format!(
                "the keyring already holds key id {id:?}"
            )));
        }
        self.keys.insert(id, key.into());
        Ok(self)
    }

    /// Makes `key` the current key under a new `id`; the previous current
    /// key stays for reading.
    ///
    /// # Errors
    /// As [`Keyring::with_old_key`].
    pub fn rotate(
        self,
        id: impl Into<String>,
        key: impl Into<Zeroizing<[u8; 32]>>,
    ) -> Result<Self, Error> {
        let id = id.into();
        let mut ring = self.with_old_key(id.clone(), key)?;
        ring.current = id;
        Ok(ring)
    }

    /// Drops the key `id` (it must not be the current one).
    ///
    /// # Errors
    /// [`Error::Store`] when `id` is the current key.
    pub fn without_key(mut self, id: &str) -> Result<Self, Error> {
        if id == self.current {
            return Err(store_error("the current key cannot be removed"));
        }
        self.keys.remove(id);
        Ok(self)
    }

    /// The id of the key that seals writes.
    #[must_use]
    pub fn current_id(&self) -> &str {
        &self.current
    }

    /// Every key id held, in order.
    pub fn ids(&self) -> impl Iterator<Item = &str> {
        self.keys.keys().map(String::as_str)
    }

    fn cipher(&self, id: &str) -> Option<XChaCha20Poly1305> {
        self.keys
            .get(id)
            .map(|k| XChaCha20Poly1305::new(&Key::from(**k)))
    }
}

impl fmt::Debug for Keyring {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Keyring")
            .field("current", &self.current)
            .field("ids", &self.keys.keys().collect::<Vec<_>>())
            .finish()
    }
}

/// Where envelope nonces come from.
pub(crate) enum Nonces {
    /// The operating system's generator (the default).
    Os,
    /// An injected source (deterministic tests).
    Injected(Mutex<Box<dyn Entropy + Send>>),
}

impl Nonces {
    fn fill(&self, nonce: &mut [u8; NONCE_LEN]) -> Result<(), Error> {
        match self {
            Nonces::Os => getrandom::fill(nonce)
                .map_err(|_| store_error("the operating system's random generator failed")),
            Nonces::Injected(source) => {
                source
                    .lock()
                    .map_err(|_| store_error("the nonce source's mutex was poisoned"))?
                    .fill_bytes(nonce);
                Ok(())
            }
        }
    }
}

impl fmt::Debug for Nonces {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Nonces::Os => "Os",
            Nonces::Injected(_) => "Injected",
        })
    }
}

fn aad(store_key: &str, id: &str, key_id: &str, generation: u64) -> Vec<u8> {
    let mut aad = Vec::with_capacity(AAD_LABEL.len() + store_key.len() + id.len() + 32);
    aad.extend_from_slice(AAD_LABEL);
    for part in [store_key, id, key_id] {
        let len = u32::try_from(part.len()).unwrap_or(u32::MAX);
        aad.extend_from_slice(&len.to_be_bytes());
        aad.extend_from_slice(part.as_bytes());
    }
    aad.extend_from_slice(&generation.to_be_bytes());
    aad
}

/// Seals `plaintext` under the keyring's current key.
pub(crate) fn seal(
    keyring: &Keyring,
    nonces: &Nonces,
    store_key: &str,
    id: &str,
    generation: u64,
    plaintext: &[u8],
) -> Result<Vec<u8>, Error> {
    let key_id = keyring.current_id();
    let cipher = keyring
        .cipher(key_id)
        .ok_or_else(|| store_error("the keyring's current key is missing"))?;
    let mut nonce = [0u8; NONCE_LEN];
    nonces.fill(&mut nonce)?;
    let aad = aad(store_key, id, key_id, generation);
    let sealed = cipher
        .encrypt(
            &XNonce::from(nonce),
            Payload {
                msg: plaintext,
                aad: &aad,
            },
        )
        .map_err(|_| {
            store_error(format!(
                "the record of attachment {id} could not be encrypted"
            ))
        })?;
    let mut envelope = Vec::with_capacity(2 + key_id.len() + NONCE_LEN + sealed.len());
    envelope.push(ENVELOPE_VERSION);
    envelope.push(u8::try_from(key_id.len()).unwrap_or(u8::MAX));
    envelope.extend_from_slice(key_id.as_bytes());
    envelope.extend_from_slice(&nonce);
    envelope.extend_from_slice(&sealed);
    Ok(envelope)
}

/// Opens an envelope stored under `store_key` for attachment `id` at
/// `generation`. Every failure is an error naming the attachment and the
/// reason, never the plaintext.
pub(crate) fn open(
    keyring: &Keyring,
    store_key: &str,
    id: &str,
    generation: u64,
    envelope: &[u8],
) -> Result<Zeroizing<Vec<u8>>, Error> {
    let fail = |why: &str| {
        store_error(format!(
            "the stored record of attachment {id} could not be decrypted: {why}"
        ))
    };
    let (&version, rest) = envelope
        .split_first()
        .ok_or_else(|| fail("the envelope is empty"))?;
    if version != ENVELOPE_VERSION {
        return Err(fail(&format!(
            "envelope version {version} is not supported (this build reads version {ENVELOPE_VERSION})"
        )));
    }
    let (&id_len, rest) = rest
        .split_first()
        .ok_or_else(|| fail("the envelope is truncated"))?;
    let id_len = usize::from(id_len);
    if rest.len() < id_len + NONCE_LEN + TAG_LEN {
        return Err(fail("the envelope is truncated"));
    }
    let (key_id, rest) = rest.split_at(id_len);
    let key_id = std::str::from_utf8(key_id)
        .ok()
        .filter(|k| valid_key_id(k))
        .ok_or_else(|| fail("the envelope's key id is malformed"))?;
    let cipher = keyring.cipher(key_id).ok_or_else(|| {
        fail(&format!(
            "it was sealed with key id {key_id:?}, which this keyring does not hold"
        ))
    })?;
    let (nonce, sealed) = rest.split_at(NONCE_LEN);
    let nonce: [u8; NONCE_LEN] = nonce
        .try_into()
        .map_err(|_| fail("the envelope is truncated"))?;
    let aad = aad(store_key, id, key_id, generation);
    cipher
        .decrypt(
            &XNonce::from(nonce),
            Payload {
                msg: sealed,
                aad: &aad,
            },
        )
        .map(Zeroizing::new)
        .map_err(|_| {
            fail(&format!(
                "authentication failed under key id {key_id:?} (a wrong key, or the stored bytes, key or generation were altered)"
            ))
        })
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used)]
    use super::*;
    use human_plus_core::SeededEntropy;

    fn ring() -> Keyring {
        Keyring::new("k1", [1u8; 32]).unwrap()
    }

    fn seeded() -> Nonces {
        Nonces::Injected(Mutex::new(Box::new(SeededEntropy::new(9))))
    }

    #[test]
    fn round_trip_and_layout() {
        let env = seal(&ring(), &Nonces::Os, "p:a", "a", 3, b"secret-token").unwrap();
        assert_eq!(env[0], ENVELOPE_VERSION);
        assert_eq!(env[1], 2);
        assert_eq!(&env[2..4], b"k1");
        assert_eq!(env.len(), 4 + NONCE_LEN + b"secret-token".len() + TAG_LEN);
        assert!(!env.windows(12).any(|w| w == b"secret-token"));
        let plain = open(&ring(), "p:a", "a", 3, &env).unwrap();
        assert_eq!(plain.as_slice(), b"secret-token");
    }

    #[test]
    fn injected_nonces_are_deterministic_and_os_nonces_are_not() {
        let a = seal(&ring(), &seeded(), "p:a", "a", 0, b"x").unwrap();
        let b = seal(&ring(), &seeded(), "p:a", "a", 0, b"x").unwrap();
        assert_eq!(a, b);
        let c = seal(&ring(), &Nonces::Os, "p:a", "a", 0, b"x").unwrap();
        let d = seal(&ring(), &Nonces::Os, "p:a", "a", 0, b"x").unwrap();
        assert_ne!(c, d);
    }

    #[test]
    fn the_associated_data_binds_key_id_attachment_and_generation() {
        let env = seal(&ring(), &Nonces::Os, "p:a", "a", 3, b"payload").unwrap();
        for (key, id, generation) in [("p:b", "a", 3), ("p:a", "b", 3), ("p:a", "a", 4)] {
            let e = open(&ring(), key, id, generation, &env).unwrap_err();
            assert_eq!(e.code(), "store_failed");
            assert!(e.to_string().contains("authentication failed"), "{e}");
        }
        // Relabelling the key id (to another key the ring holds) fails too.
        let two = ring().with_old_key("k2", [1u8; 32]).unwrap();
        let mut relabelled = env.clone();
        relabelled[3] = b'2';
        assert!(open(&two, "p:a", "a", 3, &relabelled).is_err());
    }

    #[test]
    fn every_damaged_envelope_is_an_error() {
        let env = seal(&ring(), &Nonces::Os, "p:a", "a", 0, b"payload").unwrap();
        let reason = |bytes: &[u8]| open(&ring(), "p:a", "a", 0, bytes).unwrap_err().to_string();
        assert!(reason(&[]).contains("empty"));
        assert!(reason(&[9]).contains("version 9"));
        assert!(reason(&env[..1]).contains("truncated"));
        assert!(reason(&env[..env.len() - TAG_LEN - 8]).contains("truncated"));
        for i in [5, 4 + NONCE_LEN + 1, env.len() - 1] {
            let mut flipped = env.clone();
            flipped[i] ^= 0x01;
            assert!(reason(&flipped).contains("authentication failed"));
        }
        let wrong = Keyring::new("k1", [2u8; 32]).unwrap();
        assert!(
            open(&wrong, "p:a", "a", 0, &env)
                .unwrap_err()
                .to_string()
                .contains("authentication failed")
        );
        let other = Keyring::new("k9", [1u8; 32]).unwrap();
        assert!(
            open(&other, "p:a", "a", 0, &env)
                .unwrap_err()
                .to_string()
                .contains("\"k1\", which this keyring does not hold")
        );
    }

    #[test]
    fn rotation_reads_old_records_and_writes_under_the_new_key() {
        let old = ring();
        let env = seal(&old, &Nonces::Os, "p:a", "a", 0, b"v1").unwrap();
        let rotated = old.rotate("k2", [2u8; 32]).unwrap();
        assert_eq!(
            open(&rotated, "p:a", "a", 0, &env).unwrap().as_slice(),
            b"v1"
        );
        let env2 = seal(&rotated, &Nonces::Os, "p:a", "a", 1, b"v2").unwrap();
        assert_eq!(&env2[2..4], b"k2");
        let retired = rotated.without_key("k1").unwrap();
        assert!(open(&retired, "p:a", "a", 0, &env).is_err());
        assert!(open(&retired, "p:a", "a", 1, &env2).is_ok());
        assert!(retired.without_key("k2").is_err());
    }

    #[test]
    fn key_ids_and_hex_keys_are_validated() {
        assert!(Keyring::new("", [0u8; 32]).is_err());
        assert!(Keyring::new("has space", [0u8; 32]).is_err());
        assert!(Keyring::new("x".repeat(65), [0u8; 32]).is_err());
        assert!(ring().with_old_key("k1", [0u8; 32]).is_err());
        assert!(Keyring::key_from_hex("00").is_err());
        let e = Keyring::key_from_hex(&"zz".repeat(32)).unwrap_err();
        assert!(!e.to_string().contains("zz"));
        assert_eq!(
            *Keyring::key_from_hex(&"A0".repeat(32)).unwrap(),
            [0xa0; 32]
        );
    }
}
