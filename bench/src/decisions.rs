//! What issue 39 costs, in round trips across a link: the attach that
//! learns the page's revision from its change feed (one exchange more than
//! a page without a feed), and a warm call on the stored pin against the
//! same call carrying its decision's revision (`call_at`), side by side in
//! one run, alternating.
//!
//! The agent reaches the local relay through [`Link`] (every byte delayed
//! by half the RTT each way); the page is on the relay's side, as in
//! `compare link`.

use std::fmt::Write as _;
use std::time::{Duration, Instant};

use human_plus_any::{AgentSetup, RuntimeKind, build_agent};
use human_plus_core::{
    EgressPolicy, ManagerConfig, NO_PINS, ReceiveLeg, SurfaceInvitation, TransportConfig,
    TrustPolicy,
};
use human_plus_relay::{DemoSurface, RelayServer};
use serde_json::json;

use crate::link::Link;
use crate::net::participant;

/// The token of the benchmark's sessions.
const TOKEN: &str = "decisions-bench-token-0123456789";

/// One page: its relay session with a demo surface, with or without a
/// change feed, and the link the agent reaches the relay through.
struct Page {
    session: String,
    link_port: u16,
    _surface: DemoSurface,
}

fn median(mut xs: Vec<f64>) -> f64 {
    xs.sort_by(f64::total_cmp);
    xs[xs.len() / 2]
}

/// Runs the benchmark: `rounds` attaches per kind of page, `calls` warm
/// calls of each form per round; elapsed ÷ RTT.
///
/// # Panics
/// When the relay, the page or a call fails.
#[must_use]
pub fn run(rtt: Duration, rounds: usize, calls: usize) -> String {
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .expect("runtime");
    let relay = rt.block_on(RelayServer::builder().start()).expect("relay");
    let link = rt.block_on(Link::start(relay.addr(), rtt)).expect("link");
    let mut pages = Vec::new();
    for (n, feed) in [true, false].into_iter().enumerate() {
        let session = format!("decisions_{n}");
        let surface = rt
            .block_on(
                DemoSurface::builder(relay.base_url(), &session, TOKEN)
                    .change_feed(feed)
                    .start(),
            )
            .expect("page");
        pages.push(Page {
            session,
            link_port: link.port(),
            _surface: surface,
        });
    }
    let config = |port: u16| {
        ManagerConfig::new(
            EgressPolicy::new(["127.0.0.1"])
                .allow_ports([port])
                .allow_unverified_egress(true),
            TrustPolicy::every_tool(NO_PINS),
        )
        .transport(TransportConfig::default().receive_leg(ReceiveLeg::Sse))
    };
    let rtts = |d: Duration| d.as_secs_f64() / rtt.as_secs_f64();
    let (mut with_feed, mut without) = (Vec::new(), Vec::new());
    let (mut stored, mut carried) = (Vec::new(), Vec::new());
    for round in 0..rounds {
        for (n, page) in pages.iter().enumerate() {
            // A new manager per attach: nothing kept from the last round.
            let mut setup = AgentSetup::new(config(page.link_port));
            setup.tokio_workers = 2;
            let agent = build_agent(RuntimeKind::Tokio, setup).expect("agent");
            let invitation = SurfaceInvitation::new_insecure_loopback(
                format!("http://127.0.0.1:{}", page.link_port),
                &page.session,
                TOKEN,
                "sheet:one",
                "Bench",
            )
            .expect("invitation");
            let owner = format!("bench:{round}:{n}");
            let started = Instant::now();
            let attached = agent
                .attach_verified(&owner, invitation, participant())
                .expect("attach");
            let took = rtts(started.elapsed());
            if n == 0 {
                assert!(attached.attachment.revision().is_some(), "learnt");
                with_feed.push(took);
            } else {
                without.push(took);
            }
            if n != 0 {
                continue;
            }
            // Warm calls on the page with a feed, alternating the forms.
            let id = attached.attachment.id().to_owned();
            let read = agent
                .call(&owner, &id, "sheet_get_cell", json!({"address": "A1"}))
                .expect("read");
            for _ in 0..calls {
                let at = read.revision_to_carry().cloned().expect("a revision");
                let t = Instant::now();
                agent
                    .call(&owner, &id, "sheet_get_cell", json!({"address": "A1"}))
                    .expect("call");
                stored.push(rtts(t.elapsed()));
                let t = Instant::now();
                agent
                    .call_at(&owner, &id, "sheet_get_cell", json!({"address": "A1"}), at)
                    .expect("call_at");
                carried.push(rtts(t.elapsed()));
            }
            agent.shutdown();
        }
    }
    let mut out = String::new();
    let _ = writeln!(
        out,
        "decisions (issue 39), tokio, SSE, RTT {} ms, {rounds} rounds, {calls} warm calls of each form per round, medians in RTT:",
        rtt.as_millis()
    );
    let _ = writeln!(out, "| what | RTT (median) | n |");
    let _ = writeln!(out, "|---|---|---|");
    let rows = [
        (
            "attach_verified, page with a change feed (learns the revision)",
            &with_feed,
        ),
        ("attach_verified, page without a feed", &without),
        ("warm call on the stored pin (`call`)", &stored),
        (
            "warm call carrying its decision's revision (`call_at`)",
            &carried,
        ),
    ];
    for (what, xs) in rows {
        let _ = writeln!(out, "| {what} | {:.2} | {} |", median(xs.clone()), xs.len());
    }
    drop(link);
    drop(relay);
    out
}
