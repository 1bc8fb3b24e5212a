//! Private and presence channel auth: the request a client makes of the
//! host app's auth bridge, the answer it reads, and the signature a server
//! (or a bridge) computes and checks.
//!
//! The signature is `APP_KEY:hex(HMAC-SHA256(APP_SECRET, "socket_id:channel"))`,
//! and for a presence channel `"socket_id:channel:channel_data"`. HMAC
//! (RFC 2104) is written here over the `sha2` crate the workspace already
//! uses; it is checked against RFC 4231's vectors and the Pusher
//! documentation's own example.

use std::fmt;

use serde::Deserialize;
use sha2::{Digest, Sha256};

use super::error::PusherError;
use super::frames::is_socket_id;
use crate::invite::transport::is_app_key;

/// The longest auth string accepted from a bridge, in bytes.
pub const MAX_AUTH_BYTES: usize = 512;

/// The longest presence `channel_data` accepted, in bytes.
pub const MAX_CHANNEL_DATA_BYTES: usize = 1024;

/// An app secret: it signs channel auth. Its `Debug` is redacted and it has
/// no `Display`.
///
/// ```
/// use human_plus_core::PusherSecret;
///
/// let s = PusherSecret::new("7ad3773142a6692b25b8");
/// assert_eq!(format!("{s:?}"), "PusherSecret([redacted])");
/// ```
#[derive(Clone, PartialEq, Eq)]
pub struct PusherSecret(String);

impl PusherSecret {
    /// Wraps a secret.
    #[must_use]
    pub fn new(secret: impl Into<String>) -> Self {
        PusherSecret(secret.into())
    }

    /// The secret itself, for the one place that uses it.
    #[must_use]
    pub fn expose(&self) -> &str {
        &self.0
    }
}

impl fmt::Debug for PusherSecret {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("PusherSecret([redacted])")
    }
}

/// HMAC-SHA256 (RFC 2104) of `message` under `key`.
///
/// ```
/// use human_plus_core::hmac_sha256;
///
/// // RFC 4231, test case 2.
/// let mac = hmac_sha256(b"Jefe", b"what do ya want for nothing?");
/// assert_eq!(mac[..4], [0x5b, 0xdc, 0xc1, 0x46]);
/// ```
#[must_use]
pub fn hmac_sha256(key: &[u8], message: &[u8]) -> [u8; 32] {
    const BLOCK: usize = 64;
    let mut block = [0u8; BLOCK];
    if key.len() > BLOCK {
        block[..32].copy_from_slice(&Sha256::digest(key));
    } else {
        block[..key.len()].copy_from_slice(key);
    }
    let mut inner_pad = [0x36u8; BLOCK];
    let mut outer_pad = [0x5cu8; BLOCK];
    for i in 0..BLOCK {
        inner_pad[i] ^= block[i];
        outer_pad[i] ^= block[i];
    }
    let inner = Sha256::new()
        .chain_update(inner_pad)
        .chain_update(message)
        .finalize();
    let outer = Sha256::new()
        .chain_update(outer_pad)
        .chain_update(inner)
        .finalize();
    let mut out = [0u8; 32];
    out.copy_from_slice(&outer);
    out
}

/// The signed string, `socket_id:channel` or `socket_id:channel:channel_data`.
fn signed_text(socket_id: &str, channel: &str, channel_data: Option<&str>) -> String {
    match channel_data {
        Some(cd) => format!("{socket_id}:{channel}:{cd}"),
        None => format!("{socket_id}:{channel}"),
    }
}

fn hex(bytes: &[u8]) -> String {
    const DIGITS: &[u8; 16] = b"0123456789abcdef";
    let mut s = String::with_capacity(bytes.len() * 2);
    for b in bytes {
        s.push(char::from(DIGITS[usize::from(b >> 4)]));
        s.push(char::from(DIGITS[usize::from(b & 15)]));
    }
    s
}

