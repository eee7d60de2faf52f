//! The connection guard: how many sockets the server holds, and how long each may take.
//!
//! `axum::serve` accepts every connection and waits on each forever, so sockets that
//! trickle their headers, or send nothing, stay open as long as their peer likes and a
//! few hundred of them starve real clients. Here each connection is served by hyper's
//! HTTP/1 connection directly, with:
//!
//! - a slot of `--max-connections`: at the limit, the connection that has waited longest
//!   for a request (none under way: fresh, or still sending its head; kept-alive ones
//!   that have had a request only when no such one is left) is closed to make room, so
//!   an idle flood cannot lock clients out; when every connection is busy with a
//!   request, the next one waits in the listen queue;
//! - a watchdog that closes it when a request's head takes longer than
//!   `--header-timeout` from its first byte, or when nothing has moved either way for
//!   `--idle-timeout` while no search runs for it (never sent, kept alive unused, or its
//!   peer stopped reading the answer, which is then reset so the kernel drops the
//!   unsent bytes). The body's own deadline is the handler's.
//!
//! The socket is wrapped to see the bytes move ([`Watched`]); the service is wrapped to
//! see a request start, its handler end and its answer leave ([`Answering`]).

use super::limits::{LimitArgs, secs};
use axum::{Router, body::Body};
use http_body::Body as HttpBody;
use hyper::{Request, Response, body::Incoming, service::Service as _};
use hyper_util::{rt::TokioIo, service::TowerToHyperService};
use std::{
    collections::HashMap,
    io,
    os::fd::AsRawFd,
    pin::Pin,
    sync::{
        Arc, Mutex, PoisonError,
        atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering::SeqCst},
    },
    task::{Context, Poll},
    time::{Duration, Instant},
};
use tokio::{
    io::{AsyncRead, AsyncWrite, ReadBuf},
    net::{TcpListener, TcpStream},
    sync::{Notify, OwnedSemaphorePermit, Semaphore, watch},
};

/// No head under way (for [`Conn::head_started`]).
const NONE: u64 = u64::MAX;

/// Every open connection, and the slots they hold.
pub struct Guard {
    max_connections: usize,
    header_timeout: Duration,
    idle_timeout: Duration,
    slots: Arc<Semaphore>,
    open: Mutex<HashMap<u64, Arc<Conn>>>,
    next_id: AtomicU64,
    epoch: Instant,
}

/// What the guard knows of one connection. Times are milliseconds since the guard's epoch.
struct Conn {
    id: u64,
    /// The last time a byte was read or written.
    last_progress: AtomicU64,
    /// When it began waiting for its next request: accepted, or its last answer sent.
    waiting_since: AtomicU64,
    /// When the first byte of the next request's head arrived; [`NONE`] when none has.
    head_started: AtomicU64,
    /// Requests handed to the service whose answer has not left yet.
    requests: AtomicUsize,
    /// Requests whose handler is still running (reading the body, searching).
    handling: AtomicUsize,
    /// Whether it has had a request: a client's kept-alive connection is closed to make
    /// room only after every one that never sent a request.
    served: AtomicBool,
    /// Set by the guard to close it to make room.
    evicted: AtomicBool,
    close: Notify,
}

impl Guard {
    pub fn new(limits: &LimitArgs) -> Self {
        Self {
            max_connections: limits.max_connections,
            header_timeout: limits.header_timeout,
            idle_timeout: limits.idle_timeout,
            slots: Arc::new(Semaphore::new(limits.max_connections)),
            open: Mutex::new(HashMap::new()),
            next_id: AtomicU64::new(0),
            epoch: Instant::now(),
        }
    }

    fn now(&self) -> u64 {
        u64::try_from(self.epoch.elapsed().as_millis()).unwrap_or(NONE - 1)
    }

