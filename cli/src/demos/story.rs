//! The demo's story, told once: the steps an agent takes beside a person on
//! the same sheet, each rendered for its audience. In the terminal demo the
//! reader watches a programmatic person edit the in-process demo sheet; in
//! the web demo the reader is the person, at the page.

use std::io::Write as _;
use std::time::Duration;

use human_plus_core::{
    Activity, EgressPolicy, Error, ManagerConfig, NO_PINS, Participant, Priority,
    SurfaceInvitation, TransportConfig, TrustPolicy,
};
use human_plus_relay::DemoSurface;
use serde_json::json;

use crate::args::DemoArgs;
use crate::connecting::agent::{Agent, AgentSetup, build_agent};
use crate::connecting::connect::receive_leg;
use crate::output::exit::{Failure, printable};
use crate::output::style::{Style, indent};
use crate::subcommands::commands::withheld_reason;

/// The owner of the demo's attachments.
pub(crate) const OWNER: &str = "demo-conversation";

/// The tools the demo trusts; the confirmation tool is listed on purpose.
pub(crate) const ALLOW: [&str; 4] = [
    "sheet_get_cell",
    "sheet_set_cell",
    "changes_since",
    "sheet_confirm_edit",
];

/// Whom the story is told to.
#[derive(Clone, Copy)]
pub(crate) enum Audience<'a> {
    /// The terminal demo's reader, who watches a programmatic person edit
    /// this in-process sheet.
    Terminal(&'a DemoSurface),
    /// The web demo's reader, who is the person at the page.
    Web,
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
    let mut f = Failure::from_error(e, &crate::output::exit::Context::default());
    f.message = format!("the demo failed at \"{step}\": {}", f.message);
    f
}

pub(crate) fn unexpected(step: &str) -> Failure {
    Failure::internal(format!(
        "the demo failed at \"{step}\": the outcome was not the one the story needs"
    ))
}

/// The agent line of the story's heading.
pub(crate) fn agent_line(n: &mut Narrator, args: &DemoArgs) {
    n.line(&format!(
        "agent     {} runtime, {} transport",
        args.runtime.as_str(),
        args.transport.as_str()
    ));
}

/// Screen 2: the trust policy, declared before the surface is asked
/// anything; the agent that holds it, for the servers on loopback `ports`
/// (the relay's, or the channel server's and the auth bridge's).
pub(crate) fn trust(
    n: &mut Narrator,
    args: &DemoArgs,
    ports: &[u16],
) -> Result<Box<dyn Agent>, Failure> {
    n.screen(2, "Trust is declared before the surface is asked anything");
    n.line(&format!("--allow {}", ALLOW.join(",")));
    n.line("(the confirmation tool is on the list on purpose)");
    let mut transport = TransportConfig::default().timeout(Duration::from_secs(20));
    if let Some(leg) = args.transport.relay_leg() {
        transport = transport.receive_leg(receive_leg(leg));
    }
    let config = ManagerConfig::new(
        EgressPolicy::new(["127.0.0.1"])
            .allow_ports(ports.iter().copied())
            .allow_unverified_egress(true),
        TrustPolicy::allowing(ALLOW, NO_PINS),
    )
    .transport(transport);
    build_agent(args.runtime, AgentSetup::new(config))
        .map_err(|e| step_failed("building the manager", &e))
}

/// The demo agent attaches through `invitation`; its attachment id.
pub(crate) fn attach(agent: &dyn Agent, invitation: SurfaceInvitation) -> Result<String, Failure> {
    let participant = Participant::new("demo-agent", "Human+ demo agent", "#7c3aed");
    let attachment = agent
        .attach(OWNER, invitation, participant)
        .map_err(|e| step_failed("attach", &e))?;
    Ok(attachment.id().to_owned())
}

/// Screen 3: the tools discovered, admitted and withheld.
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

/// Screen 4: the agent reads B4; the revision it read at.
pub(crate) fn read(
    n: &mut Narrator,
    to: Audience<'_>,
    agent: &dyn Agent,
    id: &str,
) -> Result<String, Failure> {
    n.screen(4, "The agent reads B4");
    if let Audience::Web = to {
        agent
            .announce(OWNER, id, &Activity::new("reading").target("B4"))
            .map_err(|e| step_failed("announce", &e))?;
    }
    let read = agent
        .call(OWNER, id, "sheet_get_cell", json!({"address": "B4"}))
        .map_err(|e| step_failed("the first read", &e))?;
    let r1 = read
        .revision
        .as_ref()
        .map(|r| r.token().to_owned())
        .ok_or_else(|| unexpected("the first read"))?;
    let what = match to {
        Audience::Terminal(surface) => {
            let b4 = surface.cell("B4").unwrap_or_default();
            format!("B4 = {b4} at revision {r1}")
        }
        Audience::Web => format!("B4 read at revision {r1}"),
    };
    n.line(&format!(
        "{what}. The model sees the result framed as untrusted data:"
    ));
    n.line(&indent(&read.text, 2));
    Ok(r1)
}

