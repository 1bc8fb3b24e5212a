//! The hostile-invitation corpus (the PHP reference's RelayEgressPolicyTest
//! rows, as `human_plus_conformance::scenarios::hostile_invitations` runs
//! them for the relay) in the Reverb link form: each hostile host, port and
//! scheme as the `reverb=` URL (the channel server) and as the `auth=` URL
//! (the host app's auth bridge), in a page link read by the library's
//! `from_link` and by the `human-plus` command from `HUMAN_PLUS_INVITATION`.
//! Every row is refused before a byte leaves: the link reader refuses it,
//! or egress does at attach, or after resolving and before connecting; a
//! listener on the port every row names accepts 0 connections, and the
//! token is in no refusal.
//!
//! Beside the relay's rows, the ones only a Reverb link has: the token in
//! either URL, a WebSocket URL without `/app/KEY`, the wrong scheme in each
//! place, a channel that is not private or presence.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

mod common;

use std::net::IpAddr;
use std::time::Duration;

use human_plus_any::{AgentSetup, RuntimeKind, build_agent};
use human_plus_conformance::Trap;
use human_plus_core::{
    EgressPolicy, EgressRule, Error, LinkOptions, ManagerConfig, Participant, SurfaceInvitation,
    TransportConfig, TrustPolicy,
};

const PROXY: &str = "http://egress.internal:3128";
/// The benign channel server and auth bridge a row's other URL names
/// (declared, never reached: the row is refused first).
const BENIGN_WS: &str = "wss://ws.app.example/app/app-key";
const BENIGN_AUTH: &str = "https://app.example/broadcasting/auth";
const BENIGN_HOSTS: [&str; 2] = ["ws.app.example", "app.example"];

/// Where a row's hostile URL goes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Place {
    /// `reverb=`: the channel server.
    Socket,
    /// `auth=`: the host app's auth bridge.
    Auth,
}

/// How a row must be refused.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Refused {
    /// By the link reader (exit 2): nothing was even attached.
    Link,
    /// By egress, with this rule (exit 3).
    Egress(EgressRule),
}

/// How egress leaves: through the proxy, unverified (local development),
/// or neither declared.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Mode {
    Proxy,
    Unverified,
    Neither,
}

/// One row: what the link names, what egress declares.
#[derive(Debug, Clone)]
struct Row {
    case: String,
    /// The hostile URL's scheme-less part: `host:port[/path]` or a whole
    /// URL when `whole`.
    url: String,
    place: Place,
    hosts: Vec<String>,
    ports: Vec<u16>,
    mode: Mode,
    loopback: bool,
    /// Names the resolver answers (the library rows only).
    dns: Vec<(String, Vec<IpAddr>)>,
    refused: Refused,
    /// An extra `channel=` value.
    channel: Option<String>,
}

impl Row {
    fn link(&self, session: &str, token: &str) -> String {
        let (ws, auth) = match self.place {
            Place::Socket => (self.url.clone(), BENIGN_AUTH.to_owned()),
            Place::Auth => (BENIGN_WS.to_owned(), self.url.clone()),
        };
        common::reverb_link(
            "https://app.example/board",
            session,
            token,
            &ws,
            &auth,
            self.channel.as_deref(),
        )
    }

    fn policy(&self) -> EgressPolicy {
        let mut hosts = self.hosts.clone();
        hosts.extend(BENIGN_HOSTS.map(str::to_owned));
        let mut policy = EgressPolicy::new(&hosts);
        if !self.ports.is_empty() {
            policy = policy.allow_ports(self.ports.iter().copied().chain([443]));
        }
        match self.mode {
            Mode::Proxy => policy.egress_proxy(PROXY),
            Mode::Unverified => policy.allow_unverified_egress(true),
            Mode::Neither => policy,
        }
    }

    /// The same egress as the command's flags.
    fn flags(&self) -> Vec<String> {
        let mut flags = Vec::new();
        for h in self.hosts.iter().map(String::as_str).chain(BENIGN_HOSTS) {
            flags.extend(["--allow-host".to_owned(), h.to_owned()]);
        }
        if !self.ports.is_empty() {
            for p in self.ports.iter().copied().chain([443]) {
                flags.extend(["--allow-port".to_owned(), p.to_string()]);
            }
        }
        match self.mode {
            Mode::Proxy => flags.extend(["--egress-proxy".to_owned(), PROXY.to_owned()]),
            Mode::Unverified => flags.push("--allow-unverified-egress".to_owned()),
            Mode::Neither => {}
        }
        if self.loopback {
            flags.push("--allow-insecure-loopback".to_owned());
        }
        flags
    }
}

