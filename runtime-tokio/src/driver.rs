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
    Error, HttpEvent, Operation, OperationOutput, Outcome, RequestId, Transmit, TransportErrorKind,
    WarmLeg,
};
use human_plus_runtime::KeptStream;
use tokio::sync::mpsc;
use tokio::task::{AbortHandle, JoinHandle};
use tracing::Instrument;

use crate::clock::now;
use crate::connect::{Connector, transport};
use crate::perform::{Event, perform};

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

/// A warm attachment's open stream (request [`RequestId::WARM`]) between
/// operations: its task keeps reading, into its own channel. Dropping it
/// closes the stream.
pub struct WarmStream {
    task: JoinHandle<()>,
    rx: mpsc::Receiver<Event>,
}

impl std::fmt::Debug for WarmStream {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("WarmStream").finish_non_exhaustive()
    }
}

impl Drop for WarmStream {
    fn drop(&mut self) {
        self.task.abort();
    }
}

impl KeptStream for WarmStream {
    /// Feeds everything the stream delivered while no operation ran to
    /// `leg`; an ended task is the stream's end.
    fn drain_into(&mut self, leg: &mut WarmLeg) {
        // Each event at the time its reader received it, so a leg that
        // went silent is seen as silent.
        while let Ok(boxed) = self.rx.try_recv() {
            let (_, event, at) = *boxed;
            leg.handle_event(event, at);
        }
        if self.task.is_finished() {
            leg.handle_event(HttpEvent::End, now());
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
    mut warm: Option<WarmStream>,
) -> Result<(Outcome<T>, Option<WarmStream>), Error> {
    let endpoint = Arc::new(op.endpoint().clone());
    let (tx, mut rx) = mpsc::channel::<Event>(EVENT_QUEUE);
    let mut inflight = InFlight::new();
    loop {
        while let Some(transmit) = op.poll_transmit() {
            match transmit {
                Transmit::Request(req) if req.id == RequestId::WARM => {
                    let (wtx, wrx) = mpsc::channel(WARM_QUEUE);
                    let task = perform(Arc::clone(connector), Arc::clone(&endpoint), req, wtx)
                        .instrument(tracing::Span::current());
                    warm = Some(WarmStream {
                        task: tokio::spawn(task),
                        rx: wrx,
                    });
                }
                Transmit::Cancel(RequestId::WARM) => {
                    tracing::debug!("warm relay stream closed");
                    warm = None;
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
            }
        }
        if let Some(outcome) = op.poll_outcome() {
            let keep = outcome.warm.as_ref().is_some_and(WarmLeg::has_stream);
            return Ok((outcome, if keep { warm } else { None }));
        }
        inflight.reap();
        let wake = op.poll_timeout();
        if wake.is_none() && inflight.is_idle() && rx.is_empty() && warm.is_none() {
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
                match warm.as_mut() {
                    Some(w) => w.rx.recv().await,
                    None => std::future::pending().await,
                }
            } => {
                match event.map(|boxed| *boxed) {
                    Some((id, event, _)) => op.handle_event(id, event, now()),
                    // The stream's task ended without a last word.
                    None => {
                        warm = None;
                        op.handle_event(RequestId::WARM, HttpEvent::End, now());
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
