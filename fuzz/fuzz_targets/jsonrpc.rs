//! JSON-RPC framing and correlation.
//!
//! Input: byte 0 = mode, byte 1 = length of the expected id, then the id
//! (lossy UTF-8), then the frame.
//!
//! Properties:
//! - `correlate_bytes` agrees with `correlate` on the parsed frame (and is
//!   `Ignore` for bytes that are not JSON);
//! - only an object whose `id` is exactly the expected string, carrying
//!   `result` or `error` and no `method`, is a reply;
//! - mode 1 wraps the expected id in a real reply, written with every
//!   character of the id as a `\uXXXX` escape (valid JSON a surface may
//!   send): both must find the reply;
//! - `encode_request` writes one line of JSON that reads back as the
//!   request, and `RequestIds` never repeats;
//! - the path SSE frames take (`correlate_text`, its envelope read with the
//!   members' values skipped) agrees with `correlate` on every frame `Value`
//!   reads: the same frames are replies, the `result` text it notes reads
//!   as the reply's `result`, its error flag is a non-null `error`; a frame
//!   `Value` refuses is never a reply `Value` can read;
//! - `notice` on the bytes agrees with `notice_of` on the parsed frame, and
//!   an `encode_notification` frame reads back as its method and params.

#![no_main]

use human_plus_core::{
    Correlation, RequestIds, correlate, correlate_bytes, encode_notification, encode_request,
    fuzz_correlate_text, notice, notice_of,
};
use libfuzzer_sys::fuzz_target;
use serde_json::{Value, json};

fn is_reply(v: &Value, expected: &str) -> bool {
    v.as_object().is_some_and(|o| {
        o.get("id") == Some(&Value::String(expected.to_owned()))
            && !o.contains_key("method")
            && (o.contains_key("result") || o.contains_key("error"))
    })
}

fn escaped(s: &str) -> String {
    let mut out = String::from("\"");
    for unit in s.encode_utf16() {
        out.push_str(&format!("\\u{unit:04x}"));
    }
    out.push('"');
    out
}

/// `correlate_text` (the SSE path) against the `Value` reading.
fn text_agrees(frame: &[u8], expected: &str, parsed: Option<&Value>) {
    let Ok(text) = std::str::from_utf8(frame) else {
        return;
    };
    let by_text = fuzz_correlate_text(text, expected);
    match parsed {
        Some(v) => {
            assert_eq!(
                by_text.is_some(),
                is_reply(v, expected),
                "correlate_text disagrees with correlate"
            );
            if let Some((result, error, value)) = by_text {
                assert_eq!(value.as_ref(), Some(v), "the reply reads as the frame");
                let error_member = v.get("error").is_some_and(|e| !e.is_null());
                assert_eq!(error, error_member, "the error flag");
                match result {
                    Some(r) => {
                        assert!(!error);
                        let read: Value =
                            serde_json::from_str(&r).expect("the result text is JSON");
                        assert_eq!(Some(&read), v.get("result"), "the result text");
                    }
                    None => assert!(error || v.get("result").is_none()),
                }
            }
        }
        None => {
            if let Some((_, _, value)) = by_text {
                assert!(value.is_none(), "Value refused it, then read it");
            }
        }
    }
}

fn agree(frame: &[u8], expected: &str) -> Correlation {
    let by_bytes = correlate_bytes(frame, expected);
    let parsed = serde_json::from_slice::<Value>(frame).ok();
    text_agrees(frame, expected, parsed.as_ref());
    assert_eq!(
        notice(frame),
        parsed.as_ref().and_then(notice_of),
        "notice disagrees with notice_of"
    );
    match serde_json::from_slice::<Value>(frame) {
        Ok(v) => {
            let reply = is_reply(&v, expected);
            let by_value = correlate(v.clone(), expected);
            assert_eq!(
                by_value,
                if reply {
                    Correlation::Reply(v)
                } else {
                    Correlation::Ignore
                },
                "correlate"
            );
            assert_eq!(
                by_bytes, by_value,
                "correlate_bytes disagrees with correlate"
            );
        }
        Err(_) => assert_eq!(by_bytes, Correlation::Ignore),
    }
    by_bytes
}

fuzz_target!(|data: &[u8]| {
    let mode = data.first().copied().unwrap_or(0);
    let n = usize::from(data.get(1).copied().unwrap_or(0) % 64);
    let rest = data.get(2..).unwrap_or_default();
    let (id, frame) = rest.split_at(n.min(rest.len()));
    let expected = String::from_utf8_lossy(id).into_owned();

    agree(frame, &expected);

    match mode % 4 {
        1 => {
            // The reply with its id escaped, and the same unescaped.
            let tail = String::from_utf8_lossy(frame);
            let result = serde_json::from_str::<Value>(&tail).unwrap_or(json!({}));
            let plain = json!({"jsonrpc": "2.0", "id": expected, "result": result});
            let text = serde_json::to_string(&plain).unwrap();
            assert!(matches!(
                agree(text.as_bytes(), &expected),
                Correlation::Reply(_)
            ));
            let esc = format!(
                r#"{{"jsonrpc":"2.0","id":{},"result":{}}}"#,
                escaped(&expected),
                serde_json::to_string(&plain["result"]).unwrap()
            );
            assert!(
                matches!(agree(esc.as_bytes(), &expected), Correlation::Reply(_)),
                "an escaped id is still the id"
            );
        }
        2 => {
            // Encoding: one line, reads back, correlates with its reply.
            let method = String::from_utf8_lossy(frame).into_owned();
            let params = serde_json::from_slice::<Value>(frame).ok();
            let line = encode_request(&expected, &method, params.as_ref());
            assert!(!line.contains(&b'\n'), "frames are single-line");
            let back: Value = serde_json::from_slice(&line).expect("the frame is JSON");
            assert_eq!(back["jsonrpc"], "2.0");
            assert_eq!(back["id"], Value::String(expected.clone()));
            assert_eq!(back["method"], Value::String(method.clone()));
            assert_eq!(back.get("params"), params.as_ref());
            let note = encode_notification(&method, params.as_ref());
            assert!(!note.contains(&b'\n'), "frames are single-line");
            let note: Value = serde_json::from_slice(&note).expect("the frame is JSON");
            assert_eq!(note["method"], Value::String(method));
            assert!(note.get("id").is_none(), "a notification has no id");
            assert_eq!(note.get("params"), params.as_ref());
            let reply = json!({"jsonrpc": "2.0", "id": back["id"], "error": {"code": 1}});
            assert!(matches!(
                agree(reply.to_string().as_bytes(), &expected),
                Correlation::Reply(_)
            ));
        }
        3 => {
            let nonce = String::from_utf8_lossy(frame.get(..8).unwrap_or(frame)).into_owned();
            let mut ids = RequestIds::new(&expected, &nonce);
            let a = ids.next_id();
            let b = ids.next_id();
            assert_ne!(a, b);
            assert!(a.starts_with(&format!("{expected}-{nonce}-")));
        }
        _ => {}
    }
});
