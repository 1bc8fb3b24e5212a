//! The toolset handles over the blocking manager: descriptors, calls through
//! the manager, and owner scoping.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use human_plus_blocking::{
    EgressPolicy, Error, HumanPlus, HumanPlusToolset, ManagerConfig, NO_PINS, Participant,
    SurfaceInvitation, ToolHandle, TrustPolicy,
};
use human_plus_relay::{DemoSurface, RelayServer};
use serde_json::json;

const OWNER: &str = "conversation:toolset";

#[test]
fn handles_describe_and_call_through_the_manager() {
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();
    let token = "toolset-token-0123456789";
    let relay = rt.block_on(RelayServer::builder().start()).unwrap();
    let surface = rt
        .block_on(DemoSurface::builder(relay.base_url(), "toolset_1", token).start())
        .unwrap();
    let config = ManagerConfig::new(
        EgressPolicy::new(["127.0.0.1"])
            .allow_ports([relay.addr().port()])
            .allow_unverified_egress(true),
        TrustPolicy::allowing(
            ["sheet_get_cell", "sheet_set_cell", "sheet_confirm_edit"],
            NO_PINS,
        ),
    );
    let human_plus = HumanPlus::new(config);
    let invitation = SurfaceInvitation::new_insecure_loopback(
        relay.base_url(),
        "toolset_1",
        token,
        "sheet:one",
        "Demo",
    )
    .unwrap();
    let id = human_plus
        .attach(OWNER, invitation, Participant::new("a", "Agent", "#000000"))
        .unwrap()
        .id()
        .to_owned();

    let tools = HumanPlusToolset::new(&human_plus)
        .for_attachment(OWNER, &id, &["sheet_set_cell"])
        .unwrap();
    let names: Vec<&str> = tools.iter().map(ToolHandle::name).collect();
    assert_eq!(names, ["sheet_get_cell", "sheet_set_cell"]);
    let set = &tools[1];
    assert!(set.requires_approval() && !tools[0].requires_approval());
    assert_eq!(set.tool().required, ["address", "value"]);

    let read = tools[0].call(json!({"address": "B4"})).unwrap();
    assert!(read.text.contains("untrusted-tool-output"));
    surface.person().set_cell("B4", "12").unwrap();
    let stale = set.call(json!({"address": "B4", "value": "8"}));
    assert!(
        matches!(stale, Err(Error::SurfaceChangedUnderYou(_))),
        "{stale:?}"
    );
    assert_eq!(surface.cell("B4").as_deref(), Some("12"));

    let other = HumanPlusToolset::new(&human_plus).for_attachment("someone-else", &id, &[]);
    assert!(matches!(other, Err(Error::AttachmentUnauthorized(_))));
    rt.block_on(async {
        surface.shutdown().await;
        relay.shutdown().await;
    });
}
