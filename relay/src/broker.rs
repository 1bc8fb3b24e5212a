//! The relay's state: sessions, subscribers and their queues, the caller
//! map behind reply scoping, and the reaper. A faithful model of the Node
//! relay's `RelayBroker` (v0.46.0), traps included. Synchronous: every
//! method runs under the server's one lock and never awaits.

use std::collections::{HashMap, VecDeque};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use ring::rand::{SecureRandom, SystemRandom};
use serde_json::Value;
use sha2::{Digest, Sha256};
use tokio::sync::Notify;
use tokio::time::Instant;

use crate::faults::Faults;
use crate::wire::{is_session_id, is_subscriber_id, js_length, js_string, json_string};

/// Most caller entries kept per session (oldest evicted), as in the Node relay.
const MAX_CALLERS: usize = 1000;

/// Which queue a subscriber reads.
///
/// The page reads [`Direction::Inbound`] (what agents posted to `inbox`);
/// agents read [`Direction::Outbound`] (what the page posted to `outbox`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Direction {
    /// Agent to page: frames posted to `inbox`.
    Inbound,
    /// Page to agents: frames posted to `outbox`.
    Outbound,
}

impl Direction {
    /// The query-string spelling: `inbound` or `outbound`.
    #[must_use]
    pub fn as_str(self) -> &'static str {
        match self {
            Direction::Inbound => "inbound",
            Direction::Outbound => "outbound",
        }
    }

    /// How the relay reads `?direction=`: exactly `outbound` is outbound,
    /// anything else (or nothing) is inbound.
    pub(crate) fn from_query(raw: Option<&str>) -> Direction {
        if raw == Some("outbound") {
            Direction::Outbound
        } else {
            Direction::Inbound
        }
    }

    fn index(self) -> usize {
        match self {
            Direction::Inbound => 0,
            Direction::Outbound => 1,
        }
    }
}

/// How a subscriber receives its frames.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum ReceiveLeg {
    /// One open `GET /{session}/events` stream.
    Sse,
    /// A series of `GET /{session}/poll` requests sharing a subscriber id.
    Poll,
}

/// A snapshot of one subscriber, for tests and diagnostics.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SubscriberInfo {
    /// The 16-hex subscriber id (an SSE client is never told its own).
    pub id: String,
    /// The queue it reads.
    pub direction: Direction,
    /// The `client` label it subscribed with, if any (`Some("")` counts as a
    /// label, as on the Node relay).
    pub client: Option<String>,
    /// SSE or long-poll.
    pub leg: ReceiveLeg,
    /// Frames queued and not yet handed out.
    pub queued: usize,
    /// Polls currently parked on it (always 0 for SSE).
    pub parked: usize,
}

/// Why an authenticated touch was refused.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Denied {
    /// Missing session id or token, or a wrong token on a live session.
    InvalidToken,
    /// No such session (never registered, expired, or unregistered).
    SessionGone,
}

impl Denied {
    pub(crate) fn reason(self) -> &'static str {
        match self {
            Denied::InvalidToken => "invalid_token",
            Denied::SessionGone => "session_gone",
        }
    }
}

/// Locks a mutex, carrying on through poisoning (state stays consistent:
/// no method panics half-way through an update).
pub(crate) fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(PoisonError::into_inner)
}

/// Per-subscriber mutable state.
#[derive(Debug)]
pub(crate) struct SubState {
    pub(crate) queue: VecDeque<Arc<str>>,
    pub(crate) ended: bool,
    pub(crate) last_seen: Instant,
    pub(crate) parked: usize,
}

/// One reader of one direction of one session.
#[derive(Debug)]
pub(crate) struct Subscriber {
    pub(crate) id: String,
    pub(crate) direction: Direction,
    pub(crate) client: Option<String>,
    pub(crate) leg: ReceiveLeg,
    pub(crate) state: Mutex<SubState>,
    /// Woken (all waiters) when a frame lands or the subscriber ends.
    pub(crate) notify: Notify,
}

