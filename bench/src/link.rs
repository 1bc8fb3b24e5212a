//! A simulated network link on loopback: a TCP forwarder that adds the
//! latency of a real round trip, so the benchmarks can count round trips
//! instead of guessing them.
//!
//! The model, for a link with round-trip time `RTT`:
//!
//! * **a new connection costs one round trip before its first byte**: a
//!   connection accepted at `A` forwards nothing the client wrote before
//!   `A + RTT` (the TCP handshake: SYN there, SYN-ACK back), so its first
//!   request reaches the server no earlier than `A + 1.5 RTT`, and nothing
//!   the server wrote reaches the client before `A + RTT`;
//! * **every chunk takes half a round trip in each direction**: a chunk
//!   read at `t` is written on the other side at `t + RTT/2` (or the
//!   handshake bound above, whichever is later). Each direction is a delay
//!   line: chunks keep their order and are pipelined (a chunk never waits
//!   behind the delay of the one before it), and bandwidth is unlimited.
//!
//! So a request and its answer over a kept connection cost 1 RTT, over a
//! new one 2 RTT; a TLS 1.3 handshake adds 1 RTT, an HTTP CONNECT through a
//! proxy on the client's side of the link adds the proxy's new upstream
//! connection (1 RTT). The forwarder counts the connections it accepted.
//!
//! [`Schedule`] is the model as a pure function (unit-tested with exact
//! instants); [`pipe`] runs it over any pair of byte streams; [`Link`]
//! listens on `127.0.0.1` and forwards every connection to a target.
//!
//! Delays are kept by a [`Clock`]: tokio's timer wheel rounds every sleep
//! up to the next millisecond (up to 2.5% of a 40 ms round trip per half
//! trip, on every chunk), so [`Link`] uses [`Clock::Precise`], one thread
//! that sleeps to the instant (the kernel's timer slack, tens of
//! microseconds) and wakes the delay lines; the unit tests use
//! [`Clock::Tokio`] with tokio's clock paused, where time is exact.

use std::cmp::Reverse;
use std::collections::BinaryHeap;
use std::io;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Condvar, Mutex, OnceLock, PoisonError};
use std::time::Duration;

use bytes::Bytes;
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::{mpsc, oneshot};
use tokio::task::JoinHandle;
use tokio::time::Instant;

/// Which way bytes flow through the link.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Direction {
    /// From the connecting side (the agent) to the accepting side (the
    /// relay).
    Up,
    /// From the accepting side back to the connecting side.
    Down,
}

/// When bytes read on one side of one connection are delivered on the
/// other: the link's model (see the [module documentation](self)).
///
/// ```
/// use std::time::Duration;
/// use human_plus_bench::link::{Direction, Schedule};
/// use tokio::time::Instant;
///
/// let opened = Instant::now();
/// let s = Schedule::new(Duration::from_millis(40), opened);
/// // The first request waits for the handshake, then half a round trip.
/// assert_eq!(s.due(Direction::Up, opened), opened + Duration::from_millis(60));
/// // Later bytes only take half a round trip.
/// let later = opened + Duration::from_secs(1);
/// assert_eq!(s.due(Direction::Up, later), later + Duration::from_millis(20));
/// assert_eq!(s.due(Direction::Down, later), later + Duration::from_millis(20));
/// ```
#[derive(Debug, Clone, Copy)]
pub struct Schedule {
    rtt: Duration,
    opened: Instant,
}

impl Schedule {
    /// The schedule of a connection accepted at `opened` on a link with
    /// round-trip time `rtt`.
    #[must_use]
    pub fn new(rtt: Duration, opened: Instant) -> Schedule {
        Schedule { rtt, opened }
    }

    /// The round-trip time.
    #[must_use]
    pub fn rtt(&self) -> Duration {
        self.rtt
    }

    /// When a chunk read at `read_at`, flowing `direction`, is written on
    /// the other side.
    #[must_use]
    pub fn due(&self, direction: Direction, read_at: Instant) -> Instant {
        let half = self.rtt / 2;
        match direction {
            // The client may send once the SYN-ACK is back (opened + RTT).
            Direction::Up => read_at.max(self.opened + self.rtt) + half,
            // The server may send once the SYN is in (opened + RTT/2).
            Direction::Down => read_at.max(self.opened + half) + half,
        }
    }
}