/// The URL of `host:port` in `place`, in the scheme `secure` picks.
fn url_in(place: Place, authority: &str, secure: bool) -> String {
    match (place, secure) {
        (Place::Socket, true) => format!("wss://{authority}/app/app-key"),
        (Place::Socket, false) => format!("ws://{authority}/app/app-key"),
        (Place::Auth, true) => format!("https://{authority}/broadcasting/auth"),
        (Place::Auth, false) => format!("http://{authority}/broadcasting/auth"),
    }
}

/// The literal addresses of the relay corpus.
const LITERAL: [&str; 26] = [
    "169.254.169.254",
    "127.0.0.1",
    "10.0.0.1",
    "172.16.0.1",
    "192.168.1.1",
    "100.64.0.1",
    "0.0.0.0",
    "192.0.2.1",
    "198.18.0.1",
    "224.0.0.1",
    "240.0.0.1",
    "255.255.255.255",
    "[::1]",
    "[::]",
    "[fe80::1]",
    "[fc00::1]",
    "[::ffff:127.0.0.1]",
    "[::ffff:169.254.169.254]",
    "[64:ff9b::a9fe:a9fe]",
    "[2002:7f00:1::]",
    "[2001:db8::1]",
    "[ff02::1]",
    "0x7f.1",
    "2130706433",
    "017700000001",
    "127.1",
];

/// Hosts the link reader refuses outright (not a canonical dotted quad).
const NOT_CANONICAL: [&str; 4] = ["0x7f.1", "2130706433", "017700000001", "127.1"];

/// Every row, in both places. `port` is the trap's; `token` the link's.
fn rows(port: u16, token: &str) -> Vec<Row> {
    let mut rows = Vec::new();
    let h = "relay.example.com";
    for place in [Place::Socket, Place::Auth] {
        let row = |case: &str, url: String, hosts: &[&str], ports: &[u16], refused| Row {
            case: format!("{case} ({place:?})"),
            url,
            place,
            hosts: hosts.iter().map(|s| (*s).to_owned()).collect(),
            ports: ports.to_vec(),
            mode: Mode::Unverified,
            loopback: false,
            dns: Vec::new(),
            refused,
            channel: None,
        };
        let at = format!("{h}:{port}");
        rows.push(Row {
            mode: Mode::Neither,
            ..row(
                "no proxy",
                url_in(place, &at, true),
                &[h],
                &[port],
                Refused::Egress(EgressRule::ProxyRequired),
            )
        });
        rows.push(row(
            "host not declared",
            url_in(place, &at, true),
            &["trusted.example.com"],
            &[port],
            Refused::Egress(EgressRule::HostNotDeclared),
        ));
        rows.push(row(
            "port not declared",
            url_in(place, &at, true),
            &[h],
            &[],
            Refused::Egress(EgressRule::PortNotDeclared),
        ));
        rows.push(Row {
            mode: Mode::Proxy,
            ..row(
                "credentials",
                url_in(place, &format!("user:pass@{at}"), true),
                &[h],
                &[port],
                Refused::Link,
            )
        });
        rows.push(Row {
            mode: Mode::Proxy,
            ..row(
                "query",
                format!("{}?tenant=other", url_in(place, &at, true)),
                &[h],
                &[port],
                Refused::Link,
            )
        });
        rows.push(Row {
            mode: Mode::Proxy,
            ..row(
                "fragment",
                format!("{}#x", url_in(place, &at, true)),
                &[h],
                &[port],
                Refused::Link,
            )
        });
        for host in LITERAL {
            let declared = host.trim_start_matches('[').trim_end_matches(']');
            let refused = if NOT_CANONICAL.contains(&host) {
                Refused::Link
            } else {
                Refused::Egress(EgressRule::PrivateAddress)
            };
            rows.push(row(
                host,
                url_in(place, &format!("{host}:{port}"), true),
                &[declared],
                &[port],
                refused,
            ));
        }
        // Plain to a host that is not loopback: the link refuses it.
        rows.push(Row {
            loopback: true,
            ..row(
                "plain, not loopback",
                url_in(place, &at, false),
                &[h],
                &[port],
                Refused::Link,
            )
        });
        // Plain to loopback without the development mode's conditions.
        rows.push(Row {
            loopback: true,
            mode: Mode::Proxy,
            ..row(
                "plain loopback without unverified egress",
                url_in(place, &format!("127.0.0.1:{port}"), false),
                &["127.0.0.1"],
                &[port],
                Refused::Egress(EgressRule::InsecureLoopback),
            )
        });
        // The other place's scheme.
        let swapped = match place {
            Place::Socket => format!("https://{at}/app/app-key"),
            Place::Auth => format!("wss://{at}/broadcasting/auth"),
        };
        rows.push(row(
            "the other place's scheme",
            swapped,
            &[h],
            &[port],
            Refused::Link,
        ));
        // The token in the URL (the WebSocket path's app key, or the auth
        // bridge's path).
        let with_token = match place {
            Place::Socket => format!("wss://{at}/app/{token}"),
            Place::Auth => format!("https://{at}/{token}/auth"),
        };
        rows.push(row(
            "the token in the URL",
            with_token,
            &[h],
            &[port],
            Refused::Link,
        ));
        // Names whose DNS answer is private: refused after resolving,
        // before connecting.
        for (name, addrs) in [
            ("private.test", vec!["10.0.0.1"]),
            ("metadata.test", vec!["169.254.169.254"]),
            ("loopback6.test", vec!["::1"]),
            ("mixed.test", vec!["93.184.215.14", "127.0.0.1"]),
            ("trap.test", vec!["127.0.0.1"]),
        ] {
            rows.push(Row {
                dns: vec![(
                    name.to_owned(),
                    addrs.iter().map(|a| a.parse().unwrap()).collect(),
                )],
                ..row(
                    name,
                    url_in(place, &format!("{name}:{port}"), true),
                    &[name],
                    &[port],
                    Refused::Egress(EgressRule::PrivateAddress),
                )
            });
        }
    }
    // Rows of the link alone.
    let socket = |case: &str, ws: String, channel: Option<&str>| Row {
        case: case.to_owned(),
        url: ws,
        place: Place::Socket,
        hosts: vec![h.to_owned()],
        ports: vec![port],
        mode: Mode::Unverified,
        loopback: false,
        dns: Vec::new(),
        refused: Refused::Link,
        channel: channel.map(str::to_owned),
    };
    rows.push(socket(
        "no /app/KEY",
        format!("wss://{h}:{port}/socket"),
        None,
    ));
    rows.push(socket(
        "a public channel",
        format!("wss://{h}:{port}/app/app-key"),
        Some("agent.session.S1_abcd"),
    ));
    rows.push(socket(
        "an encrypted channel",
        format!("wss://{h}:{port}/app/app-key"),
        Some("private-encrypted-agent.session.S1_abcd"),
    ));
    rows
}

