//! The Pusher channel protocol: `PusherFrame::parse` on every server
//! message, and the `PusherChannel` machine driven by a script of server
//! messages, whispers, auth answers, clock steps and closes.
//!
//! Input: byte 0 = configuration (bits 0-3: client events per second minus
//! one, 1 to 16; bit 4: a presence channel; bit 5: a 300-byte message limit
//! instead of 10,000; bit 6: a 4-whisper backlog instead of 256). The rest
//! is lines (`\n`), each an operation (its first byte) and its text:
//! `S<text>` a server message, `W<text>` a whisper to send,
//! `A<g|f|k|p|n>` an auth answer (good, forged, another app key, good with
//! presence `channel_data`, good without), `T<ms>` the clock moves then
//! `handle_timeout`, `C<code>` the socket closes (no code: dropped), `X`
//! a close from this side. Anything else is a server message too.
//! (WebSocket delivers messages whole, so there is no split to vary.)
//!
//! Properties:
//! - parsing never panics; a parsed `connection_established` has a
//!   `digits.digits` socket id; an error message is bounded, without control
//!   characters; a client event's data is a JSON object;
//! - a whisper accepted is sent exactly as `ClientFrame::ClientEvent`
//!   encodes it, first in first out, never over the message limit, only
//!   while subscribed; one refused for size names its exact size and the
//!   limit;
//! - no more than the budget of whispers in any one-second window;
//! - the backlog never exceeds its bound; events are only whispers while
//!   subscribed; nothing is sent after a close and there is no timeout;
//! - the machine's `Debug` never shows the auth signature;
//! - left alone (no server message), the clock alone ends the connection in
//!   bounded steps (ping, then pong timeout), sending every queued whisper.

#![no_main]

use std::collections::VecDeque;
use std::time::{Duration, Instant};

use human_plus_core::{
    ChannelAuth, ClientFrame, MAX_ERROR_MESSAGE_BYTES, PusherChannel, PusherConfig, PusherError,
    PusherEvent, PusherFrame, PusherSecret, PusherState, sign_channel_auth,
};
use libfuzzer_sys::fuzz_target;

const KEY: &str = "app-key";

struct Run {
    ch: PusherChannel,
    now: Instant,
    expected: VecDeque<String>,
    sent: Vec<Instant>,
    budget: usize,
    limit: usize,
    backlog: usize,
    signature: Option<String>,
}

impl Run {
    fn drain(&mut self) {
        let mut guard = 0;
        while let Some(message) = self.ch.poll_transmit(self.now) {
            guard += 1;
            assert!(guard < 10_000, "poll_transmit never ran dry");
            if message.starts_with(r#"{"event":"pusher:"#) {
                // A ping, a pong or the subscription: not paced.
                continue;
            }
            assert_eq!(self.ch.state(), PusherState::Subscribed);
            let want = self.expected.pop_front().expect("a whisper nobody queued");
            assert_eq!(message, want, "whispers leave in order, as encoded");
            assert!(message.len() <= self.limit);
            self.sent.push(self.now);
            if self.sent.len() > self.budget {
                let first = self.sent[self.sent.len() - 1 - self.budget];
                assert!(
                    self.now - first >= Duration::from_secs(1),
                    "more than {} whispers in one second",
                    self.budget
                );
            }
        }
        let state = self.ch.state();
        if state == PusherState::Closed {
            // A close drops what was still queued.
            self.expected.clear();
        }
        assert!(self.ch.queued_whispers() <= self.backlog);
        assert_eq!(self.ch.queued_whispers(), self.expected.len());
        while let Some(event) = self.ch.poll_event() {
            match event {
                PusherEvent::Whisper(w) => {
                    let v: serde_json::Value =
                        serde_json::from_str(&w.data).expect("whisper data is JSON");
                    assert!(v.is_object());
                    assert_eq!(state, PusherState::Subscribed);
                }
                PusherEvent::MemberAdded(_) | PusherEvent::MemberRemoved(_) => {
                    assert_eq!(state, PusherState::Subscribed);
                }
                PusherEvent::Closed(_) => assert_eq!(state, PusherState::Closed),
                _ => {}
            }
        }
        if state == PusherState::Closed {
            assert!(self.ch.poll_timeout().is_none());
            assert!(self.ch.poll_transmit(self.now).is_none());
        } else {
            assert!(self.ch.poll_timeout().is_some());
        }
        if let Some(sig) = &self.signature {
            assert!(!format!("{:?}", self.ch).contains(sig.as_str()));
        }
    }

