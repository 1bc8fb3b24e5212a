//! A Reverb channel's WebSocket: opened over the connector's vetted,
//! proxied, TLS stream, framed by tokio-tungstenite, read and written by a
//! task of its own. The core decides everything said on it
//! ([`SocketTransmit`]); this only moves the messages.

use std::sync::Arc;
use std::time::{Duration, Instant};

use futures_util::{SinkExt, StreamExt};
use human_plus_core::{Error, RelayEndpoint, SocketEvent, TransportErrorKind};
use tokio::sync::mpsc;
use tokio::task::JoinHandle;
use tokio_tungstenite::tungstenite::Message;
use tokio_tungstenite::tungstenite::protocol::WebSocketConfig;

use crate::clock::now;
use crate::connect::{Connector, transport};

/// The largest message read from a channel server (the core reads at most
/// 256 KiB of one; a bigger one ends the connection).
const MAX_MESSAGE: usize = 1024 * 1024;

/// How many messages may wait for the driver before the reader waits.
const EVENT_QUEUE: usize = 256;

/// How long a close handshake may take.
const CLOSE_WAIT: Duration = Duration::from_secs(1);

/// The longest an operation's end waits for its last messages to be
/// written.
const FLUSH_WAIT: Duration = Duration::from_secs(2);

/// What the driver asks of the socket's task.
#[derive(Debug)]
enum Out {
    Text(String),
    /// Answered once everything before it was written.
    Flush(tokio::sync::oneshot::Sender<()>),
    Close,
}

/// One open (or opening) WebSocket and its task. Dropping it closes the
/// socket (its task sends a close frame, bounded, and ends).
#[derive(Debug)]
pub(crate) struct Socket {
    out: mpsc::UnboundedSender<Out>,
    pub(crate) events: mpsc::Receiver<(SocketEvent, Instant)>,
    task: JoinHandle<()>,
}

impl Socket {
    /// Opens the WebSocket at `url` on `endpoint` (vetted, proxied, TLS as
    /// it says), bounded by `deadline`.
    pub(crate) fn open(
        connector: Arc<Connector>,
        endpoint: RelayEndpoint,
        url: String,
        deadline: Instant,
    ) -> Socket {
        let (out, out_rx) = mpsc::unbounded_channel();
        let (tx, events) = mpsc::channel(EVENT_QUEUE);
        let task = tokio::spawn(run(connector, endpoint, url, deadline, out_rx, tx));
        Socket { out, events, task }
    }

    /// Writes a text message (in order).
    pub(crate) fn send(&self, text: String) {
        let _ = self.out.send(Out::Text(text));
    }

    /// Resolves once everything queued so far was written (bounded by
    /// [`FLUSH_WAIT`]): what an operation's last whisper (an announcement)
    /// waits for before its outcome, so a process that exits right after
    /// does not lose it.
    pub(crate) async fn flushed(&self) {
        let (tx, rx) = tokio::sync::oneshot::channel();
        if self.out.send(Out::Flush(tx)).is_ok() {
            let _ = tokio::time::timeout(FLUSH_WAIT, rx).await;
        }
    }

    /// Closes the socket after what was queued; resolves once closed
    /// (bounded by [`FLUSH_WAIT`]). Nothing more is reported.
    pub(crate) async fn close(mut self) {
        let _ = self.out.send(Out::Close);
        let _ = tokio::time::timeout(FLUSH_WAIT, &mut self.task).await;
    }

    /// Whether its task ended (the socket is closed).
    pub(crate) fn is_finished(&self) -> bool {
        self.task.is_finished()
    }
}

async fn run(
    connector: Arc<Connector>,
    endpoint: RelayEndpoint,
    url: String,
    deadline: Instant,
    mut out: mpsc::UnboundedReceiver<Out>,
    tx: mpsc::Sender<(SocketEvent, Instant)>,
) {
    let opening = async {
        let stream = connector.open_stream(&endpoint).await?;
        let config = WebSocketConfig::default()
            .max_message_size(Some(MAX_MESSAGE))
            .max_frame_size(Some(MAX_MESSAGE));
        tokio_tungstenite::client_async_with_config(url.as_str(), stream, Some(config))
            .await
            .map(|(ws, _)| ws)
            .map_err(|e| {
                transport(
                    TransportErrorKind::Io,
                    format!("the channel server's WebSocket handshake failed: {e}"),
                )
            })
    };
    let wait = deadline.saturating_duration_since(now());
    let mut ws = match tokio::time::timeout(wait, opening).await {
        Ok(Ok(ws)) => ws,
        Ok(Err(e)) => {
            let _ = tx.send((SocketEvent::Failed(e), now())).await;
            return;
        }
        Err(_) => {
            let e: Error = transport(
                TransportErrorKind::Timeout,
                "opening the channel's WebSocket took longer than its deadline",
            );
            let _ = tx.send((SocketEvent::Failed(e), now())).await;
            return;
        }
    };
    if tx.send((SocketEvent::Opened, now())).await.is_err() {
        return;
    }
    loop {
        tokio::select! {
            message = ws.next() => {
                let event = match message {
                    Some(Ok(Message::Text(text))) => SocketEvent::Text(text.as_str().to_owned()),
                    Some(Ok(Message::Close(frame))) => {
                        SocketEvent::Closed(frame.map(|f| u16::from(f.code)))
                    }
                    // Pings are answered by the framing library; binary
                    // frames are not the protocol's.
                    Some(Ok(_)) => continue,
                    Some(Err(_)) | None => SocketEvent::Closed(None),
                };
                let closed = matches!(event, SocketEvent::Closed(_));
                if tx.send((event, now())).await.is_err() || closed {
                    return;
                }
            }
            wanted = out.recv() => match wanted {
                Some(Out::Text(text)) => {
                    if ws.send(Message::text(text)).await.is_err() {
                        let _ = tx.send((SocketEvent::Closed(None), now())).await;
                        return;
                    }
                }
                Some(Out::Flush(done)) => {
                    let _ = done.send(());
                }
                Some(Out::Close) | None => {
                    let _ = tokio::time::timeout(CLOSE_WAIT, ws.close(None)).await;
                    return;
                }
            }
        }
    }
}
