//! A line typed or pasted at a terminal without echo, as a password prompt
//! reads it: `join`'s link holds the relay token, and what a terminal
//! echoes stays in its scrollback and in any recording of the session.
//!
//! On Unix the terminal's echo is turned off for the read only (termios,
//! through rustix's safe wrappers), and with it the line discipline's
//! editing and signal keys (`ICANON`, `ISIG`, `IEXTEN`), so that every key
//! arrives here as a byte and no signal can end the process while the echo
//! is off: Ctrl-C (and Ctrl-\) give [`Hidden::Interrupted`], Enter ends the
//! line, Ctrl-D ends it too (on an empty line: [`Hidden::End`]), Backspace
//! removes the last character, Ctrl-U the whole line; other control keys
//! and the escape sequences of cursor keys are ignored. The terminal's
//! previous settings are restored on every way out: the line read, an
//! interruption, an error, a panic (the restoring guard is dropped while
//! unwinding). No signal handler is installed.
//!
//! Elsewhere the line is read as it is typed, echoed.

use std::io::Write as _;

/// What [`read_hidden`] read.
#[derive(Clone, PartialEq, Eq)]
pub enum Hidden {
    /// The line, without its line ending.
    Line(String),
    /// The person pressed Ctrl-C (or Ctrl-\) at the prompt.
    Interrupted,
    /// Standard input ended (Ctrl-D on an empty line) before any text.
    End,
}

impl std::fmt::Debug for Hidden {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            // The line holds a secret.
            Hidden::Line(line) => write!(f, "Line({} bytes)", line.len()),
            Hidden::Interrupted => f.write_str("Interrupted"),
            Hidden::End => f.write_str("End"),
        }
    }
}

/// Writes `prompt` on stderr and reads one line from standard input (a
/// terminal) without echoing it, keeping at most `max` bytes (the rest is
/// read and dropped). A newline is written on stderr after the line, since
/// the Enter that ended it was not echoed either.
///
/// ```no_run
/// use human_plus_cli::prompt::{Hidden, read_hidden};
///
/// match read_hidden("Paste the link, then press Enter (it is not shown): ", 8192)? {
///     Hidden::Line(link) => assert!(!link.ends_with('\n')),
///     Hidden::Interrupted => std::process::exit(130),
///     Hidden::End => {}
/// }
/// # Ok::<(), std::io::Error>(())
/// ```
///
/// # Errors
/// The terminal's or standard input's I/O error, or a line that is not
/// UTF-8.
pub fn read_hidden(prompt: &str, max: usize) -> std::io::Result<Hidden> {
    read_quietly(prompt, max)
}

/// Turns the bytes of the keys pressed into the line, one byte at a time.
#[derive(Debug, Default)]
struct Editor {
    line: Vec<u8>,
    /// Inside an escape sequence (`ESC`, then `[` or `O` and parameters,
    /// up to a final byte).
    escape: Escape,
}

#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
enum Escape {
    #[default]
    None,
    Started,
    Sequence,
}

/// What one byte did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Step {
    More,
    Done,
    Interrupted,
    End,
}

impl Editor {
    fn push(&mut self, b: u8, max: usize) -> Step {
        match self.escape {
            Escape::Started => {
                self.escape = if b == b'[' || b == b'O' {
                    Escape::Sequence
                } else {
                    Escape::None
                };
                return Step::More;
            }
            Escape::Sequence => {
                if (0x40..=0x7e).contains(&b) {
                    self.escape = Escape::None;
                }
                return Step::More;
            }
            Escape::None => {}
        }
        match b {
            // Ctrl-C, Ctrl-\.
            0x03 | 0x1c => Step::Interrupted,
            b'\r' | b'\n' => Step::Done,
            // Ctrl-D: end of input on an empty line, else the line's end.
            0x04 if self.line.is_empty() => Step::End,
            0x04 => Step::Done,
            // Backspace (DEL or BS): one character, all its UTF-8 bytes.
            0x7f | 0x08 => {
                while let Some(last) = self.line.pop() {
                    if last & 0xc0 != 0x80 {
                        break;
                    }
                }
                Step::More
            }
            // Ctrl-U: the whole line.
            0x15 => {
                self.line.clear();
                Step::More
            }
            0x1b => {
                self.escape = Escape::Started;
                Step::More
            }
            b if b < 0x20 => Step::More,
            b => {
                if self.line.len() < max {
                    self.line.push(b);
                }
                Step::More
            }
        }
    }

    fn finish(self) -> std::io::Result<String> {
        String::from_utf8(self.line)
            .map_err(|_| std::io::Error::new(std::io::ErrorKind::InvalidData, "not UTF-8"))
    }
}

fn say(text: &str) {
    let mut err = std::io::stderr().lock();
    let _ = err.write_all(text.as_bytes());
    let _ = err.flush();
}

/// Puts the terminal's settings back when dropped: on every way out of
/// the read, unwinding included.
#[cfg(unix)]
struct Restore<'a> {
    fd: std::os::fd::BorrowedFd<'a>,
    saved: rustix::termios::Termios,
}

