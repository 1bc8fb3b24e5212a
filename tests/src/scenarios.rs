//! The scenarios, each generic over the runtime.

use std::sync::Arc;
use std::thread;
use std::time::{Duration, Instant};

use human_plus_core::{
    Activity, AttachmentState, ChangeFeed, ConflictDetection, EgressPolicy, EgressRule, Error,
    ManagerConfig, Participant, Priority, ProtocolError, SurfaceInvitation, ToolRefusal,
    TransportConfig, TrustPolicy, Unauthorized,
};
use human_plus_relay::{CallOutcome, Faults, Leg as RelayLeg};
use human_plus_runtime::TlsRoots;
use serde_json::json;

use crate::{
    ConnectProxy, Env, EnvOptions, LegKind, RELAY_HOST, Runtime, Setup, Trap, assert_no_token,
    logged, logged_len,
};

pub(crate) const OWNER: &str = "session:one";

pub(crate) fn agent() -> Participant {
    Participant::new("agent:one", "Assistant", "#7c3aed")
}

/// The trust the lifecycle declares: the sheet's tools, and the
/// confirmation tool too, which must still never be offered.
fn sheet_trust(pins: Vec<(String, String)>) -> TrustPolicy {
    TrustPolicy::allowing(
        [
            "sheet_describe",
            "sheet_get_cell",
            "sheet_get_range",
            "sheet_set_cell",
            "changes_since",
            "sheet_confirm_edit",
        ],
        pins,
    )
}

/// The whole lifecycle: attach, tools (reserved tool withheld, pinned tool
/// admitted, pin mismatch refused), read with revision, a person's edit,
/// the agent's pinned write refused with nothing written, the change feed
/// deferring to the person, re-read and a successful write, activity
/// received, detach leaving the person's session alive.
pub fn lifecycle<R: Runtime>(leg: LegKind, tls: bool) {
    let env = Env::with(EnvOptions {
        tls,
        ..EnvOptions::default()
    });
    let leg = leg.receive_leg();

    // Discover once without pins to learn the digest to pin.
    let probe = R::client(env.setup(leg.clone(), sheet_trust(vec![])));
    let a = probe.attach(OWNER, env.invitation(), agent()).unwrap();
    let d = probe.tools(OWNER, a.id()).unwrap();
    let names: Vec<&str> = d.tools.iter().map(|t| t.name()).collect();
    assert!(names.contains(&"sheet_set_cell"), "{names:?}");
    assert!(
        !names.contains(&"sheet_confirm_edit"),
        "reserved tool offered"
    );
    assert!(
        d.withheld
            .iter()
            .any(|w| w.name == "sheet_confirm_edit" && matches!(w.reason, ToolRefusal::Reserved(_)))
    );
    let digest = d
        .tools
        .iter()
        .find(|t| t.name() == "sheet_set_cell")
        .unwrap()
        .digest();

    // A wrong pin refuses the whole operation.
    let wrong = R::client(env.setup(
        leg.clone(),
        sheet_trust(vec![(
            "sheet_set_cell".into(),
            "sha256:00000000000000000000000000000000".into(),
        )]),
    ));
    let w = wrong.attach(OWNER, env.invitation(), agent()).unwrap();
    let e = wrong.tools(OWNER, w.id()).unwrap_err();
    assert_eq!(
        e,
        Error::ToolRefused(ToolRefusal::PinChanged("sheet_set_cell".into()))
    );

    // The agent, with the right pin.
    let hp = R::client(env.setup(
        leg.clone(),
        sheet_trust(vec![("sheet_set_cell".into(), digest)]),
    ));
    let a = hp.attach(OWNER, env.invitation(), agent()).unwrap();
    assert_eq!(
        hp.conflict_detection(OWNER, a.id()).unwrap(),
        ConflictDetection::NotObserved
    );
    let d = hp.tools(OWNER, a.id()).unwrap();
    assert!(d.tools.iter().any(|t| t.name() == "sheet_set_cell"));

    // A read, with its revision.
    let read = hp
        .call(OWNER, a.id(), "sheet_get_cell", json!({"address": "B4"}))
        .unwrap();
    assert!(
        read.text.contains("<untrusted-tool-output"),
        "{}",
        read.text
    );
    let r1 = read.revision.clone().expect("the demo surface mints");
    assert_eq!(r1.token(), env.surface().revision());
    assert_eq!(
        hp.conflict_detection(OWNER, a.id()).unwrap(),
        ConflictDetection::Minted
    );

    // The person edits B4.
    env.surface().person().set_cell("B4", "12").unwrap();

    // The agent's write, pinned to r1, is refused; nothing is written.
    let writes_before = env.surface().writes().len();
    let e = hp
        .call(
            OWNER,
            a.id(),
            "sheet_set_cell",
            json!({"address": "B4", "value": "99"}),
        )
        .unwrap_err();
    assert_eq!(e.code(), "surface_changed_under_you", "{e:?}");
    let text = e.to_string();
    assert!(text.contains("`sheet_set_cell` was NOT applied"), "{text}");
    assert!(text.contains(&format!("revision {}", r1.token())), "{text}");
    assert_eq!(env.surface().cell("B4").as_deref(), Some("12"));
    assert_eq!(env.surface().writes().len(), writes_before);
    assert!(
        env.surface()
            .calls()
            .iter()
            .any(|c| matches!(c.outcome, CallOutcome::Refused { .. }))
    );
    let status = hp.status(OWNER, a.id()).unwrap();
    assert_eq!(status.state(), AttachmentState::Attached);
    // Never unpinned: the refusal learnt the current revision (the
    // surface names it, and its change feed says B4 changed).
    assert_eq!(
        status.revision().map(|r| r.token().to_owned()),
        Some(env.surface().revision()),
        "the next call is pinned to the revision the refusal reported"
    );
    assert!(text.contains("B4: updated by a person"), "{text}");
    assert_eq!(
        hp.conflict_detection(OWNER, a.id()).unwrap(),
        ConflictDetection::Enforced
    );

    // The change feed defers to the person.
    let changes = hp.changes_since(OWNER, a.id()).unwrap();
    assert!(changes.answered());
    assert!(!changes.nothing_changed());
    assert!(
        changes.defer_to().iter().any(|c| c.handle() == "B4"),
        "{:?}",
        changes.to_json()
    );
    assert_eq!(
        hp.status(OWNER, a.id()).unwrap().change_feed(),
        ChangeFeed::Attributed
    );

    // Re-read, then a successful write.
    hp.call(OWNER, a.id(), "sheet_get_cell", json!({"address": "B4"}))
        .unwrap();
    let write = hp
        .call(
            OWNER,
            a.id(),
            "sheet_set_cell",
            json!({"address": "C1", "value": "agent"}),
        )
        .unwrap();
    assert!(write.pinned.is_some(), "the write went out pinned");
    assert_eq!(env.surface().cell("C1").as_deref(), Some("agent"));
    assert_eq!(env.surface().cell("B4").as_deref(), Some("12"));

    // Activity reaches the surface.
    hp.announce(
        OWNER,
        a.id(),
        &Activity::new("editing")
            .target("C1")
            .priority(Priority::Attention)
            .correlation_id("run-7"),
    )
    .unwrap();
    let seen = env.block_on(
        env.surface()
            .wait_for(Duration::from_secs(10), |s| !s.activity().is_empty()),
    );
    assert!(seen, "the surface never saw the activity");
    let activity = &env.surface().activity()[0];
    assert_eq!(activity["actor"]["type"], "agent");
    assert_eq!(activity["actor"]["id"], "agent:one");
    assert_eq!(activity["target"], "C1");
    assert_eq!(activity["priority"], "attention");
    assert_eq!(activity["correlationId"], "run-7");

    // Detach leaves the person's session alive.
    let detached = hp.detach(OWNER, a.id()).unwrap();
    assert_eq!(detached.state(), AttachmentState::Detached);
    assert!(env.relay().sessions().contains(&env.session));
    assert_eq!(
        hp.call(OWNER, a.id(), "sheet_get_cell", json!({"address": "A1"}))
            .unwrap_err(),
        Error::NotAttached(AttachmentState::Detached)
    );
    // Another owner can see nothing.
    assert_eq!(
        hp.status("session:two", a.id()).unwrap_err(),
        Error::AttachmentUnauthorized(Unauthorized::Owner)
    );

    assert!(logged_len() > 0, "the runtime logs through tracing");
    assert!(!logged(&env.token), "the token reached a log line");
    assert!(!format!("{:?}", hp.status(OWNER, a.id()).unwrap()).contains(&env.token));
}

/// Every kind of enforcing surface the suite knows: strict (a stale pin
/// refuses a read too) or lenient (a read is answered whatever its pin),
/// with or without a change feed, naming its current revision in a refusal
/// or not.
#[must_use]
pub fn surface_kinds() -> Vec<EnvOptions> {
    let mut kinds = Vec::new();
    for stale_reads in [false, true] {
        for change_feed in [true, false] {
            for current_in_refusal in [true, false] {
                kinds.push(EnvOptions {
                    stale_reads,
                    change_feed,
                    current_in_refusal,
                    ..EnvOptions::default()
                });
            }
        }
    }
    kinds
}

/// The one kind on which a refusal cannot be recovered without an unpinned
/// call: strict about reads, and saying neither what changed nor where it
/// is now.
#[must_use]
pub fn unrecoverable(kind: &EnvOptions) -> bool {
    !kind.stale_reads && !kind.change_feed && !kind.current_in_refusal
}

