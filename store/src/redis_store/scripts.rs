//! The Lua scripts, run with EVALSHA (loaded on a `NOSCRIPT` miss by
//! [`redis::Script`]). Each touches only the keys it is given, which share
//! one hash slot in the tagged layout, so each is atomic on a single Redis
//! and on a cluster. Each is safe to replay: a command sent again after
//! its answer was lost (a connection reset, a failover) gives the answer
//! the first run would have given, and changes nothing more.
//!
//! The acquire and put scripts report, when asked, how many replicas the
//! primary has connected (`INFO replication`), so the caller knows how
//! many to `WAIT` for without a shard that lost its replica stalling.

use std::sync::LazyLock;

/// The Lua helper that reads the connected replicas when `flag` is `'1'`,
/// and answers `-1` otherwise.
macro_rules! replicas_fn {
    () => {
        r"
local function replicas(flag)
  if flag ~= '1' then
    return -1
  end
  local info = redis.call('INFO', 'replication')
  return tonumber(string.match(info, 'connected_slaves:(%d+)')) or 0
end
"
    };
}

/// Compare-and-set of a record.
///
/// `KEYS[1]` the record key (a hash: `g` = generation in decimal, `v` =
/// the envelope); `KEYS[2]` (optional) the lock key.
/// `ARGV[1]` the expected generation (`""`: the key must not exist),
/// `ARGV[2]` the new generation, `ARGV[3]` the envelope, `ARGV[4]` the TTL
/// in milliseconds, `ARGV[5]` `'1'` to report the connected replicas,
/// `ARGV[6]` (with `KEYS[2]`) the caller's lock token.
///
/// Returns `{1, new, replicas}` when written, or when this very write was
/// applied already (the record holds the new generation and exactly this
/// envelope, whose nonce is random: a replay); `{0, found, -1}` on a
/// generation mismatch (`found` is `""` for a missing record) and `{2,
/// found, -1}` when the lock is no longer held by the caller's token.
/// Nothing is written unless it returns 1. A record key holding something
/// else than our hash is an error, never overwritten.
pub(crate) const PUT_SRC: &str = concat!(
    replicas_fn!(),
    r"
local found = redis.call('HGET', KEYS[1], 'g')
if not found then
  if redis.call('EXISTS', KEYS[1]) == 1 then
    return redis.error_reply('human-plus: the record key holds no generation')
  end
  found = ''
end
if found ~= ARGV[1] then
  if found == ARGV[2] and redis.call('HGET', KEYS[1], 'v') == ARGV[3] then
    return {1, found, replicas(ARGV[5])}
  end
  return {0, found, -1}
end
if KEYS[2] and redis.call('GET', KEYS[2]) ~= ARGV[6] then
  return {2, found, -1}
end
redis.call('HSET', KEYS[1], 'g', ARGV[2], 'v', ARGV[3])
redis.call('PEXPIRE', KEYS[1], ARGV[4])
return {1, ARGV[2], replicas(ARGV[5])}
"
);

/// One attempt to take a lock: `SET lock token PX lease` when it is free
/// (read first, in the same atomic script), behind a one-place waiting
/// line so a holder that releases and locks again at once cannot starve
/// the workers already waiting.
///
/// The usual case, nobody in line and the lock free, is two commands: the
/// line's `GET` and a `SET NX PX` (issue 43: a call's store commands cut to
/// what the lock needs). Only when that does not take it is the lock read
/// (a replay of this very attempt, the holder's lease left).
///
/// `KEYS[1]` the lock key, `KEYS[2]` its next-in-line key; `ARGV[1]` the
/// caller's token, `ARGV[2]` the lease in milliseconds, `ARGV[3]` how long
/// a place in line is kept without being renewed, in milliseconds,
/// `ARGV[4]` `'1'` to report the connected replicas.
///
/// Returns `{1, replicas, -1}` when the lock is taken (the caller's place
/// in line, if it had it, is given up), or already holds the caller's
/// token (a replay); `{2, left, lease}` when it is held and the caller is
/// next in line (claimed or renewed now); `{0, left, lease}` when it is
/// held, or free but promised to the worker next in line. `left` is the
/// holder's lease left in milliseconds (`PTTL` of the lock; for a lock
/// promised to the worker next in line, of its place), negative when there
/// is none; `lease` the whole lease the holder took, read from its token
/// (`<random>.<lease ms>`), `-1` when its token does not say.
pub(crate) const ACQUIRE_SRC: &str = concat!(
    replicas_fn!(),
    r"
local next = redis.call('GET', KEYS[2])
if not next and redis.call('SET', KEYS[1], ARGV[1], 'NX', 'PX', ARGV[2]) then
  return {1, replicas(ARGV[4]), -1}
end
local held = redis.call('GET', KEYS[1])
if held == ARGV[1] then
  return {1, replicas(ARGV[4]), -1}
end
local function lease_of(token)
  return tonumber(string.match(token, '%.(%d+)$')) or -1
end
if next and next ~= ARGV[1] then
  if held then
    return {0, redis.call('PTTL', KEYS[1]), lease_of(held)}
  end
  return {0, redis.call('PTTL', KEYS[2]), -1}
end
if not held then
  redis.call('SET', KEYS[1], ARGV[1], 'PX', ARGV[2])
  if next then
    redis.call('DEL', KEYS[2])
  end
  return {1, replicas(ARGV[4]), -1}
end
redis.call('SET', KEYS[2], ARGV[1], 'PX', ARGV[3])
return {2, redis.call('PTTL', KEYS[1]), lease_of(held)}
"
);

/// Extends a lock's lease: `KEYS[1]` the lock key, `ARGV[1]` the holder's
/// token, `ARGV[2]` the lease in milliseconds from now. Only while the
/// lock still holds that token: returns 1 when extended, 0 when the lock
/// is gone or another worker's (a holder whose lease ran out never extends
/// its successor's). Safe to replay (a replay sets the same lease again).
pub(crate) const RENEW_SRC: &str = r"
if redis.call('GET', KEYS[1]) == ARGV[1] then
  return redis.call('PEXPIRE', KEYS[1], ARGV[2])
end
return 0
";

/// Compare-and-delete of a lock: `KEYS[1]` the lock key, `ARGV[1]` the
/// holder's token. Deletes only while the lock still holds that token (a
/// holder whose lease expired never frees its successor's lock). Returns
/// 1 when deleted, 0 otherwise (a replay finds it gone). (Also gives up a
/// place in line.)
pub(crate) const RELEASE_SRC: &str = r"
if redis.call('GET', KEYS[1]) == ARGV[1] then
  return redis.call('DEL', KEYS[1])
end
return 0
";

pub(crate) static ACQUIRE: LazyLock<redis::Script> =
    LazyLock::new(|| redis::Script::new(ACQUIRE_SRC));
pub(crate) static PUT: LazyLock<redis::Script> = LazyLock::new(|| redis::Script::new(PUT_SRC));
pub(crate) static RENEW: LazyLock<redis::Script> = LazyLock::new(|| redis::Script::new(RENEW_SRC));
pub(crate) static RELEASE: LazyLock<redis::Script> =
    LazyLock::new(|| redis::Script::new(RELEASE_SRC));
