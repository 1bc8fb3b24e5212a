//! `human-plus demo`: the whole story in a few screens, on a relay and a
//! demo sheet started in-process on loopback. Nothing to set up.

use std::io::Write as _;
use std::net::{IpAddr, Ipv4Addr};
use std::time::{Duration, Instant};

use human_plus_core::{
    EgressPolicy, Error, ManagerConfig, NO_PINS, Participant, SurfaceInvitation, ToolRefusal,
    TransportConfig, TrustPolicy,
};
use human_plus_relay::{CallOutcome, DemoSurface, RelayServer};
use serde_json::Value;

use crate::args::DemoArgs;
use crate::connecting::agent::{AgentSetup, build_agent};
use crate::demos::story::{
    Audience, Narrator, OWNER, agent_line, attach, change_feed, detach, discover, edit, internal,
    read, reread_and_write, stale_write, step_failed, trust, unexpected,
};
use crate::output::exit::{Failure, printable};
use crate::output::style::Style;
pub use crate::profiles::random::random_hex;

/// The host name the demo's test resolver maps to a private address.
const REBINDING_HOST: &str = "sheets.corp.example";

/// Runs the demo, printing the story on stdout.
///
/// # Errors
/// The failure to report (exit 1 when the in-process relay cannot start).
pub fn run(args: &DemoArgs) -> Result<(), Failure> {
    if args.web {
        return crate::demos::web_demo::run(args);
    }
    let started = Instant::now();
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .map_err(|e| internal("the tokio runtime could not start")(&e))?;
    let session = format!("demo_{}", random_hex(6));
    let token = format!("hp_{}", random_hex(16));
    let relay = rt
        .block_on(RelayServer::builder().start())
        .map_err(|e| internal("the in-process relay could not start")(&e))?;
    let surface = rt
        .block_on(DemoSurface::builder(relay.base_url(), &session, &token).start())
        .map_err(|e| internal("the demo sheet could not open")(&e))?;
    let mut n = Narrator {
        style: Style::detect(),
        buf: String::new(),
    };
    let result = story(
        &mut n,
        &rt,
        &surface,
        args,
        relay.base_url(),
        relay.addr().port(),
        &session,
        &token,
    );
    n.flush();
    rt.block_on(async {
        surface.shutdown().await;
        relay.shutdown().await;
    });
    result?;
    let mut out = std::io::stdout().lock();
    let _ = writeln!(
        out,
        "\nDone in {:.1} s ({} runtime, {} transport). Next: `human-plus relay`, `human-plus surface` and `human-plus mcp` put your own agent in this seat.",
        started.elapsed().as_secs_f64(),
        args.runtime.as_str(),
        args.transport.as_str()
    );
    let _ = out.flush();
    Ok(())
}

#[allow(clippy::too_many_arguments)]
fn story(
    n: &mut Narrator,
    rt: &tokio::runtime::Runtime,
    surface: &DemoSurface,
    args: &DemoArgs,
    base: &str,
    port: u16,
    session: &str,
    token: &str,
) -> Result<(), Failure> {
    let s = n.style;
    n.buf.push_str(&format!(
        "{}\n",
        s.bold("Human+ demo: an agent and a person editing the same sheet")
    ));
    n.line(&format!("relay     {base}  (in-process, loopback)"));
    agent_line(n, args);
    n.line(&format!(
        "the page  session {session}: a small sheet (Item, Qty, Price) a person has open"
    ));

    hostile(n, args, session, token)?;

    let to = Audience::Terminal(surface);
    let agent = trust(n, args, port)?;
    let invitation =
        SurfaceInvitation::new_insecure_loopback(base, session, token, "sheet:demo", "Human+ demo")
            .map_err(|e| step_failed("the invitation", &e))?;
    let id = attach(agent.as_ref(), invitation)?;
    discover(n, agent.as_ref(), &id)?;
    let r1 = read(n, to, agent.as_ref(), &id)?;

    edit(n, to);
    let r2 = surface
        .person()
        .set_cell("B4", "12")
        .map_err(|e| internal("the person's edit")(&e))?;
    n.line(&format!(
        "The person types 12 into B4; the sheet moves to {r2}."
    ));

    stale_write(n, to, agent.as_ref(), &id, "B4", &r1)?;
    change_feed(n, agent.as_ref(), &id)?;
    reread_and_write(n, to, agent.as_ref(), &id)?;

    // 9. What the page saw.
    n.screen(9, "What the page saw");
    let seen = rt.block_on(surface.wait_for(Duration::from_secs(15), |s| !s.activity().is_empty()));
    if !seen {
        return Err(unexpected("the activity reaching the page"));
    }
    for a in surface.activity() {
        n.line(&format!("activity  {}", describe_activity(&a)));
    }
    let calls: Vec<String> = surface
        .calls()
        .iter()
        .map(|c| {
            let what = match &c.outcome {
                CallOutcome::Read => "read".to_owned(),
                CallOutcome::Written => "written".to_owned(),
                CallOutcome::Refused { current } => format!(
                    "refused (pinned {}, sheet at {current})",
                    c.pinned.as_ref().and_then(Value::as_str).unwrap_or("?")
                ),
                CallOutcome::Failed { .. } => "failed".to_owned(),
            };
            format!("{} {what}", c.tool)
        })
        .collect();
    n.line(&format!("calls     {}", calls.join(" | ")));
    n.line(&format!(
        "sheet     B4 = {} (the person's), D4 = {} (the agent's)",
        surface.cell("B4").unwrap_or_default(),
        surface.cell("D4").unwrap_or_default()
    ));
    detach(n, to, agent.as_ref(), &id)
}

