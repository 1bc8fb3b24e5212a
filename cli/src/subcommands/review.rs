//! `human-plus review NAME`: what changed on the surface since the person
//! reviewed its tools, and, on their say-so, the profile's trust, pins and
//! reviewed definitions updated together.
//!
//! 1. The profile is read, and the surface listed through it with every
//!    tool visible (reserved confirmation tools still withheld), so that
//!    a changed or new tool can be shown.
//! 2. Each tool is compared with what the person reviewed (the core's
//!    [`review_tools`]): unchanged, changed (the description as a line
//!    diff, the input schema as the paths added, removed or changed), new
//!    on the surface, gone, or not comparable (trusted by name only). The
//!    surface's words are escaped as `join` escapes them.
//! 3. The person accepts what they want (asked at a terminal; without one
//!    `--accept NAME,...` or `--yes`), and the allowlist, the pins and the
//!    reviewed definitions are written together under the profile's lock.
//!    A bridge running under the name picks the new profile up without a
//!    restart.

use std::collections::{BTreeMap, BTreeSet};
use std::fmt::Write as _;
use std::io::IsTerminal as _;

use human_plus_core::{
    Baseline, NO_PINS, Participant, ReviewStatus, ToolDefinition, TrustPolicy, review_tools,
    shown_tool_name,
};
use serde_json::json;

use crate::args::ReviewArgs;
use crate::connecting::connect::{self, connect_resolved};
use crate::output::console::{Asker, say};
use crate::output::exit::Failure;
use crate::profiles::profile::{self, Loaded, ProfileLock};

/// What the profile says of its tools, to notice a change made while the
/// person was reviewing.
fn trust_state(p: &Loaded) -> (Vec<String>, Option<BTreeMap<String, String>>, Vec<String>) {
    (
        p.profile.allow.clone(),
        p.pins.clone(),
        p.reviewed
            .iter()
            .flatten()
            .map(ToolDefinition::digest)
            .collect(),
    )
}

