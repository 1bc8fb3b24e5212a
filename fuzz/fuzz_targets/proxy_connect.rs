//! The CONNECT handshake codec: `ProxyConnectResponse::parse` and
//! `established`, `proxy_connect_request` and `ProxyAddr::connect_request`
//! with credentials.
//!
//! Input: byte 0 = mode; the rest is the proxy's answer (mode even) or
//! `target\0authority\0port\0user\0password` for the request builders
//! (mode odd).
//!
//! Properties:
//! - `parse` never panics; `Ok(Some((status, head_len)))` has
//!   `head_len ≤ input` and ≤ 8 KiB, a status in 100..=599, and a head
//!   ending in a blank line; every shorter prefix is still incomplete
//!   (`Ok(None)`), the head alone parses the same, and bytes after the
//!   head never change the answer; `Ok(None)` only below 8 KiB;
//! - `established` agrees with `parse`, and a 407 is `proxy_auth_required`
//!   naming at most 8 schemes of at most 32 token bytes;
//! - `proxy_connect_request` writes exactly one request line, one `Host`
//!   header and the blank line: no CR or LF a hostile host could inject;
//!   with credentials `ProxyCredentials` accepts, `connect_request` adds
//!   exactly one `Proxy-Authorization` line, whose value is base64.

#![no_main]

use human_plus_core::{
    Error, PROXY_CONNECT_MAX_HEAD_BYTES, ProxyAddr, ProxyConnectResponse, ProxyCredentials,
    proxy_connect_request,
};
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let (mode, buf) = data.split_first().unwrap_or((&0, &[]));
    if mode % 2 == 0 {
        match (
            ProxyConnectResponse::parse(buf),
            ProxyConnectResponse::established(buf),
        ) {
            (Ok(Some((s, len))), Ok(Some(est))) => assert!((200..=299).contains(&s) && est == len),
            (Ok(Some((407, _))), Err(Error::ProxyAuthRequired(auth))) => {
                assert!(auth.offered().len() <= 8);
                for scheme in auth.offered() {
                    assert!(scheme.len() <= 32);
                    assert!(
                        scheme
                            .bytes()
                            .all(|b| b.is_ascii_alphanumeric() || b"-_.".contains(&b))
                    );
                }
            }
            (Ok(Some((s, _))), Err(e)) => {
                assert!(!(200..=299).contains(&s) && s != 407);
                assert_eq!(e.code(), "transport_failed");
            }
            (Ok(None), Ok(None)) | (Err(_), Err(_)) => {}
            (p, e) => panic!("parse {p:?} and established {e:?} disagree"),
        }
        match ProxyConnectResponse::parse(buf) {
            Ok(Some((status, head_len))) => {
                assert!(
                    head_len <= buf.len(),
                    "head_len {head_len} > input {}",
                    buf.len()
                );
                assert!(head_len <= PROXY_CONNECT_MAX_HEAD_BYTES);
                assert!((100..=599).contains(&status));
                let head = &buf[..head_len];
                assert!(head.ends_with(b"\n\n") || head.ends_with(b"\n\r\n"));
                assert_eq!(
                    ProxyConnectResponse::parse(head),
                    Ok(Some((status, head_len)))
                );
                for k in [0, head_len / 2, head_len.saturating_sub(1)] {
                    if k < head_len {
                        assert_eq!(
                            ProxyConnectResponse::parse(&buf[..k]),
                            Ok(None),
                            "prefix {k}"
                        );
                    }
                }
                let mut more = buf.to_vec();
                more.extend_from_slice(b"\r\n\r\nHTTP/1.1 500 x\r\n\r\n");
                assert_eq!(
                    ProxyConnectResponse::parse(&more),
                    Ok(Some((status, head_len)))
                );
            }
            Ok(None) => assert!(buf.len() < PROXY_CONNECT_MAX_HEAD_BYTES),
            Err(e) => {
                assert_eq!(e.code(), "transport_failed");
                let _ = ProxyConnectResponse::refusal(407);
            }
        }
    } else {
        let text = String::from_utf8_lossy(buf);
        let mut parts = text.splitn(5, '\0');
        let target = parts.next().unwrap_or_default();
        let authority = parts.next().unwrap_or_default();
        let port = parts
            .next()
            .and_then(|p| p.parse::<u16>().ok())
            .unwrap_or(443);
        let (user, password) = (parts.next(), parts.next());
        let req = proxy_connect_request(target, port, authority);
        if let (Some(user), Some(password)) = (user, password)
            && let Ok(credentials) = ProxyCredentials::new(user, password)
        {
            let proxy = ProxyAddr {
                host: "p".into(),
                port: 1,
                credentials: Some(credentials),
            };
            let with = proxy.connect_request(target, port, authority);
            assert!(format!("{with:?}").contains("[redacted]"));
            assert!(with.starts_with(&req[..req.len() - 2]));
            let header = &with[req.len() - 2..];
            assert!(header.starts_with(b"Proxy-Authorization: Basic "));
            assert!(header.ends_with(b"\r\n\r\n"));
            let value = &header[27..header.len() - 4];
            assert!(
                value
                    .iter()
                    .all(|b| b.is_ascii_alphanumeric() || b"+/=".contains(b))
            );
            assert_eq!(value.len() % 4, 0);
            assert_eq!(with.iter().filter(|&&b| b == b'\n').count(), 4);
        }
        assert!(req.starts_with(b"CONNECT "));
        assert!(req.ends_with(b"\r\n\r\n"));
        assert_eq!(req.iter().filter(|&&b| b == b'\r').count(), 3);
        assert_eq!(req.iter().filter(|&&b| b == b'\n').count(), 3);
        let line_end = req.windows(2).position(|w| w == b"\r\n").unwrap();
        let line = &req[..line_end];
        assert!(line.ends_with(b" HTTP/1.1"));
        assert_eq!(
            line.iter().filter(|&&b| b == b' ').count(),
            2,
            "one request target"
        );
        assert!(req[line_end + 2..].starts_with(b"Host: "));
        let host_line_end = line_end
            + 2
            + req[line_end + 2..]
                .windows(2)
                .position(|w| w == b"\r\n")
                .unwrap();
        let host_line = &req[line_end + 2 + 6..host_line_end];
        assert!(!host_line.contains(&b' '), "one Host value");
    }
});
