//! `human-plus demo`: the whole story in a few screens, on a relay and a
//! demo sheet started in-process on loopback (or, with `--transport
//! reverb`, a Pusher-protocol channel server of the project's own, the host
//! app's auth bridge and the sheet on a private channel). Nothing to set
//! up.

use std::io::Write as _;
use std::net::{IpAddr, Ipv4Addr};
use std::time::{Duration, Instant};

use human_plus_core::{
    EgressPolicy, Error, ManagerConfig, NO_PINS, Participant, ReverbChannel, SurfaceInvitation,
    ToolRefusal, TransportConfig, TrustPolicy, default_reverb_channel,
};
use human_plus_relay::{
    AuthBridge, AuthBridgeHandle, CallOutcome, DemoSurface, PusherHandle, PusherServer,
    RelayHandle, RelayServer,
};
use serde_json::Value;

use crate::args::{DemoArgs, DemoTransport};
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

/// Where the demo's page is, and how the agent reaches it.
struct Stage {
    /// The heading's lines naming the servers.
    heading: Vec<String>,
    /// The loopback ports the agent's egress declares.
    ports: Vec<u16>,
    /// The agent's invitation.
    invitation: SurfaceInvitation,
}

/// The servers a demo started, stopped at its end.
enum Servers {
    Relay(RelayHandle),
    Channel(PusherHandle, AuthBridgeHandle),
}

impl Servers {
    async fn shutdown(self) {
        match self {
            Servers::Relay(relay) => relay.shutdown().await,
            Servers::Channel(server, bridge) => {
                server.shutdown().await;
                bridge.shutdown().await;
            }
        }
    }
}

/// The channel server's app key in the demo over a channel.
const DEMO_APP_KEY: &str = "human-plus-demo";

/// Runs the demo, printing the story on stdout: over the in-process relay,
/// or with `--transport reverb` over the project's own Pusher-protocol
/// channel server, the host app's auth bridge and the page on a private
/// channel, all in-process on loopback.
///
/// # Errors
/// The failure to report (exit 1 when the in-process servers cannot start).
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
    let (servers, surface, stage) = if args.transport == DemoTransport::Reverb {
        start_channel(&rt, &session, &token)?
    } else {
        let relay = rt
            .block_on(RelayServer::builder().start())
            .map_err(|e| internal("the in-process relay could not start")(&e))?;
        let surface = rt
            .block_on(DemoSurface::builder(relay.base_url(), &session, &token).start())
            .map_err(|e| internal("the demo sheet could not open")(&e))?;
        let invitation = SurfaceInvitation::new_insecure_loopback(
            relay.base_url(),
            &session,
            &token,
            "sheet:demo",
            "Human+ demo",
        )
        .map_err(|e| step_failed("the invitation", &e))?;
        let stage = Stage {
            heading: vec![format!(
                "relay     {}  (in-process, loopback)",
                relay.base_url()
            )],
            ports: vec![relay.addr().port()],
            invitation,
        };
        (Servers::Relay(relay), surface, stage)
    };
    let mut n = Narrator {
        style: Style::detect(),
        buf: String::new(),
    };
    let result = story(&mut n, &rt, &surface, args, stage, &session, &token);
    n.flush();
    rt.block_on(async {
        surface.shutdown().await;
        servers.shutdown().await;
    });
    result?;
    let mut out = std::io::stdout().lock();
    let _ = writeln!(
        out,
        "\nDone in {:.1} s ({} runtime, {} transport). Next: {}",
        started.elapsed().as_secs_f64(),
        args.runtime.as_str(),
        args.transport.as_str(),
        if args.transport == DemoTransport::Reverb {
            "`human-plus join` with a page's Reverb link (reverb=…&auth=…) and `human-plus mcp` put your own agent in this seat."
        } else {
            "`human-plus relay`, `human-plus surface` and `human-plus mcp` put your own agent in this seat."
        }
    );
    let _ = out.flush();
    Ok(())
}

