//! What a saved profile and the files next to it hold, and the kept
//! connections: `is_valid_profile_name`, `McpClient` (`parse`,
//! `server_entry`, `merge_server` over whatever an MCP client's
//! configuration file holds), `AttachmentState` read from a stored record,
//! the file-mode rules, and `ConnectionPool` driven by a fuzzed sequence
//! of operations on a virtual clock.
//!
//! Input: byte 0 = the MCP client, byte 1 = the pool's configuration; the
//! rest, split at NUL bytes: the existing configuration file, the server
//! name, the command, then arguments; the same bytes drive the pool (one
//! operation per byte pair).
//!
//! Properties:
//! - `merge_server` refuses exactly a file that is not JSON, not an
//!   object, or whose servers member is not an object, and never writes
//!   over what it cannot read; what it writes is a JSON object, ends in a
//!   newline, keeps every other member and server as it was, holds the
//!   entry under the name, and merging it again changes nothing;
//! - a client's name reads back; an `AttachmentState` reads from its
//!   `as_str` and from nothing else;
//! - the pool never hands out a connection twice, nor one past its idle
//!   time or lifetime, nor one of another key; it keeps at most `per_key`
//!   per key; `reserve_ahead` opens at most what was wanted, within
//!   `per_key`; purging at the next expiry removes a connection.

#![no_main]

use std::collections::BTreeSet;
use std::time::{Duration, Instant};

use human_plus_core::{
    AttachmentState, ConnectionKey, ConnectionPool, EgressPolicy, McpClient, McpConfigError,
    PoolConfig, RelayEndpoint, SurfaceInvitation, is_valid_profile_name, profile_file_mode_is_safe,
    token_file_mode_is_private,
};
use libfuzzer_sys::fuzz_target;
use serde_json::Value;

const STATES: [AttachmentState; 4] = [
    AttachmentState::Attached,
    AttachmentState::SurfaceUnavailable,
    AttachmentState::AttachmentUnauthorized,
    AttachmentState::Detached,
];

fn merge(client: McpClient, existing: &str, name: &str, command: &str, args: &[&str]) {
    let entry = client.server_entry(command, args, &[("HUMAN_PLUS_PROFILE", name)]);
    let result = client.merge_server(Some(existing), name, entry.clone());
    let before = match existing.trim() {
        "" => Some(serde_json::Map::new()),
        text => match serde_json::from_str::<Value>(text) {
            Err(_) => {
                assert_eq!(result, Err(McpConfigError::NotJson));
                None
            }
            Ok(Value::Object(m)) => {
                if m.get(client.servers_key()).is_some_and(|s| !s.is_object()) {
                    assert_eq!(result, Err(McpConfigError::ServersNotAnObject));
                    None
                } else {
                    Some(m)
                }
            }
            Ok(_) => {
                assert_eq!(result, Err(McpConfigError::NotAnObject));
                None
            }
        },
    };
    let Some(before) = before else { return };
    let text = result.unwrap_or_else(|e| panic!("a readable file refused: {e:?}"));
    assert!(text.ends_with('\n'));
    let after: Value = serde_json::from_str(&text).expect("the merged file is JSON");
    let after = after.as_object().expect("the merged file is an object");
    let key = client.servers_key();
    for (k, v) in &before {
        if k != key {
            assert_eq!(after.get(k), Some(v), "member {k} changed");
        }
    }
    assert_eq!(
        after.len(),
        before.len() + usize::from(!before.contains_key(key))
    );
    let servers = after[key].as_object().expect("servers are an object");
    assert_eq!(servers.get(name), Some(&entry));
    if let Some(Value::Object(old)) = before.get(key) {
        for (k, v) in old {
            if k != name {
                assert_eq!(servers.get(k), Some(v), "server {k} changed");
            }
        }
        assert_eq!(
            servers.len(),
            old.len() + usize::from(!old.contains_key(name))
        );
    }
    let again = client
        .merge_server(Some(&text), name, entry)
        .expect("a merged file merges again");
    assert_eq!(again, text, "merging the same entry again changed the file");
}

fn key(host: &str) -> ConnectionKey {
    let inv = SurfaceInvitation::new(
        format!("https://{host}"),
        "s_one",
        "0123456789abcdef",
        "x",
        "y",
    )
    .expect("a fixed invitation");
    let policy = EgressPolicy::new([host]).egress_proxy("http://egress.internal:3128");
    RelayEndpoint::new(&inv, "c", &policy)
        .expect("a fixed endpoint")
        .connection_key()
}

