//! Plain text to the terminal.

use std::io::Write as _;

/// Writes `text` to stdout at once.
pub(crate) fn say(text: &str) {
    let mut out = std::io::stdout().lock();
    let _ = out.write_all(text.as_bytes());
    let _ = out.flush();
}