/// The project's own Pusher-protocol channel server, the host app's auth
/// bridge (granting the page's token and the agent's, each to the one
/// channel) and the demo sheet on the private channel
/// `private-agent.session.<session>`, as seed 004's page joins it.
fn start_channel(
    rt: &tokio::runtime::Runtime,
    session: &str,
    token: &str,
) -> Result<(Servers, DemoSurface, Stage), Failure> {
    let secret = random_hex(16);
    let page_token = format!("hp_{}", random_hex(16));
    let channel = default_reverb_channel(session);
    let server = rt
        .block_on(PusherServer::builder(DEMO_APP_KEY, &secret).start())
        .map_err(|e| internal("the in-process channel server could not start")(&e))?;
    let bridge = rt
        .block_on(
            AuthBridge::builder(DEMO_APP_KEY, &secret)
                .grant(token, &channel)
                .grant(&page_token, &channel)
                .start(),
        )
        .map_err(|e| internal("the in-process auth bridge could not start")(&e))?;
    let (ws_url, auth_url) = (server.ws_url(), bridge.url());
    let surface = rt
        .block_on(DemoSurface::channel_builder(&ws_url, &auth_url, session, &page_token).start())
        .map_err(|e| internal("the demo sheet could not join the channel")(&e))?;
    let ports = vec![server.local_addr().port(), bridge.local_addr().port()];
    let reverb = ReverbChannel::new(&ws_url, &auth_url, &channel, true)
        .map_err(|e| internal("the demo's channel")(&e))?;
    let invitation =
        SurfaceInvitation::new_reverb(reverb, session, token, "sheet:demo", "Human+ demo")
            .map_err(|e| step_failed("the invitation", &e))?;
    let stage = Stage {
        heading: vec![
            format!(
                "channel   {ws_url}  (a Pusher-protocol server, as Laravel Reverb; in-process, loopback)"
            ),
            format!(
                "auth      {auth_url}  (the host app's auth bridge; the token goes only there)"
            ),
            format!("          {channel}: the page and the agent whisper on it"),
        ],
        ports,
        invitation,
    };
    Ok((Servers::Channel(server, bridge), surface, stage))
}

fn story(
    n: &mut Narrator,
    rt: &tokio::runtime::Runtime,
    surface: &DemoSurface,
    args: &DemoArgs,
    stage: Stage,
    session: &str,
    token: &str,
) -> Result<(), Failure> {
    let s = n.style;
    n.buf.push_str(&format!(
        "{}\n",
        s.bold("Human+ demo: an agent and a person editing the same sheet")
    ));
    for line in &stage.heading {
        n.line(line);
    }
    agent_line(n, args);
    n.line(&format!(
        "the page  session {session}: a small sheet (Item, Qty, Price) a person has open"
    ));

    hostile(n, args, session, token)?;

    let to = Audience::Terminal(surface);
    let agent = trust(n, args, &stage.ports)?;
    let id = attach(agent.as_ref(), stage.invitation)?;
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

    let over_channel = args.transport == DemoTransport::Reverb;
    // Over a channel both hosts (the channel server's and the auth
    // bridge's) go through the same rules.
    let invitation = |ws_host: &str| {
        if over_channel {
            let channel = ReverbChannel::new(
                format!("wss://{ws_host}/app/{DEMO_APP_KEY}"),
                format!("https://{REBINDING_HOST}/broadcasting/auth"),
                default_reverb_channel(session),
                false,
            )
            .map_err(|e| internal("the hostile channel")(&e))?;
            SurfaceInvitation::new_reverb(channel, session, token, "s", "x")
                .map_err(|e| step_failed("the hostile invitation", &e))
        } else {
            SurfaceInvitation::new(format!("https://{ws_host}"), session, token, "s", "x")
                .map_err(|e| step_failed("the hostile invitation", &e))
        }
    };
    let shown = |ws_host: &str| {
        if over_channel {
            format!(
                "wss://{ws_host}/app/{DEMO_APP_KEY}, auth https://{REBINDING_HOST}/broadcasting/auth"
            )
        } else {
            format!("https://{ws_host}")
        }
    };
    let metadata = invitation("169.254.169.254")?;
    n.line(&format!(
        "{}  (the cloud metadata address)",
        shown("169.254.169.254")
    ));
    match agent.attach(OWNER, metadata, participant()) {
        Err(e @ Error::EgressRefused(_)) => n.line(&format!(
            "  refused at attach: {}: {}",
            s.bad(e.code()),
            human_plus_core::redact_text(&e.to_string())
        )),
        Err(e) => return Err(step_failed("the metadata invitation", &e)),
        Ok(_) => return Err(unexpected("the metadata invitation")),
    }

    let rebinding = invitation(REBINDING_HOST)?;
    n.line(&format!(
        "{}  (its DNS answer is 10.0.0.7)",
        shown(REBINDING_HOST)
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