    fn open(&self) -> std::sync::MutexGuard<'_, HashMap<u64, Arc<Conn>>> {
        self.open.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// A slot for a new connection: a free one, or one made by closing the connection
    /// that has waited longest with no request under way, or the next one freed.
    async fn slot(&self) -> OwnedSemaphorePermit {
        loop {
            if let Ok(permit) = self.slots.clone().try_acquire_owned() {
                return permit;
            }
            self.evict_one();
            // The evicted connection frees its slot at once, unless a request reached it
            // meanwhile: then look again shortly.
            let wait = self.slots.clone().acquire_owned();
            if let Ok(Ok(permit)) = tokio::time::timeout(Duration::from_millis(100), wait).await {
                return permit;
            }
        }
    }

    /// Closes the connection waiting longest for a request (none under way), unless one
    /// already told to close has not gone yet.
    fn evict_one(&self) {
        let open = self.open();
        if open.values().any(|c| c.evicted.load(SeqCst)) {
            return;
        }
        let oldest = open
            .values()
            .filter(|c| c.requests.load(SeqCst) == 0 && c.handling.load(SeqCst) == 0)
            .min_by_key(|c| (c.served.load(SeqCst), c.waiting_since.load(SeqCst)));
        if let Some(c) = oldest {
            c.evicted.store(true, SeqCst);
            c.close.notify_one();
        }
    }

    fn register(&self) -> Arc<Conn> {
        let now = self.now();
        let conn = Arc::new(Conn {
            id: self.next_id.fetch_add(1, SeqCst),
            last_progress: AtomicU64::new(now),
            waiting_since: AtomicU64::new(now),
            head_started: AtomicU64::new(NONE),
            requests: AtomicUsize::new(0),
            handling: AtomicUsize::new(0),
            served: AtomicBool::new(false),
            evicted: AtomicBool::new(false),
            close: Notify::new(),
        });
        self.open().insert(conn.id, conn.clone());
        conn
    }

    /// Why `conn` should be closed now, if it should.
    fn expired(&self, conn: &Conn) -> Option<String> {
        if conn.handling.load(SeqCst) > 0 {
            // The handler's own limits bound it: the body timeout, the work of a request.
            return None;
        }
        let now = self.now();
        let head = conn.head_started.load(SeqCst);
        if conn.requests.load(SeqCst) == 0
            && head != NONE
            && now.saturating_sub(head) >= millis(self.header_timeout)
        {
            return Some(format!(
                "no whole request head within --header-timeout {}",
                secs(self.header_timeout)
            ));
        }
        if now.saturating_sub(conn.last_progress.load(SeqCst)) >= millis(self.idle_timeout) {
            return Some(format!(
                "nothing moved for --idle-timeout {}",
                secs(self.idle_timeout)
            ));
        }
        None
    }

    /// How often a connection's watchdog looks: a tenth of the shorter timeout, between
    /// 10 ms and one second.
    fn tick(&self) -> Duration {
        (self.header_timeout.min(self.idle_timeout) / 10)
            .clamp(Duration::from_millis(10), Duration::from_secs(1))
    }
}

fn millis(d: Duration) -> u64 {
    u64::try_from(d.as_millis()).unwrap_or(NONE - 1)
}

/// Accepts and serves connections until `stop` resolves, then lets the requests in
/// flight finish (each connection closes once its answer is sent) and returns.
pub async fn serve(
    listener: TcpListener,
    app: Router,
    guard: Arc<Guard>,
    stop: impl Future<Output = ()>,
) {
    let (stopping, stop_seen) = watch::channel(false);
    tokio::pin!(stop);
    loop {
        let stream = tokio::select! {
            accepted = listener.accept() => match accepted {
                Ok((stream, _)) => stream,
                Err(e) => {
                    // Out of file descriptors, or a connection reset before it was
                    // accepted: say so and go on, without spinning.
                    tracing::warn!("accepting a connection: {e}");
                    tokio::time::sleep(Duration::from_millis(50)).await;
                    continue;
                }
            },
            () = &mut stop => break,
        };
        let slot = tokio::select! {
            slot = guard.slot() => slot,
            () = &mut stop => break,
        };
        let conn = guard.register();
        tokio::spawn(serve_one(
            stream,
            conn,
            slot,
            app.clone(),
            guard.clone(),
            stop_seen.clone(),
        ));
    }
    // New connections are refused from here on, not left in the listen queue.
    drop(listener);
    let _ = stopping.send(true);
    // Every connection holds a slot until it ends.
    let all = u32::try_from(guard.max_connections).unwrap_or(u32::MAX);
    let _ = guard.slots.acquire_many(all).await;
}

