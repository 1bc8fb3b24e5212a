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

/// The Lua helpers that read a lock's value. A lock holds its holder's
/// token (`<random>.<lease ms>`), followed by `~<lease ms>` once a renewal
/// gave it another lease than the token names (so the value always names
/// the lease its holder last asked for), and by `|` once a waiter has
/// taken the place next in line (so the holder's release knows to hand the
/// lock over without reading the line itself); or it holds `>` and a
/// waiter's token: the lock given back and promised to the waiter next in
/// line, for as long as a place in line is kept.
macro_rules! lock_fns {
    () => {
        r"
local function holds(value, token)
  if not value or string.sub(value, 1, #token) ~= token then
    return false
  end
  local rest = string.sub(value, #token + 1)
  return rest == '' or rest == '|' or string.find(rest, '^~%d+|?$') ~= nil
end
local function lease_of(value)
  local lease = string.match(value, '~(%d+)|?$') or string.match(value, '%.(%d+)|?$')
  return tonumber(lease) or -1
end
"
    };
}

/// Gives a lock back, or a place in line, in one `GETDEL` as the usual
/// case: `lock` holding `token` (or a promise to `token`) is deleted; a
/// lock a waiter is next in line for (flagged `|`) is promised to that
/// waiter instead (`>` and its token, for `line_ms`), when its place
/// `next` is still kept. Returns 1 when given back, 0 when the key was not
/// the caller's: then it is put back at once, in the same atomic step, with
/// the whole lease its value names (the holder's last lease: its token's,
/// or its latest renewal's), or `line_ms` for a promise, a place in line
/// (no `next`) or a value that names none. So a late release never leaves
/// another's lock with less time than it had; it may leave it with more,
/// at most one lease (its holder gives it back as usual; a holder that
/// died holds it that much longer). Redis has no compare-and-delete in one
/// command before 8.4 (`DELEX … IFEQ`); `GET` then `DEL` would be two on
/// every release for the sake of a late one.
macro_rules! release_fn {
    () => {
        r"
local function release(lock, next, token, line_ms)
  local held = redis.call('GETDEL', lock)
  if not held then
    return 0
  end
  if held == '>' .. token then
    return 1
  end
  if not holds(held, token) then
    local px = tonumber(line_ms)
    if next and string.sub(held, 1, 1) ~= '>' and lease_of(held) > 0 then
      px = lease_of(held)
    end
    redis.call('SET', lock, held, 'PX', px)
    return 0
  end
  if string.sub(held, -1) == '|' then
    local waiter = next and redis.call('GET', next)
    if waiter then
      redis.call('SET', lock, '>' .. waiter, 'PX', line_ms)
    end
  end
  return 1
end
"
    };
}

/// The Lua helpers that read and write a record: one string,
/// `<generation>:<trail>:<sealed envelope>`, with a `PX` TTL (issue 43:
/// the generation, the envelope and the TTL in one `SET`, read back by one
/// `GET`). The trail is the ids of the last writes (at most 64, the newest
/// first, comma-separated, each 12 hex digits, chosen at random by the
/// writer once per write and kept across its retries): a write retried
/// after its answer was lost (a failover, a timeout) finds its id there
/// and is answered "written", even when other writes came after it. A
/// record of the earlier layout (a hash: `g`, `v`) is still read, and
/// written over as a string by its next write.
///
/// `read_record(key)` answers the generation, the envelope and the trail
/// (`false, false, ''` for no record; `false` and the value for a string
/// with no generation: malformed, as the caller reports).
///
/// `write_record(key, expected, g, v, ttl, id, guess, held, lost)` writes
/// the record when its generation is `expected` (`''`: no record) and,
/// with `held`, while `held()` says the lock is the caller's. With `lost`,
/// a generation mismatch whose id is not in the trail asks `lost(id)`
/// whether this is a retry of a write applied under more writes than the
/// trail keeps (see [`PUT_RELEASE_SRC`]): answered 1 when it says so. `guess` is the
/// trail the writer expects to leave (its id, then the trail it loaded):
/// right whenever nothing was written since the load, so the usual case
/// is one command, `SET … PX … GET` (the write and the fence's read
/// together); otherwise a second `SET` leaves the right trail. Answers
/// `status, found`: 1 written (or this very write found applied already:
/// its id in the trail), 0 a generation mismatch, 2 the lock not held;
/// nothing is left changed unless 1. A mismatch puts the value found back
/// at once (its TTL set to `ttl` again: a refused write counts as the
/// record's use), or deletes what a record that was not there would have
/// become. A key holding something else (a string without a generation,
/// another type) is an error, its value left as it was.
macro_rules! record_fns {
    () => {
        r"
local function split_record(s)
  local a = string.find(s, ':', 1, true)
  local b = a and string.find(s, ':', a + 1, true)
  if not b or not string.find(string.sub(s, 1, a - 1), '^%d+$') then
    return nil
  end
  return string.sub(s, 1, a - 1), string.sub(s, a + 1, b - 1), b
end
local function read_record(key)
  local s = redis.pcall('GET', key)
  if type(s) == 'table' then
    local f = redis.call('HMGET', key, 'g', 'v')
    return f[1], f[2], ''
  end
  if not s then
    return false, false, ''
  end
  local g, trail, at = split_record(s)
  if not g then
    return false, s, ''
  end
  return g, string.sub(s, at + 1), trail
end
local function next_trail(id, trail)
  if trail == '' then
    return id
  end
  return id .. ',' .. string.sub(trail, 1, 818)
end
local function restore(key, old, ttl)
  if old then
    redis.call('SET', key, old, 'PX', ttl)
  else
    redis.call('DEL', key)
  end
end
local function write_record(key, expected, g, v, ttl, id, guess, held, lost)
  local old = redis.pcall('SET', key, g .. ':' .. guess .. ':' .. v, 'PX', ttl, 'GET')
  if type(old) == 'table' then
    local found = redis.call('HGET', key, 'g')
    if not found then
      return redis.error_reply('human-plus: the record key holds no generation')
    end
    if found ~= expected then
      return 0, found
    end
    if held and not held() then
      return 2, found
    end
    redis.call('SET', key, g .. ':' .. id .. ':' .. v, 'PX', ttl)
    return 1, g
  end
  local found, trail = '', ''
  if old then
    found, trail = split_record(old)
    if not found then
      redis.call('SET', key, old, 'PX', ttl)
      return redis.error_reply('human-plus: the record key holds no generation')
    end
  end
  if string.find(',' .. trail .. ',', ',' .. id .. ',', 1, true) then
    restore(key, old, ttl)
    return 1, found
  end
  if found ~= expected then
    restore(key, old, ttl)
    if lost and lost(id) then
      return 1, found
    end
    return 0, found
  end
  if held and not held() then
    restore(key, old, ttl)
    return 2, found
  end
  local actual = next_trail(id, trail)
  if actual ~= guess then
    redis.call('SET', key, g .. ':' .. actual .. ':' .. v, 'PX', ttl)
  end
  return 1, g
end
"
    };
}

/// Compare-and-set of a record.
///
/// `KEYS[1]` the record key (see [`record_fns`]); `KEYS[2]` (optional)
/// the lock key. `ARGV[1]` the expected generation (`""`: the key must
/// not exist), `ARGV[2]` the new generation, `ARGV[3]` the envelope,
/// `ARGV[4]` the TTL in milliseconds, `ARGV[5]` `'1'` to report the
/// connected replicas, `ARGV[6]` the write's id, `ARGV[7]` the trail it
/// expects to leave, `ARGV[8]` (with `KEYS[2]`) the caller's lock token.
///
/// Returns `{1, new, replicas}` when written, or when this very write was
/// applied already (its id in the record's trail: a replay); `{0, found, -1}` on a generation
/// mismatch (`found` is `""` for a missing record) and `{2, found, -1}`
/// when the lock is no longer held by the caller's token. Nothing is
/// changed unless it returns 1. A record key holding something else than
/// a record is an error, never overwritten.
pub(crate) const PUT_SRC: &str = concat!(
    replicas_fn!(),
    lock_fns!(),
    record_fns!(),
    r"
local held = nil
if KEYS[2] then
  held = function()
    return holds(redis.call('GET', KEYS[2]), ARGV[8])
  end
end
local status, found = write_record(KEYS[1], ARGV[1], ARGV[2], ARGV[3], ARGV[4], ARGV[6], ARGV[7], held)
if type(status) == 'table' then
  return status
end
if status == 1 then
  return {1, found, replicas(ARGV[5])}
end
return {status, found, -1}
"
);

/// One attempt to take a lock, and, when taken and asked, the record's
/// generation and envelope read in the same atomic step (issue 43: the
/// load folded into the acquire, so a warm call's store work is two round
/// trips).
///
/// The usual case, the lock free, is one `SET NX PX` (and the record's
/// `GET`). Only when that does not take it is the lock read: a replay of
/// this very attempt (it holds the caller's token), a lock promised to the
/// caller (taken, its place in line given up), a lock promised to another
/// waiter, or a lock held. For a held lock, the first waiter takes the
/// one-place line `KEYS[2]` (kept `line_ms` unless renewed by its next
/// attempt) and flags the lock's value, so the holder's release hands the
/// lock to it rather than freeing it for whoever asks first: a holder that
/// releases and locks again at once (a worker on a loop) cannot starve the
/// workers already waiting.
///
/// `KEYS[1]` the lock key, `KEYS[2]` its next-in-line key, `KEYS[3]`
/// (optional) the record key; `ARGV[1]` the caller's token, `ARGV[2]` the
/// lease in milliseconds, `ARGV[3]` how long a place in line is kept
/// without being renewed, in milliseconds, `ARGV[4]` `'1'` to report the
/// connected replicas, `ARGV[5]` `'1'` when the caller has held the place
/// in line (given up, when it is still the caller's, as the lock is
/// taken; a caller that never waited costs no more than the `SET`).
///
/// Returns `{1, replicas, -1, g, v, trail}` when the lock is taken or
/// already holds the caller's token (a replay), with the record's
/// generation, envelope (nil when there is none, or without `KEYS[3]`)
/// and trail of write ids; `{2, left,
/// lease, nil, nil}` when it is held and the caller is next in line
/// (claimed or renewed now); `{0, left, lease, nil, nil}` when it is held,
/// or promised to another waiter. `left` is the lock's `PTTL` (for a
/// promise, the time the promise is kept), `lease` the whole lease the
/// holder took, read from its value (its token, or its last renewal), `-1`
/// when its value does not say.
pub(crate) const ACQUIRE_SRC: &str = concat!(
    replicas_fn!(),
    lock_fns!(),
    record_fns!(),
    r"
local function taken()
  if KEYS[3] then
    local g, v, trail = read_record(KEYS[3])
    return {1, replicas(ARGV[4]), -1, g, v, trail}
  end
  return {1, replicas(ARGV[4]), -1, false, false, ''}
end
if redis.call('SET', KEYS[1], ARGV[1], 'NX', 'PX', ARGV[2]) then
  if ARGV[5] == '1' and redis.call('GET', KEYS[2]) == ARGV[1] then
    redis.call('DEL', KEYS[2])
  end
  return taken()
end
local held = redis.call('GET', KEYS[1])
if holds(held, ARGV[1]) then
  return taken()
end
if string.sub(held, 1, 1) == '>' then
  if string.sub(held, 2) ~= ARGV[1] then
    return {0, redis.call('PTTL', KEYS[1]), -1, false, false, ''}
  end
  redis.call('SET', KEYS[1], ARGV[1], 'PX', ARGV[2])
  if redis.call('GET', KEYS[2]) == ARGV[1] then
    redis.call('DEL', KEYS[2])
  end
  return taken()
end
local next = redis.call('GET', KEYS[2])
if next and next ~= ARGV[1] then
  return {0, redis.call('PTTL', KEYS[1]), lease_of(held), false, false, ''}
end
redis.call('SET', KEYS[2], ARGV[1], 'PX', ARGV[3])
if string.sub(held, -1) ~= '|' then
  redis.call('SET', KEYS[1], held .. '|', 'KEEPTTL')
end
return {2, redis.call('PTTL', KEYS[1]), lease_of(held), false, false, ''}
"
);

/// A record read: `KEYS[1]` the record key. Returns `{g, v, trail}` as
/// [`record_fns`]' `read_record` answers them (one `GET`; a record of the
/// earlier layout, a hash, one `HMGET` more).
pub(crate) const READ_SRC: &str = concat!(
    record_fns!(),
    r"
local g, v, trail = read_record(KEYS[1])
return {g, v, trail}
"
);

/// Extends a lock's lease: `KEYS[1]` the lock key, `ARGV[1]` the holder's
/// token, `ARGV[2]` the lease in milliseconds from now. Only while the
/// lock still holds that token (flagged or not): returns 1 when extended,
/// 0 when the lock is gone or another worker's (a holder whose lease ran
/// out never extends its successor's). The value is written again naming
/// the new lease (`~<lease ms>` after the token, when the token names
/// another), its flag kept, so a late release that puts the lock back
/// (see [`release_fn`]) restores this lease. Safe to replay (a replay sets
/// the same lease again).
pub(crate) const RENEW_SRC: &str = concat!(
    lock_fns!(),
    r"
local held = redis.call('GET', KEYS[1])
if not holds(held, ARGV[1]) then
  return 0
end
local value = ARGV[1]
if lease_of(ARGV[1]) ~= tonumber(ARGV[2]) then
  value = value .. '~' .. ARGV[2]
end
if string.sub(held, -1) == '|' then
  value = value .. '|'
end
redis.call('SET', KEYS[1], value, 'PX', ARGV[2])
return 1
"
);

/// Compare-and-delete of a lock or of a place in line: `KEYS[1]` the key,
/// `KEYS[2]` (for a lock) its next-in-line key, `ARGV[1]` the holder's
/// token, `ARGV[2]` how long a promise to the waiter next in line (or a
/// place in line) is kept, in milliseconds. Gives back only what still
/// holds that token (a holder whose lease expired never frees its
/// successor's lock): a lock a waiter is next in line for is promised to
/// it. Returns 1 when given back, 0 otherwise (a replay finds it gone).
/// The usual case is one command, `GETDEL` (see [`release_fn`]).
pub(crate) const RELEASE_SRC: &str = concat!(
    lock_fns!(),
    release_fn!(),
    r"
return release(KEYS[1], KEYS[2], ARGV[1], ARGV[2])
"
);

/// Compare-and-set of a record, then the lock given back, in one atomic
/// step (issue 43: the release folded into the put, so a warm write's
/// store work is two round trips). The write is exactly [`PUT_SRC`]'s
/// without a fence on the lock (the generation is the fence, as for a
/// manager's put before); the release is [`RELEASE_SRC`]'s, run whatever
/// the write's answer, so a conflict still gives the lock back.
///
/// `KEYS[1]` the record key, `KEYS[2]` the lock key, `KEYS[3]` its
/// next-in-line key, `KEYS[4]` its refusals key; `ARGV[1]` to `ARGV[7]`
/// as [`PUT_SRC`], `ARGV[8]` the lock's token, `ARGV[9]` how long a
/// promise to the waiter next in line is kept, in milliseconds, `ARGV[10]`
/// and `ARGV[11]` as below.
///
/// A write retried after its answer was lost, with more writes on top of
/// it than the trail keeps (a failover, where the retry waits seconds and
/// the other workers write at once), finds its id in no trail. It is then
/// told apart from a write that was refused, or never ran, by what only a
/// refusal or a lock still held leaves: every refusal notes its id in
/// `KEYS[4]` (the last 16, kept `ARGV[11]` ms); a retry (`ARGV[10]` `'1'`,
/// sent only while the caller's lease cannot have run out by its own
/// clock) whose id was not refused and whose lock is no longer its own
/// gave the lock back on its first run, in the same atomic step that
/// applied the write: it is answered written. A lock still its own means
/// the first run never happened here (its write is not here either: a
/// refusal as usual). Both reads are on this rare path only.
///
/// Returns [`PUT_SRC`]'s reply and a fourth number: 1 when the lock was
/// given back, 0 when it was not the caller's any more. A record key
/// holding something else than a record is an error (nothing written,
/// nothing given back: the guard's drop gives the lock back). The usual
/// case is two commands: `SET … GET`, then the release's `GETDEL`.
pub(crate) const PUT_RELEASE_SRC: &str = concat!(
    replicas_fn!(),
    lock_fns!(),
    release_fn!(),
    record_fns!(),
    r"
local function lost(id)
  local refused = redis.call('GET', KEYS[4]) or ''
  if string.find(',' .. refused .. ',', ',' .. id .. ',', 1, true) then
    return false
  end
  if ARGV[10] == '1' and not holds(redis.call('GET', KEYS[2]), ARGV[8]) then
    return true
  end
  if refused ~= '' then
    id = id .. ',' .. string.sub(refused, 1, 194)
  end
  redis.call('SET', KEYS[4], id, 'PX', ARGV[11])
  return false
end
local status, found = write_record(KEYS[1], ARGV[1], ARGV[2], ARGV[3], ARGV[4], ARGV[6], ARGV[7], nil, lost)
if type(status) == 'table' then
  return status
end
local released = release(KEYS[2], KEYS[3], ARGV[8], ARGV[9])
if status == 1 then
  return {1, found, replicas(ARGV[5]), released}
end
return {status, found, -1, released}
"
);

pub(crate) static ACQUIRE: LazyLock<redis::Script> =
    LazyLock::new(|| redis::Script::new(ACQUIRE_SRC));
pub(crate) static PUT: LazyLock<redis::Script> = LazyLock::new(|| redis::Script::new(PUT_SRC));
pub(crate) static RENEW: LazyLock<redis::Script> = LazyLock::new(|| redis::Script::new(RENEW_SRC));
pub(crate) static RELEASE: LazyLock<redis::Script> =
    LazyLock::new(|| redis::Script::new(RELEASE_SRC));
pub(crate) static READ: LazyLock<redis::Script> = LazyLock::new(|| redis::Script::new(READ_SRC));
pub(crate) static PUT_RELEASE: LazyLock<redis::Script> =
    LazyLock::new(|| redis::Script::new(PUT_RELEASE_SRC));