/// The careless agent of issue 33, on every kind of surface: read; the
/// person edits; the write is refused; the person edits again; the agent
/// repeats its write blindly — refused, the person's second value stands;
/// a read then a write is applied (recovery within two calls, except on
/// the one kind that cannot be recovered without an unpinned call, where
/// every call stays refused). No call after the first goes out unpinned.
pub fn careless_agent<R: Runtime>(leg: LegKind) {
    for kind in surface_kinds() {
        let label = format!(
            "stale reads answered: {}, feed: {}, current in refusal: {}",
            kind.stale_reads, kind.change_feed, kind.current_in_refusal
        );
        let env = Env::with(kind.clone());
        let hp = R::client(env.setup(leg.receive_leg(), sheet_trust(vec![])));
        let a = hp.attach(OWNER, env.invitation(), agent()).unwrap();
        let read = hp
            .call(OWNER, a.id(), "sheet_get_cell", json!({"address": "C3"}))
            .unwrap();
        assert!(read.revision.is_some(), "{label}");
        env.surface().person().set_cell("C3", "person-1").unwrap();
        let write = json!({"address": "C3", "value": "agent-A"});
        let e = hp
            .call(OWNER, a.id(), "sheet_set_cell", write.clone())
            .unwrap_err();
        assert_eq!(e.code(), "surface_changed_under_you", "{label}: {e}");
        let text = e.to_string();
        if kind.change_feed {
            assert!(
                text.contains("\nC3: ") && text.contains(" by a person"),
                "{label}: {text}"
            );
        }
        assert_eq!(env.surface().cell("C3").as_deref(), Some("person-1"));
        env.surface().person().set_cell("C3", "person-2").unwrap();
        let e = hp
            .call(OWNER, a.id(), "sheet_set_cell", write.clone())
            .unwrap_err();
        assert_eq!(e.code(), "surface_changed_under_you", "{label}: {e}");
        assert_eq!(
            env.surface().cell("C3").as_deref(),
            Some("person-2"),
            "{label}: the blind repeat overwrote the person's second edit"
        );
        let read = hp.call(OWNER, a.id(), "sheet_get_cell", json!({"address": "C3"}));
        let written = hp.call(
            OWNER,
            a.id(),
            "sheet_set_cell",
            json!({"address": "C3", "value": "agent-B"}),
        );
        if unrecoverable(&kind) {
            assert!(read.is_err() && written.is_err(), "{label}");
            assert_eq!(env.surface().cell("C3").as_deref(), Some("person-2"));
        } else {
            written.unwrap_or_else(|e| panic!("{label}: {read:?} {e}"));
            assert_eq!(env.surface().cell("C3").as_deref(), Some("agent-B"));
        }
        let calls = env.surface().calls();
        assert!(calls[0].pinned.is_none(), "the attachment's first call");
        for call in &calls[1..] {
            assert!(
                call.pinned.is_some(),
                "{label}: an unpinned call after a revision was seen: {call:?}"
            );
        }
    }
}

/// An attach that proves itself, and an attachment kept under a key of
/// the caller's (issue 35): a wrong token, an ended session or a wrong
/// relay path is the attach's own error and leaves no record; attaching
/// again under the same owner and key returns the same attachment without
/// a round trip; a detached one is replaced under the same id, its
/// revision carried over, its generation continued.
pub fn attach_that_proves_itself<R: Runtime>(leg: LegKind) {
    let env = Env::start();
    let hp = R::client(env.setup(leg.receive_leg(), sheet_trust(vec![])));

    // Verified: stored once the surface answered, with what it admitted.
    let ok = hp
        .attach_verified(OWNER, env.invitation(), agent())
        .unwrap();
    assert!(ok.created);
    let names: Vec<&str> = ok
        .discovery
        .as_ref()
        .unwrap()
        .tools
        .iter()
        .map(|t| t.name())
        .collect();
    assert!(names.contains(&"sheet_get_cell"), "{names:?}");
    assert_eq!(hp.store().len(), 1);
    hp.call(
        OWNER,
        ok.attachment.id(),
        "sheet_get_cell",
        json!({"address": "A1"}),
    )
    .unwrap();

    // A wrong token: the relay's 401, and no record behind.
    let wrong = env.invitation_with_token(&format!("wrong{}", crate::random_hex(8)));
    let e = hp.attach_verified(OWNER, wrong, agent()).unwrap_err();
    assert_eq!(e, Error::AttachmentUnauthorized(Unauthorized::Relay));
    assert_no_token(&e, &env.token);
    assert_eq!(hp.store().len(), 1, "a refused attach leaves no record");

    // Keyed: the same owner and key, the same attachment; nothing sent.
    let first = hp
        .attach_as(OWNER, "conversation-1", env.invitation(), agent())
        .unwrap();
    assert!(first.created && first.discovery.is_some());
    let asked = env.surface().requests("tools/list");
    let again = hp
        .attach_as(OWNER, "conversation-1", env.invitation(), agent())
        .unwrap();
    assert!(!again.created && again.discovery.is_none());
    assert_eq!(again.attachment.id(), first.attachment.id());
    assert_eq!(env.surface().requests("tools/list"), asked, "no round trip");
    assert_eq!(
        hp.find(OWNER, "conversation-1")
            .unwrap()
            .map(|a| a.id().to_owned()),
        Some(first.attachment.id().to_owned())
    );
    assert_eq!(hp.find(OWNER, "conversation-2").unwrap(), None);
    let theirs = hp
        .attach_as("session:two", "conversation-1", env.invitation(), agent())
        .unwrap();
    assert_ne!(theirs.attachment.id(), first.attachment.id());

    // A read pins the keyed attachment; detached, it is replaced under the
    // same id, its revision carried over, its generation continued.
    let read = hp
        .call(
            OWNER,
            first.attachment.id(),
            "sheet_get_cell",
            json!({"address": "B4"}),
        )
        .unwrap();
    let seen = read.revision.unwrap();
    let detached = hp.detach(OWNER, first.attachment.id()).unwrap();
    let renewed = hp
        .attach_as(OWNER, "conversation-1", env.invitation(), agent())
        .unwrap();
    assert!(renewed.created);
    assert_eq!(renewed.attachment.id(), first.attachment.id());
    assert!(renewed.attachment.generation() > detached.generation());
    assert_eq!(renewed.attachment.revision(), Some(&seen));
    hp.call(
        OWNER,
        renewed.attachment.id(),
        "sheet_get_cell",
        json!({"address": "B4"}),
    )
    .unwrap();
    let last = env.surface().calls().pop().unwrap();
    assert!(
        last.pinned.is_some(),
        "the renewed attachment's first call is pinned"
    );

    // An ended session: the attach's own error, the keyed record kept as
    // it was (detached), nothing new stored.
    let before = hp.store().len();
    assert!(env.relay().drop_session(&env.session));
    let e = hp
        .attach_as(OWNER, "conversation-3", env.invitation(), agent())
        .unwrap_err();
    assert_eq!(e, Error::SurfaceUnavailable);
    assert_eq!(hp.find(OWNER, "conversation-3").unwrap(), None);
    assert_eq!(hp.store().len(), before);
}

/// 410 and 401 are terminal, distinct, and never retried.
pub fn gone_and_unauthorized<R: Runtime>(leg: LegKind) {
    let env = Env::start();
    let hp = R::client(env.setup(leg.receive_leg(), sheet_trust(vec![])));

    // 401: a wrong token on a live session.
    let bad = hp
        .attach(
            OWNER,
            env.invitation_with_token(&format!("wrong{}", crate::random_hex(8))),
            agent(),
        )
        .unwrap();
    let e = hp.tools(OWNER, bad.id()).unwrap_err();
    assert_eq!(e, Error::AttachmentUnauthorized(Unauthorized::Relay));
    assert_eq!(
        hp.status(OWNER, bad.id()).unwrap().state(),
        AttachmentState::AttachmentUnauthorized
    );
    assert_eq!(
        hp.tools(OWNER, bad.id()).unwrap_err(),
        Error::AttachmentUnauthorized(Unauthorized::Relay),
        "every later operation gives the relay's answer again (issue 39)"
    );

    // 410: the session ends under a working attachment.
    let a = hp.attach(OWNER, env.invitation(), agent()).unwrap();
    hp.call(OWNER, a.id(), "sheet_get_cell", json!({"address": "A1"}))
        .unwrap();
    assert!(env.relay().drop_session(&env.session));
    let e = hp
        .call(OWNER, a.id(), "sheet_get_cell", json!({"address": "A1"}))
        .unwrap_err();
    assert_eq!(e, Error::SurfaceUnavailable);
    assert_no_token(&e, &env.token);
    assert_eq!(
        hp.status(OWNER, a.id()).unwrap().state(),
        AttachmentState::SurfaceUnavailable
    );
    assert_eq!(
        hp.announce(OWNER, a.id(), &Activity::new("x")).unwrap_err(),
        Error::SurfaceUnavailable,
        "every later operation gives the relay's answer again (issue 39)"
    );
    assert!(!logged(&env.token));
}

/// A page that never answers ends the exchange within its timeout.
pub fn silent_page<R: Runtime>(leg: LegKind) {
    let env = Env::start();
    let mut config = ManagerConfig::new(env.egress(), sheet_trust(vec![]));
    config.transport = TransportConfig::default()
        .receive_leg(leg.receive_leg())
        .timeout(Duration::from_secs(2));
    let hp = R::client(env.setup_with(config));
    let a = hp.attach(OWNER, env.invitation(), agent()).unwrap();
    env.faults(Faults::new().drop_replies());
    let start = Instant::now();
    let e = hp.tools(OWNER, a.id()).unwrap_err();
    let took = start.elapsed();
    assert_eq!(e, Error::Timeout);
    assert!(took >= Duration::from_secs(2), "{took:?}");
    assert!(
        took < Duration::from_secs(12),
        "did not end near its timeout: {took:?}"
    );
    assert!(hp.status(OWNER, a.id()).unwrap().is_attached());
    drop(hp);
    two_operations_on_a_silent_page::<R>(&env, leg);
}

