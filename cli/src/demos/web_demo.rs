//! `human-plus demo --web`: the story told to a person at the web page in a
//! real browser (the page itself is [`crate::web`]; `surface --web`, which
//! serves it alone, is re-exported here from where it lives now).

use std::io::BufRead as _;
use std::net::{IpAddr, Ipv4Addr, SocketAddr};
use std::time::{Duration, Instant};

use human_plus_core::{Activity, Priority, SurfaceInvitation};
use human_plus_relay::{CorsPolicy, RelayServer};

use crate::args::DemoArgs;
use crate::demos::story::{
    Audience, Narrator, OWNER, agent_line, attach, change_feed, detach, discover, edit, internal,
    read, reread_and_write, stale_write, step_failed, trust, unexpected,
};
use crate::output::console::say;
use crate::output::exit::{Failure, printable};
use crate::output::style::Style;
use crate::page::rt::runtime;
use crate::page::web::{PageConfig, PageRelayAuth, PageServer};
pub use crate::page::web_surface::{WEB_SURFACE_ID, surface};
use crate::page::web_surface::{bind_failed, page_transport};

/// How long `demo --web` waits for a browser, and then for the person.
const WAIT_FOR_PERSON: Duration = Duration::from_secs(15 * 60);
/// How long the relay stays up after the session ends, so the page hears
/// the 410 (an event stream reconnects after 2 s).
const SESSION_END_GRACE: Duration = Duration::from_secs(5);

/// Waits for `future` on `rt`, up to `limit`, or until Ctrl-C.
fn wait_on<T>(
    rt: &tokio::runtime::Runtime,
    limit: Duration,
    future: impl std::future::Future<Output = Option<T>>,
) -> Result<T, Failure> {
    rt.block_on(async {
        tokio::select! {
            got = tokio::time::timeout(limit, future) => match got {
                Ok(Some(v)) => Ok(v),
                Ok(None) => Err(Failure::internal("the page server stopped")),
                Err(_) => Err(Failure {
                    exit: crate::output::exit::TIMEOUT,
                    code: "timeout".into(),
                    message: format!("nobody answered in the page within {} minutes", limit.as_secs() / 60),
                    hint: None,
                    detail: None,
                }),
            },
            _ = tokio::signal::ctrl_c() => Err(Failure::internal("interrupted")),
        }
    })
}

/// `human-plus demo --web`: the story against the web sheet in the
/// reader's browser; the person's edit is the reader's own.
///
/// # Errors
/// As [`crate::demo::run`], plus a timeout when no browser opens the page
/// (or nobody types) within 15 minutes.
pub fn run(args: &DemoArgs) -> Result<(), Failure> {
    let Some(leg) = args.transport.relay_leg() else {
        return Err(Failure::usage(
            "the web demo runs over the HTTP relay only (--transport sse or poll)",
        )
        .with_hint(
            "`human-plus demo --transport reverb` plays the story over a channel in the terminal",
        ));
    };
    let started = Instant::now();
    let rt = runtime()?;
    let addr = SocketAddr::new(IpAddr::V4(Ipv4Addr::LOCALHOST), args.port);
    let listener = rt
        .block_on(PageServer::bind(addr))
        .map_err(bind_failed(args.port))?;
    let origin = listener.origin();
    let cors = CorsPolicy::parse(&origin).map_err(|e| internal("the relay's CORS list")(&e))?;
    let relay = rt
        .block_on(RelayServer::builder().cors(cors).start())
        .map_err(|e| internal("the in-process relay could not start")(&e))?;
    let base = relay.base_url().to_owned();
    let mut config = PageConfig::new(&base, WEB_SURFACE_ID);
    config.transport = page_transport(leg);
    // Its own relay reads the token from a header: no fetch URL holds it.
    config.relay_auth = PageRelayAuth::Bearer;
    config.demo = true;
    let page = rt.block_on(async { listener.start(config) });
    let mut n = Narrator {
        style: Style::detect(),
        buf: String::new(),
    };
    let result = story(&mut n, &rt, &page, &relay, args);
    n.flush();
    rt.block_on(async {
        page.shutdown().await;
        relay.shutdown().await;
    });
    result?;
    say(&format!(
        "\nDone in {:.1} s ({} runtime, {} transport). Next: `human-plus relay`, `human-plus surface --web --relay URL` and `human-plus mcp` put your own agent beside you.\n",
        started.elapsed().as_secs_f64(),
        args.runtime.as_str(),
        args.transport.as_str()
    ));
    Ok(())
}

