//! Fault injection: make the relay misbehave on purpose, per server or per
//! session, so clients can be tested against the failures real relays and
//! the networks in front of them produce.

use std::time::Duration;

/// One leg of a session, as a target for [`Faults::delay`] and
/// [`Faults::status`].
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Leg {
    /// `POST /{session}/inbox` (agent to page).
    Inbox,
    /// `POST /{session}/outbox` (page to agents).
    Outbox,
    /// `GET /{session}/events` (the SSE receive leg).
    Events,
    /// `GET /{session}/poll` (the long-poll receive leg).
    Poll,
}

/// How often a counted fault still fires.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Remaining {
    Always,
    Times(u32),
}

impl Remaining {
    fn from_times(n: Option<u32>) -> Remaining {
        n.map_or(Remaining::Always, Remaining::Times)
    }

    /// Consumes one firing; false when exhausted.
    fn take(&mut self) -> bool {
        match self {
            Remaining::Always => true,
            Remaining::Times(0) => false,
            Remaining::Times(n) => {
                *n -= 1;
                true
            }
        }
    }
}

#[derive(Debug, Clone, PartialEq, Eq)]
struct StatusFault {
    leg: Leg,
    status: u16,
    remaining: Remaining,
}

/// A set of faults for the relay to inject.
///
/// Configure a default for every session with
/// [`RelayServerBuilder::faults`](crate::RelayServerBuilder::faults) or
/// [`RelayHandle::set_default_faults`](crate::RelayHandle::set_default_faults),
/// or one session's with
/// [`RelayHandle::set_faults`](crate::RelayHandle::set_faults) (a session's
/// faults replace the default entirely for that session). Faults are read
/// per request and, on an SSE stream, per frame, so changing them affects
/// streams already open.
///
/// What each fault does:
///
/// * [`delay`](Faults::delay): sleep before handling a request on that leg
///   (for `events`, before the subscriber is created).
/// * [`status`](Faults::status): answer the leg with that status and
///   `{"error":"injected_fault"}` instead of handling it (after the method
///   check; nothing is read, queued or subscribed).
/// * [`drop_replies`](Faults::drop_replies) /
///   [`duplicate_replies`](Faults::duplicate_replies): a single JSON-RPC
///   response posted to `outbox` is answered `200` but delivered to nobody,
///   or delivered twice to each recipient.
/// * `sse_*`: shape the bytes of `events` streams (see each method).
/// * [`lose_inbox_answers`](Faults::lose_inbox_answers): a frame POSTed to
///   `inbox` is taken and fanned out, then the connection is broken
///   instead of answered.
///
/// Faults on the receive legs (`delay`/`status` on [`Leg::Events`] and
/// [`Leg::Poll`], and every `sse_*` fault) hit only the agents' legs
/// (`direction=outbound`) unless [`Faults::affect_pages`] extends them to
/// the page's inbound leg: a fault meant for the agent under test should
/// not silently swallow the request on its way to the page.
///
/// ```
/// use std::time::Duration;
/// use human_plus_relay::{Faults, Leg};
///
/// let faults = Faults::new()
///     .delay(Leg::Inbox, Duration::from_millis(200))
///     .status_times(Leg::Poll, 503, 1)
///     .sse_crlf()
///     .sse_cut_after(2);
/// assert!(!faults.is_empty());
/// assert!(Faults::new().is_empty());
/// ```
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Faults {
    delays: Vec<(Leg, Duration)>,
    statuses: Vec<StatusFault>,
    drop_replies: Option<Remaining>,
    duplicate_replies: Option<Remaining>,
    sse_cut_after: Option<usize>,
    sse_trickle: Option<Duration>,
    sse_crlf: bool,
    sse_garbage: bool,
    sse_gone_after: Option<usize>,
    sse_oversize: Option<usize>,
    lose_inbox_answers: Option<Remaining>,
    lose_answers_to: Option<String>,
    pages: bool,
}