/// What keeps a delay line's time.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Clock {
    /// tokio's timer (millisecond resolution; follows a paused clock in
    /// tests).
    Tokio,
    /// A dedicated thread sleeping to the instant (never early; late by the
    /// kernel's timer slack and scheduling only).
    Precise,
}

impl Clock {
    /// Waits until `due` (at once when it has passed).
    pub async fn sleep_until(self, due: Instant) {
        match self {
            Clock::Tokio => tokio::time::sleep_until(due).await,
            Clock::Precise => precise_sleep_until(due.into_std()).await,
        }
    }
}

/// One pending wake-up of the precise timer, ordered by instant, then by
/// arrival.
struct Wakeup {
    due: std::time::Instant,
    seq: u64,
    tx: oneshot::Sender<()>,
}

impl PartialEq for Wakeup {
    fn eq(&self, other: &Self) -> bool {
        (self.due, self.seq) == (other.due, other.seq)
    }
}

impl Eq for Wakeup {}

impl PartialOrd for Wakeup {
    fn partial_cmp(&self, other: &Self) -> Option<std::cmp::Ordering> {
        Some(self.cmp(other))
    }
}

impl Ord for Wakeup {
    fn cmp(&self, other: &Self) -> std::cmp::Ordering {
        (self.due, self.seq).cmp(&(other.due, other.seq))
    }
}

/// The precise timer: its queue (earliest first) and the condition
/// variable its thread sleeps on.
struct Timers {
    queue: Mutex<BinaryHeap<Reverse<Wakeup>>>,
    changed: Condvar,
}

static TIMERS: OnceLock<Arc<Timers>> = OnceLock::new();

fn timers() -> &'static Arc<Timers> {
    TIMERS.get_or_init(|| {
        let timers = Arc::new(Timers {
            queue: Mutex::new(BinaryHeap::new()),
            changed: Condvar::new(),
        });
        let run = Arc::clone(&timers);
        std::thread::Builder::new()
            .name("link-timer".into())
            .spawn(move || timer_thread(&run))
            .unwrap_or_else(|e| panic!("the link's timer thread: {e}"));
        timers
    })
}

/// Fires every wake-up once its instant has come (never before: a spurious
/// or early return of the wait is checked again); sleeps until the
/// earliest one, or a new one, otherwise.
fn timer_thread(timers: &Timers) {
    let mut queue = timers.queue.lock().unwrap_or_else(PoisonError::into_inner);
    loop {
        let now = std::time::Instant::now();
        let earliest = queue.peek().map(|w| w.0.due);
        match earliest {
            None => {
                queue = timers
                    .changed
                    .wait(queue)
                    .unwrap_or_else(PoisonError::into_inner);
            }
            Some(due) if due <= now => {
                if let Some(Reverse(wakeup)) = queue.pop() {
                    let _ = wakeup.tx.send(());
                }
            }
            Some(due) => {
                queue = timers
                    .changed
                    .wait_timeout(queue, due - now)
                    .unwrap_or_else(PoisonError::into_inner)
                    .0;
            }
        }
    }
}

async fn precise_sleep_until(due: std::time::Instant) {
    static SEQ: AtomicU64 = AtomicU64::new(0);
    if due <= std::time::Instant::now() {
        return;
    }
    let timers = timers();
    let (tx, rx) = oneshot::channel();
    let seq = SEQ.fetch_add(1, Ordering::Relaxed);
    timers
        .queue
        .lock()
        .unwrap_or_else(PoisonError::into_inner)
        .push(Reverse(Wakeup { due, seq, tx }));
    timers.changed.notify_one();
    let _ = rx.await;
}

/// The largest chunk read at once.
const CHUNK: usize = 64 * 1024;

/// Chunks in flight per direction before the reader waits.
const IN_FLIGHT: usize = 4096;

