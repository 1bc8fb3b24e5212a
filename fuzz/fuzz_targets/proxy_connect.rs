//! The CONNECT handshake codec: `ProxyConnectResponse::parse` and
//! `proxy_connect_request`.
//!
//! Input: byte 0 = mode; the rest is the proxy's answer (mode even) or
//! `target\0authority\0port` for the request builder (mode odd).
//!
//! Properties:
//! - `parse` never panics; `Ok(Some((status, head_len)))` has
//!   `head_len ≤ input` and ≤ 8 KiB, a status in 100..=599, and a head
//!   ending in a blank line; every shorter prefix is still incomplete
//!   (`Ok(None)`), the head alone parses the same, and bytes after the
//!   head never change the answer; `Ok(None)` only below 8 KiB;
//! - `proxy_connect_request` writes exactly one request line, one `Host`
//!   header and the blank line: no CR or LF a hostile host could inject.

#![no_main]

use human_plus_core::{PROXY_CONNECT_MAX_HEAD_BYTES, ProxyConnectResponse, proxy_connect_request};
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let (mode, buf) = data.split_first().unwrap_or((&0, &[]));
    if mode % 2 == 0 {
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
        let mut parts = text.splitn(3, '\0');
        let target = parts.next().unwrap_or_default();
        let authority = parts.next().unwrap_or_default();
        let port = parts
            .next()
            .and_then(|p| p.parse::<u16>().ok())
            .unwrap_or(443);
        let req = proxy_connect_request(target, port, authority);
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
