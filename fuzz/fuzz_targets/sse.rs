//! The SSE decoder (`SseDecoder`) on arbitrary bytes and arbitrary chunking.
//!
//! Input: an 8-byte header, then the stream. Header byte 0 picks the event
//! budget, byte 1 the mode (high bit set: the rest builds events that are
//! encoded, then decoded back), bytes 2..8 seed the split points.
//!
//! Properties:
//! - split invariance: pushing at fuzzer-chosen points (draining after each
//!   push) gives exactly the results of one push;
//! - no event over the budget (the budget counts raw bytes; lossy UTF-8
//!   replacement may turn one raw byte into a 3-byte U+FFFD, so each
//!   U+FFFD counts as one byte here);
//! - at most one error, and it is the last result (the decoder poisons);
//! - the decoder's own buffers stay bounded by the budget however the
//!   bytes arrive (measured through its `Debug`, which prints them);
//! - encoded events decode back to themselves, whatever the split and line
//!   ending.

#![no_main]

use arbitrary::Unstructured;
use human_plus_core::{DEFAULT_MAX_EVENT_BYTES, Error, ProtocolError, SseDecoder, SseEvent};
use libfuzzer_sys::fuzz_target;

fn budget(b: u8) -> usize {
    match b {
        0..=63 => usize::from(b),
        64..=127 => usize::from(b - 64) * 16,
        128..=254 => usize::from(b - 128) * 64,
        255 => DEFAULT_MAX_EVENT_BYTES,
    }
}

struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0
    }
}

fn split_points(seed: &[u8], len: usize) -> Vec<usize> {
    let mut s = [0u8; 8];
    s[..seed.len().min(8)].copy_from_slice(&seed[..seed.len().min(8)]);
    let raw = u64::from_le_bytes(s);
    let mut rng = Rng(raw | 1);
    let n = (raw % 17) as usize;
    let mut cuts: Vec<usize> = (0..n).map(|_| (rng.next() as usize) % (len + 1)).collect();
    // Sometimes split every byte.
    if raw % 23 == 0 {
        cuts = (0..=len).collect();
    }
    cuts.sort_unstable();
    cuts
}

/// The raw size an event's data came from, at least.
fn raw_len(s: &str) -> usize {
    s.len() - 2 * s.matches('\u{fffd}').count()
}

fn one_shot(input: &[u8], max: usize) -> Vec<Result<SseEvent, Error>> {
    let mut d = SseDecoder::new(max);
    d.push(input);
    d.finish();
    std::iter::from_fn(|| d.next_event()).collect()
}

fn split(input: &[u8], max: usize, cuts: &[usize]) -> Vec<Result<SseEvent, Error>> {
    let mut d = SseDecoder::new(max);
    let mut out = Vec::new();
    let pieces = human_plus_fuzz::pieces(input, cuts);
    let every = pieces.len() / 16 + 1;
    for (i, piece) in pieces.into_iter().enumerate() {
        d.push(piece);
        out.extend(std::iter::from_fn(|| d.next_event()));
        if i % every != 0 {
            continue;
        }
        // Bounded buffers: the line, the data, the event type, the block
        // id and the last id are each at most `max` raw bytes; Debug
        // prints a byte in at most 10 characters.
        let shown = format!("{d:?}").len();
        assert!(
            shown <= 40 * max + 2048,
            "decoder holds too much: Debug is {shown} chars for a budget of {max}"
        );
    }
    d.finish();
    out.extend(std::iter::from_fn(|| d.next_event()));
    out
}

fn check(input: &[u8], max: usize, cuts: &[usize]) -> Vec<Result<SseEvent, Error>> {
    let whole = one_shot(input, max);
    let parts = split(input, max, cuts);
    assert_eq!(parts, whole, "split invariance (cuts {cuts:?})");
    for (i, r) in whole.iter().enumerate() {
        match r {
            Ok(e) => {
                assert!(raw_len(&e.data) <= max, "event data over budget {max}");
                assert!(
                    e.event == "message" || raw_len(&e.event) <= max,
                    "event name over budget"
                );
                assert!(!e.event.is_empty());
                if let Some(id) = &e.id {
                    assert!(!id.contains('\0'));
                }
            }
            Err(err) => {
                assert_eq!(
                    err,
                    &Error::Protocol(ProtocolError::FrameTooLarge { limit: max })
                );
                assert_eq!(i, whole.len() - 1, "nothing after the budget error");
            }
        }
    }
    whole
}

fn arb_events(u: &mut Unstructured<'_>) -> arbitrary::Result<(Vec<SseEvent>, usize, bool)> {
    let n = u.int_in_range(0..=5)?;
    let mut events = Vec::with_capacity(n);
    for _ in 0..n {
        let event: String = u.arbitrary()?;
        let event: String = event.chars().filter(|c| *c != '\r' && *c != '\n').collect();
        let event = if event.is_empty() || u.ratio(1, 2)? {
            "message".to_owned()
        } else {
            event
        };
        let data: String = u.arbitrary()?;
        let data = data.replace('\r', "");
        let id: Option<String> = u.arbitrary()?;
        let id = id.map(|s| {
            s.chars()
                .filter(|c| !matches!(c, '\r' | '\n' | '\0'))
                .collect()
        });
        let retry: Option<u64> = u.arbitrary()?;
        events.push(SseEvent {
            event,
            data,
            id,
            retry,
        });
    }
    Ok((events, u.int_in_range(0..=2)?, u.arbitrary()?))
}

fuzz_target!(|data: &[u8]| {
    let (header, body) = data.split_at(data.len().min(8));
    let max = budget(header.first().copied().unwrap_or(255));
    let mode = header.get(1).copied().unwrap_or(0);
    let seed = header.get(2..).unwrap_or_default();

    if mode & 0x80 == 0 {
        let cuts = split_points(seed, body.len());
        check(body, max, &cuts);
        // What the decoder tells of itself after the whole body.
        let mut d = if mode & 0x40 == 0 {
            SseDecoder::new(max)
        } else {
            SseDecoder::default()
        };
        d.push(body);
        let pending = d.pending_events();
        let mut drained = 0;
        while d.next_event().is_some() {
            drained += 1;
        }
        assert!(drained >= pending, "fewer events than pending");
        assert_eq!(d.pending_events(), 0);
        if mode & 0x40 == 0 {
            assert_eq!(d.max_event_bytes(), max);
        } else {
            assert_eq!(d.max_event_bytes(), DEFAULT_MAX_EVENT_BYTES);
        }
        let _ = (d.last_retry(), d.last_event_id());
        // A message event encodes and decodes back.
        let text = String::from_utf8_lossy(body).replace(['\r', '\n'], " ");
        let m = SseEvent::message(text.clone());
        assert_eq!(m, SseEvent::new("message", text));
        let mut back = SseDecoder::default();
        back.push(m.encode().as_bytes());
        if let Some(Ok(e)) = back.next_event() {
            assert_eq!(e.data, m.data);
        }
        return;
    }

    // Round trip: encode fuzzer-chosen events, decode them back.
    let mut u = Unstructured::new(body);
    let Ok((events, ending, bom)) = arb_events(&mut u) else {
        return;
    };
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
    let max = DEFAULT_MAX_EVENT_BYTES;
    let cuts = split_points(seed, text.len());
    let got = check(text.as_bytes(), max, &cuts);
    let want: Vec<Result<SseEvent, Error>> = events.into_iter().map(Ok).collect();
    assert_eq!(got, want, "encode then decode is the identity");
});
