//! `human-plus demo`: the whole story in a few screens, on a relay and a
//! demo sheet started in-process on loopback. Nothing to set up.

use std::io::Write as _;
use std::net::{IpAddr, Ipv4Addr};
use std::time::{Duration, Instant};

use human_plus_core::{
    Activity, EgressPolicy, Error, ManagerConfig, NO_PINS, Participant, Priority,
    SurfaceInvitation, ToolRefusal, TransportConfig, TrustPolicy, hex,
};
use human_plus_relay::{CallOutcome, DemoSurface, RelayServer};
use human_plus_runtime::OsEntropy;
use serde_json::{Value, json};

use crate::agent::{Agent, AgentSetup, build_agent};
use crate::args::DemoArgs;
use crate::commands::withheld_reason;
use crate::connect::receive_leg;
use crate::exit::{Failure, printable};
use crate::style::{Style, indent};

/// The owner of the demo's attachments.
pub(crate) const OWNER: &str = "demo-conversation";

/// The tools the demo trusts; the confirmation tool is listed on purpose.
pub(crate) const ALLOW: [&str; 4] = [
    "sheet_get_cell",
    "sheet_set_cell",
    "changes_since",
    "sheet_confirm_edit",
];

/// The host name the demo's test resolver maps to a private address.
const REBINDING_HOST: &str = "sheets.corp.example";

/// A fresh random hex string of `bytes` bytes.
#[must_use]
pub fn random_hex(bytes: usize) -> String {
    let mut buf = vec![0u8; bytes];
    human_plus_core::Entropy::fill_bytes(&mut OsEntropy, &mut buf);
    hex(&buf)
}

pub(crate) struct Narrator {
    pub(crate) style: Style,
    pub(crate) buf: String,
}

impl Narrator {
    pub(crate) fn screen(&mut self, n: u32, title: &str) {
        self.flush();
        self.buf.push_str(&format!(
            "\n{}\n",
            self.style.bold(&format!("{n}  {title}"))
        ));
    }

    pub(crate) fn line(&mut self, text: &str) {
        self.buf.push_str(&indent(text, 3));
        self.buf.push('\n');
    }

    pub(crate) fn flush(&mut self) {
        let mut out = std::io::stdout().lock();
        let _ = out.write_all(self.buf.as_bytes());
        let _ = out.flush();
        self.buf.clear();
    }
}

pub(crate) fn internal(what: &str) -> impl Fn(&dyn std::fmt::Display) -> Failure + '_ {
    move |e| Failure::internal(format!("{what}: {e}"))
}

pub(crate) fn step_failed(step: &str, e: &Error) -> Failure {
    let mut f = Failure::from_error(e, &crate::exit::Context::default());
    f.message = format!("the demo failed at \"{step}\": {}", f.message);
    f
}

pub(crate) fn unexpected(step: &str) -> Failure {
    Failure::internal(format!(
        "the demo failed at \"{step}\": the outcome was not the one the story needs"
    ))
}

