//! An incremental, bounded Server-Sent Events decoder (the WHATWG
//! EventSource parsing algorithm), for the relay's `GET /{s}/events` leg.
//!
//! Bytes go in with [`SseDecoder::push`] however the network cuts them;
//! complete events come out of [`SseDecoder::next_event`]. The decoder
//! follows the WHATWG "event stream interpretation":
//!
//! * lines end with LF, CRLF or CR, including a CR at the end of one chunk
//!   and the LF at the start of the next (one line end, not two);
//! * one leading UTF-8 byte order mark is stripped;
//! * lines starting with `:` are comments and are ignored (the relay's
//!   `: keepalive`);
//! * `field: value` takes at most one space after the colon; a line without
//!   a colon is a field with an empty value; unknown fields are ignored;
//! * `data` lines are joined with `\n`; `event` names the event
//!   (`"message"` when absent or empty); `id` is ignored when it contains
//!   NUL; `retry` is taken only when it is ASCII digits;
//! * a blank line dispatches the event, unless no `data` line was seen (an
//!   event with no data is not dispatched, but its `id` and `retry` are
//!   still recorded: see [`SseDecoder::last_event_id`] and
//!   [`SseDecoder::last_retry`]);
//! * at the end of the stream ([`SseDecoder::finish`]) an incomplete event
//!   is discarded.
//!
//! Invalid UTF-8 in a field is replaced with U+FFFD (lossy decoding, as the
//! WHATWG UTF-8 decoder does), never refused.

use std::collections::VecDeque;

use crate::error::{Error, ProtocolError};

/// The default byte budget of one SSE event: 256 KiB, the relay's own
/// request-body cap.
pub const DEFAULT_MAX_EVENT_BYTES: usize = 262_144;

/// The UTF-8 byte order mark.
const SSE_BOM: [u8; 3] = [0xEF, 0xBB, 0xBF];

/// `bom` state once the start of the stream has been decided.
const SSE_BOM_DONE: u8 = 4;

/// The pending-line buffer keeps at most this much capacity between lines,
/// so one long line does not pin its allocation for the whole stream.
const SSE_LINE_KEEP: usize = 8_192;

/// One dispatched Server-Sent Event.
///
/// ```
/// use human_plus_core::{SseDecoder, SseEvent};
///
/// let mut d = SseDecoder::default();
/// d.push(b"event: mcp\ndata: {\"id\":1}\n\n");
/// let e = d.next_event().unwrap()?;
/// assert_eq!(e, SseEvent::new("mcp", "{\"id\":1}"));
/// # Ok::<(), human_plus_core::Error>(())
/// ```
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct SseEvent {
    /// The event type: the last `event:` field of the block, or
    /// `"message"` when there was none (or it was empty).
    pub event: String,
    /// The `data:` lines of the block, joined with `\n`.
    pub data: String,
    /// The `id:` field of this block, if it had one (WHATWG keeps the last
    /// id across events; that value is [`SseDecoder::last_event_id`]).
    pub id: Option<String>,
    /// The `retry:` field of this block, if it had a valid one.
    pub retry: Option<u64>,
}

impl SseEvent {
    /// An event of type `event` carrying `data`, with no id or retry.
    #[must_use]
    pub fn new(event: impl Into<String>, data: impl Into<String>) -> Self {
        SseEvent {
            event: event.into(),
            data: data.into(),
            id: None,
            retry: None,
        }
    }

    /// An event of the default type `"message"`.
    #[must_use]
    pub fn message(data: impl Into<String>) -> Self {
        SseEvent::new("message", data)
    }