/// Serves one connection until it ends, is closed by its watchdog or is evicted.
async fn serve_one(
    stream: TcpStream,
    conn: Arc<Conn>,
    _slot: OwnedSemaphorePermit,
    app: Router,
    guard: Arc<Guard>,
    mut stop: watch::Receiver<bool>,
) {
    let _ = stream.set_nodelay(true);
    let fd = stream.as_raw_fd();
    let io = TokioIo::new(Watched {
        inner: stream,
        conn: conn.clone(),
        guard: guard.clone(),
    });
    let tower = TowerToHyperService::new(app);
    let (c, g) = (conn.clone(), guard.clone());
    let service = hyper::service::service_fn(move |request: Request<Incoming>| {
        let answering = Answering::start(&c, &g);
        let handling = Handling::start(&c, &g);
        let response = tower.call(request);
        async move {
            let response = response.await;
            drop(handling);
            response.map(|r: Response<Body>| {
                r.map(|body| Guarded {
                    body,
                    _answering: answering,
                })
            })
        }
    });
    // No timer: hyper's own header timeout would also count the time a kept-alive
    // connection waits unused; the watchdog below tells the two apart.
    let connection = hyper::server::conn::http1::Builder::new().serve_connection(io, service);
    tokio::pin!(connection);
    let mut tick = tokio::time::interval(guard.tick());
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    let mut stopping = *stop.borrow();
    if stopping {
        connection.as_mut().graceful_shutdown();
    }
    loop {
        tokio::select! {
            ended = connection.as_mut() => {
                if let Err(e) = ended {
                    tracing::debug!("connection {}: {e}", conn.id);
                }
                break;
            }
            () = conn.close.notified() => {
                if conn.requests.load(SeqCst) > 0 || conn.handling.load(SeqCst) > 0 {
                    // A request arrived since it was chosen: it stays, another is chosen.
                    conn.evicted.store(false, SeqCst);
                    continue;
                }
                tracing::debug!("connection {}: closed to make room (--max-connections)", conn.id);
                break;
            }
            _ = tick.tick() => {
                if let Some(why) = guard.expired(&conn) {
                    tracing::debug!("connection {}: closed: {why}", conn.id);
                    if conn.requests.load(SeqCst) > 0 {
                        // An answer its peer stopped reading: reset rather than leave the
                        // unsent bytes to the kernel, which would keep trying for minutes.
                        abort_on_close(fd);
                    }
                    break;
                }
            }
            changed = stop.changed(), if !stopping => {
                stopping = true;
                if changed.is_ok() {
                    connection.as_mut().graceful_shutdown();
                }
            }
        }
    }
    guard.open().remove(&conn.id);
}

/// Makes the socket's close a reset (`SO_LINGER` 0): unsent bytes are dropped at once.
/// `fd` must be the open socket of a connection still alive (it is closed by its drop).
fn abort_on_close(fd: std::os::fd::RawFd) {
    let linger = libc::linger {
        l_onoff: 1,
        l_linger: 0,
    };
    // SAFETY: `fd` is the connection's socket, still owned and open; the option's value
    // is a `linger` of the size given.
    let failed = unsafe {
        libc::setsockopt(
            fd,
            libc::SOL_SOCKET,
            libc::SO_LINGER,
            (&linger as *const libc::linger).cast(),
            std::mem::size_of::<libc::linger>() as libc::socklen_t,
        )
    } != 0;
    if failed {
        tracing::debug!("SO_LINGER: {}", io::Error::last_os_error());
    }
}