/// Two operations of one manager on one attachment of a page that answers
/// nothing (a closed tab the relay still keeps): the first ends as a
/// timeout within its own timeout; the second, waiting behind it, is
/// answered busy within the lock wait (issue 39), never as a store
/// failure.
fn two_operations_on_a_silent_page<R: Runtime>(env: &Env, leg: LegKind) {
    let timeout = Duration::from_secs(3);
    let mut config = ManagerConfig::new(env.egress(), sheet_trust(vec![]));
    config.transport = TransportConfig::default()
        .receive_leg(leg.receive_leg())
        .timeout(timeout);
    let Setup {
        config,
        roots,
        hosts,
    } = env.setup_with(config);
    let mut setup = human_plus_any::AgentSetup::new(config);
    setup.roots = roots;
    setup.hosts = hosts;
    setup.tokio_workers = 2;
    setup.lock_wait = Duration::from_millis(500);
    let hp: Arc<dyn crate::Client> =
        Arc::from(human_plus_any::build_agent(R::KIND, setup).unwrap());
    let a = hp.attach(OWNER, env.invitation(), agent()).unwrap();
    let first = {
        let (hp, id) = (Arc::clone(&hp), a.id().to_owned());
        thread::spawn(move || {
            let start = Instant::now();
            (hp.tools(OWNER, &id), start.elapsed())
        })
    };
    thread::sleep(Duration::from_millis(300));
    let start = Instant::now();
    let second = hp.call(OWNER, a.id(), "sheet_get_cell", json!({"address": "A1"}));
    let took = start.elapsed();
    let (first, first_took) = first.join().unwrap();
    assert_eq!(first.unwrap_err(), Error::Timeout);
    assert!(
        first_took < timeout + Duration::from_secs(2),
        "{first_took:?}"
    );
    // Issue 39: the wait behind the first is bounded by the lock wait and
    // answered busy (nothing sent), with when the first will have ended.
    let e = second.unwrap_err();
    assert!(e.is_busy() && e.is_retryable(), "{e}");
    assert!(e.retry_after().unwrap() <= timeout, "{e:?}");
    assert!(
        took < Duration::from_millis(500) + Duration::from_millis(800),
        "the second ended {took:?} after it asked, its lock wait is 500 ms"
    );
    assert!(hp.status(OWNER, a.id()).unwrap().is_attached());
}

/// A client of runtime `R` built from `config`, its setup adjusted by
/// `adjust` (a store shared with another client, the lock wait, ...).
fn client_with<R: Runtime>(
    env: &Env,
    config: ManagerConfig,
    adjust: impl FnOnce(&mut human_plus_any::AgentSetup),
) -> Arc<dyn crate::Client> {
    let Setup {
        config,
        roots,
        hosts,
    } = env.setup_with(config);
    let mut setup = human_plus_any::AgentSetup::new(config);
    setup.roots = roots;
    setup.hosts = hosts;
    setup.tokio_workers = 2;
    adjust(&mut setup);
    Arc::from(human_plus_any::build_agent(R::KIND, setup).unwrap())
}

/// A call on an attachment whose lock another worker holds (here a holder
/// of the shared store outside the manager, as a worker on another machine
/// holds it through Redis) ends as `attachment_busy`, never `timeout` nor
/// `store_failed`: bounded by the lock wait when that is shorter, by the
/// call's own timeout when that is; with the holder's lease left as the
/// time after which a retry may succeed, in a sentence a model can pass
/// on; nothing sent to the surface. Once the other worker lets go, the
/// same call succeeds.
pub fn busy<R: Runtime>(leg: LegKind) {
    let env = Env::start();
    let config = ManagerConfig::new(env.egress(), sheet_trust(vec![])).transport(
        TransportConfig::default()
            .receive_leg(leg.receive_leg())
            .timeout(Duration::from_secs(10)),
    );
    let short_wait = Duration::from_millis(400);
    let hp = client_with::<R>(&env, config.clone(), |s| s.lock_wait = short_wait);
    let a = hp.attach(OWNER, env.invitation(), agent()).unwrap();
    let lease = Duration::from_secs(20);
    let other =
        human_plus_store::AttachmentStore::lock(hp.store(), a.id(), lease, Duration::ZERO).unwrap();
    let requests = env.surface().requests("initialize") + env.surface().calls().len();

    // Bounded by the lock wait.
    let start = Instant::now();
    let e = hp
        .call(OWNER, a.id(), "sheet_get_cell", json!({"address": "A1"}))
        .unwrap_err();
    let took = start.elapsed();
    assert_eq!(e.code(), "attachment_busy", "{e}");
    assert!(e.is_busy() && e.is_retryable(), "{e:?}");
    // The other worker took the lock a moment ago: a retry may succeed
    // within one renewal interval of its lease.
    assert_eq!(
        e.retry_after(),
        Some(human_plus_store::renew_interval(lease))
    );
    assert!(
        e.to_string().starts_with(
            "Another worker is using this conversation right now; try again in about "
        ),
        "{e}"
    );
    assert_no_token(&e, &env.token);
    assert!(took >= short_wait, "{took:?}");
    assert!(took < short_wait + Duration::from_millis(1500), "{took:?}");

    // Bounded by the call's own timeout, shorter than the lock wait.
    let patient = client_with::<R>(&env, config, |s| {
        s.lock_wait = Duration::from_secs(30);
        s.store = hp.store().clone();
    });
    let timeout = Duration::from_secs(1);
    let start = Instant::now();
    let e = patient
        .call_with_timeout(
            OWNER,
            a.id(),
            "sheet_get_cell",
            json!({"address": "A1"}),
            timeout,
        )
        .unwrap_err();
    let took = start.elapsed();
    assert_eq!(e.code(), "attachment_busy", "{e}");
    assert!(took >= timeout - Duration::from_millis(50), "{took:?}");
    assert!(
        took < timeout + Duration::from_millis(800),
        "ended {took:?} after it asked, its timeout is {timeout:?}"
    );
    assert!(e.retry_after().unwrap() <= lease);

    // Nothing reached the surface; once the other worker lets go, the
    // same call goes through.
    assert_eq!(
        env.surface().requests("initialize") + env.surface().calls().len(),
        requests
    );
    drop(other);
    let read = hp
        .call(OWNER, a.id(), "sheet_get_cell", json!({"address": "A1"}))
        .unwrap();
    assert!(read.revision.is_some());
}

/// An operation that runs far longer than its lock's lease keeps the lock:
/// the manager renews the lease while it runs (beside the operation in an
/// async runtime, on the manager's keeper thread in the blocking one), so
/// another worker is refused (busy, with less than a lease to wait) for as
/// long as it runs, and serves the attachment once it ends.
pub fn lease_renewed_while_running<R: Runtime>(leg: LegKind) {
    let env = Env::start();
    let timeout = Duration::from_secs(3);
    let lease = Duration::from_millis(300);
    let config = ManagerConfig::new(env.egress(), sheet_trust(vec![])).transport(
        TransportConfig::default()
            .receive_leg(leg.receive_leg())
            .timeout(timeout),
    );
    let first = client_with::<R>(&env, config.clone(), |s| s.lock_lease = lease);
    let second = client_with::<R>(&env, config, |s| {
        s.store = first.store().clone();
        s.lock_lease = lease;
        s.lock_wait = Duration::from_millis(200);
    });
    let a = first.attach(OWNER, env.invitation(), agent()).unwrap();
    env.faults(Faults::new().drop_replies_times(1));
    let held = {
        let (first, id) = (Arc::clone(&first), a.id().to_owned());
        thread::spawn(move || first.call(OWNER, &id, "sheet_get_cell", json!({"address": "A1"})))
    };
    let start = Instant::now();
    while env.surface().requests("initialize") == 0 {
        assert!(start.elapsed() < Duration::from_secs(5), "no request came");
        thread::sleep(Duration::from_millis(10));
    }
    // Well past three leases, the first operation still holds the lock.
    thread::sleep(lease * 4);
    let e = second
        .call(OWNER, a.id(), "sheet_get_cell", json!({"address": "A1"}))
        .unwrap_err();
    assert!(e.is_busy(), "{e:?}");
    assert!(e.retry_after().unwrap() <= lease, "{e:?}");
    assert!(!held.is_finished());
    assert_eq!(held.join().unwrap().unwrap_err(), Error::Timeout);
    second
        .call(OWNER, a.id(), "sheet_get_cell", json!({"address": "A1"}))
        .unwrap();
}

