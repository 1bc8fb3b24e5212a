//! The way out to a Reverb channel: its WebSocket server and the host app's
//! auth bridge, both vetted by the egress policy before a byte leaves.

use std::net::IpAddr;

use crate::egress::endpoint::{EgressPolicy, RelayEndpoint, VetTarget};
use crate::error::{EgressRefusal, EgressRule, Error};
use crate::invite::invitation::RelayToken;
use crate::invite::invitation::SurfaceInvitation;
use crate::invite::transport::{ReverbChannel, Transport};
use crate::pusher::auth::AuthRequest;

const NOT_REVERB: &str =
    "This Human+ invitation names an HTTP relay, not a Reverb channel (RelayEndpoint reaches it).";

/// A Reverb invitation vetted by the egress policy: the WebSocket server
/// and the auth bridge, each under every rule of [`RelayEndpoint::new`]
/// (the egress proxy, the URL's shape, the declared host and port, a
/// literal address public, plain loopback only in the development mode).
/// A named host is vetted when the runtime resolves it, with
/// [`ReverbEndpoint::socket`]`.vet_resolved` or
/// [`ReverbEndpoint::auth`]`.vet_resolved`.
///
/// The token goes only to the auth bridge, as `Authorization: Bearer`
/// ([`ReverbEndpoint::auth_request`]); the WebSocket URL never carries it.
///
/// ```
/// use human_plus_core::{EgressPolicy, EgressRule, Error, ReverbChannel, ReverbEndpoint, SurfaceInvitation};
///
/// let channel = ReverbChannel::new(
///     "wss://ws.app.example/app/app-key", "https://app.example/broadcasting/auth",
///     "private-agent.session.S1_abcd", false,
/// ).unwrap();
/// let inv = SurfaceInvitation::new_reverb(channel, "S1_abcd", "0123456789abcdef0123", "s", "a")?;
///
/// let both = EgressPolicy::new(["ws.app.example", "app.example"]).allow_unverified_egress(true);
/// let ep = ReverbEndpoint::new(&inv, "agent-1", &both)?;
/// assert_eq!((ep.socket().host(), ep.socket().port()), ("ws.app.example", 443));
/// assert!(!ep.connect_url().contains("0123456789abcdef0123"));
///
/// // Each host must be declared.
/// let one = EgressPolicy::new(["app.example"]).allow_unverified_egress(true);
/// match ReverbEndpoint::new(&inv, "agent-1", &one) {
///     Err(Error::EgressRefused(r)) => assert_eq!(r.rule, EgressRule::HostNotDeclared),
///     other => panic!("{other:?}"),
/// }
/// # Ok::<(), human_plus_core::Error>(())
/// ```
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ReverbEndpoint {
    channel: ReverbChannel,
    socket: RelayEndpoint,
    auth: RelayEndpoint,
}

/// A request to the host app's auth bridge, ready to send: `POST` the body
/// to the URL with the headers. The headers carry the token: its `Debug`
/// shows their names only.
#[derive(Clone, PartialEq, Eq)]
pub struct ReverbAuthRequest {
    /// The auth bridge's URL.
    pub url: String,
    /// `authorization: Bearer …`, `content-type`, `accept`.
    pub headers: Vec<(&'static str, String)>,
    /// `socket_id=…&channel_name=…`.
    pub body: String,
}

impl std::fmt::Debug for ReverbAuthRequest {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let names: Vec<&str> = self.headers.iter().map(|(n, _)| *n).collect();
        f.debug_struct("ReverbAuthRequest")
            .field("url", &self.url)
            .field("headers", &names)
            .field("body", &self.body)
            .finish()
    }
}

impl ReverbEndpoint {
    /// Vets both hosts of a Reverb invitation under `policy`, for
    /// `client_id`.
    ///
    /// # Errors
    /// [`Error::EgressRefused`] as [`RelayEndpoint::new`], for either URL
    /// (the message names the host or port, never the token), or
    /// [`EgressRule::UrlShape`] for an invitation to an HTTP relay;
    /// [`Error::InvalidAttachment`] for a malformed `client_id`.
    pub fn new(
        invitation: &SurfaceInvitation,
        client_id: &str,
        policy: &EgressPolicy,
    ) -> Result<ReverbEndpoint, Error> {
        let Transport::Reverb(channel) = invitation.transport() else {
            return Err(EgressRefusal::new(EgressRule::UrlShape, NOT_REVERB).into());
        };
        let ws = channel.ws_url();
        // The WebSocket URL under the HTTP rules: `wss` is TLS as `https`
        // is, `ws` plain as `http`, with the same default ports.
        let as_http = if let Some(rest) = ws.strip_prefix("wss://") {
            format!("https://{rest}")
        } else if let Some(rest) = ws.strip_prefix("ws://") {
            format!("http://{rest}")
        } else {
            return Err(EgressRefusal::new(EgressRule::UrlShape, NOT_REVERB).into());
        };
        let target = |url| VetTarget {
            url,
            insecure_loopback_invitation: invitation.allow_insecure_loopback(),
            session_id: invitation.session_id(),
            token: invitation.token(),
            assumed: None,
        };
        let socket = RelayEndpoint::vet(&target(&as_http), client_id, policy)?;
        let auth = RelayEndpoint::vet(&target(channel.auth_url()), client_id, policy)?;
        Ok(ReverbEndpoint {
            channel: channel.clone(),
            socket,
            auth,
        })
    }

