//! The toolset handles over the tokio manager: descriptors, calls through
//! the manager, owner scoping, and (feature `rig`) rig-core tools.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use human_plus_relay::{DemoSurface, RelayServer};
use human_plus_tokio::{
    EgressPolicy, Error, HumanPlus, HumanPlusToolset, ManagerConfig, NO_PINS, Participant,
    SurfaceInvitation, ToolHandle, TrustPolicy,
};
use serde_json::json;

const OWNER: &str = "conversation:toolset";

async fn setup() -> (
    human_plus_relay::RelayHandle,
    DemoSurface,
    HumanPlus,
    String,
) {
    let relay = RelayServer::builder().start().await.unwrap();
    let token = "toolset-token-0123456789";
    let surface = DemoSurface::builder(relay.base_url(), "toolset_1", token)
        .start()
        .await
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
    let attachment = human_plus
        .attach(OWNER, invitation, Participant::new("a", "Agent", "#000000"))
        .await
        .unwrap();
    let id = attachment.id().to_owned();
    (relay, surface, human_plus, id)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn handles_describe_and_call_through_the_manager() {
    let (relay, surface, human_plus, id) = setup().await;
    let tools = HumanPlusToolset::new(&human_plus)
        .for_attachment(OWNER, &id, &["sheet_set_cell"])
        .await
        .unwrap();
    let names: Vec<&str> = tools.iter().map(ToolHandle::name).collect();
    assert_eq!(names, ["sheet_get_cell", "sheet_set_cell"]);
    let set = &tools[1];
    assert!(set.requires_approval() && !tools[0].requires_approval());
    assert_eq!(set.tool().required, ["address", "value"]);
    assert!(set.tool().digest.starts_with("sha256:"));

    let read = tools[0].call(json!({"address": "B4"})).await.unwrap();
    assert!(read.text.contains("untrusted-tool-output"));
    surface.person().set_cell("B4", "12").unwrap();
    let stale = set.call(json!({"address": "B4", "value": "8"})).await;
    assert!(
        matches!(stale, Err(Error::SurfaceChangedUnderYou(_))),
        "{stale:?}"
    );
    assert_eq!(surface.cell("B4").as_deref(), Some("12"));

    // Another owner cannot use the attachment through a toolset.
    let other = HumanPlusToolset::new(&human_plus)
        .for_attachment("someone-else", &id, &[])
        .await;
    assert!(matches!(other, Err(Error::AttachmentUnauthorized(_))));
    surface.shutdown().await;
    relay.shutdown().await;
}

#[cfg(feature = "rig")]
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn rig_tools_call_through_the_manager() {
    use std::sync::Arc;

    use human_plus_tokio::Approve;

    let (relay, surface, human_plus, id) = setup().await;
    let mut tools = HumanPlusToolset::new(&human_plus)
        .for_attachment(OWNER, &id, &["sheet_set_cell"])
        .await
        .unwrap();
    let set = tools.pop().unwrap();
    let get = tools.pop().unwrap().into_rig_tool().unwrap();
    assert_eq!(get.name().to_string(), "sheet_get_cell");
    let def = get.definition();
    assert_eq!(def.parameters["required"], json!(["address"]));

    let out = get.execute(json!({"address": "B4"})).await.unwrap();
    assert!(
        out.render().contains("untrusted-tool-output"),
        "{}",
        out.render()
    );

    // Declined approval: refused, and nothing reaches the surface.
    let declined: Approve = Arc::new(|_, _| false);
    let gated = set.clone().into_rig_tool_with_approval(declined).unwrap();
    let before = surface.calls().len();
    let refused = gated
        .execute(json!({"address": "B4", "value": "8"}))
        .await
        .unwrap_err();
    assert_eq!(refused.code(), Some("approval_declined"));
    assert_eq!(surface.calls().len(), before);

    // A stale pin: the model reads the refusal.
    surface.person().set_cell("B4", "12").unwrap();
    let allowed: Approve = Arc::new(|_, _| true);
    let gated = set.into_rig_tool_with_approval(allowed).unwrap();
    let stale = gated
        .execute(json!({"address": "B4", "value": "8"}))
        .await
        .unwrap_err();
    assert_eq!(stale.code(), Some("surface_changed_under_you"));
    assert!(stale.model_output().render().contains("was NOT applied"));
    assert_eq!(surface.cell("B4").as_deref(), Some("12"));
    surface.shutdown().await;
    relay.shutdown().await;
}
