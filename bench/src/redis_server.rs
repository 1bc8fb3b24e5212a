//! A throwaway `redis-server` for the queue-worker run: started on a free
//! loopback port, with nothing kept on disk (no RDB snapshot, no AOF), as
//! `.ci/redis` starts the store tests' plain server; killed when dropped.
//! Its `INFO commandstats` says what the store sent it.

use std::collections::BTreeMap;
use std::net::TcpListener;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use crate::net::process_cpu;

/// A `redis-server` child process on 127.0.0.1.
pub struct RedisServer {
    child: Child,
    /// Its port on 127.0.0.1.
    pub port: u16,
    conn: redis::Connection,
}

/// Why a `redis-server` could not be started or read.
pub type RedisError = Box<dyn std::error::Error + Send + Sync>;

/// The server's counters at one moment.
#[derive(Debug, Clone, Default)]
pub struct RedisStats {
    /// `INFO commandstats`: calls per command (`hmget`, `evalsha`, and the
    /// commands the scripts run: `hget`, `hset`, `set`, ...).
    pub calls: BTreeMap<String, u64>,
    /// `INFO stats`' `total_connections_received`.
    pub connections: u64,
    /// The server process's CPU time so far (user + system).
    pub cpu: Duration,
}

/// The commands a client sends itself (each one round trip); the others
/// in `INFO commandstats` run inside the store's Lua scripts. Since issue
/// 43 a manager's `HMGET` runs inside the lock's script, so it is not
/// counted as sent (a `get` outside an operation, `status` or `find`, is
/// one round trip these counts miss; the benchmarks that count make none).
const SENT: [&str; 6] = ["evalsha", "eval", "script|load", "ping", "wait", "hgetall"];

impl RedisStats {
    /// What happened between `before` and `self`, the `INFO` commands
    /// that read the counters left out.
    #[must_use]
    pub fn since(&self, before: &RedisStats) -> RedisStats {
        let calls = self
            .calls
            .iter()
            .filter(|(name, _)| *name != "info")
            .map(|(name, &n)| {
                let was = before.calls.get(name).copied().unwrap_or(0);
                (name.clone(), n.saturating_sub(was))
            })
            .filter(|&(_, n)| n > 0)
            .collect();
        RedisStats {
            calls,
            connections: self.connections.saturating_sub(before.connections),
            cpu: self.cpu.saturating_sub(before.cpu),
        }
    }

    /// Every command counted, the scripts' own included.
    #[must_use]
    pub fn commands(&self) -> u64 {
        self.calls.values().sum()
    }

    /// The commands a client sent (one round trip each): the others ran
    /// inside a script.
    #[must_use]
    pub fn round_trips(&self) -> u64 {
        self.calls
            .iter()
            .filter(|(name, _)| SENT.contains(&name.as_str()))
            .map(|(_, n)| n)
            .sum()
    }
}

impl RedisServer {
    /// Starts `redis-server` on a free loopback port (up to five ports
    /// tried: another process may take the one found free before the
    /// server binds it) and waits until it answers `PING` (10 s at most).
    ///
    /// # Errors
    /// When `redis-server` cannot be run or does not answer.
    pub fn start() -> Result<RedisServer, RedisError> {
        let mut last: RedisError = "redis-server was not started".into();
        for _ in 0..5 {
            match RedisServer::start_once() {
                Ok(server) => return Ok(server),
                Err(e) => last = e,
            }
        }
        Err(last)
    }

