//! The conformance suite, instantiated for every runtime x receive leg,
//! over loopback HTTP and over TLS.

use human_plus_conformance::{AsyncStd, Blocking, LegKind, Tokio};
use human_plus_conformance::{hostile, kept, scenarios};

macro_rules! suite {
    ($module:ident, $runtime:ty) => {
        mod $module {
            use super::*;

            #[test]
            fn lifecycle_sse_http() {
                scenarios::lifecycle::<$runtime>(LegKind::Sse, false);
            }
            #[test]
            fn lifecycle_poll_http() {
                scenarios::lifecycle::<$runtime>(LegKind::Poll, false);
            }
            #[test]
            fn lifecycle_sse_tls() {
                scenarios::lifecycle::<$runtime>(LegKind::Sse, true);
            }
            #[test]
            fn lifecycle_poll_tls() {
                scenarios::lifecycle::<$runtime>(LegKind::Poll, true);
            }
            #[test]
            fn attach_that_proves_itself_sse() {
                scenarios::attach_that_proves_itself::<$runtime>(LegKind::Sse);
            }
            #[test]
            fn attach_that_proves_itself_poll() {
                scenarios::attach_that_proves_itself::<$runtime>(LegKind::Poll);
            }
            #[test]
            fn careless_agent_sse() {
                scenarios::careless_agent::<$runtime>(LegKind::Sse);
            }
            #[test]
            fn careless_agent_poll() {
                scenarios::careless_agent::<$runtime>(LegKind::Poll);
            }
            #[test]
            fn gone_and_unauthorized_sse() {
                scenarios::gone_and_unauthorized::<$runtime>(LegKind::Sse);
            }
            #[test]
            fn gone_and_unauthorized_poll() {
                scenarios::gone_and_unauthorized::<$runtime>(LegKind::Poll);
            }
            #[test]
            fn silent_page_sse() {
                scenarios::silent_page::<$runtime>(LegKind::Sse);
            }
            #[test]
            fn silent_page_poll() {
                scenarios::silent_page::<$runtime>(LegKind::Poll);
            }
            #[test]
            fn busy_sse() {
                scenarios::busy::<$runtime>(LegKind::Sse);
            }
            #[test]
            fn lease_renewed_while_running_sse() {
                scenarios::lease_renewed_while_running::<$runtime>(LegKind::Sse);
            }
            #[test]
            fn shutdown_keeps_one_writer_sse() {
                scenarios::shutdown_keeps_one_writer::<$runtime>(LegKind::Sse);
            }
            #[test]
            fn shutdown_keeps_one_writer_poll() {
                scenarios::shutdown_keeps_one_writer::<$runtime>(LegKind::Poll);
            }
            #[test]
            fn busy_behind_our_own_sse() {
                scenarios::busy_behind_our_own::<$runtime>(LegKind::Sse);
            }
            #[test]
            fn decisions_carry_their_revision_sse() {
                scenarios::decisions_carry_their_revision::<$runtime>(LegKind::Sse);
            }
            #[test]
            fn decisions_carry_their_revision_poll() {
                scenarios::decisions_carry_their_revision::<$runtime>(LegKind::Poll);
            }
            #[test]
            fn faults_sse() {
                scenarios::faults::<$runtime>(LegKind::Sse);
            }
            #[test]
            fn faults_poll() {
                scenarios::faults::<$runtime>(LegKind::Poll);
            }
            #[test]
            fn hostile_surface_sse() {
                hostile::hostile_surface::<$runtime>(LegKind::Sse);
            }
            #[test]
            fn hostile_surface_poll() {
                hostile::hostile_surface::<$runtime>(LegKind::Poll);
            }
            #[test]
            fn surface_versions_sse() {
                scenarios::surface_versions::<$runtime>(LegKind::Sse);
            }
            #[test]
            fn surface_versions_poll() {
                scenarios::surface_versions::<$runtime>(LegKind::Poll);
            }
            #[test]
            fn two_agents_sse() {
                scenarios::two_agents::<$runtime>(LegKind::Sse);
            }
            #[test]
            fn two_agents_poll() {
                scenarios::two_agents::<$runtime>(LegKind::Poll);
            }
            #[test]
            fn hostile_invitations() {
                scenarios::hostile_invitations::<$runtime>();
            }
            #[test]
            fn links_sse() {
                scenarios::links::<$runtime>(LegKind::Sse);
            }
            #[test]
            fn links_poll() {
                scenarios::links::<$runtime>(LegKind::Poll);
            }
            #[test]
            fn through_the_proxy_sse() {
                scenarios::through_the_proxy::<$runtime>(LegKind::Sse);
            }
            #[test]
            fn through_the_proxy_poll() {
                scenarios::through_the_proxy::<$runtime>(LegKind::Poll);
            }
            #[test]
            fn proxy_credentials_sse() {
                scenarios::proxy_credentials::<$runtime>(LegKind::Sse);
            }
        }
    };
}

