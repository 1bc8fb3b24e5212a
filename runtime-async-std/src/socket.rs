//! A Reverb channel's WebSocket: opened over this crate's own vetted,
//! proxied TLS stream, framed by async-tungstenite. Nothing is spawned: the
//! socket is a future the driver polls beside the operation's requests (and
//! the manager's drain between operations), which writes what the driver
//! queued and reads what arrived into a queue. The core decides everything
//! said on it; this only moves the messages.

use std::collections::VecDeque;
use std::future::Future;
use std::pin::Pin;
use std::sync::{Arc, Mutex, PoisonError};
use std::task::{Context as TaskContext, Poll, Waker};
use std::time::Instant;

use async_io::Timer;
use async_tungstenite::tungstenite::Message;
use async_tungstenite::tungstenite::protocol::WebSocketConfig;
use futures_lite::future;
use futures_util::{Sink, Stream};
use human_plus_core::{Error, RelayEndpoint, SocketEvent, TransportError, TransportErrorKind};

use crate::transport::{Context, open_stream};

/// The largest message read from a channel server.
const MAX_MESSAGE: usize = 1024 * 1024;

/// The longest an operation's end waits for its last messages to be
/// written.
const FLUSH_WAIT: std::time::Duration = std::time::Duration::from_secs(2);

#[derive(Debug)]
enum Out {
    Text(String),
    Close,
}

#[derive(Debug, Default)]
struct Shared {
    outbox: VecDeque<Out>,
    inbox: VecDeque<(SocketEvent, Instant)>,
    waker: Option<Waker>,
}

type SocketFuture = Pin<Box<dyn Future<Output = ()> + Send>>;

/// One channel socket: its future (the connection, read and written when
/// polled) and the queues between it and the driver. Dropping it closes the
/// connection.
pub(crate) struct Socket {
    fut: Option<SocketFuture>,
    shared: Arc<Mutex<Shared>>,
}

impl std::fmt::Debug for Socket {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Socket")
            .field("open", &self.fut.is_some())
            .finish_non_exhaustive()
    }
}

fn lock(shared: &Mutex<Shared>) -> std::sync::MutexGuard<'_, Shared> {
    shared.lock().unwrap_or_else(PoisonError::into_inner)
}

impl Socket {
    /// The WebSocket at `url` on `endpoint`, opened by `deadline` when
    /// polled.
    pub(crate) fn open(
        ctx: Arc<Context>,
        endpoint: RelayEndpoint,
        url: String,
        deadline: Instant,
    ) -> Socket {
        let shared = Arc::new(Mutex::new(Shared::default()));
        let fut: SocketFuture = Box::pin(run(ctx, endpoint, url, deadline, Arc::clone(&shared)));
        Socket {
            fut: Some(fut),
            shared,
        }
    }

    /// Queues a text message (written at the next poll, in order).
    pub(crate) fn send(&self, text: String) {
        let mut s = lock(&self.shared);
        s.outbox.push_back(Out::Text(text));
        if let Some(w) = s.waker.take() {
            w.wake();
        }
    }

    /// Closes the socket: its close frame is written now if the socket
    /// takes it without waiting (nothing here may block an executor), then
    /// the connection is dropped.
    pub(crate) fn close(mut self) {
        lock(&self.shared).outbox.push_back(Out::Close);
        if let Some(mut fut) = self.fut.take() {
            let mut cx = TaskContext::from_waker(Waker::noop());
            let _ = fut.as_mut().poll(&mut cx);
        }
    }

    /// The next event, if any.
    pub(crate) fn pop(&self) -> Option<(SocketEvent, Instant)> {
        lock(&self.shared).inbox.pop_front()
    }

    /// Polls the connection; false once it ended.
    pub(crate) fn poll(&mut self, cx: &mut TaskContext<'_>) -> bool {
        if let Some(fut) = self.fut.as_mut()
            && fut.as_mut().poll(cx).is_ready()
        {
            self.fut = None;
        }
        self.fut.is_some()
    }

