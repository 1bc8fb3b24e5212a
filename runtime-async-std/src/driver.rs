//! The driver loop of one operation: drain the core's transmits, run the
//! requests it asks for, feed their events and the clock back, until the
//! outcome.
//!
//! The requests of an operation run inside the operation's own future: the
//! driver keeps them in a small set and polls them together with the
//! core's timer. Nothing is spawned, so the future behaves the same under
//! any executor (async-std's, smol's, or `futures_lite::future::block_on`)
//! and cancelling an operation is dropping its future. Cancelling one
//! request is dropping its future, which closes its connection.

use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::task::Poll;
use std::time::Instant;

use async_io::Timer;
use human_plus_core::{
    HttpEvent, Operation, OperationOutput, Outcome, RequestId, SocketEvent, SocketTransmit,
    Transmit, WarmLeg,
};

use human_plus_runtime::KeptStream;

use crate::socket::Socket;
use crate::transport::{self, Context, EventQueue, RequestFuture};

/// The most polls of a warm stream's future when an operation starts.
const DRAIN_POLLS: usize = 64;

/// A waker that only records that it was woken.
struct Woken(AtomicBool);

impl std::task::Wake for Woken {
    fn wake(self: Arc<Self>) {
        self.0.store(true, Ordering::SeqCst);
    }

    fn wake_by_ref(self: &Arc<Self>) {
        self.0.store(true, Ordering::SeqCst);
    }
}

enum Input {
    Event(RequestId, HttpEvent),
    Socket(SocketEvent),
    Timeout,
}

/// A warm attachment's open stream (request [`RequestId::WARM`]) and the
/// queue its events go to. Between operations nothing polls it (nothing is
/// spawned): a poll parked as an operation ends is written before the
/// outcome is handed back (on a kept connection; one that needs a new
/// connection goes out only when the next operation starts, which that
/// operation's leg counts as a gap, so it lists again); the socket
/// buffers what the relay sends meanwhile, and [`WarmStream::drain_into`]
/// reads what is already there before the next operation starts, stamping
/// it with the moment the stream was kept — the earliest it can have
/// arrived — so a leg that went silent, or a parked poll that returned long
/// ago (its subscriber maybe pruned since), is never taken for a fresh one.
/// Dropping it closes the stream.
pub struct WarmStream {
    fut: Option<RequestFuture>,
    queue: EventQueue,
    /// When the last operation handed it back.
    kept_at: Instant,
    /// A Reverb channel's socket (then `fut` is `None`).
    socket: Option<Socket>,
}

impl std::fmt::Debug for WarmStream {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("WarmStream").finish_non_exhaustive()
    }
}

impl KeptStream for WarmStream {
    /// Reads whatever the stream already delivered, without waiting, and
    /// feeds it to `leg`; a finished stream is the stream's end.
    fn drain_into(&mut self, leg: &mut WarmLeg) {
        if let Some(socket) = self.socket.as_mut() {
            // Poll the socket while it makes progress (bounded), then feed
            // what it read, each at the time it was read.
            let woken = Arc::new(Woken(AtomicBool::new(false)));
            let waker = std::task::Waker::from(Arc::clone(&woken));
            let mut cx = std::task::Context::from_waker(&waker);
            for _ in 0..DRAIN_POLLS {
                woken.0.store(false, Ordering::SeqCst);
                if !socket.poll(&mut cx) || !woken.0.load(Ordering::SeqCst) {
                    break;
                }
            }
            while let Some((event, at)) = socket.pop() {
                leg.handle_socket(event, at);
            }
            if socket.is_over() {
                leg.handle_socket(SocketEvent::Closed(None), Instant::now());
            }
            return;
        }
        if !self.queue.written() {
            // The parked poll could not be written when the last operation
            // ended (it needed a new connection): only now does it go out,
            // so it did not cover the time in between.
            leg.gap();
        }
        let at = self.kept_at;
        self.poll_while_woken(Some(&mut |event| leg.handle_event(event, at)));
        while let Some((_, event)) = self.queue.pop() {
            leg.handle_event(event, self.kept_at);
        }
        if self.fut.is_none() {
            leg.handle_event(HttpEvent::End, self.kept_at);
        }
    }
}

