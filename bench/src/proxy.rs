//! A small HTTP CONNECT egress proxy on `127.0.0.1`, for the production
//! path of [`crate::across`]: the agent's relay traffic goes through it, and
//! its upstream connections go wherever the CONNECT asks (in the
//! benchmarks, a [`crate::link::Link`] in front of the relay), so every
//! tunnel pays the link's cost of a new connection, as a real egress proxy
//! on the agent's side of a network would.
//!
//! It answers `200 Connection established` once its upstream connection is
//! open, `405` to anything but CONNECT, `400` to a malformed request head and
//! `502` when the target cannot be reached. It counts the tunnels it opened.

use std::io;
use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use tokio::task::JoinHandle;

/// The longest request head read.
const MAX_HEAD: usize = 8192;

/// A running CONNECT proxy. Dropping it stops listening and cuts every
/// tunnel it carries.
#[derive(Debug)]
pub struct ConnectProxy {
    addr: SocketAddr,
    tunnels: Arc<AtomicU64>,
    task: JoinHandle<()>,
}

/// Reads a request head up to its blank line, byte by byte (nothing after
/// the head is consumed: the tunnel's first bytes stay in the socket).
async fn read_head(stream: &mut TcpStream) -> Option<String> {
    let mut head = Vec::with_capacity(256);
    let mut byte = [0u8; 1];
    while !head.ends_with(b"\r\n\r\n") {
        if head.len() >= MAX_HEAD || stream.read_exact(&mut byte).await.is_err() {
            return None;
        }
        head.extend_from_slice(&byte);
    }
    String::from_utf8(head).ok()
}

async fn serve(mut client: TcpStream, tunnels: Arc<AtomicU64>) {
    let _ = client.set_nodelay(true);
    let Some(head) = read_head(&mut client).await else {
        let _ = client
            .write_all(b"HTTP/1.1 400 Bad Request\r\ncontent-length: 0\r\n\r\n")
            .await;
        return;
    };
    let mut words = head.split_whitespace();
    let (method, target) = (words.next(), words.next());
    let (Some("CONNECT"), Some(target)) = (method, target) else {
        let _ = client
            .write_all(b"HTTP/1.1 405 Method Not Allowed\r\ncontent-length: 0\r\n\r\n")
            .await;
        return;
    };
    let Ok(mut upstream) = TcpStream::connect(target).await else {
        let _ = client
            .write_all(b"HTTP/1.1 502 Bad Gateway\r\ncontent-length: 0\r\n\r\n")
            .await;
        return;
    };
    let _ = upstream.set_nodelay(true);
    tunnels.fetch_add(1, Ordering::Relaxed);
    if client
        .write_all(b"HTTP/1.1 200 Connection established\r\n\r\n")
        .await
        .is_err()
    {
        return;
    }
    let _ = tokio::io::copy_bidirectional(&mut client, &mut upstream).await;
}

impl ConnectProxy {
    /// Starts a proxy on a free port of `127.0.0.1`. Must be called within
    /// a tokio runtime.
    ///
    /// # Errors
    /// When it cannot bind.
    pub async fn start() -> io::Result<ConnectProxy> {
        let listener = TcpListener::bind("127.0.0.1:0").await?;
        let addr = listener.local_addr()?;
        let tunnels = Arc::new(AtomicU64::new(0));
        let count = Arc::clone(&tunnels);
        let task = tokio::spawn(async move {
            let mut running = tokio::task::JoinSet::new();
            loop {
                tokio::select! {
                    accept = listener.accept() => {
                        if let Ok((client, _)) = accept {
                            running.spawn(serve(client, Arc::clone(&count)));
                        }
                    }
                    Some(_) = running.join_next(), if !running.is_empty() => {}
                }
            }
        });
        Ok(ConnectProxy {
            addr,
            tunnels,
            task,
        })
    }

    /// Where it listens.
    #[must_use]
    pub fn addr(&self) -> SocketAddr {
        self.addr
    }

    /// Its URL, for `--egress-proxy`.
    #[must_use]
    pub fn url(&self) -> String {
        format!("http://{}", self.addr)
    }

    /// How many tunnels it has opened so far.
    #[must_use]
    pub fn tunnels(&self) -> u64 {
        self.tunnels.load(Ordering::Relaxed)
    }
}

impl Drop for ConnectProxy {
    fn drop(&mut self) {
        self.task.abort();
    }
}

/// Opens a tunnel to `target` through the proxy at `proxy` (the client
/// side, used by the floor clients): sends the CONNECT and reads the answer
/// head.
///
/// # Errors
/// Connection failures, or an answer other than 200.
pub async fn tunnel(proxy: SocketAddr, target: SocketAddr) -> io::Result<TcpStream> {
    let mut stream = TcpStream::connect(proxy).await?;
    stream.set_nodelay(true)?;
    let request = format!("CONNECT {target} HTTP/1.1\r\nHost: {target}\r\n\r\n");
    stream.write_all(request.as_bytes()).await?;
    let head = read_head(&mut stream)
        .await
        .ok_or_else(|| io::Error::other("the proxy sent no answer head"))?;
    let status = head.split_whitespace().nth(1).unwrap_or_default();
    if status != "200" {
        return Err(io::Error::other(format!("the proxy answered {status}")));
    }
    Ok(stream)
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]

    use super::*;

    #[tokio::test]
    async fn tunnels_and_refusals() {
        let echo = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let target = echo.local_addr().unwrap();
        tokio::spawn(async move {
            while let Ok((mut s, _)) = echo.accept().await {
                tokio::spawn(async move {
                    let (mut r, mut w) = s.split();
                    let _ = tokio::io::copy(&mut r, &mut w).await;
                });
            }
        });
        let proxy = ConnectProxy::start().await.unwrap();
        let mut t = tunnel(proxy.addr(), target).await.unwrap();
        t.write_all(b"hello").await.unwrap();
        let mut got = [0u8; 5];
        t.read_exact(&mut got).await.unwrap();
        assert_eq!(&got, b"hello");
        assert_eq!(proxy.tunnels(), 1);

        let mut get = TcpStream::connect(proxy.addr()).await.unwrap();
        get.write_all(b"GET / HTTP/1.1\r\nHost: x\r\n\r\n")
            .await
            .unwrap();
        let mut answer = String::new();
        get.read_to_string(&mut answer).await.unwrap();
        assert!(answer.starts_with("HTTP/1.1 405"), "{answer}");

        // Port 0 cannot be connected to: 502, and no tunnel counted.
        let nowhere = SocketAddr::from(([127, 0, 0, 1], 0));
        let err = tunnel(proxy.addr(), nowhere).await.unwrap_err();
        assert!(err.to_string().contains("502"), "{err}");
        assert_eq!(proxy.tunnels(), 1);
    }
}
