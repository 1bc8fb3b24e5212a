//! The SSE leg's writer: one task per open `events` stream, feeding the
//! response body through a channel, with the SSE faults applied.

use std::sync::Arc;

use bytes::Bytes;
use tokio::sync::mpsc;
use tokio::time::{Instant, MissedTickBehavior};

use crate::body::RelayBody;
use crate::broker::{Direction, Subscriber, lock};
use crate::faults::{Leg, SseFaults};
use crate::shared::Shared;

/// Starts the writer for `sub` and returns the body it feeds.
pub(crate) fn stream(shared: Arc<Shared>, session: String, sub: Arc<Subscriber>) -> RelayBody {
    let (tx, rx) = mpsc::channel(16);
    tokio::spawn(run(shared, session, sub, tx));
    RelayBody::Stream(rx)
}

/// Unsubscribes when the writer ends, however it ends (stream closed by the
/// client, session ended, a fault, or the runtime shutting down).
struct Unsubscribe {
    shared: Arc<Shared>,
    session: String,
    sub: Arc<Subscriber>,
}

impl Drop for Unsubscribe {
    fn drop(&mut self) {
        lock(&self.shared.broker).remove_subscriber(&self.session, &self.sub);
    }
}

/// The channel to the response body.
struct Out {
    tx: mpsc::Sender<Bytes>,
}

struct Closed;

impl Out {
    async fn write(&self, faults: &SseFaults, bytes: Vec<u8>) -> Result<(), Closed> {
        match faults.trickle {
            Some(per_byte) => {
                // Paced against a deadline, so timer overshoot does not add
                // up: the mean interval between bytes is `per_byte`.
                let mut next = Instant::now();
                for b in bytes {
                    self.tx
                        .send(Bytes::copy_from_slice(&[b]))
                        .await
                        .map_err(|_| Closed)?;
                    next += per_byte;
                    tokio::time::sleep_until(next).await;
                }
                Ok(())
            }
            None => self.tx.send(Bytes::from(bytes)).await.map_err(|_| Closed),
        }
    }
}

fn eol(faults: &SseFaults) -> &'static str {
    if faults.crlf { "\r\n" } else { "\n" }
}

/// The SSE faults for a stream reading `direction`, read afresh.
fn current(shared: &Shared, session: &str, direction: Direction) -> SseFaults {
    let mut broker = lock(&shared.broker);
    let faults = broker.faults_mut(session);
    if faults.hits(Leg::Events, direction == Direction::Inbound) {
        faults.sse()
    } else {
        SseFaults::default()
    }
}

enum Next {
    Frame(Arc<str>),
    End,
    Wait,
}

async fn run(shared: Arc<Shared>, session: String, sub: Arc<Subscriber>, tx: mpsc::Sender<Bytes>) {
    let _unsubscribe = Unsubscribe {
        shared: Arc::clone(&shared),
        session: session.clone(),
        sub: Arc::clone(&sub),
    };
    let out = Out { tx };
    let faults = current(&shared, &session, sub.direction);
    let nl = eol(&faults);
    if out
        .write(&faults, format!("retry: 2000{nl}{nl}").into_bytes())
        .await
        .is_err()
    {
        return;
    }
    if faults.gone_after == Some(0) {
        let _ = write_gone(&out, &faults).await;
        return;
    }
    let every = shared.keepalive;
    let mut keepalive = tokio::time::interval_at(Instant::now() + every, every);
    keepalive.set_missed_tick_behavior(MissedTickBehavior::Delay);
    let mut sent = 0usize;
    loop {
        let notified = sub.notify.notified();
        tokio::pin!(notified);
        notified.as_mut().enable();
        let next = {
            let mut st = lock(&sub.state);
            match st.queue.pop_front() {
                Some(frame) => Next::Frame(frame),
                None if st.ended => Next::End,
                None => Next::Wait,
            }
        };
        match next {
            Next::End => return,
            Next::Frame(frame) => {
                let faults = current(&shared, &session, sub.direction);
                // Set on a stream already past its count: this frame is
                // not delivered.
                if faults.gone_after.is_some_and(|n| sent >= n) {
                    let _ = write_gone(&out, &faults).await;
                    return;
                }
                match write_frame(&out, &faults, &frame, sent).await {
                    Ok(true) => sent += 1,
                    Ok(false) | Err(Closed) => return,
                }
                if faults.gone_after.is_some_and(|n| sent >= n) {
                    let _ = write_gone(&out, &faults).await;
                    return;
                }
            }
            Next::Wait => {
                tokio::select! {
                    () = &mut notified => {}
                    _ = keepalive.tick() => {
                        let faults = current(&shared, &session, sub.direction);
                        let nl = eol(&faults);
                        if out.write(&faults, format!(": keepalive{nl}{nl}").into_bytes()).await.is_err() {
                            return;
                        }
                    }
                    () = out.tx.closed() => return,
                }
            }
        }
    }
}

/// Writes one `event: mcp` event; `Ok(false)` when a cut fault ended the
/// stream inside it.
async fn write_frame(
    out: &Out,
    faults: &SseFaults,
    frame: &str,
    sent: usize,
) -> Result<bool, Closed> {
    let nl = eol(faults);
    if faults.garbage {
        let mut junk = Vec::new();
        junk.extend_from_slice(b"this line is not a field");
        junk.extend_from_slice(nl.as_bytes());
        junk.extend_from_slice(b"\xff\xfe\x80 not utf-8");
        junk.extend_from_slice(nl.as_bytes());
        junk.extend_from_slice(nl.as_bytes());
        junk.extend_from_slice(
            format!("event: mcp{nl}data: {{\"this is\": not json{nl}{nl}").as_bytes(),
        );
        out.write(faults, junk).await?;
    }
    let data = frame.as_bytes();
    if faults.cut_after.is_some_and(|n| sent >= n) {
        let cut = (data.len() / 2).max(1).min(data.len());
        let mut partial = format!("event: mcp{nl}data: ").into_bytes();
        partial.extend_from_slice(&data[..cut]);
        out.write(faults, partial).await?;
        return Ok(false);
    }
    let mut event = format!("event: mcp{nl}data: ").into_bytes();
    event.extend_from_slice(data);
    if let Some(limit) = faults.oversize
        && data.len() <= limit
    {
        event.resize(event.len() + (limit + 1 - data.len()), b' ');
    }
    event.extend_from_slice(nl.as_bytes());
    event.extend_from_slice(nl.as_bytes());
    out.write(faults, event).await?;
    Ok(true)
}

async fn write_gone(out: &Out, faults: &SseFaults) -> Result<(), Closed> {
    let nl = eol(faults);
    out.write(
        faults,
        format!("event: error{nl}data: session_gone{nl}{nl}").into_bytes(),
    )
    .await
}