impl WarmStream {
    /// Polls the stream's future while it makes progress, handing every
    /// event to `feed` (or leaving them queued).
    fn poll_while_woken(&mut self, mut feed: Option<&mut dyn FnMut(HttpEvent)>) {
        // Poll while the stream's future makes progress: a poll that wakes
        // it again (a chunk moved through hyper's body channel, a response
        // head handed over, a yield after a chunk) means there is more to
        // do now; one that leaves it waiting on the socket or a timer, not
        // woken, means everything already there was read. Bounded, so a
        // relay streaming without pause cannot hold the operation here.
        let woken = Arc::new(Woken(AtomicBool::new(false)));
        let waker = std::task::Waker::from(Arc::clone(&woken));
        let mut cx = std::task::Context::from_waker(&waker);
        for _ in 0..DRAIN_POLLS {
            let Some(fut) = self.fut.as_mut() else {
                break;
            };
            woken.0.store(false, Ordering::SeqCst);
            if fut.as_mut().poll(&mut cx).is_ready() {
                self.fut = None;
            }
            if let Some(feed) = feed.as_mut() {
                while let Some((_, event)) = self.queue.pop() {
                    feed(event);
                }
            }
            if !woken.0.load(Ordering::SeqCst) {
                break;
            }
        }
    }
}

/// Drives `op` to its outcome, over `warm` (the attachment's open stream,
/// in warm mode), and hands the stream back when the outcome keeps it.
pub(crate) async fn drive<T: OperationOutput>(
    ctx: &Arc<Context>,
    mut op: Operation<T>,
    mut warm: Option<WarmStream>,
) -> Result<(Outcome<T>, Option<WarmStream>), human_plus_core::Error> {
    let endpoint = Arc::new(op.endpoint().clone());
    let socket_endpoint = op.socket_endpoint().cloned();
    let mut socket = warm.as_mut().and_then(|w| w.socket.take());
    let mut closing: Vec<Socket> = Vec::new();
    if socket.is_some() {
        warm = None;
    }
    let queue = EventQueue::default();
    let mut inflight: Vec<(RequestId, RequestFuture)> = Vec::new();
    // Connections being opened ahead, polled beside the requests.
    let mut ahead: Vec<RequestFuture> = Vec::new();
    loop {
        while let Some(transmit) = op.poll_transmit() {
            match transmit {
                Transmit::Request(req) if req.id == RequestId::WARM => {
                    let wq = EventQueue::default();
                    let fut =
                        transport::start(Arc::clone(ctx), Arc::clone(&endpoint), req, wq.clone());
                    warm = Some(WarmStream {
                        fut: Some(fut),
                        queue: wq,
                        kept_at: Instant::now(),
                        socket: None,
                    });
                }
                Transmit::Cancel(RequestId::WARM) => {
                    tracing::debug!("warm relay stream closed");
                    warm = None;
                }
                Transmit::Request(req) => {
                    let id = req.id;
                    let fut = transport::start(
                        Arc::clone(ctx),
                        Arc::clone(&endpoint),
                        req,
                        queue.clone(),
                    );
                    inflight.push((id, fut));
                }
                Transmit::Cancel(id) => {
                    tracing::debug!(request = %id, "relay request cancelled");
                    inflight.retain(|(r, _)| *r != id);
                    queue.forget(id);
                }
                Transmit::Connect(wanted) => {
                    ahead.extend(transport::open_ahead(ctx, &endpoint, wanted));
                }
                Transmit::Release(id) => {
                    // Delivered: its answer is read to its end when the
                    // next request starts, so its connection is kept.
                    if let Some(at) = inflight.iter().position(|(r, _)| *r == id) {
                        let (_, fut) = inflight.swap_remove(at);
                        ctx.linger(fut);
                    }
                    queue.forget(id);
                }
                Transmit::Socket(SocketTransmit::Open { url, deadline }) => {
                    if let Some(ep) = socket_endpoint.clone() {
                        socket = Some(Socket::open(Arc::clone(ctx), ep, url, deadline));
                    }
                }
                Transmit::Socket(SocketTransmit::Text(text)) => {
                    if let Some(s) = socket.as_ref() {
                        s.send(text);
                    }
                }
                Transmit::Socket(SocketTransmit::Close) => {
                    // What it was asked to write goes first (the last
                    // whisper of an operation that keeps no leg: an
                    // announcement), before the outcome is handed back.
                    if let Some(s) = socket.take() {
                        closing.push(s);
                    }
                }
            }
        }
        if let Some(outcome) = op.poll_outcome() {
            // Dropping the set closes every request still open.
            let keep = outcome.warm.as_ref().is_some_and(WarmLeg::has_stream);
            if let Some(s) = socket.as_mut() {
                s.flushed().await;
            }
            for mut s in closing.drain(..) {
                s.flushed().await;
                s.close();
            }
            if keep && socket.is_some() {
                let kept = WarmStream {
                    fut: None,
                    queue: EventQueue::default(),
                    kept_at: Instant::now(),
                    socket,
                };
                return Ok((outcome, Some(kept)));
            }
            let kept = warm.filter(|_| keep).map(|mut w| {
                // Sends a poll just parked, on a kept connection, before the
                // caller gets the outcome (its events wait in the queue for
                // the next operation).
                w.kept_at = Instant::now();
                w.poll_while_woken(None);
                w
            });
            return Ok((outcome, kept));
        }
        match next_input(
            &mut inflight,
            &mut ahead,
            &queue,
            &mut warm,
            &mut socket,
            op.poll_timeout(),
        )
        .await
        {
            Input::Event(id, event) => op.handle_event(id, event, Instant::now()),
            Input::Socket(event) => {
                if matches!(event, SocketEvent::Closed(_) | SocketEvent::Failed(_)) {
                    socket = None;
                }
                op.handle_socket(event, Instant::now());
            }
            Input::Timeout => op.handle_timeout(Instant::now()),
        }
    }
}

