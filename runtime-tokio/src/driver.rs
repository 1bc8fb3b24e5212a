//! The driver loop: run one [`Operation`] of the core to its [`Outcome`]
//! over real requests.
//!
//! Drain `poll_transmit` (start or cancel requests), take the outcome if it
//! is ready, else wait for the next request event or the core's timeout,
//! feed it, repeat. Each request is a spawned task reporting into one
//! channel; a cancelled request's task is aborted, and every task still
//! running is aborted once the outcome is taken (or the operation's future
//! is dropped).

use std::collections::HashMap;
use std::sync::Arc;

use human_plus_core::{
    Error, HttpEvent, Operation, OperationOutput, Outcome, RequestId, SocketEvent, SocketTransmit,
    Transmit, TransportErrorKind, WarmLeg,
};
use human_plus_runtime::KeptStream;
use tokio::sync::mpsc;
use tokio::task::{AbortHandle, JoinHandle};
use tracing::Instrument;

use crate::clock::now;
use crate::connect::{Connector, transport};
use crate::perform::{Event, perform};
use crate::socket::Socket;

/// How many request events may queue before a request task waits for the
/// driver (back-pressure on a fast stream).
const EVENT_QUEUE: usize = 64;

/// How many events a warm stream may hold between operations before its
/// reader waits (at one keepalive comment every 15 s, about an hour).
const WARM_QUEUE: usize = 256;

/// The requests of one operation in flight. A released POST (delivered:
/// its reply arrived) is no longer among them: its task finishes on its
/// own, so its connection is kept.
struct InFlight {
    handles: HashMap<RequestId, AbortHandle>,
}

impl InFlight {
    fn new() -> Self {
        InFlight {
            handles: HashMap::new(),
        }
    }

    /// Forgets finished tasks.
    fn reap(&mut self) {
        self.handles.retain(|_, h| !h.is_finished());
    }

    fn is_idle(&self) -> bool {
        self.handles.is_empty()
    }
}

impl Drop for InFlight {
    fn drop(&mut self) {
        for handle in self.handles.values() {
            handle.abort();
        }
    }
}

/// A warm attachment's open stream between operations: the relay's
/// (request [`RequestId::WARM`]: its task keeps reading, into its own
/// channel), or a Reverb channel's WebSocket. Dropping it closes it.
pub struct WarmStream {
    kept: Kept,
}

enum Kept {
    Relay {
        task: Aborting,
        rx: mpsc::Receiver<Event>,
    },
    Channel(Socket),
}

/// A task aborted when dropped.
struct Aborting(JoinHandle<()>);

impl Drop for Aborting {
    fn drop(&mut self) {
        self.0.abort();
    }
}

impl std::fmt::Debug for WarmStream {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let kind = match self.kept {
            Kept::Relay { .. } => "relay",
            Kept::Channel(_) => "channel",
        };
        f.debug_struct("WarmStream")
            .field("kind", &kind)
            .finish_non_exhaustive()
    }
}

impl KeptStream for WarmStream {
    /// Feeds everything the stream delivered while no operation ran to
    /// `leg`; an ended task is the stream's end.
    fn drain_into(&mut self, leg: &mut WarmLeg) {
        // Each event at the time its reader received it, so a leg that
        // went silent is seen as silent.
        match &mut self.kept {
            Kept::Relay { task, rx } => {
                while let Ok(boxed) = rx.try_recv() {
                    let (_, event, at) = *boxed;
                    leg.handle_event(event, at);
                }
                if task.0.is_finished() {
                    leg.handle_event(HttpEvent::End, now());
                }
            }
            Kept::Channel(socket) => {
                while let Ok((event, at)) = socket.events.try_recv() {
                    leg.handle_socket(event, at);
                }
                if socket.is_finished() && socket.events.is_empty() {
                    leg.handle_socket(SocketEvent::Closed(None), now());
                }
            }
        }
    }
}