    fn whisper(&mut self, text: &str) {
        let trimmed = text.trim_matches(|c| matches!(c, ' ' | '\t' | '\n' | '\r'));
        let encoded = ClientFrame::ClientEvent {
            channel: self.ch.channel(),
            event: "client-mcp",
            data: trimmed,
        }
        .encode();
        match self.ch.send_whisper(text) {
            Ok(()) => {
                assert_eq!(self.ch.state(), PusherState::Subscribed);
                assert!(encoded.len() <= self.limit);
                self.expected.push_back(encoded);
            }
            Err(PusherError::MessageTooLarge { size, limit }) => {
                assert_eq!(limit, self.limit);
                assert_eq!(size, encoded.len());
                assert!(size > limit);
            }
            Err(PusherError::Backlog { limit }) => assert_eq!(limit, self.backlog),
            Err(_) => {}
        }
    }

    fn authorize(&mut self, how: u8) {
        let Some(socket_id) = self.ch.socket_id().map(str::to_owned) else {
            let _ = self
                .ch
                .authorize(ChannelAuth::new("app-key:00", None).expect("valid"), self.now);
            return;
        };
        let channel = self.ch.channel().to_owned();
        let data = r#"{"user_id":"agent-1"}"#;
        let secret = PusherSecret::new("secret");
        let (auth, cd) = match how {
            b'f' => (format!("{KEY}:{}", "ab".repeat(32)), None),
            b'k' => (sign_channel_auth("other", &secret, &socket_id, &channel, None), None),
            b'p' => (
                sign_channel_auth(KEY, &secret, &socket_id, &channel, Some(data)),
                Some(data),
            ),
            _ => (sign_channel_auth(KEY, &secret, &socket_id, &channel, None), None),
        };
        if let Some((_, sig)) = auth.split_once(':') {
            self.signature = Some(sig.to_owned());
        }
        let auth = ChannelAuth::new(&auth, cd).expect("a well-formed auth");
        let _ = self.ch.authorize(auth, self.now);
    }
}

fn check_frame(text: &str) {
    match PusherFrame::parse(text) {
        Ok(PusherFrame::ConnectionEstablished { socket_id, .. }) => {
            assert!(human_plus_core::is_pusher_socket_id(&socket_id));
        }
        Ok(PusherFrame::Error(e)) => {
            assert!(e.message.len() <= MAX_ERROR_MESSAGE_BYTES);
            assert!(!e.message.chars().any(char::is_control));
        }
        Ok(PusherFrame::ClientEvent(e)) => {
            let v: serde_json::Value = serde_json::from_str(&e.data).expect("data is JSON");
            assert!(v.is_object());
        }
        _ => {}
    }
}

fuzz_target!(|data: &[u8]| {
    let Some((&mode, rest)) = data.split_first() else {
        return;
    };
    let budget = usize::from(mode & 15) + 1;
    let presence = mode & 16 != 0;
    let limit = if mode & 32 != 0 { 300 } else { 10_000 };
    let backlog = if mode & 64 != 0 { 4 } else { 256 };
    let mut config = PusherConfig::default();
    config.client_events = u32::try_from(budget).expect("small");
    config.max_message_bytes = limit;
    config.max_queued_whispers = backlog;
    let channel = if presence {
        "presence-agent.session.S1"
    } else {
        "private-agent.session.S1"
    };
    let t0 = Instant::now();
    let mut run = Run {
        ch: PusherChannel::new(KEY, channel, config, t0).expect("valid"),
        now: t0,
        expected: VecDeque::new(),
        sent: Vec::new(),
        budget,
        limit,
        backlog,
        signature: None,
    };
    let text = String::from_utf8_lossy(rest);
    for line in text.split('\n').take(512) {
        let (op, arg) = match line.as_bytes().first() {
            Some(&b) if b.is_ascii() => (b, &line[1..]),
            _ => (b'S', line),
        };
        match op {
            b'W' => run.whisper(arg),
            b'A' => run.authorize(arg.bytes().next().unwrap_or(b'g')),
            b'T' => {
                let ms: u64 = arg.parse().unwrap_or(1000).min(600_000);
                run.now += Duration::from_millis(ms);
                run.ch.handle_timeout(run.now);
            }
            b'C' => run.ch.handle_close(arg.parse().ok()),
            b'X' => run.ch.close(),
            b'S' => {
                check_frame(arg);
                run.ch.handle_text(arg, run.now);
            }
            _ => {
                check_frame(line);
                run.ch.handle_text(line, run.now);
            }
        }
        run.drain();
    }
    // Left alone, the clock ends it in bounded steps.
    let mut steps = 0;
    while let Some(deadline) = run.ch.poll_timeout() {
        steps += 1;
        assert!(steps < 1_000, "the clock alone never ended the connection");
        run.now = run.now.max(deadline);
        run.ch.handle_timeout(run.now);
        run.drain();
    }
    assert!(run.expected.is_empty());
    assert_eq!(run.ch.state(), PusherState::Closed);
});