/// Screen 5's title: the person edits the cell the agent read.
pub(crate) fn edit(n: &mut Narrator, to: Audience<'_>) {
    n.screen(
        5,
        match to {
            Audience::Terminal(_) => "The person edits the same cell",
            Audience::Web => "Your turn: edit the same cell in the page",
        },
    );
}

/// Screen 6: the agent writes `cell` pinned to the revision `r1` it read,
/// and is refused.
pub(crate) fn stale_write(
    n: &mut Narrator,
    to: Audience<'_>,
    agent: &dyn Agent,
    id: &str,
    cell: &str,
    r1: &str,
) -> Result<(), Failure> {
    n.screen(
        6,
        &format!(
            "The agent writes {} = 8, pinned to {r1}: refused",
            printable(cell)
        ),
    );
    match agent.call(
        OWNER,
        id,
        "sheet_set_cell",
        json!({"address": cell, "value": "8"}),
    ) {
        Err(Error::SurfaceChangedUnderYou(refusal)) => {
            let outcome = match to {
                Audience::Terminal(surface) => {
                    let still = surface.cell("B4").unwrap_or_default();
                    format!("nothing was written (B4 is still {still}).")
                }
                Audience::Web => {
                    "nothing was written; your value stands. The page lists the refused write."
                        .to_owned()
                }
            };
            n.line(&format!(
                "{}: {outcome} What the model reads:",
                n.style.bad("surface_changed_under_you")
            ));
            n.line(&indent(&refusal.to_string(), 2));
        }
        Err(e) => return Err(step_failed("the stale write", &e)),
        Ok(_) => return Err(unexpected("the stale write")),
    }
    Ok(())
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

/// Screen 8: the agent re-reads, then writes D4 = B4 x C4 where the person
/// is not; the total written.
pub(crate) fn reread_and_write(
    n: &mut Narrator,
    to: Audience<'_>,
    agent: &dyn Agent,
    id: &str,
) -> Result<String, Failure> {
    n.screen(8, "Re-read, then write where the person is not");
    let reread = |address: &str| {
        agent
            .call(OWNER, id, "sheet_get_cell", json!({"address": address}))
            .map_err(|e| step_failed("the re-read", &e))
    };
    let (total, how) = match to {
        Audience::Terminal(surface) => {
            let r_now = reread("B4")?
                .revision
                .as_ref()
                .map(|r| r.token().to_owned())
                .unwrap_or_default();
            let qty = surface.cell("B4").unwrap_or_default();
            n.line(&format!(
                "B4 = {qty} at revision {r_now}: the person's value stands."
            ));
            let price: f64 = surface
                .cell("C4")
                .and_then(|p| p.parse().ok())
                .unwrap_or(0.0);
            let total = qty.parse::<f64>().unwrap_or(0.0) * price;
            (format!("{total:.2}"), format!("{qty} x {price:.2}"))
        }
        Audience::Web => {
            let qty = reread("B4")?;
            let price = reread("C4")?;
            // The framed text's one inner line is the cell's value.
            let number = |r: &human_plus_core::CallResult| {
                let lines: Vec<&str> = r.text.lines().collect();
                (lines.len() == 4)
                    .then(|| lines[2].trim().parse::<f64>().ok())
                    .flatten()
                    .filter(|v| v.is_finite())
            };
            let total = match (number(&qty), number(&price)) {
                (Some(q), Some(p)) => format!("{:.2}", q * p),
                _ => "n/a".to_owned(),
            };
            (total, "B4 x C4".to_owned())
        }
    };
    agent
        .announce(
            OWNER,
            id,
            &Activity::new("editing")
                .target("D4")
                .priority(Priority::Attention),
        )
        .map_err(|e| step_failed("announce", &e))?;
    n.line(match to {
        Audience::Terminal(_) => "The agent announces: editing D4 (attention).",
        Audience::Web => {
            "The agent announces: editing D4 (attention). The page outlines D4 in its colour."
        }
    });
    let written = agent
        .call(
            OWNER,
            id,
            "sheet_set_cell",
            json!({"address": "D4", "value": total}),
        )
        .map_err(|e| step_failed("the write", &e))?;
    n.line(&format!(
        "D4 = {total} ({how}), pinned to {}: {}, the sheet is at {}.",
        written
            .pinned
            .as_ref()
            .map(|r| r.token())
            .unwrap_or("nothing"),
        n.style.good("applied"),
        written.revision.as_ref().map(|r| r.token()).unwrap_or("?")
    ));
    if let Audience::Web = to {
        agent
            .announce(
                OWNER,
                id,
                &Activity::new("done").priority(Priority::Background),
            )
            .map_err(|e| step_failed("announce", &e))?;
    }
    Ok(total)
}

/// The story's last step: the agent detaches, the person's session stays.
pub(crate) fn detach(
    n: &mut Narrator,
    to: Audience<'_>,
    agent: &dyn Agent,
    id: &str,
) -> Result<(), Failure> {
    agent
        .detach(OWNER, id)
        .map_err(|e| step_failed("detach", &e))?;
    n.line(match to {
        Audience::Terminal(_) => "The agent detaches; the person's session stays open.",
        Audience::Web => "The agent detaches; your session stays open.",
    });
    Ok(())
}