    /// The event in the wire format, ending with its blank line: `event:`
    /// (omitted for `"message"`), `id:`, `retry:`, then one `data:` line
    /// per `\n`-separated line of the data. LF line ends.
    ///
    /// For tests and the local relay. It does not escape anything: the
    /// event name and id must not contain CR or LF, the id no NUL, and the
    /// data no CR, or the decoder will read back something else.
    ///
    /// ```
    /// use human_plus_core::SseEvent;
    ///
    /// assert_eq!(SseEvent::new("mcp", "a\nb").encode(), "event: mcp\ndata: a\ndata: b\n\n");
    /// assert_eq!(SseEvent::message("").encode(), "data: \n\n");
    /// ```
    #[must_use]
    pub fn encode(&self) -> String {
        let mut out = String::with_capacity(self.data.len() + self.event.len() + 24);
        if self.event != "message" {
            out.push_str("event: ");
            out.push_str(&self.event);
            out.push('\n');
        }
        if let Some(id) = &self.id {
            out.push_str("id: ");
            out.push_str(id);
            out.push('\n');
        }
        if let Some(retry) = self.retry {
            out.push_str("retry: ");
            out.push_str(&retry.to_string());
            out.push('\n');
        }
        for line in self.data.split('\n') {
            out.push_str("data: ");
            out.push_str(line);
            out.push('\n');
        }
        out.push('\n');
        out
    }
}

/// An incremental SSE decoder with a per-event byte budget.
///
/// Feed it with [`push`](SseDecoder::push), drain it with
/// [`next_event`](SseDecoder::next_event) until `None`, repeat; call
/// [`finish`](SseDecoder::finish) when the stream ends.
///
/// **Budget.** The bytes of one event — the data accumulated so far plus
/// the current line, counted whole including its field name — must not
/// exceed `max_event_bytes`. When they would, the decoder yields
/// `Err(Error::Protocol(ProtocolError::FrameTooLarge { limit }))` after
/// the events completed before it, frees its buffers and is **poisoned**:
/// further input is ignored and `next_event` returns `None` for ever.
/// Comment lines are discarded as they arrive and never count.
///
/// **Memory.** Push parses eagerly and buffers only an unterminated line,
/// refused before it outgrows the budget, so the decoder's own buffers
/// stay under about twice the budget (plus 8 KiB of kept line capacity)
/// however the bytes arrive. Dispatched events wait in a queue until they
/// are taken, so drain after each push.
///
/// The result does not depend on where the input is split.
///
/// ```
/// use human_plus_core::{Error, ProtocolError, SseDecoder};
///
/// let mut d = SseDecoder::new(16);
/// d.push(b"retry: 2000\n\n: keepalive\r\ndata: ok\r");
/// d.push(b"\n\r\n");
/// assert_eq!(d.next_event().unwrap()?.data, "ok");
/// assert_eq!(d.last_retry(), Some(2000));
///
/// d.push(b"data: this line is longer than sixteen bytes\n\n");
/// assert_eq!(
///     d.next_event(),
///     Some(Err(Error::Protocol(ProtocolError::FrameTooLarge { limit: 16 })))
/// );
/// assert!(d.is_poisoned());
/// d.push(b"data: x\n\n");
/// assert_eq!(d.next_event(), None);
/// # Ok::<(), human_plus_core::Error>(())
/// ```
#[derive(Debug, Clone)]
pub struct SseDecoder {
    max: usize,
    /// The pending, unterminated line (never a comment).
    line: Vec<u8>,
    /// Discarding a comment line until its end.
    in_comment: bool,
    /// The last byte seen was a CR that ended a line; an LF next is part of
    /// that line end.
    skip_lf: bool,
    /// How many BOM bytes matched at the start of the stream, or
    /// `SSE_BOM_DONE`.
    bom: u8,
    data: Vec<u8>,
    has_data: bool,
    event_type: Option<String>,
    block_id: Option<String>,
    block_retry: Option<u64>,
    last_event_id: String,
    last_retry: Option<u64>,
    ready: VecDeque<Result<SseEvent, Error>>,
    poisoned: bool,
}

impl Default for SseDecoder {
    /// A decoder with [`DEFAULT_MAX_EVENT_BYTES`].
    fn default() -> Self {
        SseDecoder::new(DEFAULT_MAX_EVENT_BYTES)
    }
}

impl SseDecoder {
    /// A decoder refusing any event over `max_event_bytes` (a budget of 0
    /// refuses every non-comment line).
    #[must_use]
    pub fn new(max_event_bytes: usize) -> Self {
        SseDecoder {
            max: max_event_bytes,
            line: Vec::new(),
            in_comment: false,
            skip_lf: false,
            bom: 0,
            data: Vec::new(),
            has_data: false,
            event_type: None,
            block_id: None,
            block_retry: None,
            last_event_id: String::new(),
            last_retry: None,
            ready: VecDeque::new(),
            poisoned: false,
        }
    }