fn story(
    n: &mut Narrator,
    rt: &tokio::runtime::Runtime,
    page: &PageServer,
    relay: &human_plus_relay::RelayHandle,
    args: &DemoArgs,
) -> Result<(), Failure> {
    let s = n.style;
    let base = relay.base_url();
    n.buf.push_str(&format!(
        "{}\n",
        s.bold("Human+ demo in your browser: an agent beside you on the same sheet")
    ));
    n.line(&format!(
        "relay     {base}  (in-process, loopback; CORS allows {} only)",
        page.origin()
    ));
    agent_line(n, args);
    n.line(&format!("the page  {}", page.url()));
    n.buf.push('\n');
    n.buf.push_str(&format!(
        "Open {} in a browser. Waiting for the page to register its session...\n",
        s.bold(&page.url())
    ));
    n.flush();
    let invitation = wait_on(rt, WAIT_FOR_PERSON, page.invitation())?;
    if !relay.sessions().contains(&invitation.session) {
        return Err(unexpected("the page's registration"));
    }

    n.screen(
        1,
        "The page minted and registered its own session, and handed over its invitation",
    );
    n.line(&format!(
        "session {}, surface {}, on {base}",
        printable(&invitation.session),
        printable(&invitation.surface_id)
    ));
    n.line("(the token stays out of this terminal: the page has a Copy button for it)");

    let to = Audience::Web;
    let agent = trust(n, args, &[relay.addr().port()])?;
    let surface_invitation = SurfaceInvitation::new_insecure_loopback(
        base,
        &invitation.session,
        invitation.token(),
        &invitation.surface_id,
        "Human+ web sheet",
    )
    .map_err(|e| step_failed("the invitation", &e))?;
    let id = attach(agent.as_ref(), surface_invitation)?;
    discover(n, agent.as_ref(), &id)?;
    let r1 = read(n, to, agent.as_ref(), &id)?;

    edit(n, to);
    let _ = page.take_edits();
    agent
        .announce(
            OWNER,
            &id,
            &Activity::new("waiting for you to type a new value into")
                .target("B4")
                .priority(Priority::Blocking),
        )
        .map_err(|e| step_failed("announce", &e))?;
    n.line(&format!(
        "{} and press Enter. The agent waits; the page shows what it is waiting for.",
        s.bold("Type a new value into B4 in the page")
    ));
    n.flush();
    let edit = wait_on(rt, WAIT_FOR_PERSON, page.next_edit())?;
    let cell = edit.address.clone();
    n.line(&format!(
        "You typed {} into {}; the sheet moved to {}.",
        printable(&format!("{:?}", edit.value)),
        printable(&cell),
        printable(&edit.revision)
    ));

    stale_write(n, to, agent.as_ref(), &id, &cell, &r1)?;
    change_feed(n, agent.as_ref(), &id)?;
    let total = reread_and_write(n, to, agent.as_ref(), &id)?;

    n.screen(9, "What the page shows");
    n.line("participants  you, and Human+ demo agent in its colour #7c3aed");
    n.line("activity      reading B4, waiting for you at B4, editing D4, done");
    n.line(&format!(
        "refused       sheet_set_cell {} pinned to {r1}: nothing applied",
        printable(&cell)
    ));
    n.line(&format!(
        "sheet         {} = your value, D4 = {total} (the agent's)",
        printable(&cell)
    ));
    detach(n, to, agent.as_ref(), &id)?;
    n.buf.push_str(
        "\nPress Enter (or Ctrl-C) to end the session and stop the relay and the page server.\n",
    );
    n.flush();
    wait_for_enter(rt);
    // End the session the way a relay does (streams end, parked polls
    // return, then 410), and give the page a moment to say so: its event
    // stream reconnects after the relay's `retry: 2000`.
    relay.drop_session(&invitation.session);
    say("The session has ended on the relay; the page says so.\n");
    rt.block_on(async { tokio::time::sleep(SESSION_END_GRACE).await });
    Ok(())
}

/// Returns on a line, the end of stdin, or Ctrl-C.
fn wait_for_enter(rt: &tokio::runtime::Runtime) {
    let (tx, rx) = tokio::sync::oneshot::channel::<()>();
    std::thread::spawn(move || {
        let mut line = String::new();
        let _ = std::io::stdin().lock().read_line(&mut line);
        let _ = tx.send(());
    });
    rt.block_on(async {
        tokio::select! {
            _ = rx => {}
            _ = tokio::signal::ctrl_c() => {}
        }
    });
}