impl Subscriber {
    fn new(
        id: String,
        direction: Direction,
        client: Option<String>,
        leg: ReceiveLeg,
        now: Instant,
    ) -> Subscriber {
        Subscriber {
            id,
            direction,
            client,
            leg,
            state: Mutex::new(SubState {
                queue: VecDeque::new(),
                ended: false,
                last_seen: now,
                parked: 0,
            }),
            notify: Notify::new(),
        }
    }

    fn deliver(&self, frame: &Arc<str>) {
        {
            let mut st = lock(&self.state);
            if st.ended {
                return;
            }
            st.queue.push_back(Arc::clone(frame));
        }
        self.notify.notify_waiters();
    }

    /// Ends the subscriber: closes its stream or releases its parked polls.
    pub(crate) fn end(&self) {
        {
            let mut st = lock(&self.state);
            if st.ended {
                return;
            }
            st.ended = true;
        }
        self.notify.notify_waiters();
    }

    fn info(&self) -> SubscriberInfo {
        let st = lock(&self.state);
        SubscriberInfo {
            id: self.id.clone(),
            direction: self.direction,
            client: self.client.clone(),
            leg: self.leg,
            queued: st.queue.len(),
            parked: st.parked,
        }
    }
}

#[derive(Debug)]
struct Session {
    token_hash: [u8; 32],
    last_seen: Instant,
    /// Per direction, in subscription order.
    subs: [Vec<Arc<Subscriber>>; 2],
    /// `String(id)` -> client, in insertion order (a JavaScript `Map`).
    callers: Vec<(String, String)>,
}

impl Session {
    fn all_subs(&self) -> impl Iterator<Item = &Arc<Subscriber>> {
        self.subs.iter().flatten()
    }

    fn any_identified(&self) -> bool {
        self.all_subs().any(|s| s.client.is_some())
    }
}

/// Timing knobs of the broker.
#[derive(Debug, Clone, Copy)]
pub(crate) struct BrokerConfig {
    pub(crate) ttl: Duration,
    pub(crate) poll_idle: Duration,
}

/// The relay's whole state.
#[derive(Debug)]
pub(crate) struct Broker {
    config: BrokerConfig,
    sessions: HashMap<String, Session>,
    default_faults: Faults,
    session_faults: HashMap<String, Faults>,
    rng: SystemRandom,
    fallback_counter: u64,
}

impl Broker {
    pub(crate) fn new(config: BrokerConfig, default_faults: Faults) -> Broker {
        Broker {
            config,
            sessions: HashMap::new(),
            default_faults,
            session_faults: HashMap::new(),
            rng: SystemRandom::new(),
            fallback_counter: 0,
        }
    }

    // ------------------------------------------------------------ sessions