    /// The channel.
    #[must_use]
    pub fn channel(&self) -> &ReverbChannel {
        &self.channel
    }

    /// The WebSocket server's host, port, address vetting, proxy and TLS
    /// (its relay routes are meaningless and never used).
    #[must_use]
    pub fn socket(&self) -> &RelayEndpoint {
        &self.socket
    }

    /// The auth bridge's host, port, address vetting, proxy and TLS.
    #[must_use]
    pub fn auth(&self) -> &RelayEndpoint {
        &self.auth
    }

    /// The URL the WebSocket opens ([`ReverbChannel::connect_url`]): no
    /// token in it.
    #[must_use]
    pub fn connect_url(&self) -> String {
        self.channel.connect_url()
    }

    /// The addresses the WebSocket may connect to, of those the resolver
    /// gave for [`ReverbEndpoint::socket`]'s host.
    ///
    /// # Errors
    /// As [`RelayEndpoint::vet_resolved`].
    pub fn vet_socket_addresses(&self, addrs: &[IpAddr]) -> Result<Vec<IpAddr>, EgressRefusal> {
        self.socket.vet_resolved(addrs)
    }

    /// The addresses the auth request may connect to.
    ///
    /// # Errors
    /// As [`RelayEndpoint::vet_resolved`].
    pub fn vet_auth_addresses(&self, addrs: &[IpAddr]) -> Result<Vec<IpAddr>, EgressRefusal> {
        self.auth.vet_resolved(addrs)
    }