#[cfg(unix)]
impl Drop for Restore<'_> {
    fn drop(&mut self) {
        let _ =
            rustix::termios::tcsetattr(self.fd, rustix::termios::OptionalActions::Now, &self.saved);
    }
}

#[cfg(unix)]
fn read_quietly(prompt: &str, max: usize) -> std::io::Result<Hidden> {
    use rustix::termios::{LocalModes, OptionalActions, SpecialCodeIndex};
    use std::os::fd::AsFd as _;

    let stdin = std::io::stdin();
    let fd = stdin.as_fd();
    let saved = rustix::termios::tcgetattr(fd)?;
    let mut quiet = saved.clone();
    quiet.local_modes.remove(
        LocalModes::ECHO
            | LocalModes::ECHOE
            | LocalModes::ECHOK
            | LocalModes::ECHONL
            | LocalModes::ICANON
            | LocalModes::ISIG
            | LocalModes::IEXTEN,
    );
    quiet.special_codes[SpecialCodeIndex::VMIN] = 1;
    quiet.special_codes[SpecialCodeIndex::VTIME] = 0;
    let restore = Restore { fd, saved };
    rustix::termios::tcsetattr(fd, OptionalActions::Now, &quiet)?;
    // Only now is the prompt shown: whatever is typed after it is not
    // echoed.
    say(prompt);
    let outcome = read_keys(&stdin, max);
    drop(restore);
    say("\n");
    outcome
}

/// Reads the keys through the standard input's own buffer, so that
/// whatever arrived after the line (typed ahead) is read by the next
/// question.
#[cfg(unix)]
fn read_keys(stdin: &std::io::Stdin, max: usize) -> std::io::Result<Hidden> {
    use std::io::Read as _;

    let mut input = stdin.lock();
    let mut editor = Editor::default();
    let mut byte = [0u8; 1];
    loop {
        let step = match input.read(&mut byte) {
            Ok(0) if editor.line.is_empty() => Step::End,
            Ok(0) => Step::Done,
            Ok(_) => editor.push(byte[0], max),
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => Step::More,
            Err(e) => return Err(e),
        };
        match step {
            Step::More => {}
            Step::Done => return editor.finish().map(Hidden::Line),
            Step::Interrupted => return Ok(Hidden::Interrupted),
            Step::End => return Ok(Hidden::End),
        }
    }
}

/// Without termios the line is read as the terminal delivers it (echoed).
#[cfg(not(unix))]
fn read_quietly(prompt: &str, max: usize) -> std::io::Result<Hidden> {
    use std::io::{BufRead as _, Read as _};

    say(prompt);
    let mut line = String::new();
    let n = std::io::stdin()
        .lock()
        .take(u64::try_from(max).unwrap_or(u64::MAX))
        .read_line(&mut line)?;
    if n == 0 {
        return Ok(Hidden::End);
    }
    Ok(Hidden::Line(line.trim_end_matches(['\r', '\n']).to_owned()))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn keys(bytes: &[u8], max: usize) -> (Step, String) {
        let mut e = Editor::default();
        for &b in bytes {
            let step = e.push(b, max);
            if step != Step::More {
                return (step, String::from_utf8_lossy(&e.line).into_owned());
            }
        }
        (Step::More, String::from_utf8_lossy(&e.line).into_owned())
    }

    #[test]
    fn the_keys_of_a_line() {
        assert_eq!(keys(b"https://x\r", 100), (Step::Done, "https://x".into()));
        assert_eq!(keys(b"abc\n", 100), (Step::Done, "abc".into()));
        assert_eq!(keys(b"abc\x7f\x7fd\r", 100), (Step::Done, "ad".into()));
        assert_eq!(keys(b"abc\x08\r", 100), (Step::Done, "ab".into()));
        assert_eq!(
            keys("a\u{e9}\x7f\r".as_bytes(), 100),
            (Step::Done, "a".into())
        );
        assert_eq!(keys(b"\x7f\x7fa\r", 100), (Step::Done, "a".into()));
        assert_eq!(keys(b"abc\x15xy\r", 100), (Step::Done, "xy".into()));
        assert_eq!(keys(b"ab\x03cd\r", 100), (Step::Interrupted, "ab".into()));
        assert_eq!(keys(b"ab\x1c", 100), (Step::Interrupted, "ab".into()));
        assert_eq!(keys(b"\x04", 100), (Step::End, String::new()));
        assert_eq!(keys(b"ab\x04", 100), (Step::Done, "ab".into()));
        // Cursor keys and other control keys are ignored.
        assert_eq!(
            keys(b"a\x1b[D\x1bOAb\x1b[1;5C\x01\x1a\tc\r", 100),
            (Step::Done, "abc".into())
        );
        // At most `max` bytes are kept.
        assert_eq!(keys(b"abcdef\r", 3), (Step::Done, "abc".into()));
    }

    #[test]
    fn a_line_is_never_in_debug() {
        let h = Hidden::Line("token=secret".into());
        assert_eq!(format!("{h:?}"), "Line(12 bytes)");
    }
}