pub(crate) fn describe_activity(a: &Value) -> String {
    let text = |v: &Value| v.as_str().map(printable).unwrap_or_default();
    let actor = &a["actor"];
    format!(
        "{} ({}, {}) {} {} [{}]",
        text(&actor["name"]),
        text(&actor["type"]),
        text(&actor["color"]),
        text(&a["action"]),
        text(&a["target"]),
        text(&a["priority"])
    )
}

fn hostile(n: &mut Narrator, args: &DemoArgs, session: &str, token: &str) -> Result<(), Failure> {
    let s = n.style;
    n.screen(1, "A hostile invitation is refused before a byte leaves");
    n.line("The egress policy even declares both hosts; the addresses still decide:");
    let config = ManagerConfig::new(
        EgressPolicy::new(["169.254.169.254", REBINDING_HOST]).allow_unverified_egress(true),
        TrustPolicy::every_tool(NO_PINS),
    )
    .transport(TransportConfig::default().timeout(Duration::from_secs(10)));
    let mut setup = AgentSetup::new(config);
    setup.hosts = vec![(
        REBINDING_HOST.to_owned(),
        vec![IpAddr::V4(Ipv4Addr::new(10, 0, 0, 7))],
    )];
    let agent = build_agent(args.runtime, setup).map_err(|e| step_failed("hostile manager", &e))?;
    let participant = || Participant::new("demo-agent", "Human+ demo agent", "#7c3aed");

    let metadata = SurfaceInvitation::new("https://169.254.169.254", session, token, "s", "x")
        .map_err(|e| step_failed("the metadata invitation", &e))?;
    n.line("https://169.254.169.254  (the cloud metadata address)");
    match agent.attach(OWNER, metadata, participant()) {
        Err(e @ Error::EgressRefused(_)) => n.line(&format!(
            "  refused at attach: {}: {}",
            s.bad(e.code()),
            human_plus_core::redact_text(&e.to_string())
        )),
        Err(e) => return Err(step_failed("the metadata invitation", &e)),
        Ok(_) => return Err(unexpected("the metadata invitation")),
    }

    let rebinding = SurfaceInvitation::new(
        format!("https://{REBINDING_HOST}"),
        session,
        token,
        "s",
        "x",
    )
    .map_err(|e| step_failed("the rebinding invitation", &e))?;
    n.line(&format!(
        "https://{REBINDING_HOST}  (its DNS answer is 10.0.0.7)"
    ));
    let attached = agent
        .attach(OWNER, rebinding, participant())
        .map_err(|e| step_failed("the rebinding invitation", &e))?;
    match agent.tools(OWNER, attached.id()) {
        Err(e @ Error::EgressRefused(_)) => n.line(&format!(
            "  refused after resolving, before connecting: {}: {}",
            s.bad(e.code()),
            human_plus_core::redact_text(&e.to_string())
        )),
        Err(Error::ToolRefused(ToolRefusal::Undeclared)) | Ok(_) => {
            return Err(unexpected("the rebinding invitation"));
        }
        Err(e) => return Err(step_failed("the rebinding invitation", &e)),
    }
    n.line("No connection was made to either address.");
    Ok(())
}