const SESSION: &str = "S1_abcd";
const OWNER: &str = "owner:hostile";

/// Runs `row` through the library (`from_link`, then an agent of
/// `runtime` attaching and listing): refused as the row says.
fn library(row: &Row, runtime: RuntimeKind, token: &str, real_ws: Option<&str>) {
    let what = format!("{} [{runtime:?}]", row.case);
    let mut link = row.link(SESSION, token);
    if let (Place::Auth, Some(ws)) = (row.place, real_ws) {
        // The DNS rows in the auth bridge's place: the channel server is a
        // real one, so the auth bridge's name is what gets resolved.
        link = common::reverb_link(
            "https://app.example/board",
            SESSION,
            token,
            ws,
            &row.url,
            None,
        );
    }
    let options = LinkOptions::default().allow_insecure_loopback(row.loopback || real_ws.is_some());
    let invitation = match SurfaceInvitation::from_link(&link, &options) {
        Ok(inv) => inv,
        Err(e @ Error::InvalidInvitation(_)) => {
            assert_eq!(row.refused, Refused::Link, "{what}: {e}");
            assert!(!e.to_string().contains(token), "{what}");
            return;
        }
        Err(e) => panic!("{what}: {e:?}"),
    };
    assert_ne!(row.refused, Refused::Link, "{what}: the link was read");
    let policy = match real_ws {
        // The real channel server on loopback (plain, development mode),
        // and the row's auth bridge.
        Some(ws) => EgressPolicy::new(
            row.hosts
                .iter()
                .map(String::as_str)
                .chain(["127.0.0.1"])
                .collect::<Vec<_>>(),
        )
        .allow_ports(row.ports.iter().copied().chain([common::port_of(ws)]))
        .allow_unverified_egress(true),
        None => row.policy(),
    };
    let config = ManagerConfig::new(
        policy,
        TrustPolicy::every_tool(Vec::<(String, String)>::new()),
    )
    .transport(TransportConfig::default().timeout(Duration::from_secs(10)));
    let mut setup = AgentSetup::new(config);
    setup.hosts = row.dns.clone();
    setup.connect_timeout = Duration::from_secs(5);
    let agent = build_agent(runtime, setup).unwrap();
    let participant = Participant::new("agent:one", "Assistant", "#7c3aed");
    let error = match agent.attach(OWNER, invitation, participant) {
        Err(e) => e,
        Ok(a) => agent
            .tools(OWNER, a.id())
            .expect_err(&format!("{what}: listed")),
    };
    match (&error, row.refused) {
        (Error::EgressRefused(r), Refused::Egress(rule)) => {
            assert_eq!(r.rule, rule, "{what}: {error}");
        }
        _ => panic!("{what}: expected {:?}, got {error:?}", row.refused),
    }
    assert!(!error.to_string().contains(token), "{what}");
}