    /// Feeds the next bytes of the stream. Complete events become available
    /// from [`next_event`](SseDecoder::next_event). Ignored once poisoned.
    pub fn push(&mut self, bytes: &[u8]) {
        if self.poisoned {
            return;
        }
        let mut rest = bytes;
        if self.bom < SSE_BOM_DONE {
            while let Some(&expected) = SSE_BOM.get(usize::from(self.bom)) {
                let Some((&b, tail)) = rest.split_first() else {
                    // Need more bytes to decide.
                    return;
                };
                if b != expected {
                    break;
                }
                self.bom += 1;
                rest = tail;
            }
            let matched = usize::from(self.bom);
            self.bom = SSE_BOM_DONE;
            if matched < SSE_BOM.len() {
                // A partial BOM followed by something else is data.
                self.feed(SSE_BOM.get(..matched).unwrap_or_default());
            }
        }
        self.feed(rest);
    }

    /// The next complete event, the budget error, or `None` when more
    /// bytes are needed (or for ever, once poisoned and drained).
    pub fn next_event(&mut self) -> Option<Result<SseEvent, Error>> {
        self.ready.pop_front()
    }

    /// Ends the current stream: an incomplete trailing event (and any
    /// unterminated line) is discarded, as WHATWG specifies. Events already
    /// dispatched stay available.
    ///
    /// The decoder can then read a new stream (a reconnection): BOM
    /// stripping is re-armed; [`last_event_id`](SseDecoder::last_event_id)
    /// and [`last_retry`](SseDecoder::last_retry) are kept, as an
    /// EventSource keeps them across reconnections. A poisoned decoder
    /// stays poisoned.
    ///
    /// ```
    /// use human_plus_core::SseDecoder;
    ///
    /// let mut d = SseDecoder::default();
    /// d.push(b"data: complete\n\ndata: incomplete\n");
    /// d.finish();
    /// assert_eq!(d.next_event().unwrap().unwrap().data, "complete");
    /// assert!(d.next_event().is_none());
    /// ```
    pub fn finish(&mut self) {
        self.line.clear();
        self.shrink_line();
        self.in_comment = false;
        self.skip_lf = false;
        self.bom = 0;
        self.data = Vec::new();
        self.has_data = false;
        self.event_type = None;
        self.block_id = None;
        self.block_retry = None;
    }

    /// The last valid `retry:` value seen (milliseconds), whether or not
    /// its block dispatched an event.
    #[must_use]
    pub fn last_retry(&self) -> Option<u64> {
        self.last_retry
    }

    /// The WHATWG "last event ID": the value of the last `id:` field
    /// without NUL (empty when none was seen, or an empty `id:` reset it).
    #[must_use]
    pub fn last_event_id(&self) -> &str {
        &self.last_event_id
    }

    /// The budget in bytes.
    #[must_use]
    pub fn max_event_bytes(&self) -> usize {
        self.max
    }

    /// Whether the budget was exceeded; the decoder then ignores input.
    #[must_use]
    pub fn is_poisoned(&self) -> bool {
        self.poisoned
    }

    /// How many results are waiting in the queue.
    #[must_use]
    pub fn pending_events(&self) -> usize {
        self.ready.len()
    }

    /// Splits `bytes` into lines and processes them.
    fn feed(&mut self, bytes: &[u8]) {
        let mut rest = bytes;
        while !rest.is_empty() && !self.poisoned {
            if self.skip_lf {
                self.skip_lf = false;
                if let Some((&b'\n', tail)) = rest.split_first() {
                    rest = tail;
                    continue;
                }
            }
            let Some(i) = sse_find_eol(rest) else {
                self.buffer_partial(rest);
                return;
            };
            let Some((head, tail)) = rest.split_at_checked(i) else {
                return;
            };
            let Some((&terminator, after)) = tail.split_first() else {
                return;
            };
            self.end_line(head);
            self.skip_lf = terminator == b'\r';
            rest = after;
        }
    }

    /// Keeps an unterminated piece of a line.
    fn buffer_partial(&mut self, part: &[u8]) {
        if self.in_comment {
            return;
        }
        if self.line.is_empty() && part.first() == Some(&b':') {
            self.in_comment = true;
            return;
        }
        if self.over_budget(self.line.len().saturating_add(part.len())) {
            self.fail();
            return;
        }
        self.line.extend_from_slice(part);
    }