/// Kept legs and kept connections, in every runtime.
macro_rules! warm_suite {
    ($module:ident, $runtime:ty) => {
        mod $module {
            use super::*;

            #[test]
            fn warm_sse() {
                scenarios::warm::<$runtime>(LegKind::Sse);
            }
            #[test]
            fn warm_poll() {
                scenarios::warm::<$runtime>(LegKind::Poll);
            }
            #[test]
            fn kept_connections_sse() {
                scenarios::kept_connections::<$runtime>(LegKind::Sse);
            }
            #[test]
            fn kept_connections_poll() {
                scenarios::kept_connections::<$runtime>(LegKind::Poll);
            }
            #[test]
            fn never_twice_sse() {
                scenarios::never_twice::<$runtime>(LegKind::Sse);
            }
            #[test]
            fn never_twice_poll() {
                scenarios::never_twice::<$runtime>(LegKind::Poll);
            }
            #[test]
            fn listing_rule_sse() {
                scenarios::listing_rule::<$runtime>(LegKind::Sse);
            }
            #[test]
            fn listing_rule_poll() {
                scenarios::listing_rule::<$runtime>(LegKind::Poll);
            }
            #[test]
            fn dead_leg() {
                scenarios::dead_leg::<$runtime>();
            }
            #[test]
            fn seen_sse() {
                scenarios::seen::<$runtime>(LegKind::Sse);
            }
            #[test]
            fn seen_poll() {
                scenarios::seen::<$runtime>(LegKind::Poll);
            }
        }
    };
}

/// Kept legs as a service gets them by default: bounded, idle-closed,
/// the listing reused, two replicas on one conversation (issue 43).
macro_rules! kept_suite {
    ($module:ident, $runtime:ty) => {
        mod $module {
            use super::*;

            #[test]
            fn kept_by_default_sse() {
                kept::kept_by_default::<$runtime>(LegKind::Sse);
            }
            #[test]
            fn kept_by_default_poll() {
                kept::kept_by_default::<$runtime>(LegKind::Poll);
            }
            #[test]
            fn closed_after_idle_sse() {
                kept::closed_after_idle::<$runtime>(LegKind::Sse);
            }
            #[test]
            fn closed_after_idle_poll() {
                kept::closed_after_idle::<$runtime>(LegKind::Poll);
            }
            #[test]
            fn least_recently_used_at_the_bound_sse() {
                kept::least_recently_used_at_the_bound::<$runtime>(LegKind::Sse);
            }
            #[test]
            fn least_recently_used_at_the_bound_poll() {
                kept::least_recently_used_at_the_bound::<$runtime>(LegKind::Poll);
            }
            #[test]
            fn closed_on_time_while_quiet_sse() {
                kept::closed_on_time_while_quiet::<$runtime>(LegKind::Sse);
            }
            #[test]
            fn closed_on_time_while_quiet_poll() {
                kept::closed_on_time_while_quiet::<$runtime>(LegKind::Poll);
            }
            #[test]
            fn two_replicas_one_conversation_sse() {
                kept::two_replicas_one_conversation::<$runtime>(LegKind::Sse);
            }
            #[test]
            fn two_replicas_one_conversation_poll() {
                kept::two_replicas_one_conversation::<$runtime>(LegKind::Poll);
            }
        }
    };
}

kept_suite!(tokio_kept, Tokio);
kept_suite!(blocking_kept, Blocking);
kept_suite!(async_std_kept, AsyncStd);

warm_suite!(tokio_warm, Tokio);
warm_suite!(blocking_warm, Blocking);
warm_suite!(async_std_warm, AsyncStd);

suite!(tokio, Tokio);
suite!(blocking, Blocking);
suite!(async_std, AsyncStd);