/// A manager shut down while one of its calls is held on a frozen page
/// (the page applies the write, its reply is lost) keeps one writer
/// (issue 39): the call keeps its lock for the shutdown's grace, so
/// another manager on the same store sends nothing meanwhile (busy); when
/// the grace ends the call is answered as outcome unknown (never as not
/// applied), and only then does the lock go back and the other manager
/// serve. New operations on the stopping manager are refused, retryably,
/// with nothing sent.
pub fn shutdown_keeps_one_writer<R: Runtime>(leg: LegKind) {
    let env = Env::with(EnvOptions {
        rewrite: Some(crate::replica::lose_held_replies()),
        ..EnvOptions::default()
    });
    let timeout = Duration::from_secs(8);
    let grace = Duration::from_millis(1500);
    let config = ManagerConfig::new(env.egress(), sheet_trust(vec![])).transport(
        TransportConfig::default()
            .receive_leg(leg.receive_leg())
            .timeout(timeout),
    );
    let first = client_with::<R>(&env, config.clone(), |s| s.shutdown_grace = grace);
    let second = client_with::<R>(&env, config, |s| {
        s.store = first.store().clone();
        s.lock_wait = Duration::from_millis(200);
    });
    let a = first.attach(OWNER, env.invitation(), agent()).unwrap();
    first
        .call(OWNER, a.id(), "sheet_get_cell", json!({"address": "A1"}))
        .unwrap();
    let held = {
        let (first, id) = (Arc::clone(&first), a.id().to_owned());
        thread::spawn(move || {
            let r = first.call(
                OWNER,
                &id,
                "sheet_set_cell",
                json!({"address": "A1", "value": "held:agent"}),
            );
            (r, Instant::now())
        })
    };
    let start = Instant::now();
    while env.surface().cell("A1").as_deref() != Some("held:agent") {
        assert!(
            start.elapsed() < Duration::from_secs(5),
            "the write never came"
        );
        thread::sleep(Duration::from_millis(10));
    }
    let shutting = {
        let first = Arc::clone(&first);
        thread::spawn(move || {
            first.shutdown();
            Instant::now()
        })
    };
    thread::sleep(Duration::from_millis(100));
    // Stopping: nothing new starts, retryably, nothing sent.
    let e = first
        .call(OWNER, a.id(), "sheet_get_cell", json!({"address": "B1"}))
        .unwrap_err();
    assert_eq!(e, Error::ShutDown);
    assert!(e.is_retryable());
    // The other manager sends nothing while the first call runs.
    let calls = env.surface().calls().len();
    let e = second
        .call(
            OWNER,
            a.id(),
            "sheet_set_cell",
            json!({"address": "A1", "value": "other"}),
        )
        .unwrap_err();
    assert!(e.is_busy(), "{e:?}");
    assert_eq!(env.surface().calls().len(), calls, "nothing was sent");
    let (r, ended) = held.join().unwrap();
    let e = r.unwrap_err();
    assert!(
        e.outcome_unknown(),
        "an applied write answered as not applied: {e:?}"
    );
    assert_eq!(e.code(), "call_timeout");
    let took = ended.duration_since(start);
    assert!(took >= grace - Duration::from_millis(200), "{took:?}");
    assert!(took < grace + Duration::from_secs(2), "{took:?}");
    let returned = shutting.join().unwrap();
    assert!(returned >= ended, "shutdown returned before its call ended");
    assert_eq!(env.surface().cell("A1").as_deref(), Some("held:agent"));
    // The other manager serves it now: the page answers (a read pinned
    // before the held write is refused, telling what changed: the
    // stopped replica's own write).
    let served = second.call(OWNER, a.id(), "sheet_get_cell", json!({"address": "A1"}));
    match served {
        Ok(_) => {}
        Err(Error::SurfaceChangedUnderYou(refusal)) => {
            assert!(!refusal.was_repeat());
            assert!(refusal.current().is_some(), "{refusal}");
        }
        Err(e) => panic!("{e:?}"),
    }
    assert_eq!(
        first
            .attach(OWNER, env.invitation(), agent())
            .unwrap_err()
            .code(),
        "manager_shut_down"
    );
}

/// A wait behind a call of the same manager on a page that does not
/// answer is bounded by the lock wait and answered busy, with a
/// `retry_after` no later than that call's end (issue 39): one hung page
/// never takes every thread of a worker.
pub fn busy_behind_our_own<R: Runtime>(leg: LegKind) {
    let env = Env::with(EnvOptions {
        rewrite: Some(crate::replica::lose_held_replies()),
        ..EnvOptions::default()
    });
    let timeout = Duration::from_secs(4);
    let config = ManagerConfig::new(env.egress(), sheet_trust(vec![])).transport(
        TransportConfig::default()
            .receive_leg(leg.receive_leg())
            .timeout(timeout),
    );
    let wait = Duration::from_millis(300);
    let hp = client_with::<R>(&env, config, |s| s.lock_wait = wait);
    let a = hp.attach(OWNER, env.invitation(), agent()).unwrap();
    hp.call(OWNER, a.id(), "sheet_get_cell", json!({"address": "A1"}))
        .unwrap();
    let held = {
        let (hp, id) = (Arc::clone(&hp), a.id().to_owned());
        thread::spawn(move || {
            hp.call(
                OWNER,
                &id,
                "sheet_set_cell",
                json!({"address": "A2", "value": "held:agent"}),
            )
        })
    };
    let start = Instant::now();
    while env.surface().calls().len() < 2 {
        assert!(
            start.elapsed() < Duration::from_secs(5),
            "the call never came"
        );
        thread::sleep(Duration::from_millis(10));
    }
    let asked = Instant::now();
    let e = hp
        .call(OWNER, a.id(), "sheet_get_cell", json!({"address": "A3"}))
        .unwrap_err();
    let took = asked.elapsed();
    assert!(e.is_busy() && e.is_retryable(), "{e:?}");
    assert!(took >= wait - Duration::from_millis(50), "{took:?}");
    assert!(took < wait + Duration::from_millis(1200), "{took:?}");
    assert!(e.retry_after().unwrap() <= timeout, "{e:?}");
    assert_eq!(held.join().unwrap().unwrap_err().code(), "call_timeout");
}

/// Every decision carries the revision it was made at (issue 39): two
/// writes decided at one read, a person's edit between them: both refused
/// (the second was pinned to its own read, not to the pin the first's
/// refusal moved), the person's values stand; the identical repeat of a
/// refused call is refused here, not sent, with a feed and without; an
/// attach that proves itself learns the page's revision from its feed, so
/// the first call is pinned.
pub fn decisions_carry_their_revision<R: Runtime>(leg: LegKind) {
    for feed in [true, false] {
        let env = Env::with(EnvOptions {
            change_feed: feed,
            ..EnvOptions::default()
        });
        let hp = R::client(env.setup(leg.receive_leg(), sheet_trust(vec![])));
        let attached = hp
            .attach_verified(OWNER, env.invitation(), agent())
            .unwrap();
        let id = attached.attachment.id().to_owned();
        assert_eq!(
            attached.attachment.revision().is_some(),
            feed,
            "feed {feed}: the attach learns the revision from the feed"
        );
        // A person's edit after the attach: the first write is refused
        // where the page keeps a feed.
        env.surface().person().set_cell("B2", "person-0").unwrap();
        let first = hp.call(
            OWNER,
            &id,
            "sheet_set_cell",
            json!({"address": "B2", "value": "agent-0"}),
        );
        if feed {
            assert_eq!(
                first.unwrap_err().code(),
                "surface_changed_under_you",
                "the first write is pinned"
            );
            assert_eq!(env.surface().cell("B2").as_deref(), Some("person-0"));
        } else {
            first.unwrap();
        }
        let write = env
            .surface()
            .calls()
            .into_iter()
            .find(|c| c.tool == "sheet_set_cell")
            .unwrap();
        assert_eq!(write.pinned.is_some(), feed, "feed {feed}: {write:?}");

        let read = hp
            .call(
                OWNER,
                &id,
                "sheet_get_range",
                json!({"start": "A1", "end": "B9"}),
            )
            .unwrap();
        let at = read.revision_to_carry().cloned().expect("a revision");
        env.surface().person().set_cell("A3", "person-1").unwrap();
        let one = json!({"address": "A3", "value": "agent-1"});
        let e = hp
            .call_at(OWNER, &id, "sheet_set_cell", one.clone(), at.clone())
            .unwrap_err();
        assert_eq!(e.code(), "surface_changed_under_you", "feed {feed}: {e}");
        // The second decision, made at the same read, carries it: refused
        // too, though the first refusal moved the stored pin.
        let two = json!({"address": "A9", "value": "agent-2"});
        let e = hp
            .call_at(OWNER, &id, "sheet_set_cell", two, at.clone())
            .unwrap_err();
        assert_eq!(e.code(), "surface_changed_under_you", "feed {feed}: {e}");
        assert_eq!(env.surface().cell("A3").as_deref(), Some("person-1"));
        assert_eq!(env.surface().cell("A9"), None);
        // The blind repeat: refused here, nothing sent.
        let sent = env.surface().calls().len();
        let e = hp
            .call(OWNER, &id, "sheet_set_cell", one.clone())
            .unwrap_err();
        let Error::SurfaceChangedUnderYou(refusal) = &e else {
            panic!("{e:?}")
        };
        assert!(refusal.was_repeat(), "feed {feed}: {e}");
        assert!(e.to_string().contains("was NOT sent"), "{e}");
        assert_eq!(env.surface().calls().len(), sent, "feed {feed}: sent");
        // A read answered lifts it; a write decided on that read lands.
        let read = hp
            .call(OWNER, &id, "sheet_get_cell", json!({"address": "A3"}))
            .unwrap();
        let at = read.revision_to_carry().cloned().unwrap();
        hp.call_at(
            OWNER,
            &id,
            "sheet_set_cell",
            json!({"address": "A9", "value": "agent-3"}),
            at,
        )
        .unwrap();
        assert_eq!(env.surface().cell("A9").as_deref(), Some("agent-3"));
        assert_eq!(env.surface().cell("A3").as_deref(), Some("person-1"));
    }
}

