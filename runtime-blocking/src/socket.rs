//! A Reverb channel's WebSocket on a request thread: opened over this
//! crate's own vetted, proxied TLS stream, framed by tungstenite. The
//! thread writes what the driver queued, then reads in short slices (a
//! blocking stream cannot wait for both at once), and reports every
//! message into the driver's channel. The core decides everything said on
//! it; this only moves the messages.

use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::mpsc::{self, Receiver, Sender, SyncSender, TryRecvError};
use std::time::{Duration, Instant};

use human_plus_core::{Error, RelayEndpoint, SocketEvent, TransportError, TransportErrorKind};
use tungstenite::protocol::WebSocketConfig;
use tungstenite::{Message, WebSocket};

use crate::driver::{Event, Net};
use crate::resolve::VettingResolver;
use crate::transport::Io;

/// The largest message read from a channel server.
const MAX_MESSAGE: usize = 1024 * 1024;

/// How long one read waits while the channel is busy (something was
/// written or read within [`BUSY_FOR`]): the most a queued whisper waits
/// for a read in progress.
const BUSY_SLICE: Duration = Duration::from_millis(2);

/// How long one read waits on a quiet channel.
const QUIET_SLICE: Duration = Duration::from_millis(50);

/// How long a channel counts as busy after its last message.
const BUSY_FOR: Duration = Duration::from_secs(2);

/// How long a write may block.
const WRITE_WAIT: Duration = Duration::from_secs(10);

/// What the driver asks of the socket's thread.
#[derive(Debug)]
enum Out {
    Text(String),
    Close,
}

/// The driver's handle on one socket thread. Dropping it closes the
/// socket (the thread sends a close frame and ends).
#[derive(Debug)]
pub(crate) struct SocketCtl {
    out: Sender<Out>,
    /// The serial its events carry.
    pub(crate) serial: u64,
}

impl SocketCtl {
    /// Writes a text message (in order).
    pub(crate) fn send(&self, text: String) {
        let _ = self.out.send(Out::Text(text));
    }

    /// Closes the socket; nothing more is reported.
    pub(crate) fn close(self) {
        let _ = self.out.send(Out::Close);
    }
}

/// Opens the WebSocket at `url` on `endpoint` on a thread of the pool, its
/// events sent into `tx` under `serial`.
pub(crate) fn open(
    net: &Arc<Net>,
    endpoint: Arc<RelayEndpoint>,
    url: String,
    deadline: Instant,
    serial: u64,
    tx: SyncSender<Event>,
) -> std::io::Result<SocketCtl> {
    let (out, out_rx) = mpsc::channel();
    let job_net = Arc::clone(net);
    let span = tracing::Span::current();
    net.pool.execute(Box::new(move || {
        let _entered = span.enter();
        run(&job_net, &endpoint, &url, deadline, serial, &out_rx, &tx);
    }))?;
    Ok(SocketCtl { out, serial })
}

fn transport(kind: TransportErrorKind, message: impl AsRef<str>) -> Error {
    Error::Transport(TransportError::new(kind, message))
}

fn connect(
    net: &Net,
    endpoint: &Arc<RelayEndpoint>,
    url: &str,
    deadline: Instant,
) -> Result<WebSocket<Io>, Error> {
    let resolver = VettingResolver {
        endpoint: Arc::clone(endpoint),
        resolver: Arc::clone(&net.settings.resolver),
    };
    let budget = net
        .settings
        .connect_timeout
        .min(deadline.saturating_duration_since(Instant::now()));
    let ips = resolver.vetted(budget)?;
    let port = endpoint.port();
    let vetted: Vec<SocketAddr> = ips
        .into_iter()
        .map(|ip| SocketAddr::new(ip, port))
        .collect();
    let connector = net.connector(endpoint)?;
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
    let (ws, _) = tungstenite::client::client_with_config(url, io, Some(config)).map_err(|e| {
        transport(
            TransportErrorKind::Io,
            format!("the channel server's WebSocket handshake failed: {e}"),
        )
    })?;
    ws.get_ref()
        .set_write_timeout(Some(WRITE_WAIT))
        .map_err(io_error)?;
    Ok(ws)
}

fn run(
    net: &Net,
    endpoint: &Arc<RelayEndpoint>,
    url: &str,
    deadline: Instant,
    serial: u64,
    out: &Receiver<Out>,
    tx: &SyncSender<Event>,
) {
    let report = |event: SocketEvent| {
        tx.send(Event::Socket(serial, event, Instant::now()))
            .is_ok()
    };
    let mut ws = match connect(net, endpoint, url, deadline) {
        Ok(ws) => ws,
        Err(e) => {
            report(SocketEvent::Failed(e));
            return;
        }
    };
    if !report(SocketEvent::Opened) {
        return;
    }
    let mut last = Instant::now();
    loop {
        // What the driver queued goes first.
        loop {
            match out.try_recv() {
                Ok(Out::Text(text)) => {
                    last = Instant::now();
                    if ws.send(Message::text(text)).is_err() {
                        report(SocketEvent::Closed(None));
                        return;
                    }
                }
                Ok(Out::Close) | Err(TryRecvError::Disconnected) => {
                    let _ = ws.get_ref().set_read_timeout(Some(QUIET_SLICE));
                    let _ = ws.close(None);
                    let _ = ws.flush();
                    return;
                }
                Err(TryRecvError::Empty) => break,
            }
        }
        let slice = if last.elapsed() < BUSY_FOR {
            BUSY_SLICE
        } else {
            QUIET_SLICE
        };
        let _ = ws.get_ref().set_read_timeout(Some(slice));
        match ws.read() {
            Ok(Message::Text(text)) => {
                last = Instant::now();
                if !report(SocketEvent::Text(text.as_str().to_owned())) {
                    return;
                }
            }
            Ok(Message::Close(frame)) => {
                report(SocketEvent::Closed(frame.map(|f| u16::from(f.code))));
                return;
            }
            // Pings are answered by the framing library; binary frames are
            // not the protocol's.
            Ok(_) => {}
            Err(tungstenite::Error::Io(e))
                if matches!(
                    e.kind(),
                    std::io::ErrorKind::WouldBlock
                        | std::io::ErrorKind::TimedOut
                        | std::io::ErrorKind::Interrupted
                ) => {}
            Err(_) => {
                report(SocketEvent::Closed(None));
                return;
            }
        }
    }
}