    /// A line end was found; `head` is the rest of the line.
    fn end_line(&mut self, head: &[u8]) {
        if self.in_comment {
            self.in_comment = false;
            return;
        }
        if self.line.is_empty() {
            self.process_line(head);
            return;
        }
        if self.over_budget(self.line.len().saturating_add(head.len())) {
            self.fail();
            return;
        }
        self.line.extend_from_slice(head);
        let line = std::mem::take(&mut self.line);
        self.process_line(&line);
        if !self.poisoned {
            self.line = line;
            self.line.clear();
            self.shrink_line();
        }
    }

    fn shrink_line(&mut self) {
        if self.line.capacity() > SSE_LINE_KEEP {
            self.line = Vec::new();
        }
    }

    /// Whether the data so far plus a line of `line_len` bytes exceeds the
    /// budget.
    fn over_budget(&self, line_len: usize) -> bool {
        self.data.len().saturating_add(line_len) > self.max
    }

    /// One complete line, without its line end.
    fn process_line(&mut self, line: &[u8]) {
        match line.first() {
            None => {
                self.dispatch();
                return;
            }
            Some(b':') => return,
            Some(_) => {}
        }
        if self.over_budget(line.len()) {
            self.fail();
            return;
        }
        let mut parts = line.splitn(2, |&b| b == b':');
        let name = parts.next().unwrap_or_default();
        let value = match parts.next() {
            Some(v) => v.strip_prefix(b" ").unwrap_or(v),
            None => &[],
        };
        match name {
            b"data" => {
                if self.has_data {
                    self.data.push(b'\n');
                }
                self.data.extend_from_slice(value);
                self.has_data = true;
            }
            b"event" => self.event_type = Some(String::from_utf8_lossy(value).into_owned()),
            b"id" if !value.contains(&0) => {
                let id = String::from_utf8_lossy(value).into_owned();
                self.last_event_id.clone_from(&id);
                self.block_id = Some(id);
            }
            b"retry" => {
                if let Some(ms) = sse_parse_retry(value) {
                    self.last_retry = Some(ms);
                    self.block_retry = Some(ms);
                }
            }
            _ => {}
        }
    }

    /// A blank line: dispatch the event if it has data, reset the block.
    fn dispatch(&mut self) {
        let event_type = self.event_type.take();
        let id = self.block_id.take();
        let retry = self.block_retry.take();
        if !self.has_data {
            self.data.clear();
            return;
        }
        self.has_data = false;
        let data = match String::from_utf8(std::mem::take(&mut self.data)) {
            Ok(s) => s,
            Err(e) => String::from_utf8_lossy(e.as_bytes()).into_owned(),
        };
        // Each invalid byte becomes a three-byte U+FFFD: the budget holds
        // for what is handed out, not only for what arrived.
        if data.len() > self.max {
            self.fail();
            return;
        }
        let event = match event_type {
            Some(t) if !t.is_empty() => t,
            _ => "message".to_owned(),
        };
        self.ready.push_back(Ok(SseEvent {
            event,
            data,
            id,
            retry,
        }));
    }

    /// The budget was exceeded: queue the error, free the buffers, poison.
    fn fail(&mut self) {
        self.poisoned = true;
        self.line = Vec::new();
        self.data = Vec::new();
        self.has_data = false;
        self.event_type = None;
        self.block_id = None;
        self.block_retry = None;
        self.ready
            .push_back(Err(Error::Protocol(ProtocolError::FrameTooLarge {
                limit: self.max,
            })));
    }
}

/// `retry` values are ASCII digits only; one that overflows is ignored.
fn sse_parse_retry(value: &[u8]) -> Option<u64> {
    if value.is_empty() {
        return None;
    }
    value.iter().try_fold(0u64, |acc, &b| {
        if b.is_ascii_digit() {
            acc.checked_mul(10)?.checked_add(u64::from(b - b'0'))
        } else {
            None
        }
    })
}

