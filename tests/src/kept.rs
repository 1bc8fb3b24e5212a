//! Kept legs as a service gets them by default (issue 43): one leg per
//! attachment kept between operations, bounded in number and idle time,
//! the least recently used closed first; the listing reused while
//! provably current; the page seeing one join per kept leg; two replicas
//! on one conversation each with its own leg.
//!
//! Every configuration here is the default one (`TransportConfig::default()`
//! with the receive leg under test): nothing asks for warm mode.

use std::sync::Arc;
use std::thread;
use std::time::{Duration, Instant};

use human_plus_any::AgentSetup;
use human_plus_core::{ManagerConfig, Participant, TransportConfig, TrustPolicy};
use serde_json::json;

use human_plus_any::RuntimeKind;

use crate::{Client, Env, LegKind, Runtime, Setup};

fn trust() -> TrustPolicy {
    TrustPolicy::allowing(
        [
            "sheet_describe",
            "sheet_get_cell",
            "sheet_set_cell",
            "changes_since",
        ],
        Vec::<(String, String)>::new(),
    )
}

/// The default configuration, with `leg` and a short exchange timeout.
fn defaults(env: &Env, leg: LegKind) -> ManagerConfig {
    ManagerConfig::new(env.egress(), trust()).transport(
        TransportConfig::default()
            .receive_leg(leg.receive_leg())
            .timeout(Duration::from_secs(8)),
    )
}

fn client<R: Runtime>(
    env: &Env,
    leg: LegKind,
    adjust: impl FnOnce(&mut AgentSetup),
) -> Arc<dyn Client> {
    let Setup {
        config,
        roots,
        hosts,
    } = env.setup_with(defaults(env, leg));
    let mut setup = AgentSetup::new(config);
    setup.roots = roots;
    setup.hosts = hosts;
    setup.tokio_workers = 2;
    adjust(&mut setup);
    Arc::from(human_plus_any::build_agent(R::KIND, setup).unwrap())
}

fn participant(n: usize) -> Participant {
    Participant::new(format!("agent:{n}"), format!("Agent {n}"), "#7c3aed")
}

fn owner(n: usize) -> String {
    format!("conversation:{n}")
}

fn read(hp: &dyn Client, n: usize, id: &str) {
    let r = hp
        .call(&owner(n), id, "sheet_get_cell", json!({"address": "A1"}))
        .unwrap();
    assert!(r.text.contains("alpha"), "{}", r.text);
}

fn count(env: &Env, method: &str) -> usize {
    env.surface()
        .notifications()
        .iter()
        .filter(|n| n.method == method)
        .count()
}

/// How many legs joined the page so far.
fn joined(env: &Env) -> usize {
    count(env, "notifications/peer_joined")
}

/// Whether an SSE leg of the attachment whose client id is `client` is
/// open at the relay.
fn streaming(env: &Env, client: &str) -> bool {
    env.relay()
        .subscribers(&env.session)
        .iter()
        .any(|s| s.client.as_deref() == Some(client))
}

fn wait_until(what: &str, mut f: impl FnMut() -> bool) {
    let deadline = Instant::now() + Duration::from_secs(20);
    while !f() {
        assert!(Instant::now() < deadline, "never: {what}");
        thread::sleep(Duration::from_millis(20));
    }
}

/// The page has seen `n` joins (they are announced asynchronously).
fn joins_settle(env: &Env, n: usize) {
    wait_until(&format!("{n} joins"), || joined(env) >= n);
    thread::sleep(Duration::from_millis(150));
    assert_eq!(joined(env), n, "joins");
}