/// One direction of one connection: reads chunks from `from`, writes each
/// to `to` when [`Schedule::due`] says. The end of `from` is passed on as a
/// write shutdown, on time too. Ends when either side ends.
async fn delay_line<R, W>(
    mut from: R,
    mut to: W,
    schedule: Schedule,
    direction: Direction,
    clock: Clock,
) where
    R: AsyncRead + Unpin,
    W: AsyncWrite + Unpin,
{
    let (tx, mut rx) = mpsc::channel::<(Instant, Option<Bytes>)>(IN_FLIGHT);
    let reader = async move {
        let mut buf = vec![0u8; CHUNK];
        loop {
            let n = from.read(&mut buf).await.unwrap_or(0);
            let due = schedule.due(direction, Instant::now());
            let chunk = buf.get(..n).filter(|c| !c.is_empty());
            let item = chunk.map(Bytes::copy_from_slice);
            let end = item.is_none();
            if tx.send((due, item)).await.is_err() || end {
                return;
            }
        }
    };
    let writer = async move {
        while let Some((due, chunk)) = rx.recv().await {
            clock.sleep_until(due).await;
            let Some(chunk) = chunk else {
                let _ = to.shutdown().await;
                return;
            };
            if to.write_all(&chunk).await.is_err() {
                return;
            }
        }
    };
    tokio::select! {
        // The writer finishing first means the far side is gone: stop
        // reading too (dropping `from`).
        () = writer => {}
        () = async { reader.await; std::future::pending::<()>().await } => {}
    }
}

/// Forwards between `client` (the connecting side) and `server` through
/// the link's two delay lines, timed by `clock`, until both directions have
/// ended.
pub async fn pipe<C, S>(client: C, server: S, schedule: Schedule, clock: Clock)
where
    C: AsyncRead + AsyncWrite + Unpin,
    S: AsyncRead + AsyncWrite + Unpin,
{
    let (client_read, client_write) = tokio::io::split(client);
    let (server_read, server_write) = tokio::io::split(server);
    tokio::join!(
        delay_line(client_read, server_write, schedule, Direction::Up, clock),
        delay_line(server_read, client_write, schedule, Direction::Down, clock),
    );
}

/// A link listening on `127.0.0.1`, forwarding every connection to one
/// target through [`pipe`]. Dropping it stops listening and cuts every
/// connection it carries.
#[derive(Debug)]
pub struct Link {
    addr: SocketAddr,
    rtt: Duration,
    accepted: Arc<AtomicU64>,
    task: JoinHandle<()>,
}

impl Link {
    /// Starts a link with round-trip time `rtt` in front of `target`. Must
    /// be called within a tokio runtime (with time enabled).
    ///
    /// # Errors
    /// When it cannot bind a port on `127.0.0.1`.
    pub async fn start(target: SocketAddr, rtt: Duration) -> io::Result<Link> {
        let listener = TcpListener::bind("127.0.0.1:0").await?;
        let addr = listener.local_addr()?;
        let accepted = Arc::new(AtomicU64::new(0));
        let count = Arc::clone(&accepted);
        let task = tokio::spawn(async move {
            let mut connections = tokio::task::JoinSet::new();
            loop {
                tokio::select! {
                    accept = listener.accept() => {
                        let Ok((client, _)) = accept else { continue };
                        let opened = Instant::now();
                        count.fetch_add(1, Ordering::Relaxed);
                        connections.spawn(async move {
                            let Ok(server) = TcpStream::connect(target).await else {
                                return;
                            };
                            let _ = client.set_nodelay(true);
                            let _ = server.set_nodelay(true);
                            let schedule = Schedule::new(rtt, opened);
                            pipe(client, server, schedule, Clock::Precise).await;
                        });
                    }
                    Some(_) = connections.join_next(), if !connections.is_empty() => {}
                }
            }
        });
        Ok(Link {
            addr,
            rtt,
            accepted,
            task,
        })
    }

    /// Where it listens.
    #[must_use]
    pub fn addr(&self) -> SocketAddr {
        self.addr
    }

    /// Its port on `127.0.0.1`.
    #[must_use]
    pub fn port(&self) -> u16 {
        self.addr.port()
    }

    /// Its round-trip time.
    #[must_use]
    pub fn rtt(&self) -> Duration {
        self.rtt
    }

    /// How many connections it has accepted so far.
    #[must_use]
    pub fn connections(&self) -> u64 {
        self.accepted.load(Ordering::Relaxed)
    }
}

impl Drop for Link {
    fn drop(&mut self) {
        self.task.abort();
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]