/// `human-plus review NAME`; the text to print last.
///
/// # Errors
/// The failure to report: the profile cannot be read, the surface cannot
/// be listed, an `--accept` names a tool that did not change, the profile
/// changed during the review.
pub fn run(args: &ReviewArgs) -> Result<String, Failure> {
    let name = &args.name;
    let before = profile::load(name)?;
    let connect_args = connect::profile_args(
        name,
        args.transport.clone(),
        ("human-plus-review", "Human+ review"),
    );
    let mut resolved = connect::resolve(&connect_args, None)?;
    // Every tool is listed, so that what changed or is new can be shown;
    // the profile's own trust decides nothing here.
    resolved.trust = TrustPolicy::every_tool(NO_PINS);
    let participant = Participant::new(
        &connect_args.participant_id,
        &connect_args.participant_name,
        &connect_args.participant_color,
    );
    let connection =
        connect_resolved(resolved, &connect_args.transport, participant, false, false)?;
    let discovery = connection
        .agent
        .tools(&connection.owner, connection.id())
        .map_err(|e| connection.fail(&e))?;
    let pins = before.pins.clone().unwrap_or_default();
    let reviewed = before.reviewed.clone().unwrap_or_default();
    let baseline = Baseline::from_profile(&before.profile.allow, &pins, &reviewed);
    let review = review_tools(&baseline, &discovery.tools);

    let candidates: Vec<&human_plus_core::ToolReview> = review
        .tools
        .iter()
        .filter(|t| {
            matches!(
                t.status,
                ReviewStatus::Changed(_) | ReviewStatus::New | ReviewStatus::NotComparable
            ) && t.listed.is_some()
        })
        .collect();
    let candidate_names: BTreeSet<&str> = candidates.iter().map(|t| t.name.as_str()).collect();
    for wanted in &args.accept {
        if !candidate_names.contains(wanted.as_str()) {
            return Err(Failure::usage(format!(
                "--accept {}: that tool is not changed, new or unreviewed on the surface",
                shown_tool_name(wanted)
            ))
            .with_hint(format!("`human-plus review {name}` shows what changed")));
        }
    }

    if args.json {
        say(&format!("{}\n", review.to_json()));
    } else {
        say(&format!(
            "Profile {name}: the surface's tools, against what you reviewed.\n{}",
            review.text(&discovery.claims)
        ));
    }

    let interactive = std::io::stdin().is_terminal() && std::io::stderr().is_terminal();
    let asker = Asker { interactive };
    let mut accepted: Vec<&human_plus_core::ToolReview> = Vec::new();
    for t in &candidates {
        let flag = args.yes || args.accept.contains(&t.name);
        let shown = shown_tool_name(&t.name);
        let question = match t.status {
            ReviewStatus::Changed(_) => format!("Accept the new definition of {shown}?"),
            ReviewStatus::New => format!("Trust the new tool {shown}?"),
            _ => format!("Keep trusting {shown}, with the definition shown?"),
        };
        if asker.confirm(&question, false, flag)? {
            accepted.push(t);
        }
    }
    if accepted.is_empty() {
        let mut out = String::new();
        if candidates.is_empty() {
            let _ = writeln!(out, "\nNothing to accept: the profile is unchanged.");
        } else {
            let _ = writeln!(
                out,
                "\nNothing was accepted; the profile is unchanged. A changed tool stays withheld by a running bridge until you accept it{}.",
                if interactive {
                    ""
                } else {
                    " (without a terminal: --accept NAME[,NAME...] or --yes)"
                }
            );
        }
        return Ok(out);
    }

    // The profile is written under its lock held exclusively, and only if
    // nobody changed its trust while the person was reviewing.
    let lock = ProfileLock::take(&before.dir, true)?;
    let now = profile::load_holding(name, &lock)?;
    if trust_state(&now) != trust_state(&before) {
        return Err(Failure::usage(format!(
            "profile {name} changed while you reviewed it; nothing was written"
        ))
        .with_hint(format!("run `human-plus review {name}` again")));
    }
    let accepted_names: BTreeSet<&str> = accepted.iter().map(|t| t.name.as_str()).collect();
    let mut doc = now.profile.clone();
    for t in &accepted {
        if !doc.allow.contains(&t.name) {
            doc.allow.push(t.name.clone());
        }
    }
    // Pins follow the profile's choice: a pinned profile pins what was
    // accepted, an unpinned one stays unpinned.
    let pins = now.pins.clone().map(|mut pins| {
        for t in &accepted {
            if let Some(d) = &t.listed {
                pins.insert(t.name.clone(), d.digest());
            }
        }
        pins
    });
    // The reviewed definitions: what was accepted, what was unchanged
    // (listed as reviewed), and what was kept for the others.
    let kept = now.reviewed.clone().unwrap_or_default();
    let mut reviewed: Vec<ToolDefinition> = Vec::new();
    for t in &review.tools {
        if !doc.allow.contains(&t.name) {
            continue;
        }
        let listed = t.listed.clone();
        let definition = if accepted_names.contains(t.name.as_str())
            || matches!(t.status, ReviewStatus::Unchanged)
        {
            listed
        } else {
            kept.iter().find(|d| d.name() == t.name).cloned()
        };
        if let Some(d) = definition {
            reviewed.push(d);
        }
    }
    profile::write_trust(&now.dir, &doc, pins.as_ref(), Some(&reviewed))?;
    drop(lock);

    let mut out = String::new();
    let _ = writeln!(
        out,
        "\nUpdated profile {name}: {}.",
        accepted
            .iter()
            .map(|t| format!(
                "{} ({})",
                shown_tool_name(&t.name),
                match t.status {
                    ReviewStatus::Changed(_) => "its new definition accepted",
                    ReviewStatus::New => "newly trusted",
                    _ => "its definition recorded",
                }
            ))
            .collect::<Vec<_>>()
            .join(", ")
    );
    let left: Vec<String> = candidates
        .iter()
        .filter(|t| !accepted_names.contains(t.name.as_str()))
        .map(|t| shown_tool_name(&t.name))
        .collect();
    if !left.is_empty() {
        let _ = writeln!(out, "Not accepted, and withheld: {}.", left.join(", "));
    }
    let _ = writeln!(
        out,
        "A bridge running under {name} picks this up without a restart."
    );
    if args.json {
        out = format!(
            "{}\n",
            json!({"accepted": accepted.iter().map(|t| t.name.clone()).collect::<Vec<_>>()})
        );
    }
    Ok(out)
}
