//! Every captured log line (spans and events, at TRACE) is free of the
//! token, while the operation spans and redacted request URLs are there.

#![allow(missing_docs, clippy::unwrap_used, clippy::expect_used, clippy::panic)]

mod common;

use std::io;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use common::*;
use human_plus_relay::SurfaceLeg;
use human_plus_tokio::Activity;
use serde_json::json;
use tracing_subscriber::fmt::MakeWriter;
use tracing_subscriber::fmt::format::FmtSpan;

#[derive(Clone, Default)]
struct Capture(Arc<Mutex<Vec<u8>>>);

impl io::Write for Capture {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        self.0.lock().unwrap().extend_from_slice(buf);
        Ok(buf.len())
    }
    fn flush(&mut self) -> io::Result<()> {
        Ok(())
    }
}

impl<'a> MakeWriter<'a> for Capture {
    type Writer = Capture;
    fn make_writer(&'a self) -> Self::Writer {
        self.clone()
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn logs_never_carry_the_token() {
    let capture = Capture::default();
    let subscriber = tracing_subscriber::fmt()
        .with_writer(capture.clone())
        .with_max_level(tracing::Level::TRACE)
        .with_span_events(FmtSpan::NEW | FmtSpan::CLOSE)
        .with_ansi(false)
        .finish();
    tracing::subscriber::set_global_default(subscriber).unwrap();

    for leg in legs() {
        let relay = Relay::start(Wire::Plain).await;
        let surface = relay.surface("logged", SurfaceLeg::Sse).await;
        let hp = relay.manager(relay.config(leg.clone(), Duration::from_secs(30)));
        let id = hp
            .attach(OWNER, relay.invitation("logged", TOKEN), participant())
            .await
            .unwrap()
            .id()
            .to_owned();
        bounded("tools", hp.tools(OWNER, &id)).await.unwrap();
        bounded(
            "call",
            hp.call(OWNER, &id, "sheet_get_cell", json!({"address": "A2"})),
        )
        .await
        .unwrap();
        bounded("changes", hp.changes_since(OWNER, &id))
            .await
            .unwrap();
        bounded(
            "announce",
            hp.announce(OWNER, &id, &Activity::new("reading")),
        )
        .await
        .unwrap();
        // A failing request is logged too (a call: with the leg kept, a
        // listing may be answered from the kept one, sending nothing).
        relay.handle.drop_session("logged");
        let gone = hp.call(OWNER, &id, "sheet_get_cell", json!({"address": "A2"}));
        let err = bounded("gone", gone).await.unwrap_err();
        assert_eq!(err.code(), "surface_unavailable");
        surface.shutdown().await;
        relay.handle.shutdown().await;
    }

    let text = String::from_utf8(capture.0.lock().unwrap().clone()).unwrap();
    assert!(!text.is_empty());
    for line in text.lines() {
        assert!(
            !line.contains(TOKEN),
            "a log line carries the token: {line}"
        );
        assert!(
            !line.to_ascii_lowercase().contains("authorization"),
            "a log line carries headers: {line}"
        );
    }
    for span in [
        "human_plus.attach",
        "human_plus.tools",
        "human_plus.call",
        "human_plus.changes_since",
        "human_plus.announce",
    ] {
        assert!(text.contains(span), "no {span} span in the log");
    }
    assert!(
        text.contains("tool=sheet_get_cell"),
        "the call span names its tool"
    );
    assert!(
        text.contains("?[redacted]"),
        "requests are logged with the redacted URL"
    );
}
