//! The demo surface and a raw HTTP agent complete initialize, tools/list and
//! pinned tools/calls through the relay, on both receive legs, including a
//! stale pin refused with 409 and nothing written.

mod common;

use std::time::Duration;

use common::*;
use human_plus_relay::{
    Actor, CallOutcome, DemoSurface, Direction, RelayServer, RevisionMode, SurfaceError, SurfaceLeg,
};
use serde_json::{Value, json};

#[derive(Clone, Copy, Debug)]
enum AgentLeg {
    Sse,
    Poll,
}

async fn agent(addr: std::net::SocketAddr, session: &str, leg: AgentLeg) -> Agent {
    match leg {
        AgentLeg::Sse => Agent::sse(addr, session, TOKEN, Some("agent-1")).await,
        AgentLeg::Poll => Agent::poll(addr, session, TOKEN, Some("agent-1")).await,
    }
}

fn tool_call(name: &str, arguments: Value, pin: Option<&str>) -> Value {
    let mut params = json!({"name": name, "arguments": arguments});
    if let Some(pin) = pin {
        params["_meta"] = json!({"revision": pin});
    }
    params
}

async fn scenario(surface_leg: SurfaceLeg, agent_leg: AgentLeg) {
    let relay = RelayServer::builder().start().await.unwrap();
    let addr = relay.addr();
    let session = format!("e2e-{surface_leg:?}-{agent_leg:?}").to_lowercase();
    let surface = DemoSurface::builder(relay.base_url(), &session, TOKEN)
        .leg(surface_leg)
        .poll_wait(Duration::from_secs(2))
        .start()
        .await
        .unwrap();
    assert_eq!(relay.sessions(), vec![session.clone()]);
    let mut agent = agent(addr, &session, agent_leg).await;
    assert!(
        surface.wait_for(SOON, |s| s.peers().len() == 1).await,
        "the page saw the agent join"
    );

    // initialize
    let init = agent
        .call(
            json!("agent-1-1"),
            "initialize",
            json!({"protocolVersion": "2025-11-25", "capabilities": {}, "clientInfo": {"name": "raw", "version": "0"}}),
        )
        .await;
    let result = &init["result"];
    assert_eq!(result["protocolVersion"], "2025-06-18");
    assert_eq!(
        result["capabilities"],
        json!({"tools": {"listChanged": true}})
    );
    assert_eq!(result["serverInfo"]["name"], "human-plus-demo-sheet");
    assert_eq!(
        agent
            .post(&json!({"jsonrpc": "2.0", "method": "notifications/initialized"}))
            .await
            .status,
        200
    );

    // tools/list: the sheet tools, the feed, and the confirmation tool an
    // agent must never be offered.
    let list = agent
        .call(json!("agent-1-2"), "tools/list", json!({}))
        .await;
    let tools = list["result"]["tools"].as_array().unwrap();
    let names: Vec<&str> = tools.iter().map(|t| t["name"].as_str().unwrap()).collect();
    for expected in [
        "sheet_describe",
        "sheet_get_cell",
        "sheet_get_range",
        "sheet_set_cell",
        "sheet_delete_row",
        "changes_since",
        "sheet_confirm_edit",
    ] {
        assert!(names.contains(&expected), "{expected} in {names:?}");
    }
    for tool in tools {
        assert_eq!(tool["inputSchema"]["type"], "object");
        assert_eq!(tool["inputSchema"]["additionalProperties"], false);
    }

    // A read mints the revision.
    let read = agent
        .call(
            json!("agent-1-3"),
            "tools/call",
            tool_call("sheet_get_cell", json!({"address": "B4"}), None),
        )
        .await;
    assert_eq!(read["result"]["structuredContent"]["value"], "7");
    assert_eq!(read["result"]["_meta"]["revision"], "r1");

    // A pinned write at the current revision is applied.
    let write = agent
        .call(
            json!("agent-1-4"),
            "tools/call",
            tool_call(
                "sheet_set_cell",
                json!({"address": "B4", "value": "8"}),
                Some("r1"),
            ),
        )
        .await;
    assert!(write.get("error").is_none(), "{write}");
    assert_eq!(write["result"]["_meta"]["revision"], "r2");
    assert_eq!(surface.cell("B4").as_deref(), Some("8"));

    // The person edits; the agent's next write is pinned to what it last saw.
    assert_eq!(surface.person().set_cell("B4", "12").unwrap(), "r3");
    let stale = agent
        .call(
            json!("agent-1-5"),
            "tools/call",
            tool_call(
                "sheet_set_cell",
                json!({"address": "B4", "value": "9"}),
                Some("r2"),
            ),
        )
        .await;
    let error = &stale["error"];
    assert_eq!(error["code"], 409, "{stale}");
    assert_eq!(error["data"]["code"], "revision_mismatch");
    assert_eq!(error["data"]["current"], "r3");
    assert!(stale.get("result").is_none());
    // Nothing was written.
    assert_eq!(surface.cell("B4").as_deref(), Some("12"));
    assert_eq!(surface.revision(), "r3");
    assert_eq!(surface.writes().len(), 1);
    assert_eq!(
        surface.calls().last().unwrap().outcome,
        CallOutcome::Refused {
            current: "r3".into()
        }
    );

    // The change feed says who did what, even when pinned to a stale revision.
    let feed = agent
        .call(
            json!("agent-1-6"),
            "tools/call",
            tool_call("changes_since", json!({"since": "r1"}), Some("r2")),
        )
        .await;
    let meta = &feed["result"]["_meta"];
    assert_eq!(meta["revision"], "r3");
    assert_eq!(meta["complete"], true);
    let rows = meta["changes"].as_array().unwrap();
    assert_eq!(rows.len(), 2);
    assert_eq!(
        (
            rows[0]["handle"].as_str(),
            rows[0]["change"].as_str(),
            rows[0]["actor_type"].as_str(),
            rows[0]["kind"].as_str()
        ),
        (Some("B4"), Some("updated"), Some("agent"), Some("cell"))
    );
    assert_eq!(rows[1]["actor_type"], "human");
    assert!(
        feed["result"]["content"][0]["text"]
            .as_str()
            .unwrap()
            .contains("human")
    );

    // Activity is recorded; ping and unknown methods answer as MicroMcpServer.
    let activity = json!({"actor": {"id": "agent-1", "name": "Raw", "type": "agent"}, "action": "editing", "target": "B4"});
    agent
        .post(&json!({"jsonrpc": "2.0", "method": "notifications/human-plus/activity", "params": activity}))
        .await;
    let ping = agent.call(json!("agent-1-7"), "ping", json!({})).await;
    assert_eq!(ping["result"], json!({}));
    let unknown = agent
        .call(json!("agent-1-8"), "resources/list", json!({}))
        .await;
    assert_eq!(unknown["error"]["code"], -32601);
    assert!(
        surface
            .wait_for(SOON, |s| s.activity() == vec![activity.clone()])
            .await
    );
    assert!(
        surface
            .notifications()
            .iter()
            .any(|n| n.method == "notifications/initialized")
    );

    // The page leaves; the relay tells the agent nothing, but the session
    // lives on until unregistered.
    surface.shutdown().await;
    relay.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sse_surface_with_sse_agent() {
    scenario(SurfaceLeg::Sse, AgentLeg::Sse).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn poll_surface_with_poll_agent() {
    scenario(SurfaceLeg::Poll, AgentLeg::Poll).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sse_surface_with_poll_agent() {
    scenario(SurfaceLeg::Sse, AgentLeg::Poll).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn poll_surface_with_sse_agent() {
    scenario(SurfaceLeg::Poll, AgentLeg::Sse).await;
}

async fn call_once(
    surface_builder: human_plus_relay::DemoSurfaceBuilder,
    relay: &human_plus_relay::RelayHandle,
    session: &str,
    steps: Vec<(&str, Value, Option<&str>)>,
    human_edit_first: bool,
) -> (DemoSurface, Vec<Value>) {
    let surface = surface_builder.start().await.unwrap();
    if human_edit_first {
        surface.person().set_cell("A2", "Apricots").unwrap();
    }
    let mut agent = Agent::sse(relay.addr(), session, TOKEN, Some("opt")).await;
    let mut replies = Vec::new();
    for (i, (name, args, pin)) in steps.into_iter().enumerate() {
        replies.push(
            agent
                .call(
                    json!(format!("opt-{i}")),
                    "tools/call",
                    tool_call(name, args, pin),
                )
                .await,
        );
    }
    (surface, replies)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn each_human_plus_behaviour_can_be_switched_off() {
    let relay = RelayServer::builder().start().await.unwrap();
    let base = relay.base_url().to_owned();
    let set = |pin| {
        (
            "sheet_set_cell",
            json!({"address": "B2", "value": "4"}),
            pin,
        )
    };

    // Minted but not enforced: the stale pin is applied (the lost update).
    let (surface, replies) = call_once(
        DemoSurface::builder(&base, "mint-only", TOKEN).revisions(RevisionMode::MintOnly),
        &relay,
        "mint-only",
        vec![set(Some("r1"))],
        true,
    )
    .await;
    assert_eq!(replies[0]["result"]["_meta"]["revision"], "r3");
    assert_eq!(surface.cell("B2").as_deref(), Some("4"));
    assert_eq!(surface.writes().len(), 1);

    // No revisions at all: nothing minted, pins ignored.
    let (surface, replies) = call_once(
        DemoSurface::builder(&base, "no-revs", TOKEN).revisions(RevisionMode::Off),
        &relay,
        "no-revs",
        vec![("sheet_describe", json!({}), None), set(Some("r1"))],
        true,
    )
    .await;
    assert!(
        replies[0]["result"].get("_meta").is_none(),
        "{}",
        replies[0]
    );
    assert!(replies[1]["result"].get("_meta").is_none());
    assert_eq!(surface.cell("B2").as_deref(), Some("4"));

    // No change feed: the tool is not listed, and calling it is unknown.
    let surface = DemoSurface::builder(&base, "no-feed", TOKEN)
        .change_feed(false)
        .start()
        .await
        .unwrap();
    let mut agent = Agent::poll(relay.addr(), "no-feed", TOKEN, None).await;
    let list = agent.call(json!(1), "tools/list", json!({})).await;
    let listed = list["result"]["tools"].to_string();
    assert!(!listed.contains("changes_since"));
    assert!(listed.contains("sheet_confirm_edit"));
    let r = agent
        .call(
            json!(2),
            "tools/call",
            tool_call("changes_since", json!({"since": "r1"}), None),
        )
        .await;
    assert_eq!(r["error"]["code"], -32601);
    drop(surface);

    // A feed without attribution, and one that admits it is partial.
    let (_surface, replies) = call_once(
        DemoSurface::builder(&base, "anon-feed", TOKEN)
            .feed_attribution(false)
            .feed_complete(false),
        &relay,
        "anon-feed",
        vec![set(None), ("changes_since", json!({"since": "r1"}), None)],
        true,
    )
    .await;
    let meta = &replies[1]["result"]["_meta"];
    assert_eq!(meta["complete"], false);
    let rows = meta["changes"].as_array().unwrap();
    assert_eq!(rows.len(), 2);
    assert!(
        rows.iter().all(|r| r.get("actor_type").is_none()),
        "{rows:?}"
    );
    relay.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_person_and_the_record() {
    let relay = RelayServer::builder().start().await.unwrap();
    let surface = DemoSurface::builder(relay.base_url(), "person", TOKEN)
        .cells([("A1", "x"), ("A2", "y"), ("A3", "z")])
        .start()
        .await
        .unwrap();
    let person = surface.person();
    assert_eq!(person.delete_row(1).unwrap(), "r2");
    assert_eq!(surface.cell("A1").as_deref(), Some("y"));
    assert_eq!(person.clear_cell("A2").unwrap(), "r3");
    assert!(matches!(
        person.set_cell("nope", "1"),
        Err(SurfaceError::InvalidAddress(_))
    ));
    let changes = surface.changes();
    assert_eq!(changes.len(), 2);
    assert!(changes.iter().all(|c| c.actor == Actor::Human));
    assert_eq!(changes[1].change, "deleted");
    assert_eq!(surface.cells().len(), 1);
    // The page can notify every agent.
    let mut agent = Agent::sse(relay.addr(), "person", TOKEN, None).await;
    surface
        .notify("notifications/tools/list_changed", json!({}))
        .await
        .unwrap();
    let frame = agent.next(SOON).await.unwrap();
    assert_eq!(frame["method"], "notifications/tools/list_changed");
    // Registering with a token of the wrong length is the relay's 401.
    let err = DemoSurface::builder(relay.base_url(), "short-token", "short")
        .start()
        .await
        .unwrap_err();
    assert!(matches!(err, SurfaceError::Unauthorized), "{err:?}");
    // The session's end reaches the page, which stops.
    assert!(relay.drop_session("person"));
    assert!(surface.wait_for(SOON, |s| s.ended().is_some()).await);
    assert_eq!(surface.ended().as_deref(), Some("session_gone"));
    relay.shutdown().await;
}

/// The relay is stopped under the page and started again on the same
/// port, with no sessions: the page, which could not reach it meanwhile,
/// hears 410 and registers the same session again with the same token, and
/// carries on with the same sheet (the next revision follows the last). A
/// 410 that follows no outage still ends the page.
async fn relay_restarted_under_the_page(leg: SurfaceLeg) {
    let relay = RelayServer::builder().start().await.unwrap();
    let addr = relay.addr();
    let session = format!("restart-{leg:?}").to_lowercase();
    let surface = DemoSurface::builder(relay.base_url(), &session, TOKEN)
        .leg(leg)
        .poll_wait(Duration::from_secs(2))
        .start()
        .await
        .unwrap();
    let mut agent = Agent::poll(addr, &session, TOKEN, Some("agent-1")).await;
    let wrote = agent
        .call(
            json!("w-1"),
            "tools/call",
            tool_call(
                "sheet_set_cell",
                json!({"address": "A5", "value": "Figs"}),
                Some("r1"),
            ),
        )
        .await;
    assert_eq!(wrote["result"]["_meta"]["revision"], "r2", "{wrote}");
    drop(agent);

    relay.shutdown().await;
    // Long enough for the page's leg to find nobody listening (it retries
    // within 100 ms, then backs off up to 2 s).
    tokio::time::sleep(Duration::from_millis(800)).await;
    assert_eq!(surface.registered_again(), 0);
    let relay = RelayServer::builder().bind(addr).start().await.unwrap();
    assert!(
        surface.wait_for(SOON, |s| s.registered_again() == 1).await,
        "the page registered its session again"
    );
    assert_eq!(relay.sessions(), vec![session.clone()]);
    assert!(
        eventually(|| relay
            .subscribers(&session)
            .iter()
            .any(|s| s.direction == Direction::Inbound))
        .await,
        "the page's receive leg is open again"
    );
    assert_eq!(surface.ended(), None);

    // The same sheet, the same token: a pin from before is still checked.
    let mut agent = Agent::poll(addr, &session, TOKEN, Some("agent-2")).await;
    let stale = agent
        .call(
            json!("w-2"),
            "tools/call",
            tool_call(
                "sheet_set_cell",
                json!({"address": "B4", "value": "8"}),
                Some("r1"),
            ),
        )
        .await;
    assert_eq!(stale["error"]["code"], 409, "{stale}");
    assert_eq!(stale["error"]["data"]["current"], "r2", "{stale}");
    let read = agent
        .call(
            json!("r-1"),
            "tools/call",
            tool_call("sheet_get_cell", json!({"address": "A5"}), None),
        )
        .await;
    assert_eq!(read["result"]["_meta"]["revision"], "r2", "{read}");
    assert_eq!(read["result"]["content"][0]["text"], "Figs", "{read}");
    let wrote = agent
        .call(
            json!("w-3"),
            "tools/call",
            tool_call(
                "sheet_set_cell",
                json!({"address": "D4", "value": "14.40"}),
                Some("r2"),
            ),
        )
        .await;
    assert_eq!(wrote["result"]["_meta"]["revision"], "r3", "{wrote}");
    assert_eq!(surface.cell("B4").as_deref(), Some("7"));

    // Ended on a relay that was there all along: the page stops.
    assert!(relay.drop_session(&session));
    assert!(surface.wait_for(SOON, |s| s.ended().is_some()).await);
    assert_eq!(surface.ended().as_deref(), Some("session_gone"));
    assert_eq!(surface.registered_again(), 1);
    assert!(relay.sessions().is_empty());
    surface.shutdown().await;
    relay.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_restarted_relay_is_joined_again_on_the_sse_leg() {
    relay_restarted_under_the_page(SurfaceLeg::Sse).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_restarted_relay_is_joined_again_on_the_poll_leg() {
    relay_restarted_under_the_page(SurfaceLeg::Poll).await;
}

/// A page that did not register its session (someone else did) never
/// registers it again: after an outage, its 410 still ends it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_page_that_did_not_register_does_not_register_again() {
    let relay = RelayServer::builder().start().await.unwrap();
    let addr = relay.addr();
    let registered = register(addr, "not-mine", TOKEN).await;
    assert_eq!(registered.status, 200);
    let surface = DemoSurface::builder(relay.base_url(), "not-mine", TOKEN)
        .register(false)
        .start()
        .await
        .unwrap();
    relay.shutdown().await;
    tokio::time::sleep(Duration::from_millis(800)).await;
    let relay = RelayServer::builder().bind(addr).start().await.unwrap();
    assert!(surface.wait_for(SOON, |s| s.ended().is_some()).await);
    assert_eq!(surface.ended().as_deref(), Some("session_gone"));
    assert_eq!(surface.registered_again(), 0);
    assert!(relay.sessions().is_empty());
    relay.shutdown().await;
}
