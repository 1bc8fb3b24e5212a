//! Owner addressing: every operation re-presents the owner of the
//! attachment, and the attachment id alone is never a credential.

use crate::error::{Error, Unauthorized};

/// Anything that owns attachments: a conversation, a Harness session, a
/// tenant. Its [`Owner::key`] must be non-empty (after trimming ASCII
/// whitespace).
///
/// `str` and `String` are owners whose key is themselves.
///
/// ```
/// use human_plus_core::{Owner, OwnerKey};
///
/// struct Session { id: u64 }
/// impl Owner for Session {
///     fn key(&self) -> String { format!("session:{}", self.id) }
/// }
///
/// let a = OwnerKey::of(&Session { id: 7 })?;
/// assert!(a.matches(&OwnerKey::of("session:7")?));
/// assert!(OwnerKey::of("   ").is_err());
/// # Ok::<(), human_plus_core::Error>(())
/// ```
pub trait Owner {
    /// The owner's key.
    fn key(&self) -> String;
}

impl Owner for str {
    fn key(&self) -> String {
        self.to_owned()
    }
}

impl Owner for String {
    fn key(&self) -> String {
        self.clone()
    }
}

impl<T: Owner + ?Sized> Owner for &T {
    fn key(&self) -> String {
        (**self).key()
    }
}

/// An owner's key, validated non-empty. Stored with the attachment and
/// compared in constant time.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(transparent)]
pub struct OwnerKey(String);

impl OwnerKey {
    /// The key of `owner`, kept exactly as given (not trimmed).
    ///
    /// # Errors
    /// [`Error::InvalidOwner`] when the key is empty after trimming ASCII
    /// whitespace.
    pub fn of<O: Owner + ?Sized>(owner: &O) -> Result<Self, Error> {
        let key = owner.key();
        if key
            .trim_matches(|c: char| matches!(c, ' ' | '\t' | '\n' | '\r' | '\0' | '\x0B'))
            .is_empty()
        {
            return Err(Error::InvalidOwner);
        }
        Ok(OwnerKey(key))
    }

    /// The key.
    #[must_use]
    pub fn as_str(&self) -> &str {
        &self.0
    }

    /// Constant-time comparison over the bytes of both keys.
    #[must_use]
    pub fn matches(&self, other: &OwnerKey) -> bool {
        constant_time_eq(self.0.as_bytes(), other.0.as_bytes())
    }

    /// Checks that `presented` is this owner.
    ///
    /// # Errors
    /// [`Error::AttachmentUnauthorized`] when it is not.
    pub fn check(&self, presented: &OwnerKey) -> Result<(), Error> {
        if self.matches(presented) {
            Ok(())
        } else {
            Err(Error::AttachmentUnauthorized(Unauthorized::Owner))
        }
    }
}

/// Compares two byte strings in time that depends only on their lengths,
/// never on where they first differ.
///
/// ```
/// use human_plus_core::constant_time_eq;
///
/// assert!(constant_time_eq(b"sha256:abc", b"sha256:abc"));
/// assert!(!constant_time_eq(b"sha256:abc", b"sha256:abd"));
/// assert!(!constant_time_eq(b"abc", b"abcd"));
/// ```
#[must_use]
pub fn constant_time_eq(a: &[u8], b: &[u8]) -> bool {
    let len = a.len().max(b.len());
    let mut diff = u8::from(a.len() != b.len());
    for i in 0..len {
        let x = a.get(i).copied().unwrap_or(0);
        let y = b.get(i).copied().unwrap_or(0);
        diff |= x ^ y;
    }
    std::hint::black_box(diff) == 0
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn owner_key_is_kept_untrimmed_and_compared_exactly() {
        let a = OwnerKey::of(" session:one ").unwrap();
        assert_eq!(a.as_str(), " session:one ");
        assert!(!a.matches(&OwnerKey::of("session:one").unwrap()));
        assert!(a.check(&OwnerKey::of(" session:one ").unwrap()).is_ok());
        assert_eq!(
            a.check(&OwnerKey::of("session:two").unwrap()),
            Err(Error::AttachmentUnauthorized(Unauthorized::Owner))
        );
    }

    #[test]
    fn empty_owner_is_refused() {
        for bad in ["", " ", "\t\n", "\0"] {
            assert_eq!(OwnerKey::of(bad), Err(Error::InvalidOwner));
        }
        assert!(OwnerKey::of("\u{a0}").is_ok());
    }
}