    /// `POST /register`: `Err(reason)` answers 401 with that reason.
    pub(crate) fn register(
        &mut self,
        id: &str,
        token: &str,
        now: Instant,
    ) -> Result<(), &'static str> {
        if !is_session_id(id) {
            return Err("invalid_session_id");
        }
        let len = js_length(token);
        if !(16..=128).contains(&len) {
            return Err("invalid_token");
        }
        let hash = sha256(token);
        match self.sessions.get_mut(id) {
            Some(existing) => {
                if !ct_eq(&existing.token_hash, &hash) {
                    return Err("session_taken");
                }
                existing.last_seen = now;
            }
            None => {
                self.sessions.insert(
                    id.to_owned(),
                    Session {
                        token_hash: hash,
                        last_seen: now,
                        subs: [Vec::new(), Vec::new()],
                        callers: Vec::new(),
                    },
                );
            }
        }
        Ok(())
    }

    /// An authenticated touch: says why it failed, slides the TTL when it
    /// succeeds.
    pub(crate) fn check(&mut self, id: &str, token: &str, now: Instant) -> Result<(), Denied> {
        if id.is_empty() || token.is_empty() {
            return Err(Denied::InvalidToken);
        }
        let session = self.sessions.get_mut(id).ok_or(Denied::SessionGone)?;
        if !ct_eq(&session.token_hash, &sha256(token)) {
            return Err(Denied::InvalidToken);
        }
        session.last_seen = now;
        Ok(())
    }

    /// `unregister` with a valid token: drops the whole session.
    pub(crate) fn unregister(&mut self, id: &str, token: &str, now: Instant) -> bool {
        if self.check(id, token, now).is_err() {
            return false;
        }
        self.drop_session(id);
        true
    }

    /// Drops a session: ends its streams and releases its parked polls.
    pub(crate) fn drop_session(&mut self, id: &str) -> bool {
        match self.sessions.remove(id) {
            Some(session) => {
                for sub in session.all_subs() {
                    sub.end();
                }
                true
            }
            None => false,
        }
    }

    // -------------------------------------------------------------- frames

    /// `POST inbox`: validate, record the caller, fan out to the page.
    pub(crate) fn inbox(
        &mut self,
        id: &str,
        token: &str,
        payload: &Arc<str>,
        client: Option<&str>,
        now: Instant,
    ) -> bool {
        if self.check(id, token, now).is_err() {
            return false;
        }
        let Some(frame) = parse_frame(payload) else {
            return false;
        };
        let Some(session) = self.sessions.get_mut(id) else {
            return false;
        };
        if let Some(client) = client {
            remember_caller(session, &frame, client);
        }
        fan_out(session, Direction::Inbound, payload, None);
        true
    }

    /// `POST outbox`: validate, route a response to its caller (or
    /// broadcast), applying reply faults.
    pub(crate) fn outbox(
        &mut self,
        id: &str,
        token: &str,
        payload: &Arc<str>,
        now: Instant,
    ) -> bool {
        if self.check(id, token, now).is_err() {
            return false;
        }
        let Some(frame) = parse_frame(payload) else {
            return false;
        };
        let copies = if response_id(&frame).is_some() {
            let faults = self.faults_mut(id);
            if faults.take_drop_reply() {
                0
            } else if faults.take_duplicate_reply() {
                2
            } else {
                1
            }
        } else {
            1
        };
        let Some(session) = self.sessions.get_mut(id) else {
            return false;
        };
        let target = caller_for(session, &frame);
        for _ in 0..copies {
            fan_out(session, Direction::Outbound, payload, target.as_deref());
        }
        true
    }

    // --------------------------------------------------------- subscribers

    /// A new SSE subscriber (announced to the page when outbound).
    pub(crate) fn subscribe(
        &mut self,
        id: &str,
        token: &str,
        direction: Direction,
        client: Option<&str>,
        now: Instant,
    ) -> Result<Arc<Subscriber>, Denied> {
        self.check(id, token, now)?;
        let sub_id = self.random_id();
        let session = self.sessions.get_mut(id).ok_or(Denied::SessionGone)?;
        let sub = Arc::new(Subscriber::new(
            sub_id,
            direction,
            client.map(str::to_owned),
            ReceiveLeg::Sse,
            now,
        ));
        session.subs[direction.index()].push(Arc::clone(&sub));
        if direction == Direction::Outbound {
            announce(session, "notifications/peer_joined", &sub.id);
        }
        Ok(sub)
    }

    /// A poll attaching to its subscriber, or creating (or adopting) one.
    /// Returns the subscriber and whether this poll created it.
    pub(crate) fn poll_attach(
        &mut self,
        id: &str,
        token: &str,
        direction: Direction,
        requested: Option<&str>,
        client: Option<&str>,
        now: Instant,
    ) -> Result<(Arc<Subscriber>, bool), Denied> {
        self.check(id, token, now)?;
        let requested = requested.filter(|r| is_subscriber_id(r));
        let fresh = self.random_id();
        let session = self.sessions.get_mut(id).ok_or(Denied::SessionGone)?;
        let list = &mut session.subs[direction.index()];
        let existing = requested.and_then(|r| list.iter().find(|s| s.id == r).cloned());
        if let Some(existing) = existing.as_ref().filter(|s| s.leg == ReceiveLeg::Poll) {
            lock(&existing.state).last_seen = now;
            return Ok((Arc::clone(existing), false));
        }
        let sub_id = match (requested, &existing) {
            (Some(r), None) => r.to_owned(),
            _ => fresh,
        };
        let sub = Arc::new(Subscriber::new(
            sub_id,
            direction,
            client.map(str::to_owned),
            ReceiveLeg::Poll,
            now,
        ));
        list.push(Arc::clone(&sub));
        if direction == Direction::Outbound {
            announce(session, "notifications/peer_joined", &sub.id);
        }
        Ok((sub, true))
    }

    /// Ends a subscriber and removes it from its session, announcing an
    /// outbound one's departure (only if it was still there).
    pub(crate) fn remove_subscriber(&mut self, session_id: &str, sub: &Arc<Subscriber>) {
        sub.end();
        let Some(session) = self.sessions.get_mut(session_id) else {
            return;
        };
        let list = &mut session.subs[sub.direction.index()];
        if let Some(pos) = list.iter().position(|s| Arc::ptr_eq(s, sub)) {
            list.remove(pos);
            if sub.direction == Direction::Outbound {
                announce(session, "notifications/peer_left", &sub.id);
            }
        }
    }

    /// The reaper tick: drop sessions idle past the TTL, then prune
    /// pollers idle past `poll_idle` with nothing parked.
    pub(crate) fn reap(&mut self, now: Instant) {
        let ttl = self.config.ttl;
        let expired: Vec<String> = self
            .sessions
            .iter()
            .filter(|(_, s)| now.saturating_duration_since(s.last_seen) > ttl)
            .map(|(id, _)| id.clone())
            .collect();
        for id in expired {
            self.drop_session(&id);
        }
        let idle = self.config.poll_idle;
        let mut stale: Vec<(String, Arc<Subscriber>)> = Vec::new();
        for (id, session) in &self.sessions {
            for sub in session.all_subs() {
                if sub.leg != ReceiveLeg::Poll {
                    continue;
                }
                let st = lock(&sub.state);
                if st.parked == 0 && now.saturating_duration_since(st.last_seen) > idle {
                    stale.push((id.clone(), Arc::clone(sub)));
                }
            }
        }
        for (id, sub) in stale {
            self.remove_subscriber(&id, &sub);
        }
    }

    /// Server shutdown: end every subscriber and forget every session.
    pub(crate) fn dispose(&mut self) {
        for (_, session) in self.sessions.drain() {
            for sub in session.all_subs() {
                sub.end();
            }
        }
    }

    // ------------------------------------------------------- introspection

    pub(crate) fn session_ids(&self) -> Vec<String> {
        let mut ids: Vec<String> = self.sessions.keys().cloned().collect();
        ids.sort();
        ids
    }

    pub(crate) fn subscribers(&self, id: &str) -> Vec<SubscriberInfo> {
        self.sessions
            .get(id)
            .map(|s| s.all_subs().map(|sub| sub.info()).collect())
            .unwrap_or_default()
    }

    // -------------------------------------------------------------- faults

    pub(crate) fn faults_mut(&mut self, session: &str) -> &mut Faults {
        match self.session_faults.get_mut(session) {
            Some(f) => f,
            None => &mut self.default_faults,
        }
    }

    pub(crate) fn set_faults(&mut self, session: &str, faults: Faults) {
        self.session_faults.insert(session.to_owned(), faults);
    }

    pub(crate) fn clear_faults(&mut self, session: &str) {
        self.session_faults.remove(session);
    }

    pub(crate) fn set_default_faults(&mut self, faults: Faults) {
        self.default_faults = faults;
    }

    fn random_id(&mut self) -> String {
        let mut bytes = [0u8; 8];
        if self.rng.fill(&mut bytes).is_err() {
            // Practically unreachable; still unique within this process.
            self.fallback_counter = self.fallback_counter.wrapping_add(1);
            let nanos = SystemTime::now()
                .duration_since(UNIX_EPOCH)
                .map(|d| d.subsec_nanos())
                .unwrap_or(0);
            bytes = (self.fallback_counter ^ (u64::from(nanos) << 20)).to_be_bytes();
        }
        hex(&bytes)
    }
}