/// The auth a private (or, with `channel_data`, presence) channel
/// subscription carries: `APP_KEY:hex(HMAC-SHA256(secret, signed text))`.
///
/// ```
/// use human_plus_core::{PusherSecret, sign_channel_auth};
///
/// // The Pusher documentation's example.
/// let auth = sign_channel_auth(
///     "278d425bdf160c739803", &PusherSecret::new("7ad3773142a6692b25b8"),
///     "1234.1234", "private-foobar", None,
/// );
/// assert_eq!(auth, "278d425bdf160c739803:58df8b0c36d6982b82c3ecf6b4662e34fe8c25bba48f5369f135bf843651c3a4");
/// ```
#[must_use]
pub fn sign_channel_auth(
    app_key: &str,
    secret: &PusherSecret,
    socket_id: &str,
    channel: &str,
    channel_data: Option<&str>,
) -> String {
    let mac = hmac_sha256(
        secret.expose().as_bytes(),
        signed_text(socket_id, channel, channel_data).as_bytes(),
    );
    format!("{app_key}:{}", hex(&mac))
}

/// Whether `auth` is the signature [`sign_channel_auth`] computes, compared
/// in constant time over the signature.
///
/// ```
/// use human_plus_core::{PusherSecret, sign_channel_auth, verify_channel_auth};
///
/// let secret = PusherSecret::new("s3cret");
/// let good = sign_channel_auth("key", &secret, "1.2", "private-a", None);
/// assert!(verify_channel_auth("key", &secret, "1.2", "private-a", None, &good));
/// assert!(!verify_channel_auth("key", &secret, "1.3", "private-a", None, &good));
/// ```
#[must_use]
pub fn verify_channel_auth(
    app_key: &str,
    secret: &PusherSecret,
    socket_id: &str,
    channel: &str,
    channel_data: Option<&str>,
    auth: &str,
) -> bool {
    let expected = sign_channel_auth(app_key, secret, socket_id, channel, channel_data);
    let (a, b) = (expected.as_bytes(), auth.as_bytes());
    if a.len() != b.len() {
        return false;
    }
    a.iter().zip(b).fold(0u8, |acc, (x, y)| acc | (x ^ y)) == 0
}

/// What the runtime asks the host app's auth bridge for: a signature for
/// this socket on this channel. The runtime POSTs [`AuthRequest::form_body`]
/// (or [`AuthRequest::json_body`]) with `Authorization: Bearer <token>` and
/// hands the answer to [`ChannelAuth::from_response`].
///
/// ```
/// use human_plus_core::AuthRequest;
///
/// let r = AuthRequest { socket_id: "1.2".into(), channel_name: "private-agent.session.S1".into() };
/// assert_eq!(r.form_body(), "socket_id=1.2&channel_name=private-agent.session.S1");
/// assert_eq!(r.json_body(), r#"{"socket_id":"1.2","channel_name":"private-agent.session.S1"}"#);
/// ```
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AuthRequest {
    /// The socket id the server gave.
    pub socket_id: String,
    /// The channel to sign for.
    pub channel_name: String,
}

impl AuthRequest {
    /// `socket_id=…&channel_name=…`, form-encoded (what pusher-js sends).
    #[must_use]
    pub fn form_body(&self) -> String {
        format!(
            "socket_id={}&channel_name={}",
            form_encode(&self.socket_id),
            form_encode(&self.channel_name)
        )
    }

    /// The same as a JSON object (Laravel reads either).
    #[must_use]
    pub fn json_body(&self) -> String {
        format!(
            "{{\"socket_id\":{},\"channel_name\":{}}}",
            super::frames::json_string(&self.socket_id),
            super::frames::json_string(&self.channel_name)
        )
    }
}

/// `application/x-www-form-urlencoded` for one value.
fn form_encode(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    for b in s.bytes() {
        if b.is_ascii_alphanumeric() || matches!(b, b'-' | b'_' | b'.' | b'*') {
            out.push(char::from(b));
        } else if b == b' ' {
            out.push('+');
        } else {
            out.push_str(&format!("%{b:02X}"));
        }
    }
    out
}

/// The auth bridge's answer: `{"auth": "APP_KEY:SIGNATURE"}`, with a
/// presence channel's `channel_data`. Its `Debug` shows the app key only.
///
/// ```
/// use human_plus_core::ChannelAuth;
///
/// let a = ChannelAuth::from_response(br#"{"auth":"key:0a1b"}"#)?;
/// assert_eq!(a.app_key(), "key");
/// assert!(!format!("{a:?}").contains("0a1b"));
/// assert!(ChannelAuth::from_response(br#"{"message":"This action is unauthorized."}"#).is_err());
/// # Ok::<(), human_plus_core::PusherError>(())
/// ```
#[derive(Clone, PartialEq, Eq)]
pub struct ChannelAuth {
    auth: String,
    channel_data: Option<String>,
}