impl Faults {
    /// No faults: the relay behaves like the real one.
    #[must_use]
    pub fn new() -> Faults {
        Faults::default()
    }

    /// True when no fault is configured.
    #[must_use]
    pub fn is_empty(&self) -> bool {
        *self == Faults::default()
    }

    /// Sleep `by` before handling each request on `leg`.
    #[must_use]
    pub fn delay(mut self, leg: Leg, by: Duration) -> Faults {
        self.delays.retain(|(l, _)| *l != leg);
        self.delays.push((leg, by));
        self
    }

    /// Answer every request on `leg` with `status` (meant for 5xx; any
    /// valid status code is accepted, an invalid one is answered as 500).
    #[must_use]
    pub fn status(self, leg: Leg, status: u16) -> Faults {
        self.push_status(leg, status, None)
    }

    /// Answer the next `times` requests on `leg` with `status`, then
    /// behave normally.
    #[must_use]
    pub fn status_times(self, leg: Leg, status: u16, times: u32) -> Faults {
        self.push_status(leg, status, Some(times))
    }

    fn push_status(mut self, leg: Leg, status: u16, times: Option<u32>) -> Faults {
        self.statuses.retain(|s| s.leg != leg);
        self.statuses.push(StatusFault {
            leg,
            status,
            remaining: Remaining::from_times(times),
        });
        self
    }

    /// Drop every JSON-RPC response the page posts to `outbox` (answered
    /// `200`, delivered to nobody).
    #[must_use]
    pub fn drop_replies(mut self) -> Faults {
        self.drop_replies = Some(Remaining::Always);
        self
    }

    /// Drop the next `times` responses posted to `outbox`.
    #[must_use]
    pub fn drop_replies_times(mut self, times: u32) -> Faults {
        self.drop_replies = Some(Remaining::Times(times));
        self
    }

    /// Deliver every response posted to `outbox` twice.
    #[must_use]
    pub fn duplicate_replies(mut self) -> Faults {
        self.duplicate_replies = Some(Remaining::Always);
        self
    }

    /// Deliver the next `times` responses posted to `outbox` twice.
    #[must_use]
    pub fn duplicate_replies_times(mut self, times: u32) -> Faults {
        self.duplicate_replies = Some(Remaining::Times(times));
        self
    }

    /// After `frames` complete `event: mcp` events on a stream, write the
    /// next event only up to the middle of its `data:` line and end the
    /// stream (that frame is consumed and lost, as a cut connection loses
    /// it).
    #[must_use]
    pub fn sse_cut_after(mut self, frames: usize) -> Faults {
        self.sse_cut_after = Some(frames);
        self
    }

    /// Write SSE bytes one at a time, sleeping `per_byte` after each.
    #[must_use]
    pub fn sse_trickle(mut self, per_byte: Duration) -> Faults {
        self.sse_trickle = Some(per_byte);
        self
    }

    /// End SSE lines with CRLF instead of LF (the frame's own bytes are
    /// left alone).
    #[must_use]
    pub fn sse_crlf(mut self) -> Faults {
        self.sse_crlf = true;
        self
    }

    /// Before every frame, write lines a reader must skip: a line that is
    /// not a field, a line of invalid UTF-8, and a complete `event: mcp`
    /// event whose `data:` is not JSON.
    #[must_use]
    pub fn sse_garbage(mut self) -> Faults {
        self.sse_garbage = true;
        self
    }

    /// After `frames` complete events (0 = right after `retry:`), write
    /// `event: error` / `data: session_gone` and end the stream, as the relay
    /// does for a session that ended (the session itself stays registered).
    /// On a stream already past `frames` when this is set, it fires instead
    /// of the next frame.
    #[must_use]
    pub fn sse_gone_after(mut self, frames: usize) -> Faults {
        self.sse_gone_after = Some(frames);
        self
    }

    /// Pad every frame on `events` with trailing spaces (still valid JSON)
    /// to more than `bytes` bytes.
    #[must_use]
    pub fn sse_oversize(mut self, bytes: usize) -> Faults {
        self.sse_oversize = Some(bytes);
        self
    }