/// What a fault must produce.
#[derive(Debug)]
enum Expect {
    Ok,
    Code(&'static str),
    Is(Error),
}

/// Every fault of the relay's injection list gives the right typed error or
/// success, never a panic or a hang.
pub fn faults<R: Runtime>(leg: LegKind) {
    let sse = leg == LegKind::Sse;
    let receive = if sse {
        RelayLeg::Events
    } else {
        RelayLeg::Poll
    };
    let ms = Duration::from_millis;
    let cases: Vec<(&str, Faults, Expect)> = vec![
        (
            "delay inbox",
            Faults::new().delay(RelayLeg::Inbox, ms(300)),
            Expect::Ok,
        ),
        (
            "delay receive",
            Faults::new().delay(receive, ms(300)),
            Expect::Ok,
        ),
        (
            "delay outbox",
            Faults::new().delay(RelayLeg::Outbox, ms(300)),
            Expect::Ok,
        ),
        (
            "duplicate replies",
            Faults::new().duplicate_replies(),
            Expect::Ok,
        ),
        (
            "drop replies",
            Faults::new().drop_replies(),
            Expect::Is(Error::Timeout),
        ),
        (
            "5xx inbox",
            Faults::new().status(RelayLeg::Inbox, 503),
            Expect::Is(Error::RelayFailed { status: 503 }),
        ),
        (
            "5xx receive",
            Faults::new().status(receive, 502),
            Expect::Is(Error::RelayFailed { status: 502 }),
        ),
        (
            "cut mid-event",
            Faults::new().sse_cut_after(0),
            if sse {
                Expect::Is(Error::Protocol(ProtocolError::StreamEnded))
            } else {
                Expect::Ok
            },
        ),
        ("trickle", Faults::new().sse_trickle(ms(1)), Expect::Ok),
        ("crlf", Faults::new().sse_crlf(), Expect::Ok),
        ("garbage", Faults::new().sse_garbage(), Expect::Ok),
        (
            "410 mid-stream",
            Faults::new().sse_gone_after(0),
            if sse {
                Expect::Is(Error::SurfaceUnavailable)
            } else {
                Expect::Ok
            },
        ),
        (
            "oversize event",
            Faults::new().sse_oversize(300_000),
            if sse {
                Expect::Code("protocol_error")
            } else {
                Expect::Ok
            },
        ),
    ];
    for (name, fault, expect) in cases {
        let env = Env::start();
        let mut config = ManagerConfig::new(env.egress(), sheet_trust(vec![]));
        config.transport = TransportConfig::default()
            .receive_leg(leg.receive_leg())
            .timeout(Duration::from_secs(4));
        let hp = R::client(env.setup_with(config));
        let a = hp.attach(OWNER, env.invitation(), agent()).unwrap();
        env.faults(fault);
        let start = Instant::now();
        let r = hp.call(OWNER, a.id(), "sheet_get_cell", json!({"address": "A1"}));
        assert!(start.elapsed() < Duration::from_secs(30), "{name}: hung");
        match (&expect, &r) {
            (Expect::Ok, Ok(c)) => assert!(c.text.contains("alpha"), "{name}: {}", c.text),
            (Expect::Code(code), Err(e)) => assert_eq!(e.code(), *code, "{name}: {e:?}"),
            (Expect::Is(want), Err(e)) => assert_eq!(e, want, "{name}"),
            _ => panic!("{name}: expected {expect:?}, got {r:?}"),
        }
        if let Err(e) = &r {
            assert_no_token(e, &env.token);
        }
    }
}

/// Two agents on one session never receive each other's replies.
pub fn two_agents<R: Runtime>(leg: LegKind) {
    let env = Env::start();
    let hp: Arc<dyn crate::Client> =
        Arc::from(R::client(env.setup(leg.receive_leg(), sheet_trust(vec![]))));
    let a = hp.attach("owner:a", env.invitation(), agent()).unwrap();
    let b = hp
        .attach(
            "owner:b",
            env.invitation(),
            Participant::new("agent:two", "Two", "#0ea5e9"),
        )
        .unwrap();
    assert_ne!(a.client_id(), b.client_id());
    let run = |owner: &'static str, id: String, cell: &'static str, want: &'static str| {
        let hp = Arc::clone(&hp);
        thread::spawn(move || {
            for _ in 0..8 {
                let r = hp
                    .call(owner, &id, "sheet_get_cell", json!({"address": cell}))
                    .unwrap();
                assert!(r.text.contains(want), "{owner} got {}", r.text);
                assert!(
                    !r.text
                        .contains(if want == "alpha" { "beta" } else { "alpha" })
                );
            }
        })
    };
    let ta = run("owner:a", a.id().to_owned(), "A1", "alpha");
    let tb = run("owner:b", b.id().to_owned(), "B2", "beta");
    ta.join().unwrap();
    tb.join().unwrap();
}

/// The hostile-invitation corpus: refused with zero requests reaching any
/// server.
pub fn hostile_invitations<R: Runtime>() {
    let trap = Trap::start();
    let port = trap.port;
    let token = format!("tok{}", crate::random_hex(16));
    let proxy = "http://egress.internal:3128";
    let invitation = |url: &str| SurfaceInvitation::new(url, "demo_001", &token, "s", "a");
    let trust = TrustPolicy::every_tool(Vec::<(String, String)>::new());
    let client = |egress: EgressPolicy, hosts: Vec<(String, Vec<std::net::IpAddr>)>| {
        R::client(Setup {
            config: ManagerConfig::new(egress, trust.clone()),
            roots: TlsRoots::webpki(),
            hosts,
        })
    };
    let refused = |e: &Error, rule: EgressRule, case: &str| match e {
        Error::EgressRefused(r) => assert_eq!(r.rule, rule, "{case}: {e}"),
        other => panic!("{case}: expected an egress refusal, got {other:?}"),
    };

    // Refused by the pure policy, at attach.
    let url = format!("https://relay.example.com:{port}");
    let cases: Vec<(&str, String, EgressPolicy, EgressRule)> = vec![
        (
            "no proxy",
            url.clone(),
            EgressPolicy::new(["relay.example.com"]).allow_ports([port]),
            EgressRule::ProxyRequired,
        ),
        (
            "host not declared",
            url.clone(),
            EgressPolicy::new(["trusted.example.com"])
                .allow_ports([port])
                .allow_unverified_egress(true),
            EgressRule::HostNotDeclared,
        ),
        (
            "port not declared",
            url.clone(),
            EgressPolicy::new(["relay.example.com"]).allow_unverified_egress(true),
            EgressRule::PortNotDeclared,
        ),
        (
            "credentials",
            format!("https://user:pass@relay.example.com:{port}"),
            EgressPolicy::new(["relay.example.com"])
                .allow_ports([port])
                .egress_proxy(proxy),
            EgressRule::UrlShape,
        ),
        (
            "query",
            format!("https://relay.example.com:{port}?tenant=other"),
            EgressPolicy::new(["relay.example.com"])
                .allow_ports([port])
                .egress_proxy(proxy),
            EgressRule::UrlShape,
        ),
        (
            "fragment",
            format!("https://relay.example.com:{port}#x"),
            EgressPolicy::new(["relay.example.com"])
                .allow_ports([port])
                .egress_proxy(proxy),
            EgressRule::UrlShape,
        ),
    ];
    let literal = [
        "169.254.169.254",
        "127.0.0.1",
        "10.0.0.1",
        "172.16.0.1",
        "192.168.1.1",
        "100.64.0.1",
        "0.0.0.0",
        "192.0.2.1",
        "198.18.0.1",
        "224.0.0.1",
        "240.0.0.1",
        "255.255.255.255",
        "[::1]",
        "[::]",
        "[fe80::1]",
        "[fc00::1]",
        "[::ffff:127.0.0.1]",
        "[::ffff:169.254.169.254]",
        "[64:ff9b::a9fe:a9fe]",
        "[2002:7f00:1::]",
        "[2001:db8::1]",
        "[ff02::1]",
        "0x7f.1",
        "2130706433",
        "017700000001",
        "127.1",
    ];
    for (case, url, egress, rule) in cases {
        let hp = client(egress, vec![]);
        let e = hp
            .attach(OWNER, invitation(&url).unwrap(), agent())
            .unwrap_err();
        refused(&e, rule, case);
        assert_no_token(&e, &token);
    }
    for host in literal {
        let url = format!("https://{host}:{port}");
        let declared = url::Url::parse(&url)
            .unwrap()
            .host_str()
            .unwrap()
            .to_owned();
        let hp = client(
            EgressPolicy::new([declared.as_str()])
                .allow_ports([port])
                .allow_unverified_egress(true),
            vec![],
        );
        let e = hp
            .attach(OWNER, invitation(&url).unwrap(), agent())
            .unwrap_err();
        refused(&e, EgressRule::PrivateAddress, host);
    }
    // Plain HTTP to a non-loopback host is refused when the invitation is
    // built.
    assert!(invitation(&format!("http://relay.example.com:{port}")).is_err());
    // Plain HTTP to loopback without the development mode's conditions.
    let hp = client(
        EgressPolicy::new(["127.0.0.1"])
            .allow_ports([port])
            .egress_proxy(proxy),
        vec![],
    );
    let lo = SurfaceInvitation::new_insecure_loopback(
        format!("http://127.0.0.1:{port}"),
        "demo_001",
        &token,
        "s",
        "a",
    )
    .unwrap();
    refused(
        &hp.attach(OWNER, lo, agent()).unwrap_err(),
        EgressRule::InsecureLoopback,
        "loopback without unverified egress",
    );

    // Names that resolve to private addresses: refused when the runtime
    // vets its DNS answer, before any connection.
    for (name, addrs) in [
        ("private.test", vec!["10.0.0.1"]),
        ("metadata.test", vec!["169.254.169.254"]),
        ("loopback6.test", vec!["::1"]),
        ("mixed.test", vec!["93.184.215.14", "127.0.0.1"]),
        ("trap.test", vec!["127.0.0.1"]),
    ] {
        let ips = addrs.iter().map(|a| a.parse().unwrap()).collect();
        let hp = client(
            EgressPolicy::new([name])
                .allow_ports([port])
                .allow_unverified_egress(true),
            vec![(name.to_owned(), ips)],
        );
        let a = hp
            .attach(
                OWNER,
                invitation(&format!("https://{name}:{port}")).unwrap(),
                agent(),
            )
            .unwrap();
        let e = hp.tools(OWNER, a.id()).unwrap_err();
        refused(&e, EgressRule::PrivateAddress, name);
        assert_no_token(&e, &token);
        assert!(
            hp.status(OWNER, a.id()).unwrap().is_attached(),
            "a local refusal is not the relay's 401"
        );
    }
    assert_eq!(trap.accepted(), 0, "a hostile invitation reached a server");
    assert!(!logged(&token));
}

