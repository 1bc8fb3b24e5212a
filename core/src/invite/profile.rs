//! The rules of a saved connection profile and of the MCP client
//! configuration that points at it: what a profile may be called, which
//! permissions and owner its token file, its other files and its directory
//! may have, and how an entry is merged into an MCP client's configuration
//! file. Pure functions: the caller reads and writes the files.

use std::fmt;

use serde_json::{Map, Value};

/// Whether `name` may name a profile (and the MCP server entry that uses
/// it): `[A-Za-z0-9_-]{1,64}`, so it is one path segment and one shell word
/// everywhere.
///
/// ```
/// use human_plus_core::is_valid_profile_name;
///
/// assert!(is_valid_profile_name("fancy-sheet_1"));
/// for bad in ["", "../x", "a b", "a/b", ".", &"a".repeat(65)] {
///     assert!(!is_valid_profile_name(bad));
/// }
/// ```
#[must_use]
pub fn is_valid_profile_name(name: &str) -> bool {
    (1..=64).contains(&name.len())
        && name
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b == b'_' || b == b'-')
}

/// Whether a token file with these Unix permission bits is private to its
/// owner: no bit for the group or others (ssh's rule for a private key).
///
/// ```
/// use human_plus_core::token_file_mode_is_private;
///
/// assert!(token_file_mode_is_private(0o100600));
/// assert!(token_file_mode_is_private(0o400));
/// assert!(!token_file_mode_is_private(0o644));
/// assert!(!token_file_mode_is_private(0o604));
/// ```
#[must_use]
pub fn token_file_mode_is_private(mode: u32) -> bool {
    mode & 0o077 == 0
}

/// Whether a file a profile is read from (`profile.json`, the pins, the
/// reviewed definitions), or the profile's directory, with these Unix
/// permission bits can be changed by its owner only: no write bit for the
/// group or others. ssh's rule for its configuration: whoever can write
/// the profile chooses the relay, the trust, the egress and the pins the
/// bridge obeys. Reading is allowed (a profile holds no secret but the
/// token, which has its own file and [`token_file_mode_is_private`]).
///
/// ```
/// use human_plus_core::profile_file_mode_is_safe;
///
/// assert!(profile_file_mode_is_safe(0o100600));
/// assert!(profile_file_mode_is_safe(0o644));
/// assert!(profile_file_mode_is_safe(0o040700));
/// assert!(profile_file_mode_is_safe(0o755));
/// assert!(!profile_file_mode_is_safe(0o666));
/// assert!(!profile_file_mode_is_safe(0o620));
/// assert!(!profile_file_mode_is_safe(0o602));
/// assert!(!profile_file_mode_is_safe(0o040777));
/// ```
#[must_use]
pub fn profile_file_mode_is_safe(mode: u32) -> bool {
    mode & 0o022 == 0
}

/// Whether a profile's file or directory owned by user `owner` may be
/// used by user `user`: it is theirs, or the superuser's (ssh's rule).
/// Another user owning it can change it whatever its mode says.
///
/// ```
/// use human_plus_core::profile_file_owner_is_safe;
///
/// assert!(profile_file_owner_is_safe(1000, 1000));
/// assert!(profile_file_owner_is_safe(0, 1000));
/// assert!(!profile_file_owner_is_safe(1001, 1000));
/// ```
#[must_use]
pub fn profile_file_owner_is_safe(owner: u32, user: u32) -> bool {
    owner == user || owner == 0
}

/// An MCP client whose configuration file Human+ can write an entry into.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum McpClient {
    /// Claude Code (a project's `.mcp.json`, under `mcpServers`).
    ClaudeCode,
    /// Claude Desktop (`claude_desktop_config.json`, under `mcpServers`).
    ClaudeDesktop,
    /// Cursor (`mcp.json`, under `mcpServers`).
    Cursor,
    /// VS Code (`mcp.json`, under `servers`, with `"type": "stdio"`).
    VsCode,
}

impl McpClient {
    /// Every client.
    pub const ALL: [McpClient; 4] = [
        McpClient::ClaudeCode,
        McpClient::ClaudeDesktop,
        McpClient::Cursor,
        McpClient::VsCode,
    ];

