//! The Pusher Channels protocol (version 7), sans-IO: the wire of a Laravel
//! Reverb (or any Pusher-protocol) private channel, seed 004's first
//! transport.
//!
//! * `frames.rs`: every frame a client sends and receives, typed, and the
//!   `pusher:error` and close codes ([`crate::PusherFrame`],
//!   [`crate::ClientFrame`], [`crate::PusherErrorCode`],
//!   [`crate::PusherCloseCode`]);
//! * `auth.rs`: the channel auth a host app's bridge signs
//!   ([`crate::sign_channel_auth`], [`crate::verify_channel_auth`],
//!   [`crate::ChannelAuth`]);
//! * `error.rs`: the layer's own error ([`crate::PusherError`]);
//! * `channel.rs`: one connection joined to one channel as a state machine
//!   ([`crate::PusherChannel`]);
//! * `endpoint.rs`: a Reverb invitation's two hosts (the WebSocket server,
//!   the auth bridge) vetted by the egress policy, and the auth bridge
//!   request ([`crate::ReverbEndpoint`]);
//! * `leg.rs`: the channel as an operation's relay (the exchange machine's
//!   receive leg and POSTs carried by whispers).
//!
//! May use: `error.rs`, `invite/`, `formats/` and `egress/`.

pub(crate) mod auth;
pub(crate) mod channel;
pub(crate) mod endpoint;
pub(crate) mod error;
pub(crate) mod frames;
pub(crate) mod leg;