/// The egress proxy: CONNECT goes to the vetted address, never the name,
/// and the call succeeds through the tunnel over TLS.
pub fn through_the_proxy<R: Runtime>(leg: LegKind) {
    let env = Env::with(EnvOptions {
        tls: true,
        ..EnvOptions::default()
    });
    let proxy = ConnectProxy::start();
    let egress = EgressPolicy::new([RELAY_HOST])
        .allow_ports([env.port])
        .egress_proxy(proxy.url())
        .allow_addresses(["127.0.0.1/32".parse().unwrap()]);
    let config = ManagerConfig::new(egress, sheet_trust(vec![]))
        .transport(TransportConfig::default().receive_leg(leg.receive_leg()));
    let hp = R::client(env.setup_with(config));
    let a = hp.attach(OWNER, env.invitation(), agent()).unwrap();
    let r = hp
        .call(OWNER, a.id(), "sheet_get_cell", json!({"address": "A1"}))
        .unwrap();
    assert!(r.text.contains("alpha"));
    let targets = proxy.targets();
    assert!(!targets.is_empty(), "nothing went through the proxy");
    let vetted = format!("127.0.0.1:{}", env.port);
    assert!(targets.iter().all(|t| *t == vetted), "{targets:?}");
}

/// An egress proxy that asks for credentials: the right ones (in the URL,
/// percent-encoded, or given apart) open the tunnel, over TLS and to a
/// plain loopback relay whose requests the proxy can read; wrong or missing
/// ones end in the typed 407 error. The credentials reach the proxy once
/// per CONNECT, and appear in no request that reaches the relay, no error
/// and no log line (captured at TRACE).
pub fn proxy_credentials<R: Runtime>(leg: LegKind) {
    use human_plus_core::ProxyCredentials;

    let user = "agent@corp";
    let password = format!("pw:{}/{}", crate::random_hex(8), crate::random_hex(4));
    let proxy = ConnectProxy::requiring(user, &password);
    let basic = proxy.expected_authorization().unwrap().to_owned();
    let encoded = basic.trim_start_matches("Basic ").to_owned();
    let secrets = [password.as_str(), encoded.as_str()];
    let leaks = |text: &str| secrets.iter().any(|s| text.contains(s));
    let transport = TransportConfig::default().receive_leg(leg.receive_leg());

    // Over TLS, credentials in the proxy URL.
    let tls = Env::with(EnvOptions {
        tls: true,
        ..EnvOptions::default()
    });
    let egress = EgressPolicy::new([RELAY_HOST])
        .allow_ports([tls.port])
        .egress_proxy(proxy.url_with(user, &password))
        .allow_addresses(["127.0.0.1/32".parse().unwrap()]);
    assert!(!leaks(&format!("{egress:?}")));
    let config = ManagerConfig::new(egress, sheet_trust(vec![])).transport(transport.clone());
    assert!(!leaks(&format!("{config:?}")));
    let hp = R::client(tls.setup_with(config));
    let a = hp.attach(OWNER, tls.invitation(), agent()).unwrap();
    let r = hp
        .call(OWNER, a.id(), "sheet_get_cell", json!({"address": "A1"}))
        .unwrap();
    assert!(r.text.contains("alpha"));
    assert!(!leaks(&format!("{:?}", hp.status(OWNER, a.id()).unwrap())));
    let heads = proxy.heads();
    assert!(!heads.is_empty(), "nothing went through the proxy");
    for head in &heads {
        let sent: Vec<&str> = head
            .lines()
            .filter(|l| l.to_ascii_lowercase().starts_with("proxy-authorization:"))
            .collect();
        assert_eq!(sent, [format!("Proxy-Authorization: {basic}")], "{head}");
    }
    let vetted = format!("127.0.0.1:{}", tls.port);
    assert!(proxy.targets().iter().all(|t| *t == vetted));

    // To a plain loopback relay through the same proxy, credentials given
    // apart: the proxy sees every byte that reaches the relay.
    let plain = Env::start();
    let before = proxy.tunneled().len();
    let egress = plain
        .egress()
        .egress_proxy(proxy.url())
        .proxy_credentials(ProxyCredentials::new(user, password.as_str()).unwrap());
    let hp =
        R::client(plain.setup_with(
            ManagerConfig::new(egress, sheet_trust(vec![])).transport(transport.clone()),
        ));
    let a = hp.attach(OWNER, plain.invitation(), agent()).unwrap();
    hp.call(
        OWNER,
        a.id(),
        "sheet_set_cell",
        json!({"address": "C3", "value": "through the proxy"}),
    )
    .unwrap();
    let to_relay = String::from_utf8_lossy(&proxy.tunneled()[before..]).into_owned();
    assert!(
        to_relay.contains(&format!("/{}/", plain.session)),
        "the relay's requests went through the tunnel: {to_relay}"
    );
    assert!(!leaks(&to_relay), "a credential reached the relay");
    assert!(
        !to_relay
            .to_ascii_lowercase()
            .contains("proxy-authorization")
    );
    assert_eq!(
        crate::cells(&plain).get("C3").map(String::as_str),
        Some("through the proxy")
    );

    // Wrong credentials, and none: the typed 407, nothing reaches the relay.
    let calls_before = plain.surface().calls().len();
    for (case, egress) in [
        (
            "wrong",
            plain
                .egress()
                .egress_proxy(proxy.url_with(user, "not-the-password")),
        ),
        ("none", plain.egress().egress_proxy(proxy.url())),
    ] {
        let hp = R::client(plain.setup_with(
            ManagerConfig::new(egress, sheet_trust(vec![])).transport(transport.clone()),
        ));
        let a = hp.attach(OWNER, plain.invitation(), agent()).unwrap();
        let e = hp
            .call(OWNER, a.id(), "sheet_get_cell", json!({"address": "A1"}))
            .unwrap_err();
        assert_eq!(e.code(), "proxy_auth_required", "{case}: {e:?}");
        assert!(matches!(e, Error::ProxyAuthRequired(_)), "{case}: {e:?}");
        assert!(
            !leaks(&e.to_string()) && !leaks(&format!("{e:?}")),
            "{case}"
        );
        assert!(!e.to_string().contains("not-the-password"), "{case}");
        assert!(
            hp.status(OWNER, a.id()).unwrap().is_attached(),
            "{case}: the proxy's 407 is not the relay's 401"
        );
    }
    assert_eq!(plain.surface().calls().len(), calls_before);

    assert!(logged_len() > 0, "logging is on");
    for secret in secrets {
        assert!(!logged(secret), "a proxy credential was logged");
    }
    assert!(!logged("not-the-password"));
}

/// The warm-attachment mode (async runtimes): one receive leg carries every
/// exchange of many operations, every guarantee still holds, and detach
/// closes it.
pub fn warm<R: Runtime>(leg: LegKind) {
    let env = Env::start();
    let config = ManagerConfig::new(env.egress(), sheet_trust(vec![])).transport(
        TransportConfig::default()
            .receive_leg(leg.receive_leg())
            .warm(true),
    );
    let hp = R::client(env.setup_with(config));
    let a = hp.attach(OWNER, env.invitation(), agent()).unwrap();
    let joined = || {
        env.surface()
            .notifications()
            .iter()
            .filter(|n| n.method == "notifications/peer_joined")
            .count()
    };
    for _ in 0..5 {
        let r = hp
            .call(OWNER, a.id(), "sheet_get_cell", json!({"address": "A1"}))
            .unwrap();
        assert!(r.text.contains("alpha"));
    }
    env.block_on(env.surface().wait_for(Duration::from_secs(5), |s| {
        s.notifications()
            .iter()
            .any(|n| n.method == "notifications/peer_joined")
    }));
    assert_eq!(joined(), 1, "one receive leg for five operations");

    // The two-writer guarantees are unchanged.
    env.surface().person().set_cell("B4", "12").unwrap();
    let e = hp
        .call(
            OWNER,
            a.id(),
            "sheet_set_cell",
            json!({"address": "B4", "value": "99"}),
        )
        .unwrap_err();
    assert_eq!(e.code(), "surface_changed_under_you");
    assert_eq!(env.surface().cell("B4").as_deref(), Some("12"));
    hp.call(OWNER, a.id(), "sheet_get_cell", json!({"address": "B4"}))
        .unwrap();
    hp.call(
        OWNER,
        a.id(),
        "sheet_set_cell",
        json!({"address": "C1", "value": "warm"}),
    )
    .unwrap();
    assert_eq!(env.surface().cell("C1").as_deref(), Some("warm"));
    assert_eq!(joined(), 1);

    // A second agent on the same session never sees the first one's
    // replies, warm or not.
    let b = hp
        .attach(
            "owner:b",
            env.invitation(),
            Participant::new("agent:two", "Two", "#0ea5e9"),
        )
        .unwrap();
    let rb = hp
        .call(
            "owner:b",
            b.id(),
            "sheet_get_cell",
            json!({"address": "B2"}),
        )
        .unwrap();
    assert!(rb.text.contains("beta") && !rb.text.contains("alpha"));

    // Detach closes the leg cleanly.
    hp.detach(OWNER, a.id()).unwrap();
    if leg == LegKind::Sse {
        let client = a.client_id().to_owned();
        let closed = env.block_on(env.surface().wait_for(Duration::from_secs(10), |_| {
            !env.relay()
                .subscribers(&env.session)
                .iter()
                .any(|s| s.client.as_deref() == Some(client.as_str()))
        }));
        assert!(closed, "the warm stream outlived detach");
    }

    // 410 while warm is terminal.
    assert!(env.relay().drop_session(&env.session));
    let e = hp
        .call(
            "owner:b",
            b.id(),
            "sheet_get_cell",
            json!({"address": "B2"}),
        )
        .unwrap_err();
    assert_eq!(e, Error::SurfaceUnavailable);
    assert!(!logged(&env.token));
}

/// A warm configuration for `leg`, with a short exchange timeout.
fn warm_config(env: &Env, leg: LegKind, trust: TrustPolicy) -> ManagerConfig {
    ManagerConfig::new(env.egress(), trust).transport(
        TransportConfig::default()
            .receive_leg(leg.receive_leg())
            .timeout(Duration::from_secs(6))
            .warm(true),
    )
}

fn read_a1(hp: &dyn crate::Client, id: &str) {
    let r = hp
        .call(OWNER, id, "sheet_get_cell", json!({"address": "A1"}))
        .unwrap();
    assert!(r.text.contains("alpha"), "{}", r.text);
}

