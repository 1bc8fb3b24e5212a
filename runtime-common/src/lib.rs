//! # Host pieces every Human+ runtime shares
//!
//! The core is sans-IO; the runtime crates (`human-plus-tokio`,
//! `human-plus-blocking`, `human-plus-async-std`) each drive it over their
//! own sockets. What they share that is not protocol lives here, once: the
//! operating system's entropy for ids and framing nonces, and the rustls
//! client configuration (the `ring` provider chosen explicitly, webpki roots
//! plus any roots the caller adds).
//!
//! ```
//! use human_plus_core::{Entropy, ResultGuard};
//! use human_plus_runtime::{OsEntropy, TlsRoots, client_config};
//!
//! let framed = ResultGuard::default().frame("s", "t", "text", &mut OsEntropy)?;
//! assert!(framed.contains("text"));
//! let config = client_config(&TlsRoots::webpki())?;
//! assert_eq!(config.alpn_protocols, vec![b"http/1.1".to_vec()]);
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```

use std::sync::Arc;

use human_plus_core::Entropy;
use rustls::RootCertStore;
use rustls_pki_types::CertificateDer;

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

/// Which certificate authorities a runtime trusts for the relay's TLS.
#[derive(Debug, Clone, Default)]
pub struct TlsRoots {
    webpki: bool,
    extra: Vec<CertificateDer<'static>>,
}

impl TlsRoots {
    /// The Mozilla root store bundled with webpki-roots (hermetic: no
    /// dependence on the machine's store).
    #[must_use]
    pub fn webpki() -> Self {
        TlsRoots {
            webpki: true,
            extra: Vec::new(),
        }
    }

    /// Only the given roots (for tests against a generated CA, or a private
    /// relay).
    #[must_use]
    pub fn only(roots: impl IntoIterator<Item = CertificateDer<'static>>) -> Self {
        TlsRoots {
            webpki: false,
            extra: roots.into_iter().collect(),
        }
    }

    /// Adds a root.
    #[must_use]
    pub fn with_root(mut self, root: CertificateDer<'static>) -> Self {
        self.extra.push(root);
        self
    }

    /// The extra roots.
    #[must_use]
    pub fn extra(&self) -> &[CertificateDer<'static>] {
        &self.extra
    }

    /// Whether the webpki roots are included.
    #[must_use]
    pub fn includes_webpki(&self) -> bool {
        self.webpki
    }

    /// The root store.
    ///
    /// # Errors
    /// A certificate that rustls cannot parse as a trust anchor.
    pub fn root_store(&self) -> Result<RootCertStore, rustls::Error> {
        let mut store = RootCertStore::empty();
        if self.webpki {
            store.extend(webpki_roots::TLS_SERVER_ROOTS.iter().cloned());
        }
        for cert in &self.extra {
            store.add(cert.clone())?;
        }
        Ok(store)
    }
}

/// A rustls client configuration for the relay: the `ring` provider chosen
/// explicitly (feature unification can enable two providers, and rustls's
/// default builder then panics), the default safe protocol versions, the
/// given roots, and ALPN `http/1.1`.
///
/// # Errors
/// A root that cannot be parsed, or a provider that refuses the defaults.
pub fn client_config(roots: &TlsRoots) -> Result<Arc<rustls::ClientConfig>, rustls::Error> {
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let mut config = rustls::ClientConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()?
        .with_root_certificates(roots.root_store()?)
        .with_no_client_auth();
    config.alpn_protocols = vec![b"http/1.1".to_vec()];
    Ok(Arc::new(config))
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

    #[test]
    fn roots() {
        let r = TlsRoots::webpki();
        assert!(r.root_store().map(|s| s.len() > 100).unwrap_or(false));
        let only = TlsRoots::only([]);
        assert!(only.root_store().map(|s| s.is_empty()).unwrap_or(false));
        assert!(client_config(&only).is_ok());
    }
}