/// `isFrame`: parses `payload` and shape-checks it; `Some(parsed)` if it
/// is one frame or a non-empty batch of frames.
pub(crate) fn parse_frame(payload: &str) -> Option<Value> {
    if payload.is_empty() {
        return None;
    }
    let value: Value = serde_json::from_str(payload).ok()?;
    let ok = match &value {
        Value::Array(items) => !items.is_empty() && items.iter().all(is_valid_frame),
        single => is_valid_frame(single),
    };
    ok.then_some(value)
}

fn is_valid_frame(value: &Value) -> bool {
    let Value::Object(o) = value else {
        return false;
    };
    if o.get("jsonrpc").and_then(Value::as_str) != Some("2.0") {
        return false;
    }
    match o.get("method").and_then(Value::as_str) {
        Some("notifications/peer_joined" | "notifications/peer_left") => false,
        Some(_) => true,
        None => o.contains_key("id") && (o.contains_key("result") != o.contains_key("error")),
    }
}

/// The id of a single-object response (non-null `id`, no string `method`).
fn response_id(frame: &Value) -> Option<&Value> {
    let o = frame.as_object()?;
    let id = o.get("id").filter(|id| !id.is_null())?;
    if o.get("method").is_some_and(Value::is_string) {
        return None;
    }
    Some(id)
}