/// By default a leg is kept: a steady stream of calls costs one
/// `tools/call` each, one listing in all, and the page sees one join; a
/// list change between two calls reaches the next call, which lists again.
pub fn kept_by_default<R: Runtime>(leg: LegKind) {
    let env = Env::start();
    let hp = client::<R>(&env, leg, |_| {});
    let a = hp
        .attach(&owner(1), env.invitation(), participant(1))
        .unwrap();
    let lists = env.surface().requests("tools/list");
    let calls = env.surface().calls().len();
    for _ in 0..10 {
        read(hp.as_ref(), 1, a.id());
    }
    assert_eq!(env.surface().calls().len(), calls + 10, "{leg:?}");
    assert_eq!(
        env.surface().requests("tools/list"),
        lists + 1,
        "{leg:?}: listed once for ten calls"
    );
    joins_settle(&env, 1);

    // The surface's tools change between two calls: the next call lists
    // again, once.
    env.block_on(
        env.surface()
            .redefine_tool("sheet_describe", "Describe the workbook, tersely."),
    )
    .unwrap();
    wait_until("the change seen on the kept leg", || {
        hp.listing_current_for(&owner(1), a.id()).unwrap().is_none()
    });
    read(hp.as_ref(), 1, a.id());
    read(hp.as_ref(), 1, a.id());
    assert_eq!(
        env.surface().requests("tools/list"),
        lists + 2,
        "{leg:?}: the list change was listed again, once"
    );
    assert_eq!(joined(&env), 1, "{leg:?}: still the one leg");
}

/// A kept leg unused for the idle time is closed: never handed to the
/// next operation (which opens a new one), and closed at the manager's
/// next operation whichever attachment it is for.
pub fn closed_after_idle<R: Runtime>(leg: LegKind) {
    let env = Env::start();
    let idle = Duration::from_millis(800);
    let hp = client::<R>(&env, leg, |s| s.kept_legs.idle = idle);
    let a = hp
        .attach(&owner(1), env.invitation(), participant(1))
        .unwrap();
    let b = hp
        .attach(&owner(2), env.invitation(), participant(2))
        .unwrap();
    read(hp.as_ref(), 1, a.id());
    read(hp.as_ref(), 1, a.id());
    joins_settle(&env, 1);
    thread::sleep(idle + Duration::from_millis(300));
    // An operation on b closes a's idle leg.
    read(hp.as_ref(), 2, b.id());
    joins_settle(&env, 2);
    if leg == LegKind::Sse {
        wait_until("a's idle leg closed", || !streaming(&env, a.client_id()));
        assert!(streaming(&env, b.client_id()), "b's leg is in use");
        wait_until("the page saw a leave", || {
            count(&env, "notifications/peer_left") >= 1
        });
    }
    // a's next call opens a new leg, answered once.
    let writes = env.surface().writes().len();
    hp.call(
        &owner(1),
        a.id(),
        "sheet_set_cell",
        json!({"address": "H1", "value": "after idle"}),
    )
    .unwrap();
    assert_eq!(env.surface().writes().len(), writes + 1);
    assert_eq!(env.surface().cell("H1").as_deref(), Some("after idle"));
    joins_settle(&env, 3);
    // Used within the idle time: kept.
    read(hp.as_ref(), 1, a.id());
    assert_eq!(joined(&env), 3, "{leg:?}");
}

/// At the bound, the least recently used leg is closed; the others stay,
/// and a conversation whose leg was closed is served correctly by a new
/// one.
pub fn least_recently_used_at_the_bound<R: Runtime>(leg: LegKind) {
    let env = Env::start();
    let hp = client::<R>(&env, leg, |s| s.kept_legs.max = 2);
    let ids: Vec<_> = (1..=3)
        .map(|n| {
            hp.attach(&owner(n), env.invitation(), participant(n))
                .unwrap()
        })
        .collect();
    let (a, b, c) = (&ids[0], &ids[1], &ids[2]);
    read(hp.as_ref(), 1, a.id());
    read(hp.as_ref(), 2, b.id());
    joins_settle(&env, 2);
    // a is used again: b is the least recently used.
    read(hp.as_ref(), 1, a.id());
    joins_settle(&env, 2);
    read(hp.as_ref(), 3, c.id());
    joins_settle(&env, 3);
    if leg == LegKind::Sse {
        wait_until("b's leg closed at the bound", || {
            !streaming(&env, b.client_id())
        });
        assert!(streaming(&env, a.client_id()) && streaming(&env, c.client_id()));
    }
    // a and c are still kept; b opens a new leg (closing c, now the least
    // recently used).
    read(hp.as_ref(), 1, a.id());
    read(hp.as_ref(), 3, c.id());
    joins_settle(&env, 3);
    read(hp.as_ref(), 2, b.id());
    joins_settle(&env, 4);
    if leg == LegKind::Sse {
        wait_until("a's leg closed at the bound", || {
            !streaming(&env, a.client_id())
        });
        assert!(streaming(&env, b.client_id()) && streaming(&env, c.client_id()));
    }
}