    /// The name used on the command line: `claude-code`, `claude-desktop`,
    /// `cursor` or `vscode`.
    #[must_use]
    pub fn as_str(self) -> &'static str {
        match self {
            McpClient::ClaudeCode => "claude-code",
            McpClient::ClaudeDesktop => "claude-desktop",
            McpClient::Cursor => "cursor",
            McpClient::VsCode => "vscode",
        }
    }

    /// The client a command-line name names.
    #[must_use]
    pub fn parse(name: &str) -> Option<McpClient> {
        McpClient::ALL.into_iter().find(|c| c.as_str() == name)
    }

    /// The key its configuration keeps servers under: `servers` for VS
    /// Code, `mcpServers` for the others.
    #[must_use]
    pub fn servers_key(self) -> &'static str {
        match self {
            McpClient::VsCode => "servers",
            _ => "mcpServers",
        }
    }

    /// The entry that starts `command args...` with `env` for this client.
    ///
    /// ```
    /// use human_plus_core::McpClient;
    ///
    /// let args = ["mcp", "--profile", "sheet"];
    /// let entry = McpClient::VsCode.server_entry("human-plus", &args, &[]);
    /// assert_eq!(entry.to_string(), r#"{"args":["mcp","--profile","sheet"],"command":"human-plus","type":"stdio"}"#);
    /// let entry = McpClient::Cursor.server_entry("human-plus", &args, &[("K", "v")]);
    /// assert_eq!(entry.to_string(), r#"{"args":["mcp","--profile","sheet"],"command":"human-plus","env":{"K":"v"}}"#);
    /// ```
    #[must_use]
    pub fn server_entry(self, command: &str, args: &[&str], env: &[(&str, &str)]) -> Value {
        let mut entry = Map::new();
        if self == McpClient::VsCode {
            entry.insert("type".into(), Value::from("stdio"));
        }
        entry.insert("command".into(), Value::from(command));
        entry.insert(
            "args".into(),
            Value::Array(args.iter().map(|a| Value::from(*a)).collect()),
        );
        if !env.is_empty() {
            let env: Map<String, Value> = env
                .iter()
                .map(|(k, v)| ((*k).to_owned(), Value::from(*v)))
                .collect();
            entry.insert("env".into(), Value::Object(env));
        }
        Value::Object(entry)
    }

    /// Merges `entry` under `name` into this client's configuration text
    /// (`None` or blank for a file that does not exist yet), keeping every
    /// other key and every other server; an entry of the same name is
    /// replaced. Returns the new text, pretty-printed, ending in a newline.
    ///
    /// ```
    /// use human_plus_core::McpClient;
    ///
    /// let before = r#"{"theme": "dark", "mcpServers": {"other": {"command": "x"}}}"#;
    /// let entry = McpClient::Cursor.server_entry("human-plus", &["mcp", "--profile", "s"], &[]);
    /// let after = McpClient::Cursor.merge_server(Some(before), "s", entry)?;
    /// let v: serde_json::Value = serde_json::from_str(&after).unwrap();
    /// assert_eq!(v["theme"], "dark");
    /// assert_eq!(v["mcpServers"]["other"]["command"], "x");
    /// assert_eq!(v["mcpServers"]["s"]["args"][2], "s");
    /// # Ok::<(), human_plus_core::McpConfigError>(())
    /// ```
    ///
    /// # Errors
    /// [`McpConfigError`] when the text is not a JSON object, or its
    /// servers key holds something other than an object: the file is then
    /// left for a person to fix, never overwritten.
    pub fn merge_server(
        self,
        existing: Option<&str>,
        name: &str,
        entry: Value,
    ) -> Result<String, McpConfigError> {
        let mut root = match existing.map(str::trim) {
            None | Some("") => Map::new(),
            Some(text) => match serde_json::from_str::<Value>(text) {
                Ok(Value::Object(map)) => map,
                Ok(_) => return Err(McpConfigError::NotAnObject),
                Err(_) => return Err(McpConfigError::NotJson),
            },
        };
        let servers = root
            .entry(self.servers_key())
            .or_insert_with(|| Value::Object(Map::new()));
        let Value::Object(servers) = servers else {
            return Err(McpConfigError::ServersNotAnObject);
        };
        servers.insert(name.to_owned(), entry);
        let mut text = serde_json::to_string_pretty(&Value::Object(root))
            .map_err(|_| McpConfigError::NotJson)?;
        text.push('\n');
        Ok(text)
    }
}

impl fmt::Display for McpClient {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// Why an MCP client's configuration file cannot take an entry.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum McpConfigError {
    /// The file is not JSON (comments included: JSON with comments is not
    /// rewritten, so none is lost).
    #[error("the MCP client configuration is not JSON")]
    NotJson,
    /// The file's JSON is not an object.
    #[error("the MCP client configuration is not a JSON object")]
    NotAnObject,
    /// The servers key holds something other than an object.
    #[error("the MCP client configuration's servers are not a JSON object")]
    ServersNotAnObject,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn merging_keeps_everything_else() {
        let before = r#"{"servers": {"a": {"type": "stdio", "command": "a"}}, "inputs": [1]}"#;
        let entry = McpClient::VsCode.server_entry("hp", &["mcp"], &[]);
        let after = McpClient::VsCode
            .merge_server(Some(before), "b", entry.clone())
            .unwrap();
        let v: Value = serde_json::from_str(&after).unwrap();
        assert_eq!(v["servers"]["a"]["command"], "a");
        assert_eq!(v["servers"]["b"], entry);
        assert_eq!(v["inputs"][0], 1);
        // Replacing the same name keeps one entry.
        let again = McpClient::VsCode
            .merge_server(Some(&after), "b", entry)
            .unwrap();
        assert_eq!(again, after);
        assert!(
            McpClient::Cursor
                .merge_server(None, "x", Value::Null)
                .is_ok()
        );
        assert!(
            McpClient::Cursor
                .merge_server(Some("  "), "x", Value::Null)
                .is_ok()
        );
    }

    #[test]
    fn never_overwrites_what_it_cannot_read() {
        let e = Value::Null;
        assert_eq!(
            McpClient::Cursor.merge_server(Some("// c\n{}"), "x", e.clone()),
            Err(McpConfigError::NotJson)
        );
        assert_eq!(
            McpClient::Cursor.merge_server(Some("[]"), "x", e.clone()),
            Err(McpConfigError::NotAnObject)
        );
        assert_eq!(
            McpClient::Cursor.merge_server(Some(r#"{"mcpServers": []}"#), "x", e),
            Err(McpConfigError::ServersNotAnObject)
        );
    }

    #[test]
    fn names() {
        for c in McpClient::ALL {
            assert_eq!(McpClient::parse(c.as_str()), Some(c));
        }
        assert_eq!(McpClient::parse("emacs"), None);
    }
}