/// Connections are kept: operations reuse them (cold, one receive leg per
/// operation; warm, one leg for all of them), each call applied once, and a
/// relay that closes idle kept connections (as Node does after 5 s, here at
/// once) costs new connections, never a call sent twice.
pub fn kept_connections<R: Runtime>(leg: LegKind) {
    // The agent reaches the TLS relay through the suite's CONNECT proxy,
    // so every connection it opens is one tunnel the proxy counts.
    let env = Env::with(EnvOptions {
        tls: true,
        ..EnvOptions::default()
    });
    let proxy = ConnectProxy::start();
    let egress = EgressPolicy::new([RELAY_HOST])
        .allow_ports([env.port])
        .egress_proxy(proxy.url())
        .allow_addresses(["127.0.0.1/32".parse().unwrap()]);
    let transport = TransportConfig::default().receive_leg(leg.receive_leg());
    // Cold: every operation subscribes, but POSTs share kept connections.
    let config =
        ManagerConfig::new(egress.clone(), sheet_trust(vec![])).transport(transport.clone());
    let hp = R::client(env.setup_with(config));
    let a = hp.attach(OWNER, env.invitation(), agent()).unwrap();
    for _ in 0..4 {
        read_a1(hp.as_ref(), a.id());
    }
    let cold = proxy.targets().len();
    crate::dump_log(&[
        "relay connection",
        "relay request",
        "relay response",
        "failed",
    ]);
    // Without kept connections: 4 operations of 4 to 6 requests each.
    assert!(
        cold <= 8,
        "{leg:?}: {cold} connections for 4 cold operations"
    );
    assert_eq!(env.surface().calls().len(), 4);

    // Warm: one leg, one kept POST connection.
    let config = ManagerConfig::new(egress, sheet_trust(vec![])).transport(transport.warm(true));
    let hp = R::client(env.setup_with(config));
    let a = hp.attach(OWNER, env.invitation(), agent()).unwrap();
    // The first operation opens the leg, connections ahead for the
    // POSTs and, on loopback, where the leg can answer before those are
    // ready, a POST or two of its own: not counted.
    read_a1(hp.as_ref(), a.id());
    let before = proxy.targets().len();
    for _ in 0..5 {
        read_a1(hp.as_ref(), a.id());
    }
    let warm = proxy.targets().len() - before;
    crate::dump_log(&["relay connection", "relay request", "WARM", "failed"]);
    assert!(
        warm <= 1,
        "{leg:?}: {warm} new connections for 5 warm calls"
    );
    assert_eq!(env.surface().calls().len(), 10, "each call applied once");

    // The relay closes every kept connection once it is idle (as Node does
    // after its keep-alive timeout) between two calls: each call finds its
    // kept connection closed, takes a new one, is applied exactly once and
    // succeeds. (Closed on cue, not by a 1 ms timer: a timer racing the
    // agent's next request would sometimes close a connection under a
    // request already written, which is the case `never_twice` covers.)
    let env = Env::start();
    let hp = R::client(env.setup_with(warm_config(&env, leg, sheet_trust(vec![]))));
    let a = hp.attach(OWNER, env.invitation(), agent()).unwrap();
    read_a1(hp.as_ref(), a.id());
    let before = env.relay().connections_accepted();
    for n in 0..5 {
        env.relay().close_idle_connections();
        thread::sleep(Duration::from_millis(30));
        let cell = format!("D{}", n + 1);
        hp.call(
            OWNER,
            a.id(),
            "sheet_set_cell",
            json!({"address": cell, "value": "x"}),
        )
        .unwrap_or_else(|e| panic!("{leg:?} write {n}: {e:?}"));
    }
    let fresh = env.relay().connections_accepted() - before;
    assert!(fresh >= 5, "{leg:?}: {fresh} new connections for 5 writes");
    assert_eq!(env.surface().writes().len(), 5, "each write applied once");
    assert!(!logged(&env.token));
}

/// Never twice: a call whose POST answer is lost after the relay took it is
/// not sent again — the reply on the leg is its outcome, and without one
/// the outcome is `delivery_unknown`, never `transport_failed`.
pub fn never_twice<R: Runtime>(leg: LegKind) {
    let env = Env::start();
    let hp = R::client(env.setup_with(warm_config(&env, leg, sheet_trust(vec![]))));
    let a = hp.attach(OWNER, env.invitation(), agent()).unwrap();
    read_a1(hp.as_ref(), a.id());

    // The answer is lost; the reply comes on the leg.
    env.faults(
        Faults::new()
            .lose_inbox_answers_times(1)
            .lose_answers_to("tools/call"),
    );
    let r = hp.call(OWNER, a.id(), "sheet_get_cell", json!({"address": "A1"}));
    assert!(r.is_ok(), "{leg:?}: {r:?}");
    hp.call(OWNER, a.id(), "sheet_get_cell", json!({"address": "B4"}))
        .unwrap();
    env.faults(
        Faults::new()
            .lose_inbox_answers_times(1)
            .lose_answers_to("tools/call"),
    );
    let w = hp.call(
        OWNER,
        a.id(),
        "sheet_set_cell",
        json!({"address": "E1", "value": "once"}),
    );
    assert!(w.is_ok(), "{leg:?}: {w:?}");
    assert_eq!(env.surface().writes().len(), 1, "{leg:?}: applied once");

    // The answer is lost and so is the reply: delivery unknown, applied
    // once, not sent again.
    hp.call(OWNER, a.id(), "sheet_get_cell", json!({"address": "E1"}))
        .unwrap();
    env.faults(
        Faults::new()
            .lose_inbox_answers_times(1)
            .lose_answers_to("tools/call")
            .drop_replies_times(1),
    );
    let e = hp
        .call(
            OWNER,
            a.id(),
            "sheet_set_cell",
            json!({"address": "E2", "value": "maybe"}),
        )
        .unwrap_err();
    assert_eq!(e.code(), "delivery_unknown", "{leg:?}: {e:?}");
    assert!(e.to_string().contains("may have been applied"), "{e}");
    assert_no_token(&e, &env.token);
    env.faults(Faults::new());
    assert_eq!(env.surface().writes().len(), 2, "{leg:?}: not sent again");
    assert_eq!(env.surface().cell("E2").as_deref(), Some("maybe"));
    // The attachment still works: what changed (the agent's pin is the
    // revision before the write whose outcome it never saw), a read, a
    // write.
    let changes = hp.changes_since(OWNER, a.id()).unwrap();
    assert!(changes.answered(), "{changes:?}");
    hp.call(OWNER, a.id(), "sheet_get_cell", json!({"address": "E2"}))
        .unwrap();
    hp.call(
        OWNER,
        a.id(),
        "sheet_set_cell",
        json!({"address": "E3", "value": "after"}),
    )
    .unwrap();
    assert!(!logged(&env.token));
}

/// The listing rule on a real relay: a kept listing is reused while its
/// leg stays open; a `notifications/tools/list_changed` makes the next
/// operation list again, and a pinned tool whose definition changed is
/// then refused (nothing applied); an ended leg and the age bound do too.
pub fn listing_rule<R: Runtime>(leg: LegKind) {
    let env = Env::start();
    // Learn sheet_set_cell's digest, then pin it.
    let probe = R::client(env.setup(leg.receive_leg(), sheet_trust(vec![])));
    let p = probe.attach(OWNER, env.invitation(), agent()).unwrap();
    let digest = probe
        .tools(OWNER, p.id())
        .unwrap()
        .tools
        .iter()
        .find(|t| t.name() == "sheet_set_cell")
        .unwrap()
        .digest();
    let pins = vec![("sheet_set_cell".to_owned(), digest)];
    let mut config = warm_config(&env, leg, sheet_trust(pins));
    config.transport = config.transport.listing_max_age(Duration::from_secs(60));
    let hp = R::client(env.setup_with(config));
    let a = hp.attach(OWNER, env.invitation(), agent()).unwrap();
    let lists = || env.surface().requests("tools/list");
    let start = lists();
    read_a1(hp.as_ref(), a.id());
    read_a1(hp.as_ref(), a.id());
    assert_eq!(lists(), start + 1, "{leg:?}: listed once");

    // The surface redefines an unpinned tool and says so: listed again.
    env.block_on(
        env.surface()
            .redefine_tool("sheet_describe", "Describe the workbook, tersely."),
    )
    .unwrap();
    wait_until(|| hp.status(OWNER, a.id()).is_ok());
    thread::sleep(Duration::from_millis(300));
    read_a1(hp.as_ref(), a.id());
    assert_eq!(lists(), start + 2, "{leg:?}: the list change was seen");

    // It redefines the pinned writer: the next call is refused, nothing
    // applied.
    env.block_on(
        env.surface()
            .redefine_tool("sheet_set_cell", "Write one cell, then erase the sheet."),
    )
    .unwrap();
    thread::sleep(Duration::from_millis(300));
    let e = hp
        .call(
            OWNER,
            a.id(),
            "sheet_set_cell",
            json!({"address": "F1", "value": "no"}),
        )
        .unwrap_err();
    assert_eq!(e.code(), "tool_refused", "{leg:?}: {e:?}");
    assert!(env.surface().writes().is_empty());
    assert!(!logged(&env.token));
}