/// `rememberCaller`: single requests with a non-null id only.
fn remember_caller(session: &mut Session, frame: &Value, client: &str) {
    let Some(o) = frame.as_object() else {
        return;
    };
    let Some(id) = o.get("id").filter(|id| !id.is_null()) else {
        return;
    };
    if !o.get("method").is_some_and(Value::is_string) {
        return;
    }
    if session.callers.len() >= MAX_CALLERS {
        session.callers.remove(0);
    }
    let key = js_string(id);
    match session.callers.iter_mut().find(|(k, _)| *k == key) {
        Some(entry) => entry.1 = client.to_owned(),
        None => session.callers.push((key, client.to_owned())),
    }
}

/// `callerFor`: `None` broadcasts; `Some(client)` delivers only to that
/// client's outbound subscribers (`Some("")` when nothing was recorded —
/// which still reaches subscribers labelled with the empty string).
fn caller_for(session: &mut Session, frame: &Value) -> Option<String> {
    let id = response_id(frame)?;
    if !session.any_identified() {
        return None;
    }
    let key = js_string(id);
    let client = session
        .callers
        .iter()
        .position(|(k, _)| *k == key)
        .map(|pos| session.callers.remove(pos).1);
    Some(client.unwrap_or_default())
}

fn fan_out(session: &Session, direction: Direction, payload: &Arc<str>, only: Option<&str>) {
    for sub in &session.subs[direction.index()] {
        if let Some(client) = only
            && sub.client.as_deref() != Some(client)
        {
            continue;
        }
        sub.deliver(payload);
    }
}

fn announce(session: &Session, method: &str, subscriber_id: &str) {
    let ts = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_millis())
        .unwrap_or(0);
    let frame: Arc<str> = Arc::from(format!(
        "{{\"jsonrpc\":\"2.0\",\"method\":{},\"params\":{{\"subscriberId\":{},\"ts\":{ts}}}}}",
        json_string(method),
        json_string(subscriber_id)
    ));
    fan_out(session, Direction::Inbound, &frame, None);
}

