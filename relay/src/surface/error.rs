//! Why the demo surface could not start or act.

/// Why the demo surface could not start or act.
#[derive(Debug, thiserror::Error)]
pub enum SurfaceError {
    /// The relay base URL is unusable.
    #[error("invalid relay URL: {0}")]
    InvalidUrl(String),
    /// The relay could not be reached or the connection broke.
    #[error("cannot reach the relay: {0}")]
    Connect(String),
    /// TLS setup or handshake failed.
    #[error("TLS: {0}")]
    Tls(String),
    /// A request took too long.
    #[error("timed out during {0}")]
    Timeout(&'static str),
    /// The relay answered 410: the session is gone.
    #[error("the relay says the session is gone (410)")]
    SessionGone,
    /// The relay answered 401: wrong or missing token.
    #[error("the relay refused the token (401)")]
    Unauthorized,
    /// Any other unexpected status.
    #[error("the relay answered HTTP {status}: {body}")]
    Status {
        /// The status code.
        status: u16,
        /// The (lossy, truncated) body.
        body: String,
    },
    /// The relay answered something the surface could not read.
    #[error("unreadable relay answer: {0}")]
    Protocol(String),
    /// Not an A1 address (or row) of the sheet.
    #[error("invalid cell address: {0}")]
    InvalidAddress(String),
    /// The host app's auth bridge would not sign the page's channel (its
    /// HTTP status: 403 when it refused the bearer).
    #[error("the auth bridge refused to sign the page's channel (HTTP {status})")]
    AuthBridge {
        /// The bridge's status.
        status: u16,
    },
    /// The channel server or the channel layer refused (a subscription
    /// refused with 4009, a connection closed before the page joined, a
    /// whisper the layer would not send).
    #[error("the channel: {0}")]
    Channel(String),
    /// The page on a channel is not joined (it left, or is reconnecting):
    /// nothing was sent.
    #[error("the page is not joined to its channel: nothing was sent")]
    NotJoined,
}

pub(super) fn status_error(status: u16, body: &[u8]) -> SurfaceError {
    match status {
        410 => SurfaceError::SessionGone,
        401 => SurfaceError::Unauthorized,
        _ => {
            let mut text = String::from_utf8_lossy(body).into_owned();
            if text.len() > 512 {
                let mut cut = 512;
                while !text.is_char_boundary(cut) {
                    cut -= 1;
                }
                text.truncate(cut);
            }
            SurfaceError::Status { status, body: text }
        }
    }
}
