//! The core workloads, each a plain function over [`Inputs`](crate::data::Inputs), shared by the
//! criterion benches and the `compare` binary. `bench/python/bench.py`
//! has the Python port's counterpart of each.

use human_plus_core::{
    Admission, ChangeFeed, Correlation, DEFAULT_MAX_EVENT_BYTES, ResultGuard, SeededEntropy,
    SseDecoder, SurfaceChanges, ToolDefinition, TrustPolicy, correlate_bytes, encode_request,
};
use serde_json::Value;

use crate::data::EXPECTED_ID;

/// SSE decoding alone: push the stream in `chunk`-byte pieces, drain every
/// event after each push. Returns the bytes of data decoded.
#[must_use]
pub fn sse_decode(stream: &[u8], chunk: usize) -> usize {
    let mut decoder = SseDecoder::new(DEFAULT_MAX_EVENT_BYTES);
    let mut total = 0;
    for piece in stream.chunks(chunk) {
        decoder.push(piece);
        while let Some(event) = decoder.next_event() {
            if let Ok(e) = event {
                total += e.data.len();
            }
        }
    }
    total
}

/// What an exchange's SSE leg does with the stream: decode, and correlate
/// each event's data with the awaited id until the reply (the last event).
#[must_use]
pub fn sse_receive(stream: &[u8], chunk: usize) -> Option<Value> {
    let mut decoder = SseDecoder::new(DEFAULT_MAX_EVENT_BYTES);
    for piece in stream.chunks(chunk) {
        decoder.push(piece);
        while let Some(event) = decoder.next_event() {
            let Ok(e) = event else { return None };
            if let Correlation::Reply(v) = correlate_bytes(e.data.as_bytes(), EXPECTED_ID) {
                return Some(v);
            }
        }
    }
    None
}

fn listed(tools: &Value) -> Vec<ToolDefinition> {
    tools
        .get("tools")
        .and_then(Value::as_array)
        .map(|a| {
            a.iter()
                .filter_map(|t| ToolDefinition::from_listing(t).ok())
                .collect()
        })
        .unwrap_or_default()
}

/// Admission plus digest of a `tools/list` answer: every entry through
/// `from_listing`, then `admit` under the policy (every allowed tool is
/// pinned, so each is digested and compared).
///
/// # Panics
/// When the admission fails (a pin mismatch would be a generator bug).
#[must_use]
pub fn admit(tools: &Value, policy: &TrustPolicy) -> Admission {
    policy
        .admit(listed(tools))
        .unwrap_or_else(|e| panic!("admission failed: {e}"))
}

/// [`admit`] from the raw bytes of the answer (JSON parsing included).
///
/// # Panics
/// When the bytes are not JSON or the admission fails.
#[must_use]
pub fn admit_bytes(bytes: &[u8], policy: &TrustPolicy) -> Admission {
    let tools: Value = serde_json::from_slice(bytes).unwrap_or_else(|e| panic!("{e}"));
    admit(&tools, policy)
}

/// The digest of every listed tool (no admission).
#[must_use]
pub fn digest_all(tools: &Value) -> Vec<String> {
    listed(tools).iter().map(ToolDefinition::digest).collect()
}

/// Reads the change feed answer.
#[must_use]
pub fn read_changes(result: &Value) -> SurfaceChanges {
    SurfaceChanges::read_from(result, ChangeFeed::Offered)
}

/// [`read_changes`] from the raw bytes (JSON parsing included).
///
/// # Panics
/// When the bytes are not JSON.
#[must_use]
pub fn read_changes_bytes(bytes: &[u8]) -> SurfaceChanges {
    let result: Value = serde_json::from_slice(bytes).unwrap_or_else(|e| panic!("{e}"));
    read_changes(&result)
}

/// Frames the 64 KiB result.
///
/// # Panics
/// When the text is over the default budget (it is exactly the budget).
#[must_use]
pub fn frame(text: &str, entropy: &mut SeededEntropy) -> String {
    ResultGuard::default()
        .frame("sheet:one", "sheet_get_range", text, entropy)
        .unwrap_or_else(|e| panic!("{e}"))
}

/// The floor of framing: copying the same bytes into a new `String`.
#[must_use]
pub fn copy_string(text: &str) -> String {
    let mut out = String::with_capacity(text.len() + 1);
    out.push_str(text);
    out
}

/// The floor of framing, as bytes: `Vec::extend_from_slice`.
#[must_use]
pub fn copy_bytes(text: &str) -> Vec<u8> {
    let mut out = Vec::with_capacity(text.len() + 1);
    out.extend_from_slice(text.as_bytes());
    out
}

/// Encodes the pinned `tools/call` request.
#[must_use]
pub fn encode(id: &str, params: &Value) -> Vec<u8> {
    encode_request(id, "tools/call", Some(params))
}

/// Correlates each frame of the noisy stream with the awaited id until the
/// reply (the last frame).
#[must_use]
pub fn correlate_noisy(frames: &[Vec<u8>]) -> Option<Value> {
    frames
        .iter()
        .find_map(|f| match correlate_bytes(f, EXPECTED_ID) {
            Correlation::Reply(v) => Some(v),
            Correlation::Ignore => None,
        })
}