/// Runs the demo, printing the story on stdout.
///
/// # Errors
/// The failure to report (exit 1 when the in-process relay cannot start).
pub fn run(args: &DemoArgs) -> Result<(), Failure> {
    if args.web {
        return crate::web_demo::run(args);
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
    n.line(&format!(
        "agent     {} runtime, {} transport",
        args.runtime.as_str(),
        args.transport.as_str()
    ));
    n.line(&format!(
        "the page  session {session}: a small sheet (Item, Qty, Price) a person has open"
    ));

    hostile(n, args, session, token)?;

    // 2. Trust.
    n.screen(2, "Trust is declared before the surface is asked anything");
    n.line(&format!("--allow {}", ALLOW.join(",")));
    n.line("(the confirmation tool is on the list on purpose)");

    let transport = TransportConfig::default()
        .receive_leg(receive_leg(args.transport))
        .timeout(Duration::from_secs(20));
    let config = ManagerConfig::new(
        EgressPolicy::new(["127.0.0.1"])
            .allow_ports([port])
            .allow_unverified_egress(true),
        TrustPolicy::allowing(ALLOW, NO_PINS),
    )
    .transport(transport);
    let agent = build_agent(args.runtime, AgentSetup::new(config))
        .map_err(|e| step_failed("building the manager", &e))?;
    let invitation =
        SurfaceInvitation::new_insecure_loopback(base, session, token, "sheet:demo", "Human+ demo")
            .map_err(|e| step_failed("the invitation", &e))?;
    let participant = Participant::new("demo-agent", "Human+ demo agent", "#7c3aed");
    let attachment = agent
        .attach(OWNER, invitation, participant)
        .map_err(|e| step_failed("attach", &e))?;
    let id = attachment.id().to_owned();

    discover(n, agent.as_ref(), &id)?;

    // 4. A read with its revision.
    n.screen(4, "The agent reads B4");
    let read = agent
        .call(OWNER, &id, "sheet_get_cell", json!({"address": "B4"}))
        .map_err(|e| step_failed("the first read", &e))?;
    let r1 = read
        .revision
        .as_ref()
        .map(|r| r.token().to_owned())
        .ok_or_else(|| unexpected("the first read"))?;
    let b4 = surface.cell("B4").unwrap_or_default();
    n.line(&format!(
        "B4 = {b4} at revision {r1}. The model sees the result framed as untrusted data:"
    ));
    n.line(&indent(&read.text, 2));

    // 5. The person edits.
    n.screen(5, "The person edits the same cell");
    let r2 = surface
        .person()
        .set_cell("B4", "12")
        .map_err(|e| internal("the person's edit")(&e))?;
    n.line(&format!(
        "The person types 12 into B4; the sheet moves to {r2}."
    ));

    // 6. The stale write.
    n.screen(
        6,
        &format!("The agent writes B4 = 8, pinned to {r1}: refused"),
    );
    match agent.call(
        OWNER,
        &id,
        "sheet_set_cell",
        json!({"address": "B4", "value": "8"}),
    ) {
        Err(Error::SurfaceChangedUnderYou(refusal)) => {
            let still = surface.cell("B4").unwrap_or_default();
            n.line(&format!(
                "{}: nothing was written (B4 is still {still}). What the model reads:",
                s.bad("surface_changed_under_you")
            ));
            n.line(&indent(&refusal.to_string(), 2));
        }
        Err(e) => return Err(step_failed("the stale write", &e)),
        Ok(_) => return Err(unexpected("the stale write")),
    }

    change_feed(n, agent.as_ref(), &id)?;

    // 8. Re-read and a successful write.
    n.screen(8, "Re-read, then write where the person is not");
    let reread = agent
        .call(OWNER, &id, "sheet_get_cell", json!({"address": "B4"}))
        .map_err(|e| step_failed("the re-read", &e))?;
    let r_now = reread
        .revision
        .as_ref()
        .map(|r| r.token().to_owned())
        .unwrap_or_default();
    let qty = surface.cell("B4").unwrap_or_default();
    n.line(&format!(
        "B4 = {qty} at revision {r_now}: the person's value stands."
    ));
    agent
        .announce(
            OWNER,
            &id,
            &Activity::new("editing")
                .target("D4")
                .priority(Priority::Attention),
        )
        .map_err(|e| step_failed("announce", &e))?;
    n.line("The agent announces: editing D4 (attention).");
    let price: f64 = surface
        .cell("C4")
        .and_then(|p| p.parse().ok())
        .unwrap_or(0.0);
    let total = qty.parse::<f64>().unwrap_or(0.0) * price;
    let total = format!("{total:.2}");
    let written = agent
        .call(
            OWNER,
            &id,
            "sheet_set_cell",
            json!({"address": "D4", "value": total}),
        )
        .map_err(|e| step_failed("the write", &e))?;
    n.line(&format!(
        "D4 = {total} ({qty} x {price:.2}), pinned to {}: {}, the sheet is at {}.",
        written
            .pinned
            .as_ref()
            .map(|r| r.token())
            .unwrap_or("nothing"),
        s.good("applied"),
        written.revision.as_ref().map(|r| r.token()).unwrap_or("?")
    ));

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
    agent
        .detach(OWNER, &id)
        .map_err(|e| step_failed("detach", &e))?;
    n.line("The agent detaches; the person's session stays open.");
    Ok(())
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

/// Screen 7: the change feed, and whom to defer to.
pub(crate) fn change_feed(n: &mut Narrator, agent: &dyn Agent, id: &str) -> Result<(), Failure> {
    n.screen(7, "The change feed: defer to the person");
    let changes = agent
        .changes_since(OWNER, id)
        .map_err(|e| step_failed("the change feed", &e))?;
    n.line(&changes.describe());
    let defer = changes.defer_to();
    if defer.is_empty() {
        return Err(unexpected("the change feed"));
    }
    for c in defer {
        n.line(&format!(
            "{}  {} by {}: re-read it, do not correct it",
            printable(c.handle()),
            c.kind().as_str(),
            c.actor().as_str()
        ));
    }
    Ok(())
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

pub(crate) fn discover(n: &mut Narrator, agent: &dyn Agent, id: &str) -> Result<(), Failure> {
    n.screen(3, "Tools discovered from the surface's own tools/list");
    let d = agent
        .tools(OWNER, id)
        .map_err(|e| step_failed("discovery", &e))?;
    let width = d
        .tools
        .iter()
        .map(|t| t.name().len())
        .chain(d.withheld.iter().map(|w| w.name.len()))
        .max()
        .unwrap_or(0);
    for t in &d.tools {
        n.line(&format!(
            "admitted  {:width$}  {}",
            printable(t.name()),
            t.digest()
        ));
    }
    let mut not_allowed = Vec::new();
    for w in &d.withheld {
        let (code, reason) = withheld_reason(w);
        if code == "not_allowed" {
            not_allowed.push(printable(&w.name));
        } else {
            n.line(&format!(
                "{}  {:width$}  {reason}",
                n.style.bad("withheld"),
                printable(&w.name)
            ));
        }
    }
    if !not_allowed.is_empty() {
        n.line(&format!(
            "withheld  {}: not in the allowlist",
            not_allowed.join(", ")
        ));
    }
    if !d.withheld.iter().any(|w| w.name == "sheet_confirm_edit") {
        return Err(unexpected("discovery"));
    }
    if let Some(t) = d.tools.iter().find(|t| t.name() == "sheet_set_cell") {
        n.line(&format!(
            "Pin a reviewed definition so a changed tool stops the agent: --pin sheet_set_cell={}",
            t.digest()
        ));
    }
    Ok(())
}
