//! The core workloads, each a plain function over [`Inputs`](crate::data::Inputs), shared by the
//! criterion benches and the `compare` binary. `bench/python/bench.py`
//! has the Python port's counterpart of each.

use human_plus_core::{
    Admission, ChangeFeed, Correlation, DEFAULT_MAX_EVENT_BYTES, ListingReader, ListingVerdict,
    ResultGuard, SeededEntropy, SseDecoder, SurfaceChanges, ToolDefinition, TrustPolicy,
    admit_listing_bytes, correlate_bytes, encode_request,
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

/// The full path from the raw bytes of the answer, as a cold call takes it
/// when no verdict is kept: the page's hash, the borrowed parse, the
/// admission and the pinned tools' digests ([`ListingReader`]; the admitted
/// names are what a call needs). Before issue 21 this was: parse into a
/// `Value`, `from_listing` every entry, `admit` ([`admit_bytes_value`]).
///
/// # Panics
/// When the bytes are not a listing or the admission fails.
#[must_use]
pub fn admit_bytes(bytes: &[u8], policy: &TrustPolicy) -> Vec<String> {
    admit_listing_bytes(bytes, policy)
        .unwrap_or_else(|e| panic!("admission failed: {e}"))
        .admitted()
        .to_vec()
}

/// [`admit_bytes`], also building the admitted definitions (what a
/// `tools` operation hands back).
///
/// # Panics
/// When the bytes are not a listing or the admission fails.
#[must_use]
pub fn admit_bytes_definitions(bytes: &[u8], policy: &TrustPolicy) -> Admission {
    let text = std::str::from_utf8(bytes).unwrap_or_else(|e| panic!("{e}"));
    let mut reader = ListingReader::new();
    reader
        .page(text.to_owned(), None, policy, true)
        .unwrap_or_else(|e| panic!("{e}"));
    reader
        .finish(policy, None, true)
        .unwrap_or_else(|e| panic!("admission failed: {e}"))
        .admission
        .unwrap_or_default()
}

/// The path before issue 21, kept for comparison: parse the bytes into a
/// `Value`, then [`admit`].
///
/// # Panics
/// When the bytes are not JSON or the admission fails.
#[must_use]
pub fn admit_bytes_value(bytes: &[u8], policy: &TrustPolicy) -> Admission {
    let tools: Value = serde_json::from_slice(bytes).unwrap_or_else(|e| panic!("{e}"));
    admit(&tools, policy)
}

/// The same listing as a surface that does not write canonical JSON would
/// send it: `pretty`, indented (`serde_json::to_string_pretty`); and
/// compact with every object's members in reverse order (what an
/// insertion-ordered writer such as `JSON.stringify` sends when its keys
/// were not added in order). Neither is its own canonical form, so the
/// full path parses and writes every schema.
///
/// # Panics
/// When the bytes are not JSON.
#[must_use]
pub fn listing_not_canonical(bytes: &[u8]) -> (Vec<u8>, Vec<u8>) {
    fn reversed(v: &Value, out: &mut String) {
        match v {
            Value::Object(map) => {
                out.push('{');
                for (i, (k, v)) in map.iter().rev().enumerate() {
                    if i > 0 {
                        out.push(',');
                    }
                    out.push_str(&Value::String(k.clone()).to_string());
                    out.push(':');
                    reversed(v, out);
                }
                out.push('}');
            }
            Value::Array(items) => {
                out.push('[');
                for (i, item) in items.iter().enumerate() {
                    if i > 0 {
                        out.push(',');
                    }
                    reversed(item, out);
                }
                out.push(']');
            }
            other => out.push_str(&other.to_string()),
        }
    }
    let value: Value = serde_json::from_slice(bytes).unwrap_or_else(|e| panic!("{e}"));
    let pretty = serde_json::to_vec_pretty(&value).unwrap_or_else(|e| panic!("{e}"));
    let mut out = String::with_capacity(bytes.len());
    reversed(&value, &mut out);
    (pretty, out.into_bytes())
}

/// A cold call's listing when the kept verdict matches: the page's bytes
/// hashed and the verdict served (nothing parsed, admitted or digested).
///
/// # Panics
/// When the verdict is not served.
#[must_use]
pub fn readmit_unchanged(bytes: &[u8], policy: &TrustPolicy, kept: &ListingVerdict) -> usize {
    let text = std::str::from_utf8(bytes).unwrap_or_else(|e| panic!("{e}"));
    let mut reader = ListingReader::new();
    reader
        .page(text.to_owned(), Some(kept), policy, false)
        .unwrap_or_else(|e| panic!("{e}"));
    let outcome = reader
        .finish(policy, Some(kept), false)
        .unwrap_or_else(|e| panic!("{e}"));
    assert!(outcome.reused, "the kept verdict was not served");
    outcome.admitted().len()
}

/// The verdict a first listing leaves with the attachment.
///
/// # Panics
/// When the admission fails.
#[must_use]
pub fn first_verdict(bytes: &[u8], policy: &TrustPolicy) -> ListingVerdict {
    admit_listing_bytes(bytes, policy)
        .unwrap_or_else(|e| panic!("admission failed: {e}"))
        .verdict
        .into_owned()
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

/// The change feed answer read from its raw bytes, as an operation reads
/// it from the reply frame: one parse, each row read as it is parsed
/// (`SurfaceChanges::read_from_bytes`). Before issue 21 this was: parse
/// into a `Value`, then [`read_changes`] ([`read_changes_bytes_value`]).
///
/// # Panics
/// When the bytes are not JSON.
#[must_use]
pub fn read_changes_bytes(bytes: &[u8]) -> SurfaceChanges {
    SurfaceChanges::read_from_bytes(bytes, ChangeFeed::Offered).unwrap_or_else(|e| panic!("{e}"))
}

/// The path before issue 21, kept for comparison: parse the bytes into a
/// `Value`, then [`read_changes`].
///
/// # Panics
/// When the bytes are not JSON.
#[must_use]
pub fn read_changes_bytes_value(bytes: &[u8]) -> SurfaceChanges {
    let result: Value = serde_json::from_slice(bytes).unwrap_or_else(|e| panic!("{e}"));
    read_changes(&result)
}

/// Frames the 64 KiB result, under a budget with room for the frame
/// around it (the budget covers the whole framed answer since issue 19, so
/// the default budget no longer fits 64 KiB of text and its frame).
///
/// # Panics
/// When the framed text is over that budget.
#[must_use]
pub fn frame(text: &str, entropy: &mut SeededEntropy) -> String {
    ResultGuard::new(text.len() + FRAME_ROOM)
        .frame("sheet:one", "sheet_get_range", text, entropy)
        .unwrap_or_else(|e| panic!("{e}"))
}

/// Room for the frame around a result: its notice, tags and nonces.
const FRAME_ROOM: usize = 1024;

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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::data;

    /// Every workload `compare micro` times runs on the committed inputs
    /// without panicking (a workload that panics stops the whole table).
    #[test]
    fn every_workload_runs_on_the_committed_inputs() {
        let inputs = data::load(&data::default_dir()).unwrap();
        assert!(sse_decode(&inputs.sse, 8192) > 0);
        assert!(sse_receive(&inputs.sse, 8192).is_some());
        let names = admit_bytes(&inputs.tools_bytes, &inputs.policy);
        assert_eq!(
            admit(&inputs.tools, &inputs.policy)
                .admitted_names()
                .count(),
            names.len()
        );
        assert_eq!(
            admit_bytes_definitions(&inputs.tools_bytes, &inputs.policy)
                .admitted
                .len(),
            names.len()
        );
        assert_eq!(
            admit_bytes_value(&inputs.tools_bytes, &inputs.policy)
                .admitted
                .len(),
            names.len()
        );
        let (pretty, reversed) = listing_not_canonical(&inputs.tools_bytes);
        assert_eq!(admit_bytes(&pretty, &inputs.policy), names);
        assert_eq!(admit_bytes(&reversed, &inputs.policy), names);
        let kept = first_verdict(&inputs.tools_bytes, &inputs.policy);
        assert_eq!(
            readmit_unchanged(&inputs.tools_bytes, &inputs.policy, &kept),
            names.len()
        );
        assert_eq!(digest_all(&inputs.tools).len(), 200);
        assert_eq!(
            read_changes(&inputs.changes),
            read_changes_bytes(&inputs.changes_bytes)
        );
        assert_eq!(
            read_changes_bytes_value(&inputs.changes_bytes),
            read_changes_bytes(&inputs.changes_bytes)
        );
        let mut entropy = SeededEntropy::new(7);
        let framed = frame(&inputs.result, &mut entropy);
        assert!(framed.contains(&inputs.result));
        assert_eq!(copy_string(&inputs.result), inputs.result);
        assert_eq!(copy_bytes(&inputs.result), inputs.result.as_bytes());
        assert!(!encode(&inputs.request_id, &inputs.call_params).is_empty());
        assert!(correlate_noisy(&inputs.noisy).is_some());
    }
}
