//! The conformance suite over a Reverb channel, in every runtime: the
//! project's own Pusher-protocol server, the auth bridge and the page on
//! the channel, over real WebSockets on loopback.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use human_plus_conformance::channel::{self, ChannelEnv, ChannelOptions};
use human_plus_conformance::{AsyncStd, Blocking, Tokio};

macro_rules! channel_suite {
    ($module:ident, $runtime:ty) => {
        mod $module {
            use super::*;

            #[test]
            fn conversation() {
                channel::conversation::<$runtime>(&ChannelEnv::ours(&ChannelOptions::default()));
            }

            #[test]
            fn refusals() {
                channel::refusals::<$runtime>(&ChannelEnv::ours(&ChannelOptions::default()));
            }

            #[test]
            fn request_over_the_limit() {
                channel::request_over_the_limit::<$runtime>(&ChannelEnv::ours(
                    &ChannelOptions::default(),
                ));
            }

            #[test]
            fn reply_over_the_limit() {
                let options = ChannelOptions {
                    extra_tools: 40,
                    ..ChannelOptions::default()
                };
                channel::reply_over_the_limit::<$runtime>(&ChannelEnv::ours(&options));
            }

            #[test]
            fn page_left_private() {
                channel::page_left::<$runtime>(
                    &ChannelEnv::ours(&ChannelOptions::default()),
                    false,
                );
            }

            #[test]
            fn page_left_presence() {
                let options = ChannelOptions {
                    presence: true,
                    ..ChannelOptions::default()
                };
                channel::page_left::<$runtime>(&ChannelEnv::ours(&options), true);
            }

            #[test]
            fn two_agents() {
                channel::two_agents::<$runtime>(&ChannelEnv::ours(&ChannelOptions::default()));
            }

            // The same over sockudo, a real third-party Pusher-protocol
            // server (skipped, said why, where the machine has none; CI
            // requires it).
            #[test]
            fn sockudo_conversation() {
                if let Some(env) = ChannelEnv::sockudo(&ChannelOptions::default()) {
                    channel::conversation::<$runtime>(&env);
                }
            }

            #[test]
            fn sockudo_refusals() {
                if let Some(env) = ChannelEnv::sockudo(&ChannelOptions::default()) {
                    channel::refusals::<$runtime>(&env);
                }
            }

            #[test]
            fn sockudo_limits() {
                if let Some(env) = ChannelEnv::sockudo(&ChannelOptions::default()) {
                    channel::request_over_the_limit::<$runtime>(&env);
                }
                let options = ChannelOptions {
                    extra_tools: 40,
                    ..ChannelOptions::default()
                };
                if let Some(env) = ChannelEnv::sockudo(&options) {
                    channel::reply_over_the_limit::<$runtime>(&env);
                }
            }

            #[test]
            fn sockudo_page_left() {
                if let Some(env) = ChannelEnv::sockudo(&ChannelOptions::default()) {
                    channel::page_left::<$runtime>(&env, false);
                }
                let options = ChannelOptions {
                    presence: true,
                    ..ChannelOptions::default()
                };
                if let Some(env) = ChannelEnv::sockudo(&options) {
                    channel::page_left::<$runtime>(&env, true);
                }
            }

            #[test]
            fn sockudo_two_agents() {
                if let Some(env) = ChannelEnv::sockudo(&ChannelOptions::default()) {
                    channel::two_agents::<$runtime>(&env);
                }
            }

            #[test]
            fn echo_page_over_sockudo() {
                channel::echo_page_conversation::<$runtime>();
            }
        }
    };
}

channel_suite!(tokio_runtime, Tokio);
channel_suite!(blocking_runtime, Blocking);
channel_suite!(async_std_runtime, AsyncStd);
