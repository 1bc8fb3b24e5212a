//! What a running bridge follows: the profile it was started with, re-read
//! when its attachment can no longer go on and whenever the profile's files
//! change (`join` wrote a new link under the name, `review` accepted a
//! changed tool), or the one invitation its flags or link named, joined
//! again when the session comes back (a relay that restarted, a page that
//! registered again).

use std::path::PathBuf;

use human_plus_core::Participant;

use crate::args::ConnectArgs;
use crate::connecting::connect::{Connection, connect_resolved, resolve};
use crate::connecting::handshake::{Handshake, handshake};
use crate::output::exit::Failure;
use crate::profiles::profile::{self, Fingerprint};

/// How a bridge joins its surface again.
#[derive(Debug, Clone)]
pub struct Follow {
    args: ConnectArgs,
    warm: bool,
    /// The profile's name, directory and the look of its files when last
    /// read; `None` for a bridge started from flags or a link.
    profile: Option<(String, PathBuf, Fingerprint)>,
}

impl Follow {
    /// What a bridge started with `args` follows (`warm`: keep the receive
    /// leg open between operations).
    ///
    /// # Errors
    /// A usage failure for a malformed profile name.
    pub fn new(args: &ConnectArgs, warm: bool) -> Result<Follow, Failure> {
        let profile = match &args.profile {
            Some(name) => {
                let dir = profile::profile_dir(name)?;
                let seen = Fingerprint::of(&dir);
                Some((name.clone(), dir, seen))
            }
            None => None,
        };
        Ok(Follow {
            args: args.clone(),
            warm,
            profile,
        })
    }

    /// The exchange timeout the bridge's operations run under.
    #[must_use]
    pub fn timeout(&self) -> std::time::Duration {
        crate::connecting::connect::timeout(self.args.transport.timeout)
            .unwrap_or(human_plus_core::TransportConfig::default().timeout)
    }

    /// The profile's name, when the bridge follows one.
    #[must_use]
    pub fn profile_name(&self) -> Option<&str> {
        self.profile.as_ref().map(|(name, _, _)| name.as_str())
    }

    /// Whether the profile's files changed since they were last read (and
    /// from now on compares with how they look now). Always false without
    /// a profile. No file is read, only their metadata.
    pub fn files_changed(&mut self) -> bool {
        let Some((_, dir, seen)) = &mut self.profile else {
            return false;
        };
        let now = Fingerprint::of(dir);
        if now == *seen {
            return false;
        }
        *seen = now;
        true
    }

    /// Reads the profile (or the flags and link) again and makes a new
    /// manager and attachment from what it says now. No network: the first
    /// operation is the first request.
    ///
    /// # Errors
    /// What [`connect_resolved`] returns: a profile that cannot be read or
    /// is refused, an egress refusal.
    pub fn connect(&self) -> Result<Connection, Failure> {
        let resolved = resolve(&self.args, None)?;
        connect_resolved(
            resolved,
            &self.args.transport,
            self.participant(),
            self.warm,
            true,
        )
    }

    /// Asks the page what the profile (or the flags and link) names now
    /// whether it answers: `status`'s handshake, on a connection of its
    /// own, every exchange bounded by `bound`. Nothing is called.
    ///
    /// # Errors
    /// As [`Follow::connect`].
    pub fn probe(&self, bound: std::time::Duration) -> Result<Handshake, Failure> {
        let resolved = resolve(&self.args, None)?;
        handshake(resolved, &self.args.transport, self.participant(), bound)
    }

    fn participant(&self) -> Participant {
        Participant::new(
            &self.args.participant_id,
            &self.args.participant_name,
            &self.args.participant_color,
        )
    }

    /// What a person runs to give this bridge a new link: `human-plus join
    /// --name NAME` for a profile, else a new invitation and a restart.
    #[must_use]
    pub fn remedy(&self) -> String {
        match self.profile_name() {
            Some(name) => format!(
                "Tell the user: to continue, they can share a new link from the page and run `human-plus join --name {name}`; this bridge picks it up without a restart."
            ),
            None => "Tell the user: this bridge was started with a fixed invitation; it joins the same session again if it comes back, and otherwise needs a new invitation (with `human-plus join`, a profile it follows) and a restart by its MCP client.".to_owned(),
        }
    }
}