/// Polls the requests in flight until one of them reported an event, or
/// the core's timeout is due. The timeout wins a tie, so the core's own
/// deadline, not a request's, decides an exchange that ran out of time.
async fn next_input(
    inflight: &mut Vec<(RequestId, RequestFuture)>,
    ahead: &mut Vec<RequestFuture>,
    queue: &EventQueue,
    warm: &mut Option<WarmStream>,
    socket: &mut Option<Socket>,
    deadline: Option<Instant>,
) -> Input {
    let mut timer = deadline.map(Timer::at);
    let due = || deadline.is_some_and(|d| Instant::now() >= d);
    std::future::poll_fn(move |cx| {
        if due() {
            return Poll::Ready(Input::Timeout);
        }
        if let Some((id, event)) = queue.pop() {
            return Poll::Ready(Input::Event(id, event));
        }
        if let Some(event) = warm.as_ref().and_then(|w| w.queue.pop()) {
            return Poll::Ready(Input::Event(event.0, event.1));
        }
        if let Some((event, _)) = socket.as_ref().and_then(Socket::pop) {
            return Poll::Ready(Input::Socket(event));
        }
        inflight.retain_mut(|(_, fut)| fut.as_mut().poll(cx).is_pending());
        if let Some(s) = socket.as_mut()
            && !s.poll(cx)
            && s.is_over()
        {
            // Ended without a last word.
            return Poll::Ready(Input::Socket(SocketEvent::Closed(None)));
        }
        ahead.retain_mut(|fut| fut.as_mut().poll(cx).is_pending());
        if let Some(w) = warm.as_mut()
            && let Some(fut) = w.fut.as_mut()
            && fut.as_mut().poll(cx).is_ready()
        {
            w.fut = None;
        }
        if due() {
            return Poll::Ready(Input::Timeout);
        }
        if let Some((id, event)) = queue.pop() {
            return Poll::Ready(Input::Event(id, event));
        }
        if let Some(event) = warm.as_ref().and_then(|w| w.queue.pop()) {
            return Poll::Ready(Input::Event(event.0, event.1));
        }
        if let Some((event, _)) = socket.as_ref().and_then(Socket::pop) {
            return Poll::Ready(Input::Socket(event));
        }
        if let Some(timer) = timer.as_mut()
            && Pin::new(timer).poll(cx).is_ready()
        {
            return Poll::Ready(Input::Timeout);
        }
        Poll::Pending
    })
    .await
}
