//! A Reverb channel's WebSocket, owned by the driver's own thread: opened
//! over this crate's own vetted, proxied TLS stream, framed by tungstenite.
//! While an operation runs the driver writes to it directly and waits on
//! it for the next message (bounded by the core's next timer), so a reply
//! wakes it at once and nothing sits in a queue; between operations the
//! kept socket is read without waiting when the manager looks at its legs.
//! The core decides everything said on it; this only moves the messages.

use std::net::SocketAddr;
use std::time::{Duration, Instant};

use human_plus_core::{Error, SocketEvent, TransportError, TransportErrorKind};
use tungstenite::protocol::WebSocketConfig;
use tungstenite::{Message, WebSocket};

use crate::resolve::VettingResolver;
use crate::transport::{Io, RelayConnector};

/// The largest message read from a channel server.
const MAX_MESSAGE: usize = 1024 * 1024;

/// How long a write may block.
const WRITE_WAIT: Duration = Duration::from_secs(10);

/// How long a close frame may take to write.
const CLOSE_WAIT: Duration = Duration::from_millis(200);

/// One open channel socket.
pub(crate) struct ChannelSocket {
    ws: WebSocket<Io>,
}

impl std::fmt::Debug for ChannelSocket {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ChannelSocket").finish_non_exhaustive()
    }
}

/// What one wait on the socket brought.
pub(crate) enum SocketRead {
    /// A message (or the socket's end, `Closed`).
    Event(SocketEvent),
    /// Nothing within the wait.
    Nothing,
}

fn transport(kind: TransportErrorKind, message: impl AsRef<str>) -> Error {
    Error::Transport(TransportError::new(kind, message))
}

impl ChannelSocket {
    /// Opens the WebSocket at `url` on `endpoint` (its vetted addresses,
    /// its egress proxy, TLS as it says), by `deadline`.
    pub(crate) fn open(
        connector: &RelayConnector,
        resolver: &VettingResolver,
        connect_timeout: Duration,
        url: &str,
        deadline: Instant,
    ) -> Result<ChannelSocket, Error> {
        let budget = connect_timeout.min(deadline.saturating_duration_since(Instant::now()));
        let ips = resolver.vetted(budget)?;
        let port = connector.endpoint.port();
        let vetted: Vec<SocketAddr> = ips
            .into_iter()
            .map(|ip| SocketAddr::new(ip, port))
            .collect();
        let io = connector.open(&vetted, deadline)?;
        let left = deadline.saturating_duration_since(Instant::now());
        if left.is_zero() {
            return Err(transport(
                TransportErrorKind::Timeout,
                "opening the channel's WebSocket took longer than its deadline",
            ));
        }
        let io_error = |e: std::io::Error| transport(TransportErrorKind::Io, e.to_string());
        io.set_read_timeout(Some(left)).map_err(io_error)?;
        io.set_write_timeout(Some(left)).map_err(io_error)?;
        let config = WebSocketConfig::default()
            .max_message_size(Some(MAX_MESSAGE))
            .max_frame_size(Some(MAX_MESSAGE));
        let (ws, _) =
            tungstenite::client::client_with_config(url, io, Some(config)).map_err(|e| {
                transport(
                    TransportErrorKind::Io,
                    format!("the channel server's WebSocket handshake failed: {e}"),
                )
            })?;
        ws.get_ref()
            .set_write_timeout(Some(WRITE_WAIT))
            .map_err(io_error)?;
        Ok(ChannelSocket { ws })
    }

    /// Writes one text message; `Err` when the socket is gone (its end to
    /// report).
    pub(crate) fn send(&mut self, text: String) -> Result<(), SocketEvent> {
        self.ws
            .send(Message::text(text))
            .map_err(|_| SocketEvent::Closed(None))
    }

    /// Closes the socket: a close frame, written without waiting long.
    pub(crate) fn close(mut self) {
        let _ = self.ws.get_ref().set_write_timeout(Some(CLOSE_WAIT));
        let _ = self.ws.close(None);
        let _ = self.ws.flush();
    }

    /// Waits up to `wait` (at least a millisecond) for the next message.
    pub(crate) fn read(&mut self, wait: Duration) -> SocketRead {
        let wait = wait.max(Duration::from_millis(1));
        if self.ws.get_ref().set_read_timeout(Some(wait)).is_err() {
            return SocketRead::Event(SocketEvent::Closed(None));
        }
        self.read_one()
    }

    /// What arrived while nobody waited, without waiting.
    pub(crate) fn drain(&mut self) -> Vec<SocketEvent> {
        let mut out = Vec::new();
        if self.ws.get_ref().set_nonblocking(true).is_err() {
            out.push(SocketEvent::Closed(None));
            return out;
        }
        loop {
            match self.read_one() {
                SocketRead::Nothing => break,
                SocketRead::Event(e) => {
                    let end = matches!(e, SocketEvent::Closed(_));
                    out.push(e);
                    if end {
                        return out;
                    }
                }
            }
        }
        if self.ws.get_ref().set_nonblocking(false).is_err() {
            out.push(SocketEvent::Closed(None));
        }
        out
    }

    fn read_one(&mut self) -> SocketRead {
        loop {
            return match self.ws.read() {
                Ok(Message::Text(text)) => {
                    SocketRead::Event(SocketEvent::Text(text.as_str().to_owned()))
                }
                Ok(Message::Close(frame)) => {
                    SocketRead::Event(SocketEvent::Closed(frame.map(|f| u16::from(f.code))))
                }
                // Pings are answered by the framing library; binary frames
                // are not the protocol's.
                Ok(_) => continue,
                Err(tungstenite::Error::Io(e))
                    if matches!(
                        e.kind(),
                        std::io::ErrorKind::WouldBlock
                            | std::io::ErrorKind::TimedOut
                            | std::io::ErrorKind::Interrupted
                    ) =>
                {
                    SocketRead::Nothing
                }
                Err(_) => SocketRead::Event(SocketEvent::Closed(None)),
            };
        }
    }
}
