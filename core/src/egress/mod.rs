//! The way out: the relay's endpoint and URLs under the egress policy
//! (`endpoint.rs`), the egress proxy's CONNECT handshake (`proxy.rs`), the
//! HTTP intents a runtime performs and the transport configuration
//! (`wire.rs`), the rules of kept connections (`pool.rs`), and the secrets
//! that travel out (the relay token, the proxy's credentials), found by
//! exact value wherever else they might show (`secrets.rs`).
//!
//! May use: `error.rs`, `invite/` (an endpoint is built from an invitation)
//! and `formats/` (the transport's default frame budget).

pub(crate) mod endpoint;
pub(crate) mod pool;
pub(crate) mod proxy;
pub(crate) mod secrets;
pub(crate) mod wire;