    /// Resolves once everything queued was written (or the connection
    /// ended): what an operation that ends right after its last whisper
    /// (a notification) waits for, since nothing polls a kept socket
    /// between operations.
    /// Bounded by [`FLUSH_WAIT`] (a server that reads nothing).
    pub(crate) async fn flushed(&mut self) {
        let written = std::future::poll_fn(|cx| {
            if !self.poll(cx) || lock(&self.shared).outbox.is_empty() {
                Poll::Ready(())
            } else {
                Poll::Pending
            }
        });
        future::or(written, async {
            Timer::after(FLUSH_WAIT).await;
        })
        .await;
    }

    /// Whether the connection ended and every event was taken.
    pub(crate) fn is_over(&self) -> bool {
        self.fut.is_none() && lock(&self.shared).inbox.is_empty()
    }
}

fn transport(kind: TransportErrorKind, message: impl AsRef<str>) -> Error {
    Error::Transport(TransportError::new(kind, message))
}

async fn run(
    ctx: Arc<Context>,
    endpoint: RelayEndpoint,
    url: String,
    deadline: Instant,
    shared: Arc<Mutex<Shared>>,
) {
    let push = |event: SocketEvent| lock(&shared).inbox.push_back((event, Instant::now()));
    let opening = async {
        let stream = open_stream(&ctx, &endpoint).await?;
        let config = WebSocketConfig::default()
            .max_message_size(Some(MAX_MESSAGE))
            .max_frame_size(Some(MAX_MESSAGE));
        async_tungstenite::client_async_with_config(url.as_str(), stream, Some(config))
            .await
            .map(|(ws, _)| ws)
            .map_err(|e| {
                transport(
                    TransportErrorKind::Io,
                    format!("the channel server's WebSocket handshake failed: {e}"),
                )
            })
    };
    let timed_out = async {
        Timer::at(deadline).await;
        Err(transport(
            TransportErrorKind::Timeout,
            "opening the channel's WebSocket took longer than its deadline",
        ))
    };
    let mut ws = match future::or(opening, timed_out).await {
        Ok(ws) => ws,
        Err(e) => {
            push(SocketEvent::Failed(e));
            return;
        }
    };
    push(SocketEvent::Opened);
    std::future::poll_fn(|cx| {
        let mut s = lock(&shared);
        s.waker = Some(cx.waker().clone());
        // What the driver queued goes first, in order.
        loop {
            match s.outbox.front() {
                None => break,
                Some(Out::Close) => {
                    return match Pin::new(&mut ws).poll_close(cx) {
                        Poll::Pending => Poll::Pending,
                        Poll::Ready(_) => Poll::Ready(()),
                    };
                }
                Some(Out::Text(_)) => match Pin::new(&mut ws).poll_ready(cx) {
                    Poll::Pending => break,
                    Poll::Ready(Err(_)) => {
                        s.inbox
                            .push_back((SocketEvent::Closed(None), Instant::now()));
                        return Poll::Ready(());
                    }
                    Poll::Ready(Ok(())) => {
                        let Some(Out::Text(text)) = s.outbox.pop_front() else {
                            continue;
                        };
                        if Pin::new(&mut ws).start_send(Message::text(text)).is_err() {
                            s.inbox
                                .push_back((SocketEvent::Closed(None), Instant::now()));
                            return Poll::Ready(());
                        }
                    }
                },
            }
        }
        if let Poll::Ready(Err(_)) = Pin::new(&mut ws).poll_flush(cx) {
            s.inbox
                .push_back((SocketEvent::Closed(None), Instant::now()));
            return Poll::Ready(());
        }
        loop {
            match Pin::new(&mut ws).poll_next(cx) {
                Poll::Pending => return Poll::Pending,
                Poll::Ready(Some(Ok(Message::Text(text)))) => {
                    let event = SocketEvent::Text(text.as_str().to_owned());
                    s.inbox.push_back((event, Instant::now()));
                }
                Poll::Ready(Some(Ok(Message::Close(frame)))) => {
                    let code = frame.map(|f| u16::from(f.code));
                    s.inbox
                        .push_back((SocketEvent::Closed(code), Instant::now()));
                    return Poll::Ready(());
                }
                // Pings are answered by the framing library; binary frames
                // are not the protocol's.
                Poll::Ready(Some(Ok(_))) => {}
                Poll::Ready(Some(Err(_)) | None) => {
                    s.inbox
                        .push_back((SocketEvent::Closed(None), Instant::now()));
                    return Poll::Ready(());
                }
            }
        }
    })
    .await;
}