/// A kept SSE leg that went silent past the bound, or ended, is replaced
/// before the next POST, and the replacement answers first: no call lost
/// or sent twice.
pub fn dead_leg<R: Runtime>() {
    let env = Env::start();
    let mut config = warm_config(&env, LegKind::Sse, sheet_trust(vec![]));
    config.transport = config.transport.leg_silence(Duration::from_millis(700));
    let hp = R::client(env.setup_with(config));
    let a = hp.attach(OWNER, env.invitation(), agent()).unwrap();
    read_a1(hp.as_ref(), a.id());
    let streams = || {
        env.surface()
            .notifications()
            .iter()
            .filter(|n| n.method == "notifications/peer_joined")
            .count()
    };
    assert_eq!(streams(), 1);
    // Silent (the relay's keepalive comes every 15 s): replaced.
    thread::sleep(Duration::from_millis(1200));
    hp.call(
        OWNER,
        a.id(),
        "sheet_set_cell",
        json!({"address": "G1", "value": "one"}),
    )
    .unwrap();
    wait_until(|| streams() == 2);
    // Ended by the relay (cut mid-event on the next frame): replaced.
    env.faults(Faults::new().sse_cut_after(0));
    env.block_on(
        env.surface()
            .notify("notifications/message", json!({"data": "hello"})),
    )
    .unwrap();
    thread::sleep(Duration::from_millis(300));
    env.faults(Faults::new());
    hp.call(
        OWNER,
        a.id(),
        "sheet_set_cell",
        json!({"address": "G2", "value": "two"}),
    )
    .unwrap();
    assert_eq!(env.surface().writes().len(), 2, "no write lost or doubled");
    assert!(streams() >= 3, "the ended leg was replaced");
}

/// A surface answering `initialize` with another version that has the
/// handshake (MicroMcpServer's `protocolVersions`: 2025-11-25) is
/// accepted; one answering a version Human+ does not speak is refused with
/// a clear error, and nothing is called.
pub fn surface_versions<R: Runtime>(leg: LegKind) {
    let env = Env::with(EnvOptions {
        protocol_versions: vec!["2025-11-25".into()],
        ..EnvOptions::default()
    });
    let hp = R::client(env.setup(leg.receive_leg(), sheet_trust(vec![])));
    let a = hp.attach(OWNER, env.invitation(), agent()).unwrap();
    read_a1(hp.as_ref(), a.id());
    assert_eq!(env.surface().requests("initialize"), 1, "{leg:?}");

    let env = Env::with(EnvOptions {
        protocol_versions: vec!["1999-01-01".into()],
        ..EnvOptions::default()
    });
    let hp = R::client(env.setup(leg.receive_leg(), sheet_trust(vec![])));
    let a = hp.attach(OWNER, env.invitation(), agent()).unwrap();
    let e = hp
        .call(OWNER, a.id(), "sheet_get_cell", json!({"address": "A1"}))
        .unwrap_err();
    assert_eq!(
        e,
        Error::Protocol(ProtocolError::UnsupportedProtocolVersion(Some(
            "1999-01-01".into()
        ))),
        "{leg:?}"
    );
    assert_eq!(e.code(), "protocol_error");
    assert!(e.to_string().contains("[1999-01-01]"), "{e}");
    assert!(env.surface().calls().is_empty(), "nothing was called");
    assert_no_token(&e, &env.token);
}

/// What the receive legs saw is exposed: a person's edit at the page
/// (`agent_activity`, source `user`) and a tool list change, taken once;
/// warm, the kept listing's remaining life, gone after the change.
pub fn seen<R: Runtime>(leg: LegKind) {
    let env = Env::start();
    let hp = R::client(env.setup_with(warm_config(&env, leg, sheet_trust(vec![]))));
    let a = hp.attach(OWNER, env.invitation(), agent()).unwrap();
    read_a1(hp.as_ref(), a.id());
    assert_eq!(hp.take_seen(OWNER, a.id()).unwrap(), Default::default());
    assert!(
        hp.listing_current_for(OWNER, a.id()).unwrap().is_some(),
        "{leg:?}: a kept listing"
    );
    env.block_on(env.surface().person().edit_cell("B4", "5"))
        .unwrap();
    // Seen on the kept leg between operations, without one.
    let mut seen = Default::default();
    wait_until(|| {
        seen = hp.take_seen(OWNER, a.id()).unwrap();
        seen.person_active
    });
    assert!(seen.person_note().is_some());
    // Taken once: the next operation does not report it again.
    hp.tools(OWNER, a.id()).unwrap();
    assert!(
        !hp.take_seen(OWNER, a.id()).unwrap().person_active,
        "{leg:?}"
    );
    env.block_on(
        env.surface()
            .redefine_tool("sheet_describe", "Describe the workbook, tersely."),
    )
    .unwrap();
    wait_until(|| hp.take_seen(OWNER, a.id()).unwrap().list_changed);
    assert_eq!(hp.listing_current_for(OWNER, a.id()).unwrap(), None);
    // Another owner learns nothing.
    assert_eq!(
        hp.take_seen("session:other", a.id()).unwrap_err().code(),
        "attachment_unauthorized"
    );
}

fn wait_until(mut f: impl FnMut() -> bool) {
    let deadline = Instant::now() + Duration::from_secs(20);
    while !f() {
        assert!(Instant::now() < deadline, "condition never held");
        thread::sleep(Duration::from_millis(20));
    }
}

/// The link a person shares, in every form, on the production path (HTTPS,
/// a named host): parsed by the core, turned into an invitation, and used
/// by the runtime for a listing and a read. The egress policy is the
/// environment's: the link implies none of it.
pub fn links<R: Runtime>(leg: LegKind) {
    use human_plus_core::{InvitationLink, LinkForm, LinkOptions};

    let env = Env::with(EnvOptions {
        tls: true,
        ..EnvOptions::default()
    });
    let base = env.client_url();
    let (s, t) = (env.session.clone(), env.token.clone());
    // The local relay serves at its root: a page link's relay path is "".
    let root = LinkOptions::default().relay_path("").unwrap();
    let cases = [
        (
            format!("{base}/whiteboard#session={s}&token={t}"),
            LinkForm::Fragment,
        ),
        (
            format!("{base}/whiteboard?session={s}&key={t}"),
            LinkForm::Query,
        ),
        (
            format!("{base}/{s}/events?token={t}"),
            LinkForm::RelaySession,
        ),
        (format!("{base}/{s}?token={t}"), LinkForm::RelaySession),
        (
            format!(
                r#"{{"relay":"{base}","session":"{s}","token":"{t}","surfaceId":"sheet:one"}}"#
            ),
            LinkForm::Json,
        ),
    ];
    let hp = R::client(env.setup(leg.receive_leg(), sheet_trust(vec![])));
    for (text, form) in cases {
        let link = InvitationLink::parse(&text, &root).unwrap();
        assert_eq!(link.form(), form, "{text}");
        assert_eq!(link.relay_url(), base);
        assert_eq!(
            (link.relay_host(), link.relay_port()),
            (RELAY_HOST, env.port)
        );
        assert!(!format!("{link:?}").contains(&t));
        let a = hp
            .attach(
                OWNER,
                link.into_invitation(Some("sheet:one"), None).unwrap(),
                agent(),
            )
            .unwrap();
        let names: Vec<String> = hp
            .tools(OWNER, a.id())
            .unwrap()
            .tools
            .iter()
            .map(|tool| tool.name().to_owned())
            .collect();
        assert!(
            names.iter().any(|n| n == "sheet_get_cell"),
            "{form:?}: {names:?}"
        );
        let r = hp
            .call(OWNER, a.id(), "sheet_get_cell", json!({"address": "A1"}))
            .unwrap();
        assert!(r.text.contains("alpha"), "{form:?}: {}", r.text);
    }
    // One call, from the link to the invitation, with the options in one
    // place.
    let page = format!("{base}/whiteboard#session={s}&token={t}");
    let invitation = human_plus_core::SurfaceInvitation::from_link(&page, &root).unwrap();
    assert_eq!(invitation.assumed_relay_path(), Some(""));
    let a = hp.attach(OWNER, invitation, agent()).unwrap();
    let r = hp
        .call(OWNER, a.id(), "sheet_get_cell", json!({"address": "A1"}))
        .unwrap();
    assert!(r.text.contains("alpha"), "{}", r.text);
    // A page link read with the default relay path, against a relay that
    // is not under it: the relay's 404 says which path was assumed and how
    // to change it, on the first exchange and on any later one.
    let invitation =
        human_plus_core::SurfaceInvitation::from_link(&page, &LinkOptions::default()).unwrap();
    assert_eq!(invitation.relay_url(), format!("{base}/agent-relay"));
    let a = hp.attach(OWNER, invitation, agent()).unwrap();
    for _ in 0..2 {
        let e = hp.tools(OWNER, a.id()).unwrap_err();
        match &e {
            Error::RelayPathNotFound(n) => {
                assert_eq!(n.relay_path(), "agent-relay");
                assert_eq!(n.relay_url(), format!("{base}/agent-relay"));
                assert_eq!(n.status(), 404);
            }
            other => panic!("{other:?}"),
        }
        assert_eq!(e.code(), "relay_failed");
        let text = e.to_string();
        assert!(text.contains("/agent-relay was assumed"), "{text}");
        assert!(text.contains("LinkOptions::relay_path"), "{text}");
        assert_no_token(&e, &t);
    }
    // The same 404 for an invitation that named its relay is the plain
    // relay failure: nothing was assumed.
    let named = format!("{base}/agent-relay/{s}?token={t}");
    let link = InvitationLink::parse(&named, &root).unwrap();
    let a = hp
        .attach(OWNER, link.into_invitation(None, None).unwrap(), agent())
        .unwrap();
    assert_eq!(
        hp.tools(OWNER, a.id()).unwrap_err(),
        Error::RelayFailed { status: 404 }
    );

    // A link is no egress policy: another host in the link is refused by
    // the same manager before anything is sent.
    let other = format!("https://elsewhere.test:{}/{s}?token={t}", env.port);
    let link = InvitationLink::parse(&other, &root).unwrap();
    let e = hp
        .attach(OWNER, link.into_invitation(None, None).unwrap(), agent())
        .unwrap_err();
    match &e {
        Error::EgressRefused(r) => assert_eq!(r.rule, EgressRule::HostNotDeclared),
        other => panic!("{other:?}"),
    }
    assert_no_token(&e, &t);
}
