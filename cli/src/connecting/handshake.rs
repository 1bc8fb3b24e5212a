//! The handshake that tells whether a page answers: a connection of its
//! own to what the invitation names (withholding a tool whose pin changed,
//! as the bridge does) and one `tools` operation (`initialize`,
//! `notifications/initialized`, `tools/list`), each exchange bounded by one
//! short bound and opening a connection by half of it. No call, no
//! announcement, no `unregister`.
//!
//! What came back tells apart a relay that cannot be reached (a transport
//! failure), a session that ended (410), a token the relay refuses (401)
//! and a relay that took the request while no page answered (a timeout).
//! Over a Reverb channel the same handshake runs on the channel (the auth
//! bridge signs, the page answers on the channel): a token the auth bridge
//! refuses (401/403), a page that left a presence channel or did not
//! answer, a channel server that cannot be reached.
//! `human-plus status NAME` reports it to a person; the bridge asks it
//! after a call timed out, before it sends the next one.

use std::time::{Duration, Instant};

use human_plus_core::{ChannelError, Discovery, Error, Participant, Unauthorized};

use crate::args::TransportArgs;
use crate::connecting::connect::{Connection, Resolved, connect_resolved_within};
use crate::output::exit::Failure;

/// The shortest bound on opening a connection for a handshake.
const MIN_CONNECT: Duration = Duration::from_millis(100);

/// What a handshake found.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ProbeOutcome {
    /// The relay answered and a page answered the MCP handshake and listed
    /// its tools.
    PageAnswered,
    /// The relay could not be reached (DNS, TCP, TLS, the egress proxy).
    RelayUnreachable,
    /// The relay says the session has ended (410).
    SessionEnded,
    /// The relay refused the token (401).
    TokenRefused,
    /// The relay took the request, and no page answered in time.
    NoPage,
    /// Egress refused the relay (the profile's egress does not allow it),
    /// or the egress proxy wants credentials.
    EgressRefused,
    /// Anything else (the relay answered another status, the exchange
    /// broke the protocol, ...).
    Failed,
}

impl ProbeOutcome {
    /// A stable name: `page_answered`, `relay_unreachable`,
    /// `session_ended`, `token_refused`, `no_page`, `egress_refused` or
    /// `failed`.
    #[must_use]
    pub fn as_str(&self) -> &'static str {
        match self {
            ProbeOutcome::PageAnswered => "page_answered",
            ProbeOutcome::RelayUnreachable => "relay_unreachable",
            ProbeOutcome::SessionEnded => "session_ended",
            ProbeOutcome::TokenRefused => "token_refused",
            ProbeOutcome::NoPage => "no_page",
            ProbeOutcome::EgressRefused => "egress_refused",
            ProbeOutcome::Failed => "failed",
        }
    }

    /// What the outcome of a failed handshake is. Over a Reverb channel:
    /// the auth bridge's 401/403 is a refused token, a reply that never came
    /// or a page gone from a presence channel is no page, a connection the
    /// channel server ended is an unreachable server, and the channel
    /// server refusing the bridge's signature (4009) is a failure of its
    /// own (the host app's bridge and server disagree).
    #[must_use]
    pub fn of_error(error: &Error) -> Self {
        match error {
            Error::SurfaceUnavailable => ProbeOutcome::SessionEnded,
            Error::AttachmentUnauthorized(Unauthorized::Channel) => ProbeOutcome::Failed,
            Error::AttachmentUnauthorized(_) => ProbeOutcome::TokenRefused,
            Error::Channel(ChannelError::Unanswered { .. } | ChannelError::PageLeft { .. }) => {
                ProbeOutcome::NoPage
            }
            Error::Channel(ChannelError::Closed { .. }) => ProbeOutcome::RelayUnreachable,
            Error::Timeout => ProbeOutcome::NoPage,
            Error::Transport(_) => ProbeOutcome::RelayUnreachable,
            Error::EgressRefused(_) | Error::ProxyAuthRequired(_) => ProbeOutcome::EgressRefused,
            _ => ProbeOutcome::Failed,
        }
    }
}

/// One handshake's result.
pub struct Handshake {
    /// What it found.
    pub outcome: ProbeOutcome,
    /// How long it took, opening the connection included.
    pub elapsed: Duration,
    /// The listing the page answered with, or the error that ended it.
    pub listing: Result<Discovery, Error>,
    /// The connection it ran on (for the failure's context).
    pub connection: Connection,
}

impl std::fmt::Debug for Handshake {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Handshake")
            .field("outcome", &self.outcome)
            .field("elapsed", &self.elapsed)
            .finish_non_exhaustive()
    }
}

/// Runs the handshake with what `resolved` names, on `transport`'s runtime
/// and leg: every exchange bounded by `bound` (not `transport`'s timeout),
/// opening a new connection by half of it (at least 0.1 s), so a relay that
/// cannot be reached is told apart from a page that does not answer.
///
/// # Errors
/// A failure before anything is sent: bad options, an egress refusal.
pub fn handshake(
    resolved: Resolved,
    transport: &TransportArgs,
    participant: Participant,
    bound: Duration,
) -> Result<Handshake, Failure> {
    let transport = TransportArgs {
        timeout: bound.as_secs_f64(),
        ..transport.clone()
    };
    let started = Instant::now();
    let connection = connect_resolved_within(
        resolved,
        &transport,
        participant,
        false,
        true,
        (bound / 2).max(MIN_CONNECT),
    )?;
    let listing = connection.agent.tools(&connection.owner, connection.id());
    let elapsed = started.elapsed();
    let outcome = match &listing {
        Ok(_) => ProbeOutcome::PageAnswered,
        Err(e) => ProbeOutcome::of_error(e),
    };
    Ok(Handshake {
        outcome,
        elapsed,
        listing,
        connection,
    })
}
