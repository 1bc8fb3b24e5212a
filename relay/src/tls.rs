//! TLS for the relay: a rustls server configuration from PEM files, or a
//! freshly generated certificate authority and server certificate for tests.
//!
//! Every configuration is built on the `ring` crypto provider explicitly,
//! never the process default.

use std::fmt;
use std::path::Path;
use std::sync::Arc;

use rustls::crypto::CryptoProvider;
use rustls_pki_types::pem::PemObject;
use rustls_pki_types::{CertificateDer, PrivateKeyDer, PrivatePkcs8KeyDer};

/// Why a TLS configuration could not be built.
#[derive(Debug, thiserror::Error)]
pub enum TlsError {
    /// A PEM file or buffer held no usable certificate or key.
    #[error("cannot read PEM: {0}")]
    Pem(String),
    /// rustls refused the certificate, key or protocol setup.
    #[error("TLS configuration refused: {0}")]
    Rustls(#[from] rustls::Error),
    /// Certificate generation failed.
    #[error("certificate generation failed: {0}")]
    Generate(#[from] rcgen::Error),
}

/// The `ring` crypto provider every configuration here uses.
pub(crate) fn provider() -> Arc<CryptoProvider> {
    Arc::new(rustls::crypto::ring::default_provider())
}

/// A server-side TLS configuration for [`RelayServerBuilder::tls`](crate::RelayServerBuilder::tls).
#[derive(Clone)]
pub struct TlsConfig {
    server: Arc<rustls::ServerConfig>,
}

impl fmt::Debug for TlsConfig {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("TlsConfig").finish_non_exhaustive()
    }
}

impl TlsConfig {
    /// From a certificate chain (leaf first) and a private key, in DER.
    pub fn from_der(
        chain: Vec<CertificateDer<'static>>,
        key: PrivateKeyDer<'static>,
    ) -> Result<TlsConfig, TlsError> {
        let mut server = rustls::ServerConfig::builder_with_provider(provider())
            .with_safe_default_protocol_versions()?
            .with_no_client_auth()
            .with_single_cert(chain, key)?;
        server.alpn_protocols = vec![b"http/1.1".to_vec()];
        Ok(TlsConfig {
            server: Arc::new(server),
        })
    }

    /// From PEM text: a certificate chain (leaf first) and a private key
    /// (PKCS#8, PKCS#1 or SEC1).
    pub fn from_pem(cert_chain_pem: &[u8], key_pem: &[u8]) -> Result<TlsConfig, TlsError> {
        let chain = CertificateDer::pem_slice_iter(cert_chain_pem)
            .collect::<Result<Vec<_>, _>>()
            .map_err(|e| TlsError::Pem(e.to_string()))?;
        if chain.is_empty() {
            return Err(TlsError::Pem("no certificate found".into()));
        }
        let key =
            PrivateKeyDer::from_pem_slice(key_pem).map_err(|e| TlsError::Pem(e.to_string()))?;
        TlsConfig::from_der(chain, key)
    }

    /// From PEM files: a certificate chain (leaf first) and a private key.
    pub fn from_pem_files(
        cert_chain: impl AsRef<Path>,
        key: impl AsRef<Path>,
    ) -> Result<TlsConfig, TlsError> {
        let chain = CertificateDer::pem_file_iter(cert_chain.as_ref())
            .map_err(|e| TlsError::Pem(e.to_string()))?
            .collect::<Result<Vec<_>, _>>()
            .map_err(|e| TlsError::Pem(e.to_string()))?;
        if chain.is_empty() {
            return Err(TlsError::Pem("no certificate found".into()));
        }
        let key =
            PrivateKeyDer::from_pem_file(key.as_ref()).map_err(|e| TlsError::Pem(e.to_string()))?;
        TlsConfig::from_der(chain, key)
    }

    /// Wraps a rustls configuration built elsewhere (it should offer
    /// `http/1.1` or no ALPN at all: the relay speaks HTTP/1.1 only).
    #[must_use]
    pub fn from_server_config(server: Arc<rustls::ServerConfig>) -> TlsConfig {
        TlsConfig { server }
    }

    /// Generates a throwaway CA and a server certificate it signs, valid for
    /// `localhost`, `127.0.0.1` and `::1`. Trust [`GeneratedCert::ca_der`]
    /// in the client.
    pub fn generate() -> Result<(TlsConfig, GeneratedCert), TlsError> {
        TlsConfig::generate_for(&["localhost", "127.0.0.1", "::1"])
    }

