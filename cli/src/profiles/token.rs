//! The relay token, from the environment or a file only.

use std::path::Path;

use crate::output::exit::Failure;

/// The environment variable the relay token is read from.
pub const TOKEN_ENV: &str = "HUMAN_PLUS_TOKEN";

/// Reads the relay token: `--token-file` when given, else
/// `HUMAN_PLUS_TOKEN`. Surrounding whitespace (a trailing newline) is
/// trimmed.
///
/// # Errors
/// A usage failure when neither is set, the file cannot be read, or the
/// token is empty.
pub fn read_token(token_file: Option<&Path>) -> Result<String, Failure> {
    let token = match token_file {
        Some(path) => std::fs::read_to_string(path).map_err(|e| {
            Failure::usage(format!(
                "cannot read --token-file {}: {e}",
                path.display()
            ))
        })?,
        None => std::env::var(TOKEN_ENV).map_err(|_| {
            Failure::usage("no relay token").with_hint(format!(
                "set {TOKEN_ENV} or pass --token-file PATH (the token is never accepted as a flag value)"
            ))
        })?,
    };
    let token = token.trim().to_owned();
    if token.is_empty() {
        return Err(Failure::usage("the relay token is empty")
            .with_hint(format!("set {TOKEN_ENV} or pass --token-file PATH")));
    }
    Ok(token)
}