/// A request handed to the service, until its answer has left (the body is dropped by
/// hyper once written, or with the connection).
struct Answering {
    conn: Arc<Conn>,
    guard: Arc<Guard>,
}

impl Answering {
    fn start(conn: &Arc<Conn>, guard: &Arc<Guard>) -> Self {
        conn.requests.fetch_add(1, SeqCst);
        conn.served.store(true, SeqCst);
        // The head is whole: the header clock stops.
        conn.head_started.store(NONE, SeqCst);
        Self {
            conn: conn.clone(),
            guard: guard.clone(),
        }
    }
}

impl Drop for Answering {
    fn drop(&mut self) {
        if self.conn.requests.fetch_sub(1, SeqCst) == 1 {
            let now = self.guard.now();
            self.conn.waiting_since.store(now, SeqCst);
            self.conn.last_progress.store(now, SeqCst);
        }
    }
}

/// A request whose handler runs.
struct Handling {
    conn: Arc<Conn>,
    guard: Arc<Guard>,
}

impl Handling {
    fn start(conn: &Arc<Conn>, guard: &Arc<Guard>) -> Self {
        conn.handling.fetch_add(1, SeqCst);
        Self {
            conn: conn.clone(),
            guard: guard.clone(),
        }
    }
}

impl Drop for Handling {
    fn drop(&mut self) {
        // The idle clock counts from the end of the search, not from the request's bytes.
        self.conn.last_progress.store(self.guard.now(), SeqCst);
        self.conn.handling.fetch_sub(1, SeqCst);
    }
}

/// An answer's body, holding its [`Answering`] until hyper drops it.
struct Guarded {
    body: Body,
    _answering: Answering,
}

impl HttpBody for Guarded {
    type Data = axum::body::Bytes;
    type Error = axum::Error;

    fn poll_frame(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<http_body::Frame<Self::Data>, Self::Error>>> {
        Pin::new(&mut self.get_mut().body).poll_frame(cx)
    }

    fn is_end_stream(&self) -> bool {
        HttpBody::is_end_stream(&self.body)
    }

    fn size_hint(&self) -> http_body::SizeHint {
        HttpBody::size_hint(&self.body)
    }
}

/// The socket, noting when bytes move and when a request's head begins.
struct Watched {
    inner: TcpStream,
    conn: Arc<Conn>,
    guard: Arc<Guard>,
}

impl Watched {
    fn moved(&self) {
        self.conn.last_progress.store(self.guard.now(), SeqCst);
    }
}

impl AsyncRead for Watched {
    fn poll_read(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        let this = self.get_mut();
        let before = buf.filled().len();
        let polled = Pin::new(&mut this.inner).poll_read(cx, buf);
        if buf.filled().len() > before {
            this.moved();
            let c = &this.conn;
            if c.requests.load(SeqCst) == 0 {
                // The first byte of a head starts its clock (a compare-exchange: later
                // bytes of the same head leave it).
                let _ = c
                    .head_started
                    .compare_exchange(NONE, this.guard.now(), SeqCst, SeqCst);
            }
        }
        polled
    }
}

impl AsyncWrite for Watched {
    fn poll_write(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        let this = self.get_mut();
        let polled = Pin::new(&mut this.inner).poll_write(cx, buf);
        if matches!(polled, Poll::Ready(Ok(n)) if n > 0) {
            this.moved();
        }
        polled
    }

    fn poll_write_vectored(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[io::IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        let this = self.get_mut();
        let polled = Pin::new(&mut this.inner).poll_write_vectored(cx, bufs);
        if matches!(polled, Poll::Ready(Ok(n)) if n > 0) {
            this.moved();
        }
        polled
    }

    fn is_write_vectored(&self) -> bool {
        self.inner.is_write_vectored()
    }

    fn poll_flush(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.get_mut().inner).poll_flush(cx)
    }

    fn poll_shutdown(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.get_mut().inner).poll_shutdown(cx)
    }
}
