//! The Pusher channel layer's own error type.

/// An error of the Pusher channel layer. No variant holds a token, a
/// secret or a signature.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum PusherError {
    /// The channel is not a `private-…` or `presence-…` name Human+ joins.
    #[error(
        "The channel name must be a private or presence channel name (private-… or presence-…, at most 200 of letters, digits and _-=@,.;), not an encrypted channel."
    )]
    ChannelName,
    /// The app key is not 1 to 128 of `[A-Za-z0-9._-]`.
    #[error("The Pusher app key must be 1 to 128 letters, digits, '.', '_' or '-'.")]
    AppKey,
    /// A whisper's WebSocket message is over the channel's limit.
    #[error(
        "This message is {size} bytes as a channel whisper, over the channel's limit of {limit} bytes per WebSocket message: it was refused here and not sent."
    )]
    MessageTooLarge {
        /// The encoded message's size, in bytes.
        size: usize,
        /// The limit, in bytes.
        limit: usize,
    },
    /// A whisper's data is not a JSON object.
    #[error("A channel whisper must carry a JSON object.")]
    NotAnObject,
    /// Too many whispers already wait for the rate limit.
    #[error("{limit} whispers already wait for the channel's rate limit; this one was not queued.")]
    Backlog {
        /// The most whispers that may wait.
        limit: usize,
    },
    /// Whispers go only on a subscribed channel.
    #[error("The channel is not subscribed yet: nothing can be whispered on it.")]
    NotSubscribed,
    /// An auth was given when none was asked for.
    #[error("The channel did not ask for an auth signature.")]
    NotAwaitingAuth,
    /// The auth bridge's answer is not `{"auth": "KEY:SIGNATURE"}`.
    #[error("The host app's auth bridge did not answer with a channel auth signature.")]
    AuthResponse,
    /// The bridge signed for another app key than the WebSocket URL's.
    #[error("The host app's auth bridge signed for another app key than the channel server's.")]
    AuthKey,
    /// A presence channel needs `channel_data` with a `user_id`, and a
    /// private channel takes none.
    #[error(
        "A presence channel's auth needs channel_data with a user_id (and a private channel's has none)."
    )]
    ChannelData,
    /// The connection is closed.
    #[error("The channel connection is closed.")]
    Closed,
}