    use super::*;

    const RTT: Duration = Duration::from_millis(40);

    fn ms(n: u64) -> Duration {
        Duration::from_millis(n)
    }

    #[test]
    fn the_schedule_charges_the_handshake_once() {
        let t0 = Instant::now();
        let s = Schedule::new(RTT, t0);
        // Client bytes written at once wait for the handshake (1 RTT), then
        // travel (RTT/2).
        assert_eq!(s.due(Direction::Up, t0), t0 + ms(60));
        assert_eq!(s.due(Direction::Up, t0 + ms(10)), t0 + ms(60));
        assert_eq!(s.due(Direction::Up, t0 + ms(40)), t0 + ms(60));
        // After the handshake, only the travel.
        assert_eq!(s.due(Direction::Up, t0 + ms(41)), t0 + ms(61));
        assert_eq!(s.due(Direction::Up, t0 + ms(500)), t0 + ms(520));
        // The server's bytes: never before the client could have them.
        assert_eq!(s.due(Direction::Down, t0), t0 + ms(40));
        assert_eq!(s.due(Direction::Down, t0 + ms(60)), t0 + ms(80));
        // A request answered at once by the server: 2 RTT on a new
        // connection, 1 RTT later on.
        let at_server = s.due(Direction::Up, t0);
        assert_eq!(s.due(Direction::Down, at_server) - t0, RTT * 2);
        let later = t0 + ms(1000);
        let at_server = s.due(Direction::Up, later);
        assert_eq!(s.due(Direction::Down, at_server) - later, RTT);
    }

    #[test]
    fn the_schedule_keeps_order_and_never_serialises() {
        let t0 = Instant::now();
        let s = Schedule::new(RTT, t0);
        let reads: Vec<Instant> = (0..50).map(|i| t0 + ms(100 + i)).collect();
        let dues: Vec<Instant> = reads.iter().map(|&r| s.due(Direction::Up, r)).collect();
        assert!(dues.windows(2).all(|w| w[0] <= w[1]), "order kept");
        // Each chunk is delayed by RTT/2 from its own read, not from the
        // one before it.
        for (read, due) in reads.iter().zip(&dues) {
            assert_eq!(*due - *read, RTT / 2);
        }
    }

    /// Two in-memory streams joined by the link: what the client writes
    /// reaches the server through the delay lines, and back.
    fn linked(rtt: Duration) -> (tokio::io::DuplexStream, tokio::io::DuplexStream) {
        let (client, near) = tokio::io::duplex(1 << 16);
        let (far, server) = tokio::io::duplex(1 << 16);
        let schedule = Schedule::new(rtt, Instant::now());
        tokio::spawn(pipe(near, far, schedule, Clock::Tokio));
        (client, server)
    }

    /// An echo server on one end of an in-memory stream: answers every
    /// chunk at once.
    async fn echo(mut server: tokio::io::DuplexStream) {
        let mut buf = [0u8; 1024];
        loop {
            match server.read(&mut buf).await {
                Ok(0) | Err(_) => return,
                Ok(n) => {
                    if server.write_all(&buf[..n]).await.is_err() {
                        return;
                    }
                }
            }
        }
    }

    async fn round_trip(client: &mut tokio::io::DuplexStream, byte: u8) -> Duration {
        let start = Instant::now();
        client.write_all(&[byte]).await.unwrap();
        let mut got = [0u8; 1];
        client.read_exact(&mut got).await.unwrap();
        assert_eq!(got[0], byte);
        start.elapsed()
    }

    // With tokio's clock paused, time moves only when every task waits on a
    // timer, and in-memory streams need no I/O driver: the elapsed times
    // are exact, whatever the machine's load.
    #[tokio::test(start_paused = true)]
    async fn a_new_connection_costs_two_round_trips_then_one() {
        let rtt = ms(200);
        let (mut client, server) = linked(rtt);
        tokio::spawn(echo(server));
        assert_eq!(round_trip(&mut client, 1).await, rtt * 2);
        assert_eq!(round_trip(&mut client, 2).await, rtt);
        tokio::time::sleep(ms(5000)).await;
        assert_eq!(round_trip(&mut client, 3).await, rtt);
    }

