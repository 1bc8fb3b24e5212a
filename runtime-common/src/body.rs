//! How a runtime reports a response body to the core.

use human_plus_core::Leg;

/// The most of a bounded body held back before it is reported anyway (the
/// core refuses long-poll bodies over its frame budget, 256 KiB by
/// default; a POST's answer is a few bytes).
pub const WHOLE_BODY_CAP: usize = 1024 * 1024;

/// How a runtime reports a response body: the SSE stream chunk by chunk as
/// it arrives; a bounded body (a POST's answer, a poll's) whole, once it was
/// read to its end — so the connection is back among the kept ones before
/// the core acts on the answer and sends its next request. A bounded body
/// over [`WHOLE_BODY_CAP`] is reported as it comes from there on.
///
/// ```
/// use human_plus_core::Leg;
/// use human_plus_runtime::BodyReport;
///
/// let mut stream = BodyReport::for_leg(Leg::Events);
/// assert_eq!(stream.chunk(b"data: x\n\n"), Some(b"data: x\n\n".to_vec()));
///
/// let mut poll = BodyReport::for_leg(Leg::Poll);
/// assert_eq!(poll.chunk(b"{\"frames\":"), None);
/// assert_eq!(poll.chunk(b"[]}"), None);
/// assert_eq!(poll.end(), Some(b"{\"frames\":[]}".to_vec()));
/// ```
#[derive(Debug)]
pub struct BodyReport {
    whole: bool,
    held: Vec<u8>,
}

impl BodyReport {
    /// The report of a response on `leg`.
    #[must_use]
    pub fn for_leg(leg: Leg) -> Self {
        BodyReport {
            whole: leg != Leg::Events,
            held: Vec::new(),
        }
    }

    /// A chunk arrived: the bytes to report now, if any.
    pub fn chunk(&mut self, data: &[u8]) -> Option<Vec<u8>> {
        if !self.whole {
            return Some(data.to_vec());
        }
        self.held.extend_from_slice(data);
        if self.held.len() > WHOLE_BODY_CAP {
            self.whole = false;
            return Some(std::mem::take(&mut self.held));
        }
        None
    }

    /// The body ended: the bytes still to report, if any.
    pub fn end(&mut self) -> Option<Vec<u8>> {
        (!self.held.is_empty()).then(|| std::mem::take(&mut self.held))
    }

    /// Whether the body is still held back whole (nothing of it reported
    /// yet).
    #[must_use]
    pub fn holds_whole(&self) -> bool {
        self.whole
    }
}