/// The index of the first CR or LF in `hay`, eight bytes at a time.
fn sse_find_eol(hay: &[u8]) -> Option<usize> {
    const LO: u64 = 0x0101_0101_0101_0101;
    const HI: u64 = 0x8080_8080_8080_8080;
    const LF: u64 = LO * b'\n' as u64;
    const CR: u64 = LO * b'\r' as u64;
    // Flags the zero bytes of `v`. Bytes above the first zero may be
    // flagged spuriously (borrows), but the lowest flag is always exact.
    let zero_bytes = |v: u64| v.wrapping_sub(LO) & !v & HI;
    let (words, tail) = hay.as_chunks::<8>();
    for (n, word) in words.iter().enumerate() {
        let w = u64::from_le_bytes(*word);
        let hits = zero_bytes(w ^ LF) | zero_bytes(w ^ CR);
        if hits != 0 {
            return Some(n * 8 + (hits.trailing_zeros() / 8) as usize);
        }
    }
    tail.iter()
        .position(|&b| b == b'\n' || b == b'\r')
        .map(|i| words.len() * 8 + i)
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn decode_all(d: &mut SseDecoder) -> Vec<Result<SseEvent, Error>> {
        std::iter::from_fn(|| d.next_event()).collect()
    }

    fn one_shot(input: &[u8], max: usize) -> Vec<Result<SseEvent, Error>> {
        let mut d = SseDecoder::new(max);
        d.push(input);
        d.finish();
        decode_all(&mut d)
    }

    fn split(input: &[u8], max: usize, cuts: &[usize]) -> Vec<Result<SseEvent, Error>> {
        let mut d = SseDecoder::new(max);
        let mut cuts: Vec<usize> = cuts.iter().map(|c| c % (input.len() + 1)).collect();
        cuts.sort_unstable();
        let mut out = Vec::new();
        let mut start = 0;
        for c in cuts {
            d.push(&input[start..c]);
            out.extend(decode_all(&mut d));
            start = c;
        }
        d.push(&input[start..]);
        d.finish();
        out.extend(decode_all(&mut d));
        out
    }

    fn data(input: &str) -> Vec<String> {
        one_shot(input.as_bytes(), DEFAULT_MAX_EVENT_BYTES)
            .into_iter()
            .map(|r| r.unwrap().data)
            .collect()
    }

    #[test]
    fn line_endings_lf_crlf_cr() {
        assert_eq!(
            data("data: a\n\ndata: b\r\n\r\ndata: c\r\rdata: d\n\r\n"),
            ["a", "b", "c", "d"]
        );
    }

    #[test]
    fn cr_at_chunk_end_then_lf_is_one_line_end() {
        let mut d = SseDecoder::default();
        d.push(b"data: a\r");
        d.push(b"\ndata: b\r");
        d.push(b"\n\r");
        d.push(b"\n");
        let e = d.next_event().unwrap().unwrap();
        assert_eq!(e.data, "a\nb");
        assert!(d.next_event().is_none());
        // A CR then CR is two line ends: the second dispatches.
        d.push(b"data: c\r");
        d.push(b"\r");
        assert_eq!(d.next_event().unwrap().unwrap().data, "c");
    }

    #[test]
    fn bom_stripped_once_even_split() {
        let mut d = SseDecoder::default();
        d.push(&[0xEF]);
        d.push(&[0xBB]);
        d.push(&[0xBF]);
        d.push(b"data: x\n\n");
        assert_eq!(d.next_event().unwrap().unwrap().data, "x");
        // Only a leading BOM: a later one is part of the line (an unknown
        // field here).
        let out = one_shot(b"\xEF\xBB\xBF\xEF\xBB\xBFdata: x\n\ndata: y\n\n", 1024);
        assert_eq!(out.len(), 1);
        // A partial BOM is data, not dropped.
        let out = one_shot(b"\xEF\xBBdata: x\n\n", 1024);
        assert!(out.is_empty());
        let out = one_shot(b"\xEFdata\n\ndata: y\n\n", 1024);
        assert_eq!(out, [Ok(SseEvent::message("y"))]);
    }

    #[test]
    fn fields_per_spec() {
        let out = one_shot(
            b": comment\nevent:mcp\nid: 7\nretry: 1500\ndata\ndata:  two\nunknown: x\n\n",
            1024,
        );
        assert_eq!(
            out,
            [Ok(SseEvent {
                event: "mcp".into(),
                data: "\n two".into(),
                id: Some("7".into()),
                retry: Some(1500)
            })]
        );
        // An id with NUL is ignored; retry must be digits.
        let mut d = SseDecoder::default();
        d.push(b"id: a\0b\nretry: 12a\nretry: -1\ndata: x\n\n");
        let e = d.next_event().unwrap().unwrap();
        assert_eq!((e.id, e.retry), (None, None));
        assert_eq!(d.last_event_id(), "");
        assert_eq!(d.last_retry(), None);
        // Empty event name means message.
        assert_eq!(
            one_shot(b"event:\ndata: x\n\n", 64),
            [Ok(SseEvent::message("x"))]
        );
    }

    #[test]
    fn blocks_without_data_do_not_dispatch_but_record() {
        let mut d = SseDecoder::default();
        d.push(b"retry: 2000\n\nid: 9\nevent: x\n\ndata: y\n\n");
        let e = d.next_event().unwrap().unwrap();
        assert_eq!(e, SseEvent::message("y"));
        assert_eq!(d.last_retry(), Some(2000));
        assert_eq!(d.last_event_id(), "9");
    }

    #[test]
    fn the_relays_error_event() {
        let mut d = SseDecoder::default();
        d.push(b"event: error\ndata: session_gone\n\n");
        assert_eq!(
            d.next_event().unwrap().unwrap(),
            SseEvent::new("error", "session_gone")
        );
    }

    #[test]
    fn invalid_utf8_is_replaced() {
        let out = one_shot(b"data: a\xffb\n\n", 64);
        assert_eq!(out, [Ok(SseEvent::message("a\u{fffd}b"))]);
    }

    #[test]
    fn budget_counts_the_whole_line_and_poisons() {
        // "data: " + 10 bytes = 16: fits a budget of 16, not 15.
        let input = b"data: 0123456789\n\n";
        assert_eq!(one_shot(input, 16), [Ok(SseEvent::message("0123456789"))]);
        let tl = Err(Error::Protocol(ProtocolError::FrameTooLarge { limit: 15 }));
        assert_eq!(one_shot(input, 15), std::slice::from_ref(&tl));
        assert_eq!(split(input, 15, &[3, 9]), [tl]);
        // Data accumulates across lines.
        let out = one_shot(b"data: 12345\ndata: 12345\ndata: 12345\n\n", 20);
        assert_eq!(out.len(), 1);
        assert!(out[0].is_err());
        // An unterminated line is refused before it is complete.
        let mut d = SseDecoder::new(32);
        d.push(&[b'x'; 33]);
        assert!(d.next_event().unwrap().is_err());
        assert!(d.is_poisoned() && d.line.capacity() == 0);
    }

    #[test]
    fn comments_are_never_buffered() {
        let mut d = SseDecoder::new(8);
        d.push(b":");
        for _ in 0..1000 {
            d.push(&[b'k'; 100]);
        }
        d.push(b"\ndata: ok\n\n");
        assert_eq!(d.next_event().unwrap().unwrap().data, "ok");
        assert_eq!(d.line.capacity(), 0);
    }

    #[test]
    fn finish_discards_and_rearms() {
        let mut d = SseDecoder::default();
        d.push(b"id: 4\ndata: half");
        d.finish();
        assert!(d.next_event().is_none());
        assert_eq!(d.last_event_id(), "4");
        d.push(b"\xEF\xBB\xBFdata: new\n\n");
        assert_eq!(d.next_event().unwrap().unwrap().data, "new");
    }

    #[test]
    fn find_eol_matches_the_naive_scan() {
        for len in 0..40 {
            for pos in 0..=len {
                let mut v = vec![b'a'; len];
                if pos < len {
                    v[pos] = if pos % 2 == 0 { b'\n' } else { b'\r' };
                }
                // Bytes that could fool a sloppy SWAR test.
                if len > 0 && pos + 1 < len {
                    v[len - 1] = 0x0b;
                }
                let naive = v.iter().position(|&b| b == b'\n' || b == b'\r');
                assert_eq!(sse_find_eol(&v), naive, "{v:?}");
            }
        }
        let mut v: Vec<u8> = (0u8..=255).collect();
        v.retain(|&b| b != b'\n' && b != b'\r');
        assert_eq!(sse_find_eol(&v), None);
        v.push(b'\r');
        assert_eq!(sse_find_eol(&v), Some(254));
    }

    /// Up to `len` bytes, half of them drawn from `bias` (cheap to
    /// generate, unlike a `prop_oneof!` per byte).
    fn sse_bytes(len: usize, bias: &'static [u8]) -> impl Strategy<Value = Vec<u8>> {
        proptest::collection::vec(any::<(bool, u8)>(), 0..len).prop_map(move |v| {
            v.into_iter()
                .map(|(biased, b)| {
                    if biased {
                        bias[usize::from(b) % bias.len()]
                    } else {
                        b
                    }
                })
                .collect()
        })
    }

    fn arb_event() -> impl Strategy<Value = SseEvent> {
        (
            prop_oneof![Just("message".to_owned()), "[a-z][a-z0-9_]{0,7}"],
            "[^\r]{0,40}",
            proptest::option::of("[^\r\n\u{0}]{0,8}"),
            proptest::option::of(any::<u64>()),
        )
            .prop_map(|(event, data, id, retry)| SseEvent {
                event,
                data,
                id,
                retry,
            })
    }

    proptest! {
        #[test]
        fn decode_encode_round_trips_under_any_split_and_line_end(
            events in proptest::collection::vec(arb_event(), 0..6),
            ending in 0usize..3,
            bom in any::<bool>(),
            cuts in proptest::collection::vec(any::<usize>(), 0..12),
        ) {
            let mut text = String::new();
            if bom {
                text.push('\u{feff}');
            }
            for e in &events {
                text.push_str(": keepalive\n");
                text.push_str(&e.encode());
            }
            let text = match ending {
                0 => text,
                1 => text.replace('\n', "\r\n"),
                _ => text.replace('\n', "\r"),
            };
            let expected: Vec<Result<SseEvent, Error>> = events.into_iter().map(Ok).collect();
            prop_assert_eq!(&one_shot(text.as_bytes(), 4096), &expected);
            prop_assert_eq!(&split(text.as_bytes(), 4096, &cuts), &expected);
        }

        #[test]
        fn arbitrary_bytes_split_anywhere_give_the_same_results(
            input in sse_bytes(400, b"\n\r: data\xEF"),
            max in 0usize..64,
            cuts in proptest::collection::vec(any::<usize>(), 0..16),
        ) {
            let whole = one_shot(&input, max);
            prop_assert_eq!(&split(&input, max, &cuts), &whole);
            for e in whole.iter().flatten() {
                prop_assert!(e.data.len() <= max);
            }
        }

        #[test]
        fn prefixed_fields_split_anywhere(
            lines in proptest::collection::vec(
                ("(data|event|id|retry|:|x)", "[ -~]{0,12}", 0usize..4), 0..30),
            max in 1usize..64,
            cuts in proptest::collection::vec(any::<usize>(), 0..16),
        ) {
            let mut input = String::new();
            for (name, value, end) in &lines {
                input.push_str(name);
                input.push(':');
                input.push_str(value);
                input.push_str(["\n", "\r\n", "\r", "\n\n"][*end]);
            }
            let whole = one_shot(input.as_bytes(), max);
            prop_assert_eq!(&split(input.as_bytes(), max, &cuts), &whole);
            for e in whole.iter().flatten() {
                prop_assert!(e.data.len() <= max);
                prop_assert!(e.event == "message" || e.event.len() <= max);
            }
        }

        #[test]
        fn budget_and_memory_hold_however_bytes_arrive(
            chunks in proptest::collection::vec(sse_bytes(300, b"xxx\n:"), 0..40),
            prefix in prop_oneof![Just(&b""[..]), Just(&b"data:"[..])],
            max in 1usize..512,
        ) {
            let mut d = SseDecoder::new(max);
            d.push(prefix);
            for chunk in &chunks {
                d.push(chunk);
                while let Some(r) = d.next_event() {
                    if let Ok(e) = r {
                        prop_assert!(e.data.len() <= max);
                    }
                }
                prop_assert!(d.line.len() + d.data.len() <= max);
                prop_assert!(
                    d.line.capacity() + d.data.capacity() <= 2 * max + SSE_LINE_KEEP + 16,
                    "line {} data {} max {}", d.line.capacity(), d.data.capacity(), max
                );
            }
        }
    }
}
