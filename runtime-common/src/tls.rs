//! The certificate authorities a runtime trusts, and the rustls client
//! configuration built from them.

use std::sync::Arc;

use rustls::RootCertStore;
use rustls_pki_types::CertificateDer;

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
    fn roots() {
        let r = TlsRoots::webpki();
        assert!(r.root_store().map(|s| s.len() > 100).unwrap_or(false));
        let only = TlsRoots::only([]);
        assert!(only.root_store().map(|s| s.is_empty()).unwrap_or(false));
        assert!(client_config(&only).is_ok());
    }
}