    /// Extend the receive-leg faults to the page's inbound subscribers.
    #[must_use]
    pub fn affect_pages(mut self) -> Faults {
        self.pages = true;
        self
    }

    /// Take every frame POSTed to `inbox` (it reaches the page, which may
    /// act on it), then break the connection instead of answering: the
    /// agent's POST is delivered, but its HTTP answer is lost.
    #[must_use]
    pub fn lose_inbox_answers(mut self) -> Faults {
        self.lose_inbox_answers = Some(Remaining::Always);
        self
    }

    /// As [`Faults::lose_inbox_answers`], for the next `times` POSTs.
    #[must_use]
    pub fn lose_inbox_answers_times(mut self, times: u32) -> Faults {
        self.lose_inbox_answers = Some(Remaining::Times(times));
        self
    }

    /// Limits [`Faults::lose_inbox_answers`] to frames of JSON-RPC `method`
    /// (`tools/call`, say): other POSTs are answered.
    #[must_use]
    pub fn lose_answers_to(mut self, method: impl Into<String>) -> Faults {
        self.lose_answers_to = Some(method.into());
        self
    }

    /// Whether receive-leg faults apply to a subscriber reading `inbound`.
    pub(crate) fn hits(&self, leg: Leg, inbound: bool) -> bool {
        !inbound || self.pages || matches!(leg, Leg::Inbox | Leg::Outbox)
    }

    pub(crate) fn delay_for(&self, leg: Leg) -> Option<Duration> {
        self.delays.iter().find(|(l, _)| *l == leg).map(|(_, d)| *d)
    }

    /// The injected status for `leg`, consuming one firing.
    pub(crate) fn take_status(&mut self, leg: Leg) -> Option<u16> {
        let fault = self.statuses.iter_mut().find(|s| s.leg == leg)?;
        fault.remaining.take().then_some(fault.status)
    }

    pub(crate) fn take_lose_inbox_answer(&mut self) -> bool {
        self.lose_inbox_answers
            .as_mut()
            .is_some_and(Remaining::take)
    }

    pub(crate) fn take_drop_reply(&mut self) -> bool {
        self.drop_replies.as_mut().is_some_and(Remaining::take)
    }

    pub(crate) fn take_duplicate_reply(&mut self) -> bool {
        self.duplicate_replies.as_mut().is_some_and(Remaining::take)
    }

    pub(crate) fn sse(&self) -> SseFaults {
        SseFaults {
            cut_after: self.sse_cut_after,
            trickle: self.sse_trickle,
            crlf: self.sse_crlf,
            garbage: self.sse_garbage,
            gone_after: self.sse_gone_after,
            oversize: self.sse_oversize,
        }
    }
}

/// The SSE-shaping part of [`Faults`], copied out for a stream writer.
#[derive(Debug, Clone, Copy, Default)]
pub(crate) struct SseFaults {
    pub(crate) cut_after: Option<usize>,
    pub(crate) trickle: Option<Duration>,
    pub(crate) crlf: bool,
    pub(crate) garbage: bool,
    pub(crate) gone_after: Option<usize>,
    pub(crate) oversize: Option<usize>,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn counted_faults_run_out() {
        let mut f = Faults::new()
            .status_times(Leg::Poll, 503, 2)
            .drop_replies_times(1);
        assert_eq!(f.take_status(Leg::Poll), Some(503));
        assert_eq!(f.take_status(Leg::Inbox), None);
        assert_eq!(f.take_status(Leg::Poll), Some(503));
        assert_eq!(f.take_status(Leg::Poll), None);
        assert!(f.take_drop_reply());
        assert!(!f.take_drop_reply());
        assert!(!f.take_duplicate_reply());
        let mut always = Faults::new().status(Leg::Inbox, 500);
        for _ in 0..5 {
            assert_eq!(always.take_status(Leg::Inbox), Some(500));
        }
    }
}
