//! Terminal styling: bold and dim on a terminal, plain text otherwise (and
//! whenever `NO_COLOR` is set or `TERM=dumb`).

use std::io::IsTerminal;

/// Whether to style output.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Style {
    color: bool,
}

impl Style {
    /// Styled only when stdout is a terminal, `NO_COLOR` is unset and
    /// `TERM` is not `dumb`.
    #[must_use]
    pub fn detect() -> Style {
        let no_color = std::env::var_os("NO_COLOR").is_some_and(|v| !v.is_empty());
        let dumb = std::env::var("TERM").is_ok_and(|t| t == "dumb");
        Style {
            color: std::io::stdout().is_terminal() && !no_color && !dumb,
        }
    }

    /// Never styled.
    #[must_use]
    pub fn plain() -> Style {
        Style { color: false }
    }

    fn wrap(self, code: &str, text: &str) -> String {
        if self.color {
            format!("\x1b[{code}m{text}\x1b[0m")
        } else {
            text.to_owned()
        }
    }

    /// Bold.
    #[must_use]
    pub fn bold(self, text: &str) -> String {
        self.wrap("1", text)
    }

    /// Dim.
    #[must_use]
    pub fn dim(self, text: &str) -> String {
        self.wrap("2", text)
    }

    /// Green (something that worked).
    #[must_use]
    pub fn good(self, text: &str) -> String {
        self.wrap("32", text)
    }

    /// Red (something refused).
    #[must_use]
    pub fn bad(self, text: &str) -> String {
        self.wrap("31", text)
    }
}

/// `text` with every line indented by `by` spaces.
#[must_use]
pub fn indent(text: &str, by: usize) -> String {
    let pad = " ".repeat(by);
    text.lines()
        .map(|l| {
            if l.is_empty() {
                String::new()
            } else {
                format!("{pad}{l}")
            }
        })
        .collect::<Vec<_>>()
        .join("\n")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn plain_has_no_escapes() {
        let s = Style::plain();
        assert_eq!(s.bold("x"), "x");
        assert_eq!(indent("a\n\nb", 2), "  a\n\n  b");
    }
}