/// A quiet manager's idle legs close on time, with no operation running
/// (issue 43): the blocking manager's keeper thread closes them by itself;
/// an async manager closes them when the service calls `close_idle_legs`
/// (on its timer). The next call opens a new leg and is answered.
pub fn closed_on_time_while_quiet<R: Runtime>(leg: LegKind) {
    let env = Env::start();
    let idle = Duration::from_millis(600);
    let hp = client::<R>(&env, leg, |s| s.kept_legs.idle = idle);
    let a = hp
        .attach(&owner(1), env.invitation(), participant(1))
        .unwrap();
    read(hp.as_ref(), 1, a.id());
    joins_settle(&env, 1);
    assert_eq!(hp.close_idle_legs(), 0, "{leg:?}: not idle yet");
    if leg == LegKind::Sse {
        assert!(streaming(&env, a.client_id()), "kept");
    }
    thread::sleep(idle + Duration::from_millis(400));
    if R::KIND == RuntimeKind::Blocking {
        // Nothing ran since: the keeper thread closed it on time.
        if leg == LegKind::Sse {
            wait_until("the keeper closed the idle leg", || {
                !streaming(&env, a.client_id())
            });
        }
        assert_eq!(hp.close_idle_legs(), 0, "{leg:?}: closed already");
    } else {
        assert_eq!(hp.close_idle_legs(), 1, "{leg:?}: the idle leg");
        if leg == LegKind::Sse {
            wait_until("the idle leg closed at the relay", || {
                !streaming(&env, a.client_id())
            });
        }
    }
    read(hp.as_ref(), 1, a.id());
    joins_settle(&env, 2);
}

/// Two replicas (two managers over one store) serve one conversation in
/// turns: each keeps a leg of its own (two joins, however many calls),
/// lists at most once (SSE and long-poll), every call is answered once and
/// applied once, and a change of the tools still reaches the next call.
pub fn two_replicas_one_conversation<R: Runtime>(leg: LegKind) {
    let env = Env::start();
    let one = client::<R>(&env, leg, |_| {});
    let store = one.store().clone();
    let two = client::<R>(&env, leg, |s| s.store = store);
    let a = one
        .attach(&owner(1), env.invitation(), participant(1))
        .unwrap();
    let lists = env.surface().requests("tools/list");
    let mut expected = Vec::new();
    for i in 0..6 {
        let replica = if i % 2 == 0 { &one } else { &two };
        let cell = format!("J{}", i + 1);
        let value = format!("replica {} call {i}", i % 2 + 1);
        replica
            .call(
                &owner(1),
                a.id(),
                "sheet_set_cell",
                json!({"address": cell, "value": value}),
            )
            .unwrap();
        let back = replica
            .call(
                &owner(1),
                a.id(),
                "sheet_get_cell",
                json!({"address": cell}),
            )
            .unwrap();
        assert!(back.text.contains(&value), "{leg:?}: {}", back.text);
        expected.push((cell, value));
    }
    let writes = env.surface().writes();
    assert_eq!(writes.len(), 6, "{leg:?}: each write applied once");
    for (cell, value) in &expected {
        assert_eq!(env.surface().cell(cell).as_deref(), Some(value.as_str()));
    }
    assert_eq!(env.surface().calls().len(), 12, "{leg:?}: each call once");
    let listed = env.surface().requests("tools/list") - lists;
    // On the long-poll leg the other replica's reply comes back on this
    // replica's parked poll too (one client id): the next operation's
    // first poll, answered before anything is posted, proves the kept
    // listing current again (issue 43), instead of listing again.
    assert!(
        listed <= 2,
        "{leg:?}: listed {listed} times, at most once per replica"
    );

    // The tools change while the first replica's parked poll is away (the
    // second replica called last): the first replica's next call still
    // hears of it before it posts, and lists again.
    env.block_on(
        env.surface()
            .redefine_tool("sheet_describe", "Describe the workbook, tersely."),
    )
    .unwrap();
    thread::sleep(Duration::from_millis(200));
    let before = env.surface().requests("tools/list");
    read(one.as_ref(), 1, a.id());
    assert_eq!(
        env.surface().requests("tools/list"),
        before + 1,
        "{leg:?}: the change reached the next call, which listed again"
    );
    joins_settle(&env, 2);
}