#[test]
fn every_row_in_the_reverb_form_is_refused_before_a_byte_leaves_in_every_runtime() {
    let trap = Trap::start();
    let token = format!("tok{}", common::random_hex(16));
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(1)
        .enable_all()
        .build()
        .unwrap();
    // A real channel server, for the rows whose auth bridge is only
    // refused once its name is resolved (the socket opens first).
    let server = rt
        .block_on(
            human_plus_relay::PusherServer::builder(common::APP_KEY, common::APP_SECRET).start(),
        )
        .unwrap();
    let rows = rows(trap.port, &token);
    let (mut link, mut egress) = (0, 0);
    for runtime in RuntimeKind::ALL {
        for row in &rows {
            let real = (row.place == Place::Auth && !row.dns.is_empty()).then(|| server.ws_url());
            library(row, runtime, &token, real.as_deref());
            match row.refused {
                Refused::Link => link += 1,
                Refused::Egress(_) => egress += 1,
            }
        }
    }
    assert_eq!(trap.accepted(), 0, "a hostile invitation reached a server");
    // The auth bridge's resolver rows did open the (real) channel socket
    // first, and were refused at the bridge's name.
    assert!(server.connections_accepted() >= 15);
    for path in server.seen_paths() {
        assert!(!path.contains(&token), "the token in a URL: {path}");
    }
    assert!(link > 0 && egress > 0);
    eprintln!(
        "{} rows x 3 runtimes: {link} refused by the link reader, {egress} by egress",
        rows.len()
    );
    rt.block_on(server.shutdown());
}

/// The same rows through `human-plus tools` (the link in
/// `HUMAN_PLUS_INVITATION`, egress as flags): exit 2 for the link reader's
/// refusal, 3 for egress's, the token in neither stream. The resolver's
/// rows need names this machine resolves: `localhost`, in the secure
/// schemes, is refused after resolving.
#[test]
fn every_row_through_the_command_is_refused_and_nothing_reaches_the_trap() {
    let trap = Trap::start();
    let token = format!("tok{}", common::random_hex(16));
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(1)
        .enable_all()
        .build()
        .unwrap();
    let server = rt
        .block_on(
            human_plus_relay::PusherServer::builder(common::APP_KEY, common::APP_SECRET).start(),
        )
        .unwrap();
    let mut rows: Vec<Row> = rows(trap.port, &token)
        .into_iter()
        .filter(|r| r.dns.is_empty())
        .collect();
    for place in [Place::Socket, Place::Auth] {
        rows.push(Row {
            case: format!("localhost ({place:?})"),
            url: url_in(place, &format!("localhost:{}", trap.port), true),
            place,
            hosts: vec!["localhost".to_owned()],
            ports: vec![trap.port],
            mode: Mode::Unverified,
            loopback: false,
            dns: Vec::new(),
            refused: Refused::Egress(EgressRule::PrivateAddress),
            channel: None,
        });
    }
    for (i, row) in rows.iter().enumerate() {
        let runtime = ["tokio", "blocking", "async-std"][i % 3];
        let mut link = row.link(SESSION, &token);
        let mut flags = row.flags();
        if row.case == "localhost (Auth)" {
            // The socket opens first (a real channel server on loopback),
            // then the auth bridge's name resolves to loopback: refused.
            let ws = server.ws_url();
            link = common::reverb_link(
                "https://app.example/board",
                SESSION,
                &token,
                &ws,
                &row.url,
                None,
            );
            flags.extend([
                "--allow-host".to_owned(),
                "127.0.0.1".to_owned(),
                "--allow-port".to_owned(),
                common::port_of(&ws).to_string(),
                "--allow-insecure-loopback".to_owned(),
            ]);
        }
        let mut args = vec![
            "tools",
            "--every-tool",
            "--timeout",
            "10",
            "--runtime",
            runtime,
        ];
        args.extend(flags.iter().map(String::as_str));
        let run = common::run_with_env(&args, None, &[("HUMAN_PLUS_INVITATION", &link)]);
        let (code, name) = match row.refused {
            Refused::Link => (2, "usage"),
            Refused::Egress(_) => (3, "egress_refused"),
        };
        let what = format!("{} [{runtime}]", row.case);
        if row.refused == Refused::Link {
            assert!(
                run.code == 2 && run.stderr.contains("error[invalid_invitation]"),
                "{what}: {run:?}"
            );
        } else {
            assert_eq!(run.code, code, "{what}: {run:?}");
            assert!(
                run.stderr.contains(&format!("error[{name}]")),
                "{what}: {run:?}"
            );
        }
        run.assert_no_secret(&token);
    }
    assert_eq!(trap.accepted(), 0, "a hostile invitation reached a server");
    for path in server.seen_paths() {
        assert!(!path.contains(&token), "the token in a URL: {path}");
    }
    rt.block_on(server.shutdown());
}
