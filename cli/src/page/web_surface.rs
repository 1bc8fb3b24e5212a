//! `human-plus surface --web`: the web sheet served from its own origin
//! until Ctrl-C (the page and its server are [`crate::web`]), and what
//! `demo --web` shares with it: the surface id the page shows, the page's
//! transport, the message when the port cannot be bound.

use std::net::{IpAddr, Ipv4Addr, SocketAddr};

use crate::args::{SurfaceArgs, Transport};
use crate::output::console::say;
use crate::output::exit::{Failure, printable};
use crate::page::rt::runtime;
use crate::page::web::{PageConfig, PageServer, PageTransport};

/// The surface id the web page shows in its invitation.
pub const WEB_SURFACE_ID: &str = "sheet:web";

pub(crate) fn page_transport(transport: Transport) -> PageTransport {
    match transport {
        Transport::Sse => PageTransport::Auto,
        Transport::Poll => PageTransport::Poll,
    }
}

/// A relay base URL a browser page can use: http or https, no query,
/// fragment or credentials.
fn check_relay_url(raw: &str) -> Result<String, Failure> {
    let url =
        url::Url::parse(raw).map_err(|e| Failure::usage(format!("--relay is not a URL: {e}")))?;
    if !matches!(url.scheme(), "http" | "https")
        || url.query().is_some()
        || url.fragment().is_some()
        || !url.username().is_empty()
        || url.password().is_some()
        || url.host().is_none()
    {
        return Err(Failure::usage(
            "--relay must be an http(s) base URL without a query, fragment or credentials",
        ));
    }
    Ok(raw.trim_end_matches('/').to_owned())
}

pub(crate) fn bind_failed(port: u16) -> impl Fn(std::io::Error) -> Failure {
    move |e| {
        Failure::internal(format!(
            "the page server cannot listen on 127.0.0.1:{port}: {e}"
        ))
    }
}

/// `human-plus surface --web`: serves the web sheet until Ctrl-C.
///
/// # Errors
/// A usage failure for a bad relay URL; an internal one when the port
/// cannot be bound.
pub fn surface(args: &SurfaceArgs) -> Result<(), Failure> {
    let relay = check_relay_url(&args.relay)?;
    let rt = runtime()?;
    let addr = SocketAddr::new(IpAddr::V4(Ipv4Addr::LOCALHOST), args.port);
    let listener = rt
        .block_on(PageServer::bind(addr))
        .map_err(bind_failed(args.port))?;
    let mut config = PageConfig::new(&relay, WEB_SURFACE_ID);
    config.transport = page_transport(args.transport);
    let page = rt.block_on(async { listener.start(config) });
    say(&format!(
        "The web sheet is served at {}\n\
         relay {}\n\
         Open it in a browser: the page mints and registers its own session and shows the \
         invitation to hand to an agent (the token is copyable there and shown nowhere else). \
         A reload of the tab keeps the session; the page's button ends it and starts a new one. \
         Ctrl-C stops.\n",
        page.url(),
        printable(&relay)
    ));
    rt.block_on(async {
        let _ = tokio::signal::ctrl_c().await;
        page.shutdown().await;
    });
    say("page server stopped\n");
    Ok(())
}