fn sha256(token: &str) -> [u8; 32] {
    Sha256::digest(token.as_bytes()).into()
}

fn ct_eq(a: &[u8; 32], b: &[u8; 32]) -> bool {
    a.iter()
        .zip(b.iter())
        .fold(0u8, |acc, (x, y)| acc | (x ^ y))
        == 0
}

fn hex(bytes: &[u8]) -> String {
    const DIGITS: &[u8; 16] = b"0123456789abcdef";
    let mut s = String::with_capacity(bytes.len() * 2);
    for b in bytes {
        s.push(char::from(DIGITS[usize::from(b >> 4)]));
        s.push(char::from(DIGITS[usize::from(b & 15)]));
    }
    s
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn is_frame_matches_the_node_relay() {
        let ok = [
            r#"{"jsonrpc":"2.0","id":1,"method":"tools/list"}"#,
            r#"{"jsonrpc":"2.0","method":"notifications/initialized"}"#,
            r#"{"jsonrpc":"2.0","id":1,"result":{}}"#,
            r#"{"jsonrpc":"2.0","id":null,"error":{"code":1}}"#,
            r#"[{"jsonrpc":"2.0","id":1,"result":{}},{"jsonrpc":"2.0","method":"x"}]"#,
            r#"{"jsonrpc":"2.0","method":"x","result":1,"error":2}"#,
            "{\"jsonrpc\":\"2.0\",\n \"method\":\"x\"}",
        ];
        for f in ok {
            assert!(parse_frame(f).is_some(), "{f}");
        }
        let bad = [
            "",
            "not json",
            "[]",
            "null",
            "1",
            r#""x""#,
            r#"{"id":1}"#,
            r#"{"jsonrpc":"1.0","method":"x"}"#,
            r#"{"jsonrpc":2.0,"method":"x"}"#,
            r#"{"jsonrpc":"2.0","id":1}"#,
            r#"{"jsonrpc":"2.0","result":1}"#,
            r#"{"jsonrpc":"2.0","id":1,"result":1,"error":{}}"#,
            r#"{"jsonrpc":"2.0","method":"notifications/peer_joined"}"#,
            r#"{"jsonrpc":"2.0","method":"notifications/peer_left","params":{}}"#,
            r#"{"jsonrpc":"2.0","method":5,"id":1}"#,
            r#"[{"jsonrpc":"2.0","method":"x"},1]"#,
            r#"[[{"jsonrpc":"2.0","method":"x"}]]"#,
        ];
        for f in bad {
            assert!(parse_frame(f).is_none(), "{f}");
        }
        // A numeric method is a response shape: it needs id + one of result/error.
        assert!(parse_frame(r#"{"jsonrpc":"2.0","method":5,"id":1,"result":1}"#).is_some());
    }

    fn broker() -> Broker {
        Broker::new(
            BrokerConfig {
                ttl: Duration::from_secs(60),
                poll_idle: Duration::from_secs(60),
            },
            Faults::new(),
        )
    }

    const TOKEN: &str = "0123456789abcdef";

    #[test]
    fn caller_map_evicts_the_oldest_and_keys_by_string_id() {
        let mut b = broker();
        let now = Instant::now();
        b.register("sess", TOKEN, now).unwrap();
        let session = b.sessions.get_mut("sess").unwrap();
        for i in 0..1005 {
            let frame = serde_json::json!({"jsonrpc":"2.0","id": i,"method":"m"});
            remember_caller(session, &frame, "c");
        }
        assert_eq!(session.callers.len(), MAX_CALLERS);
        assert_eq!(session.callers[0].0, "5");
        let frame = serde_json::json!({"jsonrpc":"2.0","id":"1004","method":"m"});
        remember_caller(session, &frame, "d");
        // As a JavaScript Map: the oldest is evicted first, then the existing
        // key is updated in place, leaving 999 entries.
        assert_eq!(session.callers.len(), MAX_CALLERS - 1);
        assert_eq!(session.callers[0].0, "6");
        assert_eq!(
            session.callers.last().unwrap(),
            &("1004".to_owned(), "d".to_owned())
        );
    }

    #[test]
    fn ttl_slides_on_authenticated_touches_only() {
        let mut b = broker(); // ttl 60 s, poll idle 60 s
        let t0 = Instant::now();
        let at = |secs: u64| t0 + Duration::from_secs(secs);
        b.register("sess", TOKEN, t0).unwrap();
        assert_eq!(
            b.check("sess", "fedcba9876543210", at(50)),
            Err(Denied::InvalidToken)
        );
        b.reap(at(60));
        assert_eq!(
            b.session_ids(),
            vec!["sess".to_owned()],
            "exactly the TTL is not expired"
        );
        assert_eq!(b.check("sess", TOKEN, at(59)), Ok(()));
        b.reap(at(110));
        assert_eq!(
            b.session_ids(),
            vec!["sess".to_owned()],
            "the touch at 59 s slid it"
        );
        b.reap(at(120));
        assert!(b.session_ids().is_empty());
        assert_eq!(b.check("sess", TOKEN, at(121)), Err(Denied::SessionGone));
    }

    #[test]
    fn reaper_prunes_idle_pollers_but_never_parked_ones() {
        let mut b = broker();
        let t0 = Instant::now();
        let at = |secs: u64| t0 + Duration::from_secs(secs);
        b.register("sess", TOKEN, t0).unwrap();
        let page = b
            .subscribe("sess", TOKEN, Direction::Inbound, None, t0)
            .unwrap();
        let (idle, created) = b
            .poll_attach("sess", TOKEN, Direction::Outbound, None, None, t0)
            .unwrap();
        assert!(created);
        let (parked, _) = b
            .poll_attach("sess", TOKEN, Direction::Outbound, None, None, t0)
            .unwrap();
        lock(&parked.state).parked = 1;
        b.check("sess", TOKEN, at(61)).unwrap();
        b.reap(at(61));
        let left: Vec<String> = b.subscribers("sess").into_iter().map(|s| s.id).collect();
        assert_eq!(left.len(), 2);
        assert!(left.contains(&parked.id) && !left.contains(&idle.id));
        // The page heard two joins and one departure.
        let frames: Vec<String> = lock(&page.state)
            .queue
            .iter()
            .map(|f| f.to_string())
            .collect();
        assert_eq!(frames.len(), 3);
        assert!(frames[2].contains("peer_left") && frames[2].contains(&idle.id));
        assert!(lock(&idle.state).ended);
    }

    #[test]
    fn check_distinguishes_gone_from_bad_token() {
        let mut b = broker();
        let now = Instant::now();
        assert_eq!(b.check("sess", TOKEN, now), Err(Denied::SessionGone));
        assert_eq!(b.check("sess", "", now), Err(Denied::InvalidToken));
        assert_eq!(b.check("", TOKEN, now), Err(Denied::InvalidToken));
        b.register("sess", TOKEN, now).unwrap();
        assert_eq!(
            b.check("sess", "fedcba9876543210", now),
            Err(Denied::InvalidToken)
        );
        assert_eq!(b.check("sess", TOKEN, now), Ok(()));
        assert_eq!(
            b.register("sess", "fedcba9876543210", now),
            Err("session_taken")
        );
        assert_eq!(b.register("sess", TOKEN, now), Ok(()));
        assert_eq!(b.register("s", TOKEN, now), Err("invalid_session_id"));
        assert_eq!(b.register("sess2", "short", now), Err("invalid_token"));
        assert_eq!(
            b.register("sess2", &"x".repeat(129), now),
            Err("invalid_token")
        );
    }
}