    #[tokio::test(start_paused = true)]
    async fn chunks_are_pipelined_in_order() {
        let rtt = ms(200);
        let (mut client, mut server) = linked(rtt);
        tokio::time::sleep(rtt * 3).await;
        let start = Instant::now();
        let sender = tokio::spawn(async move {
            for i in 0..20u8 {
                client.write_all(&[i]).await.unwrap();
                tokio::time::sleep(ms(1)).await;
            }
            client
        });
        let mut got = Vec::new();
        let mut buf = [0u8; 64];
        while got.len() < 20 {
            let n = server.read(&mut buf).await.unwrap();
            got.extend_from_slice(&buf[..n]);
        }
        // The last byte was written at ~19 ms and arrives RTT/2 later:
        // nowhere near the 20 x RTT/2 of a serialising forwarder.
        let took = start.elapsed();
        assert!(took >= rtt / 2 + ms(19), "{took:?}");
        assert!(took <= rtt / 2 + ms(25), "{took:?}");
        assert_eq!(got, (0..20u8).collect::<Vec<_>>());
        drop(sender.await.unwrap());
    }

    #[tokio::test(start_paused = true)]
    async fn the_end_of_a_stream_is_passed_on_late() {
        let rtt = ms(200);
        let (client, mut server) = linked(rtt);
        tokio::time::sleep(rtt * 3).await;
        let start = Instant::now();
        let (_read, mut write) = tokio::io::split(client);
        write.shutdown().await.unwrap();
        let mut rest = Vec::new();
        server.read_to_end(&mut rest).await.unwrap();
        assert!(rest.is_empty());
        assert_eq!(start.elapsed(), rtt / 2);
    }

    /// The precise clock never wakes early, whatever order the wake-ups
    /// were asked in (later ones first here), and wakes every one.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn the_precise_clock_is_never_early() {
        let start = Instant::now();
        let mut sleeps = tokio::task::JoinSet::new();
        for i in (0..40u64).rev() {
            let due = start + ms(5 + (i * 7) % 60);
            sleeps.spawn(async move {
                Clock::Precise.sleep_until(due).await;
                (due, Instant::now())
            });
        }
        let mut woken = 0;
        while let Some(done) = sleeps.join_next().await {
            let (due, at) = done.unwrap();
            assert!(at >= due, "woke {:?} early", due - at);
            assert!(at - due < Duration::from_secs(30));
            woken += 1;
        }
        assert_eq!(woken, 40);
        // A past instant returns at once.
        Clock::Precise.sleep_until(start).await;
    }

    /// Over real sockets the timing is only bounded below (timers never
    /// fire early): a new connection's exchange takes at least 2 RTT, a
    /// kept one's at least 1 RTT, and the link counts the connections.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn real_sockets_and_the_connection_count() {
        let server = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let target = server.local_addr().unwrap();
        tokio::spawn(async move {
            while let Ok((mut s, _)) = server.accept().await {
                tokio::spawn(async move {
                    let mut buf = [0u8; 1024];
                    while let Ok(n) = s.read(&mut buf).await {
                        if n == 0 || s.write_all(&buf[..n]).await.is_err() {
                            return;
                        }
                    }
                });
            }
        });
        let rtt = ms(200);
        let link = Link::start(target, rtt).await.unwrap();
        assert_eq!(link.connections(), 0);
        for expected in 1..=2u64 {
            let start = std::time::Instant::now();
            let mut c = TcpStream::connect(link.addr()).await.unwrap();
            c.set_nodelay(true).unwrap();
            let mut got = [0u8; 1];
            c.write_all(b"a").await.unwrap();
            c.read_exact(&mut got).await.unwrap();
            let first = start.elapsed();
            let start = std::time::Instant::now();
            c.write_all(b"b").await.unwrap();
            c.read_exact(&mut got).await.unwrap();
            let kept = start.elapsed();
            assert_eq!(&got, b"b");
            assert!(first >= rtt * 2, "new connection: {first:?}");
            assert!(kept >= rtt, "kept connection: {kept:?}");
            // Only a hang (or a forwarder serialising far more) fails these.
            assert!(first < Duration::from_secs(30) && kept < Duration::from_secs(30));
            assert_eq!(link.connections(), expected);
        }
    }
}