    /// Like [`TlsConfig::generate`], for the given DNS names and IP
    /// addresses.
    pub fn generate_for(names: &[&str]) -> Result<(TlsConfig, GeneratedCert), TlsError> {
        use rcgen::{
            BasicConstraints, CertificateParams, DnType, ExtendedKeyUsagePurpose, IsCa, Issuer,
            KeyPair, KeyUsagePurpose,
        };

        let ca_key = KeyPair::generate()?;
        let mut ca_params = CertificateParams::new(Vec::<String>::new())?;
        ca_params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
        ca_params
            .distinguished_name
            .push(DnType::CommonName, "Human+ relay test CA");
        ca_params.key_usages = vec![
            KeyUsagePurpose::KeyCertSign,
            KeyUsagePurpose::CrlSign,
            KeyUsagePurpose::DigitalSignature,
        ];
        let ca_cert = ca_params.self_signed(&ca_key)?;
        let issuer = Issuer::new(ca_params, ca_key);

        let leaf_key = KeyPair::generate()?;
        let names: Vec<String> = names.iter().map(|n| (*n).to_owned()).collect();
        let mut leaf_params = CertificateParams::new(names)?;
        leaf_params
            .distinguished_name
            .push(DnType::CommonName, "Human+ relay");
        leaf_params.is_ca = IsCa::NoCa;
        leaf_params.key_usages = vec![KeyUsagePurpose::DigitalSignature];
        leaf_params.extended_key_usages = vec![ExtendedKeyUsagePurpose::ServerAuth];
        leaf_params.use_authority_key_identifier_extension = true;
        let leaf_cert = leaf_params.signed_by(&leaf_key, &issuer)?;

        let generated = GeneratedCert {
            ca_der: ca_cert.der().clone(),
            cert_der: leaf_cert.der().clone(),
            ca_pem: ca_cert.pem(),
            cert_pem: leaf_cert.pem(),
            key_pem: leaf_key.serialize_pem(),
        };
        let key = PrivateKeyDer::Pkcs8(PrivatePkcs8KeyDer::from(leaf_key.serialize_der()));
        let config = TlsConfig::from_der(vec![generated.cert_der.clone()], key)?;
        Ok((config, generated))
    }

    pub(crate) fn acceptor(&self) -> tokio_rustls::TlsAcceptor {
        tokio_rustls::TlsAcceptor::from(Arc::clone(&self.server))
    }
}

/// A certificate generated by [`TlsConfig::generate`]: the CA to trust and
/// the server certificate it signed (the private key stays out of `Debug`).
#[derive(Clone)]
pub struct GeneratedCert {
    ca_der: CertificateDer<'static>,
    cert_der: CertificateDer<'static>,
    ca_pem: String,
    cert_pem: String,
    key_pem: String,
}

impl fmt::Debug for GeneratedCert {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("GeneratedCert")
            .field("ca_pem", &self.ca_pem)
            .field("cert_pem", &self.cert_pem)
            .finish_non_exhaustive()
    }
}

impl GeneratedCert {
    /// The CA certificate (DER): the trust anchor a client adds.
    #[must_use]
    pub fn ca_der(&self) -> &CertificateDer<'static> {
        &self.ca_der
    }

    /// The server certificate (DER) the relay presents.
    #[must_use]
    pub fn cert_der(&self) -> &CertificateDer<'static> {
        &self.cert_der
    }

    /// The CA certificate, PEM.
    #[must_use]
    pub fn ca_pem(&self) -> &str {
        &self.ca_pem
    }

    /// The server certificate, PEM.
    #[must_use]
    pub fn cert_pem(&self) -> &str {
        &self.cert_pem
    }

    /// The server's private key, PKCS#8 PEM (for writing the pair to files).
    #[must_use]
    pub fn key_pem(&self) -> &str {
        &self.key_pem
    }

    /// A rustls client configuration (ring provider) trusting only this CA.
    pub fn client_config(&self) -> Result<Arc<rustls::ClientConfig>, TlsError> {
        client_config_trusting(std::slice::from_ref(&self.ca_der))
    }
}

/// A rustls client configuration (ring provider, HTTP/1.1 ALPN) trusting
/// exactly `roots`.
pub fn client_config_trusting(
    roots: &[CertificateDer<'static>],
) -> Result<Arc<rustls::ClientConfig>, TlsError> {
    let mut store = rustls::RootCertStore::empty();
    for root in roots {
        store.add(root.clone())?;
    }
    let mut config = rustls::ClientConfig::builder_with_provider(provider())
        .with_safe_default_protocol_versions()?
        .with_root_certificates(store)
        .with_no_client_auth();
    config.alpn_protocols = vec![b"http/1.1".to_vec()];
    Ok(Arc::new(config))
}
