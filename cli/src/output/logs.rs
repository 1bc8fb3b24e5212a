//! Where the command's log lines go: standard error, with every secret the
//! command holds redacted by exact value.
//!
//! The runtimes never hand the token to a library that logs (the blocking
//! runtime gives ureq the request head with a marker in its place), so no
//! record should hold it; this writer is the second wall. It redacts whole
//! values and their encodings ([`Secrets`]), one formatted line at a time.
//! A hex dump that splits a token over two lines is beyond any line
//! filter: that is why the first wall exists.

use std::io::{self, Write};
use std::sync::{PoisonError, RwLock};

use human_plus_core::Secrets;

static HIDDEN: RwLock<Vec<Secrets>> = RwLock::new(Vec::new());

/// Adds `secrets` to what every log line is redacted of, for the rest of
/// the process.
pub fn hide(secrets: &Secrets) {
    if secrets.is_empty() {
        return;
    }
    HIDDEN
        .write()
        .unwrap_or_else(PoisonError::into_inner)
        .push(secrets.clone());
}

/// `text` redacted of every secret given to [`hide`].
#[must_use]
pub fn redact(text: &str) -> String {
    let hidden = HIDDEN.read().unwrap_or_else(PoisonError::into_inner);
    let mut out = text.to_owned();
    for secrets in hidden.iter() {
        if secrets.appears_in(&out) {
            out = secrets.redact(&out).into_owned();
        }
    }
    out
}

/// Standard error, each write redacted of the hidden secrets: a
/// `tracing_subscriber` writer (each event is one write).
#[derive(Debug, Clone, Copy, Default)]
pub struct Stderr;

impl Write for Stderr {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        let text = String::from_utf8_lossy(buf);
        io::stderr().write_all(redact(&text).as_bytes())?;
        Ok(buf.len())
    }

    fn flush(&mut self) -> io::Result<()> {
        io::stderr().flush()
    }
}

impl<'a> tracing_subscriber::fmt::MakeWriter<'a> for Stderr {
    type Writer = Stderr;

    fn make_writer(&'a self) -> Self::Writer {
        Stderr
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use human_plus_core::SurfaceInvitation;

    #[test]
    fn hidden_secrets_are_redacted_and_data_is_not() {
        let inv = SurfaceInvitation::new(
            "https://relay.example",
            "demo_001",
            "logs-test-token-0123456789",
            "s",
            "a",
        )
        .unwrap();
        hide(&Secrets::of(&inv, None));
        assert_eq!(
            redact("GET /x?token=logs-test-token-0123456789 bearer abc"),
            "GET /x?token=[redacted] bearer abc"
        );
    }
}