impl fmt::Debug for ChannelAuth {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ChannelAuth")
            .field("app_key", &self.app_key())
            .field("signature", &"[redacted]")
            .field("channel_data", &self.channel_data)
            .finish()
    }
}

#[derive(Deserialize)]
struct AuthWire {
    auth: String,
    #[serde(default)]
    channel_data: Option<String>,
}

impl ChannelAuth {
    /// An auth string (and presence `channel_data`), checked: `KEY:SIG`
    /// with a non-empty key and a signature of hexadecimal digits, no
    /// longer than [`MAX_AUTH_BYTES`]; `channel_data` a JSON object with a
    /// `user_id`, no longer than [`MAX_CHANNEL_DATA_BYTES`].
    ///
    /// # Errors
    /// [`PusherError::AuthResponse`] or [`PusherError::ChannelData`].
    pub fn new(auth: &str, channel_data: Option<&str>) -> Result<ChannelAuth, PusherError> {
        let shape_ok = auth.len() <= MAX_AUTH_BYTES
            && auth.split_once(':').is_some_and(|(key, sig)| {
                is_app_key(key) && !sig.is_empty() && sig.bytes().all(|b| b.is_ascii_hexdigit())
            });
        if !shape_ok {
            return Err(PusherError::AuthResponse);
        }
        if let Some(cd) = channel_data {
            let ok = cd.len() <= MAX_CHANNEL_DATA_BYTES
                && serde_json::from_str::<serde_json::Value>(cd)
                    .ok()
                    .is_some_and(|v| {
                        v.get("user_id")
                            .is_some_and(|u| u.is_string() || u.is_number())
                    });
            if !ok {
                return Err(PusherError::ChannelData);
            }
        }
        Ok(ChannelAuth {
            auth: auth.to_owned(),
            channel_data: channel_data.map(str::to_owned),
        })
    }

    /// Reads the bridge's JSON answer.
    ///
    /// # Errors
    /// [`PusherError::AuthResponse`] when it is not `{"auth": "KEY:SIG"}`;
    /// [`PusherError::ChannelData`] when its `channel_data` is malformed.
    pub fn from_response(body: &[u8]) -> Result<ChannelAuth, PusherError> {
        if body.len() > MAX_AUTH_BYTES + MAX_CHANNEL_DATA_BYTES + 1024 {
            return Err(PusherError::AuthResponse);
        }
        let wire: AuthWire = serde_json::from_slice(body).map_err(|_| PusherError::AuthResponse)?;
        ChannelAuth::new(&wire.auth, wire.channel_data.as_deref())
    }

    /// The app key the bridge signed for.
    #[must_use]
    pub fn app_key(&self) -> &str {
        self.auth.split_once(':').map_or("", |(k, _)| k)
    }

    /// The whole `KEY:SIG` string, for the subscribe frame.
    #[must_use]
    pub fn expose(&self) -> &str {
        &self.auth
    }

    /// A presence channel's `channel_data`, as signed.
    #[must_use]
    pub fn channel_data(&self) -> Option<&str> {
        self.channel_data.as_deref()
    }
}