    fn start_once() -> Result<RedisServer, RedisError> {
        let port = TcpListener::bind(("127.0.0.1", 0))?.local_addr()?.port();
        let mut child = Command::new("redis-server")
            .args(["--bind", "127.0.0.1", "--port", &port.to_string()])
            .args(["--save", "", "--appendonly", "no"])
            .args(["--dir", &std::env::temp_dir().to_string_lossy()])
            .args(["--loglevel", "warning", "--maxclients", "10000"])
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::inherit())
            .spawn()
            .map_err(|e| format!("redis-server: {e}"))?;
        let url = format!("redis://127.0.0.1:{port}/");
        let start = Instant::now();
        loop {
            if let Some(status) = child.try_wait()? {
                return Err(format!("redis-server on port {port} exited: {status}").into());
            }
            let conn = redis::Client::open(url.as_str())
                .and_then(|c| c.get_connection_with_timeout(Duration::from_secs(1)));
            if let Ok(mut conn) = conn
                && redis::cmd("PING").query::<String>(&mut conn).is_ok()
            {
                return Ok(RedisServer { child, port, conn });
            }
            if start.elapsed() > Duration::from_secs(10) {
                let _ = child.kill();
                let _ = child.wait();
                return Err(format!("redis-server on port {port}: no PONG within 10 s").into());
            }
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    /// Its URL.
    #[must_use]
    pub fn url(&self) -> String {
        format!("redis://127.0.0.1:{}/", self.port)
    }

    /// The counters now (two `INFO` commands, left out of
    /// [`RedisStats::since`]).
    ///
    /// # Errors
    /// When the server does not answer.
    pub fn stats(&mut self) -> Result<RedisStats, RedisError> {
        let commands: String = redis::cmd("INFO")
            .arg("commandstats")
            .query(&mut self.conn)?;
        let stats: String = redis::cmd("INFO").arg("stats").query(&mut self.conn)?;
        let calls = command_calls(&commands);
        let connections = stats
            .lines()
            .find_map(|l| l.strip_prefix("total_connections_received:"))
            .and_then(|n| n.trim().parse().ok())
            .unwrap_or(0);
        Ok(RedisStats {
            calls,
            connections,
            cpu: process_cpu(&format!("/proc/{}/stat", self.child.id())),
        })
    }

    /// The string at `key`, if any (`GET`).
    ///
    /// # Errors
    /// When the server does not answer.
    pub fn get(&mut self, key: &str) -> Result<Option<String>, RedisError> {
        Ok(redis::cmd("GET").arg(key).query(&mut self.conn)?)
    }

    /// How many keys the server holds (`DBSIZE`).
    ///
    /// # Errors
    /// When the server does not answer.
    pub fn keys(&mut self) -> Result<u64, RedisError> {
        Ok(redis::cmd("DBSIZE").query(&mut self.conn)?)
    }

    /// The length of field `field` of hash `key` (`HSTRLEN`).
    ///
    /// # Errors
    /// When the server does not answer.
    pub fn field_len(&mut self, key: &str, field: &str) -> Result<u64, RedisError> {
        Ok(redis::cmd("HSTRLEN")
            .arg(key)
            .arg(field)
            .query(&mut self.conn)?)
    }
}

/// Calls per command from the text of `INFO commandstats`
/// (`cmdstat_hmget:calls=3,usec=...`).
fn command_calls(info: &str) -> BTreeMap<String, u64> {
    info.lines()
        .filter_map(|line| {
            let (name, fields) = line.strip_prefix("cmdstat_")?.split_once(':')?;
            let calls = fields
                .split(',')
                .find_map(|f| f.strip_prefix("calls="))?
                .parse()
                .ok()?;
            Some((name.to_owned(), calls))
        })
        .collect()
}

impl Drop for RedisServer {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn counters_are_read_and_differenced_without_info() {
        let text = "# Commandstats\r\n\
                    cmdstat_hmget:calls=10,usec=50,usec_per_call=5.00,rejected_calls=0,failed_calls=0\r\n\
                    cmdstat_evalsha:calls=20,usec=400,usec_per_call=20.00,rejected_calls=0,failed_calls=0\r\n\
                    cmdstat_set:calls=10,usec=30,usec_per_call=3.00,rejected_calls=0,failed_calls=0\r\n\
                    cmdstat_info:calls=4,usec=90,usec_per_call=22.50,rejected_calls=0,failed_calls=0\r\n";
        let before = RedisStats {
            calls: command_calls(text),
            connections: 3,
            cpu: Duration::from_millis(10),
        };
        assert_eq!(before.calls.get("evalsha"), Some(&20));
        let mut after = before.clone();
        after.calls.insert("hmget".into(), 15);
        after.calls.insert("evalsha".into(), 30);
        after.calls.insert("set".into(), 15);
        after.calls.insert("info".into(), 6);
        after.connections = 4;
        let d = after.since(&before);
        assert_eq!(
            d.commands(),
            20,
            "hmget 5 + evalsha 10 + set 5, info left out"
        );
        assert_eq!(d.round_trips(), 10, "set and hmget run inside a script");
        assert_eq!(d.connections, 1);
        assert!(!d.calls.contains_key("info"));
    }
}
