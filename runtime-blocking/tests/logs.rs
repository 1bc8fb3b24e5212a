//! Every span and event this crate emits (at TRACE), and every `log`
//! record ureq emits (at TRACE too: its wire logs included), is captured while whole lifecycles and
//! failures run: none carries the token. One test in its own binary, since
//! it installs the process-wide collectors.

#![allow(clippy::unwrap_used, clippy::expect_used, missing_docs)]

mod common;

use std::fmt::Write as _;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use common::*;
use human_plus_core::RelayAuth;
use human_plus_relay::{Faults, Leg};
use serde_json::json;
use tracing::field::{Field, Visit};
use tracing::span::{Attributes, Id, Record};
use tracing::{Event, Metadata, Subscriber};

#[derive(Clone, Default)]
struct Lines(Arc<Mutex<Vec<String>>>);

impl Lines {
    fn push(&self, line: String) {
        self.0.lock().unwrap().push(line);
    }
    fn all(&self) -> Vec<String> {
        self.0.lock().unwrap().clone()
    }
}

struct Fields(String);

impl Visit for Fields {
    fn record_debug(&mut self, field: &Field, value: &dyn std::fmt::Debug) {
        let _ = write!(self.0, " {}={:?}", field.name(), value);
    }
    fn record_str(&mut self, field: &Field, value: &str) {
        let _ = write!(self.0, " {}={}", field.name(), value);
    }
}

struct Capture {
    lines: Lines,
    next: AtomicU64,
}

impl Subscriber for Capture {
    fn enabled(&self, _: &Metadata<'_>) -> bool {
        true
    }
    fn new_span(&self, span: &Attributes<'_>) -> Id {
        let mut f = Fields(format!("span {}", span.metadata().name()));
        span.record(&mut f);
        self.lines.push(f.0);
        Id::from_u64(self.next.fetch_add(1, Ordering::Relaxed) + 1)
    }
    fn record(&self, _: &Id, values: &Record<'_>) {
        let mut f = Fields("record".to_owned());
        values.record(&mut f);
        self.lines.push(f.0);
    }
    fn record_follows_from(&self, _: &Id, _: &Id) {}
    fn event(&self, event: &Event<'_>) {
        let mut f = Fields(format!("event {}", event.metadata().target()));
        event.record(&mut f);
        self.lines.push(f.0);
    }
    fn enter(&self, _: &Id) {}
    fn exit(&self, _: &Id) {}
}

struct LogCapture(Lines);

impl log::Log for LogCapture {
    fn enabled(&self, _: &log::Metadata<'_>) -> bool {
        true
    }
    fn log(&self, record: &log::Record<'_>) {
        self.0
            .push(format!("log {} {}", record.target(), record.args()));
    }
    fn flush(&self) {}
}

/// The bytes of ureq's hex-dump records (`6865 6c6c ...  hell...`), in
/// order, as one buffer.
fn wire_bytes(lines: &[String]) -> Vec<u8> {
    let mut out = Vec::new();
    for line in lines {
        let Some(row) = line.strip_prefix("log ureq_proto::util ") else {
            continue;
        };
        let hex: String = row
            .get(..40)
            .unwrap_or_default()
            .chars()
            .filter(|c| !c.is_whitespace())
            .collect();
        for pair in hex.as_bytes().chunks(2) {
            if let Ok(b) = u8::from_str_radix(std::str::from_utf8(pair).unwrap_or("--"), 16) {
                out.push(b);
            }
        }
    }
    out
}

#[test]
fn no_captured_log_line_carries_the_token() {
    let lines = Lines::default();
    tracing::subscriber::set_global_default(Capture {
        lines: lines.clone(),
        next: AtomicU64::new(0),
    })
    .unwrap();
    log::set_logger(Box::leak(Box::new(LogCapture(lines.clone())))).unwrap();
    // ureq writes the request line it was given into its own TRACE
    // records: it is given the URL with the token masked (see the crate
    // docs), so even its wire logs never hold the token.
    log::set_max_level(log::LevelFilter::Trace);

    for (tls, auth) in [
        (false, RelayAuth::Query),
        (true, RelayAuth::Query),
        (false, RelayAuth::Bearer),
        (true, RelayAuth::Bearer),
    ] {
        let world = if tls {
            World::tls("logs-tls")
        } else {
            World::http("logs")
        };
        for leg in legs() {
            let mut config = world.config(&leg, Duration::from_secs(3));
            config.egress = config.egress.auth(auth);
            let hp = world.manager_with(config);
            let a = hp.attach(OWNER, world.invitation(), participant()).unwrap();
            if auth == RelayAuth::Bearer {
                // Whether or not this relay reads the header, the request
                // head carrying it is written, and dumped by ureq.
                let _ = hp.tools(OWNER, a.id());
                continue;
            }
            hp.tools(OWNER, a.id()).unwrap();
            hp.call(OWNER, a.id(), "sheet_get_cell", json!({"address": "A1"}))
                .unwrap();
            world.set_faults(Faults::new().drop_replies());
            hp.changes_since(OWNER, a.id()).unwrap_err();
            world.set_faults(Faults::new().status(Leg::Inbox, 500));
            hp.call(OWNER, a.id(), "sheet_get_cell", json!({"address": "A1"}))
                .unwrap_err();
            world.set_faults(Faults::new());
            hp.detach(OWNER, a.id()).unwrap();
            let b = hp
                .attach(
                    OWNER,
                    world.invitation_with("WrongToken-2222222222222"),
                    participant(),
                )
                .unwrap();
            hp.tools(OWNER, b.id()).unwrap_err();
        }
    }

    let all = lines.all();
    assert!(
        all.iter().any(|l| l.starts_with("span human_plus.call")),
        "spans are emitted"
    );
    assert!(
        all.iter()
            .any(|l| l.contains("relay request") && l.contains("[redacted]")),
        "requests are logged with the redacted URL"
    );
    assert!(
        all.iter().any(|l| l.starts_with("log ureq")),
        "ureq logs are captured"
    );
    assert!(
        all.iter()
            .any(|l| l.starts_with("log ureq") && l.contains(human_plus_core::TOKEN_MARKER)),
        "ureq's wire logs are captured, and show the marker where the token goes"
    );
    // ureq's wire log is a hex dump, 16 bytes a record: a token split
    // over two records is in no single line, so read the bytes back.
    let dumped = wire_bytes(&all);
    assert!(
        dumped
            .windows(b"authorization: Bearer ".len())
            .any(|w| w.eq_ignore_ascii_case(b"authorization: Bearer ")),
        "the bearer header's hex dump is captured"
    );
    for secret in [TOKEN, "WrongToken-2222222222222"] {
        assert!(
            !dumped.windows(secret.len()).any(|w| w == secret.as_bytes()),
            "the token is in ureq's hex dump"
        );
    }
    for line in &all {
        assert!(!line.contains(TOKEN), "the token leaked: {line}");
        assert!(
            !line.contains("WrongToken-2222222222222"),
            "a token leaked: {line}"
        );
    }
}