/// Runs `op` to its outcome, over `warm` (the attachment's open stream, in
/// warm mode), and hands the stream back when the outcome keeps it. `op`
/// comes boxed (see [`Tokio::drive`](crate::Tokio)): the loop's future then
/// holds a pointer where it held the machine twice.
///
/// # Errors
/// Only when the core waits for nothing while no request is in flight (it
/// never should): the operation cannot progress, and this is reported
/// rather than hanging.
pub(crate) async fn drive<T: OperationOutput>(
    mut op: Box<Operation<T>>,
    connector: &Arc<Connector>,
    warm: Option<WarmStream>,
) -> Result<(Outcome<T>, Option<WarmStream>), Error> {
    let endpoint = Arc::new(op.endpoint().clone());
    let socket_endpoint = op.socket_endpoint().cloned();
    let (tx, mut rx) = mpsc::channel::<Event>(EVENT_QUEUE);
    let mut inflight = InFlight::new();
    // The relay's kept stream, or the channel's socket.
    let mut relay: Option<(Aborting, mpsc::Receiver<Event>)> = None;
    let mut socket: Option<Socket> = None;
    let mut closing: Vec<Socket> = Vec::new();
    match warm.map(|w| w.kept) {
        Some(Kept::Relay { task, rx }) => relay = Some((task, rx)),
        Some(Kept::Channel(s)) => socket = Some(s),
        None => {}
    }
    loop {
        while let Some(transmit) = op.poll_transmit() {
            match transmit {
                Transmit::Request(req) if req.id == RequestId::WARM => {
                    let (wtx, wrx) = mpsc::channel(WARM_QUEUE);
                    let task = perform(Arc::clone(connector), Arc::clone(&endpoint), req, wtx)
                        .instrument(tracing::Span::current());
                    relay = Some((Aborting(tokio::spawn(task)), wrx));
                }
                Transmit::Cancel(RequestId::WARM) => {
                    tracing::debug!("warm relay stream closed");
                    relay = None;
                }
                Transmit::Request(req) => {
                    let id = req.id;
                    let task = perform(
                        Arc::clone(connector),
                        Arc::clone(&endpoint),
                        req,
                        tx.clone(),
                    )
                    .instrument(tracing::Span::current());
                    let handle = tokio::spawn(task).abort_handle();
                    inflight.handles.insert(id, handle);
                }
                Transmit::Cancel(id) => {
                    if let Some(handle) = inflight.handles.remove(&id) {
                        tracing::debug!(request = %id, "relay request cancelled");
                        handle.abort();
                    }
                }
                Transmit::Release(id) => {
                    // Delivered: its task reads the answer to its end and
                    // keeps the connection; nobody listens any more.
                    inflight.handles.remove(&id);
                }
                Transmit::Connect(wanted) => connector.open_ahead(&endpoint, wanted),
                Transmit::Socket(SocketTransmit::Open { url, deadline }) => {
                    if let Some(ep) = socket_endpoint.clone() {
                        tracing::debug!("channel socket opening");
                        socket = Some(Socket::open(Arc::clone(connector), ep, url, deadline));
                    }
                }
                Transmit::Socket(SocketTransmit::Text(text)) => {
                    if let Some(s) = socket.as_ref() {
                        s.send(text);
                    }
                }
                Transmit::Socket(SocketTransmit::Close) => {
                    if let Some(s) = socket.take() {
                        tracing::debug!("channel socket closed");
                        closing.push(s);
                    }
                }
            }
        }
        if op.is_finished() {
            // What the operation whispered last is written before its
            // outcome is handed back (a process may exit right after).
            // (Boxed, and before the outcome is taken: the loop's own
            // future stays small.)
            Box::pin(settle_sockets(
                socket.as_ref(),
                std::mem::take(&mut closing),
            ))
            .await;
        }
        if let Some(outcome) = op.poll_outcome() {
            let keep = outcome.warm.as_ref().is_some_and(WarmLeg::has_stream);
            let kept = if !keep {
                None
            } else if let Some(s) = socket.take() {
                Some(WarmStream {
                    kept: Kept::Channel(s),
                })
            } else {
                relay.take().map(|(task, rx)| WarmStream {
                    kept: Kept::Relay { task, rx },
                })
            };
            return Ok((outcome, kept));
        }
        inflight.reap();
        let wake = op.poll_timeout();
        if wake.is_none()
            && inflight.is_idle()
            && rx.is_empty()
            && relay.is_none()
            && socket.is_none()
        {
            return Err(transport(
                TransportErrorKind::Io,
                "the operation stalled: no request in flight and nothing to wait for",
            ));
        }
        let sleep = wake.map(tokio::time::Instant::from_std);
        tokio::select! {
            event = rx.recv() => {
                if let Some(boxed) = event {
                    let (id, event, _) = *boxed;
                    op.handle_event(id, event, now());
                }
            }
            event = async {
                match relay.as_mut() {
                    Some((_, w)) => w.recv().await,
                    None => std::future::pending().await,
                }
            } => {
                match event.map(|boxed| *boxed) {
                    Some((id, event, _)) => op.handle_event(id, event, now()),
                    // The stream's task ended without a last word.
                    None => {
                        relay = None;
                        op.handle_event(RequestId::WARM, HttpEvent::End, now());
                    }
                }
            }
            event = async {
                match socket.as_mut() {
                    Some(s) => s.events.recv().await,
                    None => std::future::pending().await,
                }
            } => {
                match event {
                    Some((event, _)) => op.handle_socket(event, now()),
                    None => {
                        socket = None;
                        op.handle_socket(SocketEvent::Closed(None), now());
                    }
                }
            }
            () = async {
                match sleep {
                    Some(at) => tokio::time::sleep_until(at).await,
                    None => std::future::pending().await,
                }
            } => {
                op.handle_timeout(now());
            }
        }
    }
}

/// Writes what the kept socket was asked to write, and closes the sockets
/// the operation closed, once what they were asked to write is written.
async fn settle_sockets(kept: Option<&Socket>, closing: Vec<Socket>) {
    if let Some(s) = kept {
        s.flushed().await;
    }
    for s in closing {
        s.close().await;
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::perform::perform;
    use human_plus_core::CallResult;

    /// The size of the future `f` returns, without calling it.
    fn future_size<A, B, C, D, F>(_: impl FnOnce(A, B, C, D) -> F) -> usize {
        std::mem::size_of::<F>()
    }

    /// Every in-flight operation holds one loop future and a task per
    /// request; both are kept small so that 1,000 attachments fit (the
    /// scale benchmark's figure per in-flight exchange).
    #[test]
    fn the_futures_held_per_operation_stay_small() {
        // The layout is the optimised build's; an unoptimised one keeps
        // room for every temporary.
        if cfg!(debug_assertions) {
            return;
        }
        let op_size = std::mem::size_of::<Operation<CallResult>>();
        let drive_size = future_size(|op, connector: &'static Arc<Connector>, warm, (): ()| {
            drive::<CallResult>(op, connector, warm)
        });
        // The machine is behind a pointer: the loop's own state only.
        assert!(
            drive_size < 1024,
            "drive's future is {drive_size} bytes (the operation is {op_size})"
        );
        let perform_size = future_size(perform);
        // Opening a connection is boxed: a request waiting for its answer
        // does not hold room for a TLS handshake.
        assert!(
            perform_size < 2048,
            "a request's future is {perform_size} bytes"
        );
    }
}
