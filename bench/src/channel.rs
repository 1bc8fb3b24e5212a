//! What a Reverb channel costs against the HTTP relay (issue 40): a warm
//! call over our Pusher-protocol server against the same call over the
//! relay's SSE leg, on loopback, side by side in one run (alternating
//! windows), in each runtime; and the attach of each.
//!
//! Both pages are the demo surface (the same sheet, the same answering
//! code); the channel's page is on the channel, the relay's on the relay.

use std::fmt::Write as _;
use std::time::Instant;

use human_plus_any::{Agent, AgentSetup, RuntimeKind, build_agent};
use human_plus_core::{
    EgressPolicy, ManagerConfig, NO_PINS, PusherConfig, ReverbChannel, SurfaceInvitation,
    TrustPolicy,
};
use human_plus_relay::{AuthBridge, DemoSurface, PusherServer, RelayServer};
use serde_json::json;

use crate::net::participant;

const TOKEN: &str = "channel-bench-token-0123456789ab";
const PAGE_TOKEN: &str = "channel-bench-page-0123456789ab";
const KEY: &str = "bench-key";
const SECRET: &str = "bench-secret";

fn percentile(xs: &[f64], p: f64) -> f64 {
    let mut v = xs.to_vec();
    v.sort_by(f64::total_cmp);
    let i = ((v.len() as f64 - 1.0) * p).round() as usize;
    v[i.min(v.len() - 1)]
}

fn port_of(url: &str) -> u16 {
    let rest = url.split_once("://").map_or(url, |(_, r)| r);
    let authority = rest.split('/').next().unwrap_or(rest);
    authority
        .rsplit_once(':')
        .and_then(|(_, p)| p.parse().ok())
        .expect("a port")
}

fn agent(kind: RuntimeKind, ports: Vec<u16>, events: u32) -> Box<dyn Agent> {
    let mut channel = PusherConfig::default();
    channel.client_events = events;
    let config = ManagerConfig::new(
        EgressPolicy::new(["127.0.0.1"])
            .allow_ports(ports)
            .allow_unverified_egress(true),
        TrustPolicy::every_tool(NO_PINS),
    )
    .channel(channel);
    let mut setup = AgentSetup::new(config);
    setup.tokio_workers = 1;
    build_agent(kind, setup).expect("agent")
}

/// Runs the benchmark: per runtime, one attach of each transport, then
/// `windows` alternating windows of `calls` warm calls each; microseconds.
///
/// # Panics
/// When a server, a page or a call fails.
#[must_use]
pub fn run(windows: usize, calls: usize, events: u32) -> String {
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .expect("runtime");
    let relay = rt.block_on(RelayServer::builder().start()).expect("relay");
    let server = rt
        .block_on(PusherServer::builder(KEY, SECRET).start())
        .expect("channel server");
    let mut out = String::new();
    let _ = writeln!(
        out,
        "channel (issue 40): a warm `sheet_get_cell` over our Pusher-protocol server against the HTTP relay's SSE leg, loopback, {windows} alternating windows of {calls} calls per transport and runtime, the agent's client events paced at {events}/s, µs:"
    );
    let _ = writeln!(
        out,
        "| runtime | attach relay / channel (µs) | warm call p50 relay / channel | ratio | p99 relay / channel | calls |"
    );
    let _ = writeln!(out, "|---|---|---|---|---|---|");
    for (n, kind) in [
        RuntimeKind::Tokio,
        RuntimeKind::Blocking,
        RuntimeKind::AsyncStd,
    ]
    .into_iter()
    .enumerate()
    {
        let session = format!("chbench_{n}");
        let channel = format!("private-agent.session.{session}");
        let relay_page = rt
            .block_on(DemoSurface::builder(relay.base_url(), &session, TOKEN).start())
            .expect("relay page");
        let bridge = rt
            .block_on(
                AuthBridge::builder(KEY, SECRET)
                    .grant(TOKEN, &channel)
                    .grant_as(PAGE_TOKEN, &channel, "page")
                    .start(),
            )
            .expect("bridge");
        let channel_page = rt
            .block_on(
                DemoSurface::channel_builder(server.ws_url(), bridge.url(), &session, PAGE_TOKEN)
                    .client_events_per_second(10_000)
                    .start(),
            )
            .expect("channel page");
        let relay_agent = agent(kind, vec![relay.addr().port()], events);
        let channel_agent = agent(
            kind,
            vec![port_of(&server.ws_url()), port_of(&bridge.url())],
            events,
        );
        let relay_inv = SurfaceInvitation::new_insecure_loopback(
            relay.base_url(),
            &session,
            TOKEN,
            "sheet:one",
            "Bench",
        )
        .expect("invitation");
        let ch =
            ReverbChannel::new(server.ws_url(), bridge.url(), &channel, true).expect("channel");
        let channel_inv =
            SurfaceInvitation::new_reverb(ch, &session, TOKEN, "sheet:one", "Bench").expect("inv");
        let owner = format!("bench:{n}");
        let t = Instant::now();
        let r = relay_agent
            .attach_verified(&owner, relay_inv, participant())
            .expect("attach relay")
            .attachment;
        let attach_relay = t.elapsed();
        let t = Instant::now();
        let c = channel_agent
            .attach_verified(&owner, channel_inv, participant())
            .expect("attach channel")
            .attachment;
        let attach_channel = t.elapsed();
        let call = |a: &dyn Agent, id: &str| {
            let t = Instant::now();
            a.call(&owner, id, "sheet_get_cell", json!({"address": "A1"}))
                .expect("call");
            t.elapsed().as_secs_f64() * 1e6
        };
        // Warm both legs (and the listings) first.
        for _ in 0..5 {
            call(relay_agent.as_ref(), r.id());
            call(channel_agent.as_ref(), c.id());
        }
        let (mut over_relay, mut over_channel) = (Vec::new(), Vec::new());
        for w in 0..windows {
            // Alternate which goes first in a window.
            for first in [w % 2 == 0, w % 2 == 1] {
                for _ in 0..calls {
                    if first {
                        over_relay.push(call(relay_agent.as_ref(), r.id()));
                    } else {
                        over_channel.push(call(channel_agent.as_ref(), c.id()));
                    }
                }
            }
        }
        let (p50r, p50c) = (percentile(&over_relay, 0.5), percentile(&over_channel, 0.5));
        let _ = writeln!(
            out,
            "| {} | {:.0} / {:.0} | {:.0} / {:.0} | {:.2}x | {:.0} / {:.0} | {} + {} |",
            kind.as_str(),
            attach_relay.as_secs_f64() * 1e6,
            attach_channel.as_secs_f64() * 1e6,
            p50r,
            p50c,
            p50c / p50r,
            percentile(&over_relay, 0.99),
            percentile(&over_channel, 0.99),
            over_relay.len(),
            over_channel.len(),
        );
        relay_agent.shutdown();
        channel_agent.shutdown();
        drop(relay_page);
        rt.block_on(channel_page.leave());
    }
    out
}