fn pool(config_byte: u8, ops: &[u8]) {
    let config = PoolConfig {
        idle: Duration::from_millis(u64::from(config_byte & 0x0f) * 500),
        lifetime: Duration::from_millis(u64::from(config_byte >> 4) * 1500),
        per_key: usize::from(config_byte % 5),
    };
    let keys = [key("a.test"), key("b.test")];
    let t0 = Instant::now();
    let mut now = t0;
    let mut pool: ConnectionPool<(usize, u32)> = ConnectionPool::new(config);
    let mut next_id = 0u32;
    let mut handed = BTreeSet::new();
    for pair in ops.chunks(2).take(256) {
        let (op, arg) = (pair[0], pair.get(1).copied().unwrap_or(0));
        let k = usize::from(op >> 7);
        match op % 8 {
            0 | 1 => {
                let created = now
                    .checked_sub(Duration::from_millis(u64::from(arg) * 40))
                    .unwrap_or(now);
                let created = created.max(t0);
                pool.put(keys[k].clone(), (k, next_id), created, now);
                next_id += 1;
            }
            2 | 3 => {
                let usable = arg % 4 != 0;
                if let Some(kept) = pool.take(&keys[k], now, |_| usable) {
                    assert!(usable);
                    assert_eq!(kept.conn.0, k, "a connection of another key");
                    assert!(handed.insert(kept.conn.1), "a connection handed out twice");
                    assert!(now.saturating_duration_since(kept.idle_since) < config.idle);
                    assert!(now.saturating_duration_since(kept.created) < config.lifetime);
                }
            }
            4 => now += Duration::from_millis(u64::from(arg) * 30),
            5 => {
                let wanted = usize::from(arg % 8);
                let open = pool.reserve_ahead(&keys[k], wanted, now);
                assert!(open <= wanted.min(config.per_key));
            }
            6 => pool.ahead_done(&keys[k]),
            _ => {
                if arg == 0 {
                    pool.clear();
                    assert_eq!(pool.idle_count(), 0);
                } else if let Some(at) = pool.next_expiry() {
                    let before = pool.idle_count();
                    assert!(before > 0);
                    if at >= now {
                        now = at;
                    }
                    pool.purge(now);
                    assert!(
                        pool.idle_count() < before,
                        "nothing expired at the next expiry"
                    );
                } else {
                    assert_eq!(pool.idle_count(), 0);
                }
            }
        }
        assert!(
            pool.idle_count() <= 2 * config.per_key,
            "more kept than per_key"
        );
    }
}

fuzz_target!(|data: &[u8]| {
    let client = McpClient::ALL[usize::from(data.first().copied().unwrap_or(0) % 4)];
    let config_byte = data.get(1).copied().unwrap_or(0);
    let rest = data.get(2..).unwrap_or_default();
    let text = String::from_utf8_lossy(rest);
    let mut parts = text.split('\0');
    let existing = parts.next().unwrap_or_default();
    let name = parts.next().unwrap_or("hp");
    let command = parts.next().unwrap_or("human-plus");
    let args: Vec<&str> = parts.take(4).collect();

    assert_eq!(McpClient::parse(client.as_str()), Some(client));
    assert_eq!(client.to_string(), client.as_str());
    if let Some(c) = McpClient::parse(name) {
        assert_eq!(c.as_str(), name);
    }
    merge(client, existing, name, command, &args);

    // A profile name is 1 to 64 ASCII letters, digits, `_` and `-`.
    let valid = !name.is_empty()
        && name.len() <= 64
        && name
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || c == '_' || c == '-');
    assert_eq!(is_valid_profile_name(name), valid);
    let mode = u32::from(config_byte) * 3;
    if token_file_mode_is_private(mode) {
        assert!(profile_file_mode_is_safe(mode));
    }

    // An attachment state read from a stored record.
    let read: Result<AttachmentState, _> = serde_json::from_str(existing);
    if let Ok(state) = read {
        assert_eq!(
            Value::String(state.as_str().into()),
            serde_json::from_str::<Value>(existing).unwrap()
        );
    }
    for s in STATES {
        assert_eq!(s.to_string(), s.as_str());
        let json = serde_json::to_string(&s).unwrap();
        assert_eq!(json, format!("\"{}\"", s.as_str()));
        assert_eq!(serde_json::from_str::<AttachmentState>(&json).unwrap(), s);
    }

    pool(config_byte, rest);
});
