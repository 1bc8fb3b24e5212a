//! The change feed: what somebody else did since the agent's last marker.

use std::fmt;

use serde::{Deserialize, Serialize};

/// What has been observed of a surface's change feed.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ChangeFeed {
    /// The surface has not listed its tools yet.
    #[default]
    NotObserved,
    /// The surface offers no change feed.
    Unavailable,
    /// The surface offers a feed; attribution is not yet observed.
    Offered,
    /// The feed has named an actor other than this agent.
    Attributed,
}

impl ChangeFeed {
    /// The wire value.
    #[must_use]
    pub fn as_str(self) -> &'static str {
        match self {
            ChangeFeed::NotObserved => "not_observed",
            ChangeFeed::Unavailable => "unavailable",
            ChangeFeed::Offered => "offered",
            ChangeFeed::Attributed => "attributed",
        }
    }

    /// True for `Offered` and `Attributed`.
    #[must_use]
    pub fn is_answerable(self) -> bool {
        matches!(self, ChangeFeed::Offered | ChangeFeed::Attributed)
    }

    /// True for `Unavailable`.
    #[must_use]
    pub fn is_unavailable(self) -> bool {
        self == ChangeFeed::Unavailable
    }

    /// True for `Attributed`.
    #[must_use]
    pub fn is_proven(self) -> bool {
        self == ChangeFeed::Attributed
    }

    /// One sentence saying what is known.
    #[must_use]
    pub fn describe(self) -> &'static str {
        match self {
            ChangeFeed::NotObserved => {
                "The surface has not listed its tools yet, so nothing is known about a change feed."
            }
            ChangeFeed::Unavailable => {
                "The surface offers no change feed, so what a human changed cannot be known here. An empty answer is not evidence that nothing changed."
            }
            ChangeFeed::Offered => {
                "The surface offers a change feed. Whether it names WHO made a change is not observable until something changes."
            }
            ChangeFeed::Attributed => {
                "The surface has reported a change made by someone other than this agent, so attribution is proven rather than assumed."
            }
        }
    }
}

impl fmt::Display for ChangeFeed {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}