    /// The auth bridge request for what the channel asked
    /// ([`crate::PusherEvent::AuthNeeded`]): a form POST with the token as
    /// `Authorization: Bearer`, as pusher-js sends it to Laravel's
    /// `/broadcasting/auth`. A 403 answer means the bridge refused the
    /// bearer; a 200 carries the signature for
    /// [`crate::ChannelAuth::from_response`].
    #[must_use]
    pub fn auth_request(&self, request: &AuthRequest, token: &RelayToken) -> ReverbAuthRequest {
        ReverbAuthRequest {
            url: self.channel.auth_url().to_owned(),
            headers: vec![
                ("authorization", format!("Bearer {}", token.expose())),
                (
                    "content-type",
                    "application/x-www-form-urlencoded".to_owned(),
                ),
                ("accept", "application/json".to_owned()),
            ],
            body: request.form_body(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::invite::link::{InvitationLink, LinkOptions};

    const TOKEN: &str = "0123456789abcdef0123456789abcdef";

    fn pct(s: &str) -> String {
        s.bytes()
            .map(|b| {
                if b.is_ascii_alphanumeric() || matches!(b, b'-' | b'.' | b'_' | b'~') {
                    char::from(b).to_string()
                } else {
                    format!("%{b:02X}")
                }
            })
            .collect()
    }

    fn link(ws: &str, auth: &str) -> String {
        format!(
            "https://page.example/board#session=S1_abcd&token={TOKEN}&reverb={}&auth={}",
            pct(ws),
            pct(auth)
        )
    }

    fn vet(ws: &str, auth: &str, hosts: &[&str], ports: &[u16]) -> Result<ReverbEndpoint, Error> {
        let options = LinkOptions::default().allow_insecure_loopback(true);
        let inv = InvitationLink::parse(&link(ws, auth), &options)?.into_invitation(None, None)?;
        let policy = EgressPolicy::new(hosts.iter().copied())
            .allow_ports(ports.iter().copied())
            .allow_unverified_egress(true);
        ReverbEndpoint::new(&inv, "agent-1", &policy)
    }

    fn rule<T>(r: Result<T, Error>) -> Option<EgressRule> {
        match r {
            Err(Error::EgressRefused(e)) => {
                assert!(!e.message.contains(TOKEN));
                Some(e.rule)
            }
            _ => None,
        }
    }

    #[test]
    fn both_hosts_and_ports_are_declared() {
        let ok = vet(
            "wss://ws.example:6001/app/k",
            "https://app.example/broadcasting/auth",
            &["ws.example", "app.example"],
            &[6001, 443],
        )
        .unwrap();
        assert_eq!(ok.socket().port(), 6001);
        assert_eq!(ok.auth().host(), "app.example");
        assert!(ok.socket().uses_tls());
        assert_eq!(
            rule(vet(
                "wss://ws.example:6001/app/k",
                "https://app.example/a",
                &["ws.example", "app.example"],
                &[443]
            )),
            Some(EgressRule::PortNotDeclared)
        );
        assert_eq!(
            rule(vet(
                "wss://ws.example/app/k",
                "https://app.example/a",
                &["ws.example"],
                &[443]
            )),
            Some(EgressRule::HostNotDeclared)
        );
    }

    #[test]
    fn hostile_reverb_links_are_refused_before_a_byte_leaves() {
        let auth = "https://app.example/a";
        // Hosts the policy declares, refused for their address.
        for host in [
            "169.254.169.254",
            "10.0.0.1",
            "192.168.1.1",
            "100.64.0.7",
            "0.0.0.0",
            "[::ffff:127.0.0.1]",
            "[fe80::1]",
            "[::1]",
            "127.0.0.1",
        ] {
            let ws = format!("wss://{host}/app/k");
            assert_eq!(
                rule(vet(&ws, auth, &[host, "app.example"], &[443])),
                Some(EgressRule::PrivateAddress),
                "{host}"
            );
            let auth_bad = format!("https://{host}/broadcasting/auth");
            assert_eq!(
                rule(vet(
                    "wss://ws.example/app/k",
                    &auth_bad,
                    &["ws.example", host],
                    &[443]
                )),
                Some(EgressRule::PrivateAddress),
                "{host}"
            );
        }
        // Resolved names: the whole answer refused when any is not public.
        let ok = vet(
            "wss://ws.example/app/k",
            auth,
            &["ws.example", "app.example"],
            &[443],
        )
        .unwrap();
        let public: IpAddr = "93.184.215.14".parse().unwrap();
        for hostile in ["169.254.169.254", "10.0.0.1", "::1", "::ffff:127.0.0.1"] {
            let bad: IpAddr = hostile.parse().unwrap();
            assert!(ok.vet_socket_addresses(&[public, bad]).is_err());
            assert!(ok.vet_auth_addresses(&[bad]).is_err());
        }
        assert_eq!(ok.vet_socket_addresses(&[public]).unwrap(), [public]);
        // Without unverified egress or a proxy, nothing goes.
        let inv = InvitationLink::parse(
            &link("wss://ws.example/app/k", auth),
            &LinkOptions::default(),
        )
        .unwrap()
        .into_invitation(None, None)
        .unwrap();
        assert_eq!(
            rule(ReverbEndpoint::new(
                &inv,
                "agent-1",
                &EgressPolicy::new(["ws.example", "app.example"])
            )),
            Some(EgressRule::ProxyRequired)
        );
        // Plain ws:// to loopback needs unverified egress and the option.
        let lo = vet(
            "ws://127.0.0.1:8080/app/k",
            "http://127.0.0.1:8000/a",
            &["127.0.0.1"],
            &[8080, 8000],
        )
        .unwrap();
        assert!(!lo.socket().uses_tls());
        assert!(lo.socket().is_loopback_dev());
    }

    #[test]
    fn an_http_relay_invitation_is_not_a_channel_and_back() {
        let relay =
            SurfaceInvitation::new("https://relay.example", "S1_abcd", TOKEN, "s", "a").unwrap();
        let policy = EgressPolicy::new(["relay.example"]).allow_unverified_egress(true);
        assert_eq!(
            rule(ReverbEndpoint::new(&relay, "agent-1", &policy)),
            Some(EgressRule::UrlShape)
        );
        let channel = ReverbChannel::new(
            "wss://relay.example/app/k",
            "https://relay.example/auth",
            "private-a",
            false,
        )
        .unwrap();
        let reverb = SurfaceInvitation::new_reverb(channel, "S1_abcd", TOKEN, "s", "a").unwrap();
        // Never relay routes on the auth bridge, which would put the token
        // in a URL.
        assert_eq!(
            rule(RelayEndpoint::new(&reverb, "agent-1", &policy)),
            Some(EgressRule::UrlShape)
        );
    }

    #[test]
    fn the_token_goes_only_to_the_bridge_as_a_bearer() {
        let ep = vet(
            "wss://ws.example/app/k",
            "https://app.example/broadcasting/auth",
            &["ws.example", "app.example"],
            &[443],
        )
        .unwrap();
        assert!(!ep.connect_url().contains(TOKEN));
        let req = ep.auth_request(
            &AuthRequest {
                socket_id: "1.2".into(),
                channel_name: "private-agent.session.S1_abcd".into(),
            },
            &RelayToken::new(TOKEN),
        );
        assert_eq!(req.url, "https://app.example/broadcasting/auth");
        assert!(!req.url.contains(TOKEN) && !req.body.contains(TOKEN));
        assert_eq!(req.headers[0], ("authorization", format!("Bearer {TOKEN}")));
        assert!(!format!("{req:?}").contains(TOKEN));
        assert!(!format!("{ep:?}").contains(TOKEN));
    }
}