/// Whether `socket_id` has the protocol's `digits.digits` shape.
#[must_use]
pub fn is_pusher_socket_id(socket_id: &str) -> bool {
    is_socket_id(socket_id)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn unhex(s: &str) -> Vec<u8> {
        (0..s.len())
            .step_by(2)
            .map(|i| u8::from_str_radix(&s[i..i + 2], 16).unwrap())
            .collect()
    }

    #[test]
    fn hmac_matches_rfc_4231() {
        // Test cases 1, 2, 6 (a key longer than the block) and 7.
        let cases: [(Vec<u8>, Vec<u8>, &str); 4] = [
            (
                vec![0x0b; 20],
                b"Hi There".to_vec(),
                "b0344c61d8db38535ca8afceaf0bf12b881dc200c9833da726e9376c2e32cff7",
            ),
            (
                b"Jefe".to_vec(),
                b"what do ya want for nothing?".to_vec(),
                "5bdcc146bf60754e6a042426089575c75a003f089d2739839dec58b964ec3843",
            ),
            (
                vec![0xaa; 131],
                b"Test Using Larger Than Block-Size Key - Hash Key First".to_vec(),
                "60e431591ee0b67f0d8a26aacbf5b77f8e0bc6213728c5140546040f0ee37f54",
            ),
            (
                vec![0xaa; 131],
                b"This is a test using a larger than block-size key and a larger than block-size data. The key needs to be hashed before being used by the HMAC algorithm.".to_vec(),
                "9b09ffa71b942fcb27635fbcd5b0e944bfdc63644f0713938a7f51535c3a35e2",
            ),
        ];
        for (key, msg, mac) in cases {
            assert_eq!(hmac_sha256(&key, &msg).to_vec(), unhex(mac));
        }
        // A key of exactly one block is used as is.
        assert_ne!(hmac_sha256(&[1; 64], b"x"), hmac_sha256(&[1; 65], b"x"));
    }

    #[test]
    fn presence_signature_matches_pusher_docs() {
        let auth = sign_channel_auth(
            "278d425bdf160c739803",
            &PusherSecret::new("7ad3773142a6692b25b8"),
            "1234.1234",
            "presence-foobar",
            Some(r#"{"user_id":10,"user_info":{"name":"Mr. Channels"}}"#),
        );
        assert_eq!(
            auth,
            "278d425bdf160c739803:31935e7d86dba64c2a90aed31fdc61869f9b22ba9d8863bba239c03ca481bc80"
        );
    }

    #[test]
    fn verification_refuses_every_change() {
        let s = PusherSecret::new("secret");
        let good = sign_channel_auth("key", &s, "1.2", "private-c", None);
        assert!(verify_channel_auth(
            "key",
            &s,
            "1.2",
            "private-c",
            None,
            &good
        ));
        assert!(!verify_channel_auth(
            "key",
            &s,
            "1.2",
            "private-d",
            None,
            &good
        ));
        assert!(!verify_channel_auth(
            "kez",
            &s,
            "1.2",
            "private-c",
            None,
            &good
        ));
        assert!(!verify_channel_auth(
            "key",
            &PusherSecret::new("secreu"),
            "1.2",
            "private-c",
            None,
            &good
        ));
        assert!(!verify_channel_auth(
            "key",
            &s,
            "1.2",
            "private-c",
            Some("{}"),
            &good
        ));
        assert!(!verify_channel_auth(
            "key",
            &s,
            "1.2",
            "private-c",
            None,
            &good[..good.len() - 1]
        ));
        assert!(!verify_channel_auth(
            "key",
            &s,
            "1.2",
            "private-c",
            None,
            ""
        ));
    }

    #[test]
    fn bridge_answers() {
        assert!(ChannelAuth::from_response(br#"{"auth":"k:00ff"}"#).is_ok());
        for bad in [
            &br#"{"auth":""}"#[..],
            br#"{"auth":"k"}"#,
            br#"{"auth":":00"}"#,
            br#"{"auth":"k:zz"}"#,
            br#"{"auth":"k:"}"#,
            br#"{"auth":"k y:00"}"#,
            br#"{"auth":7}"#,
            b"",
            b"<html>",
        ] {
            assert_eq!(
                ChannelAuth::from_response(bad),
                Err(PusherError::AuthResponse),
                "{}",
                String::from_utf8_lossy(bad)
            );
        }
        assert!(
            ChannelAuth::from_response(br#"{"auth":"k:00","channel_data":"{\"user_id\":\"a\"}"}"#)
                .is_ok()
        );
        assert_eq!(
            ChannelAuth::from_response(br#"{"auth":"k:00","channel_data":"{}"}"#),
            Err(PusherError::ChannelData)
        );
        let long = format!(r#"{{"auth":"k:{}"}}"#, "0".repeat(MAX_AUTH_BYTES));
        assert!(ChannelAuth::from_response(long.as_bytes()).is_err());
    }

    #[test]
    fn form_bodies_escape() {
        let r = AuthRequest {
            socket_id: "1.2".into(),
            channel_name: "presence-a=b;c@d,e".into(),
        };
        assert_eq!(
            r.form_body(),
            "socket_id=1.2&channel_name=presence-a%3Db%3Bc%40d%2Ce"
        );
    }
}
