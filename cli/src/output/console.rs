//! Plain text to the terminal.

use std::io::{BufRead as _, Write as _};

use crate::output::exit::Failure;

/// Writes `text` to stdout at once.
pub(crate) fn say(text: &str) {
    let mut out = std::io::stdout().lock();
    let _ = out.write_all(text.as_bytes());
    let _ = out.flush();
}

/// Asks the person, when there is a terminal.
pub(crate) struct Asker {
    /// Whether there is a person at a terminal to ask.
    pub(crate) interactive: bool,
}

impl Asker {
    /// `question [y/N]` on stderr, the answer from the terminal; `default`
    /// on an empty answer. Without a terminal: `flag`.
    pub(crate) fn confirm(
        &self,
        question: &str,
        default: bool,
        flag: bool,
    ) -> Result<bool, Failure> {
        if !self.interactive {
            return Ok(flag);
        }
        if flag {
            return Ok(true);
        }
        let mut err = std::io::stderr().lock();
        let _ = write!(err, "{question} [{}] ", if default { "Y/n" } else { "y/N" });
        let _ = err.flush();
        let mut line = String::new();
        std::io::stdin()
            .lock()
            .read_line(&mut line)
            .map_err(|e| Failure::internal(format!("cannot read the answer: {e}")))?;
        Ok(match line.trim().to_ascii_lowercase().as_str() {
            "" => default,
            "y" | "yes" => true,
            _ => false,
        })
    }
}
