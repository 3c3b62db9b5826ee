//! The server's HTTP connections: its own accept loop around hyper's HTTP/1 connection, so that
//! what one client can hold on the device is bounded.
//!
//! The rules, and why each:
//!
//! - **At most `--max-connections` connections are open.** Each holds a descriptor, a task and
//!   buffers, and a server without a cap can be starved of descriptors by sockets that never
//!   send a request, until its accept fails and a normal request waits in the backlog.
//! - **At the cap, a new connection first takes the place of the one that has waited longest
//!   with no request in progress** (idle between requests, or still sending its header): such a
//!   connection costs its client nothing but a reconnect, and slow-header ("slowloris") sockets
//!   are exactly such connections, so however many a client opens, a normal request still gets
//!   in. This is what nginx does with its idle connections when it runs out. The new one is
//!   accepted once the old one has closed, so the descriptors in use stay within the cap.
//! - **Only when every connection has a request in progress is a new one refused**, with `503`,
//!   an OpenAI error body (`code: "too_many_connections"`), `Retry-After: 1` and
//!   `Connection: close`, written before its request is read: an OpenAI client then raises its
//!   usual error with the reason and retries, where a bare close reads as a network fault. The
//!   request is read and dropped for up to a second after the answer, because closing a socket
//!   with unread data resets it and a client could lose the answer. At most [`REFUSALS`]
//!   refusals are written at a time; past them a connection is closed at once, so a flood costs
//!   no more than that.
//! - **A request's header must be complete within `--header-timeout-ms`**, counted from the
//!   accept for a connection's first request and from its first byte for a later one; its body
//!   then has as long again.
//! - **A connection with no request in progress is closed after `--idle-timeout-ms`**
//!   (keep-alive), and so is one whose response the client has stopped reading (its writes
//!   blocked that long).
//! - **A request in progress has no time limit here**: a generation may take long, and what it
//!   may take is bounded per request (`--max-request-tokens`).
//!
//! hyper's own `header_read_timeout` is not used: it starts again as soon as a response is sent,
//! so it would also close every kept-alive connection at the header timeout.

use std::collections::HashMap;
use std::convert::Infallible;
use std::future::Future;
use std::io;
use std::pin::Pin;
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use std::task::{Context, Poll};
use std::time::Duration;

use axum::body::{Body, Bytes, HttpBody};
use axum::http::Request;
use http_body::{Frame, SizeHint};
use hyper::body::Incoming;
use hyper_util::rt::TokioIo;
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt, ReadBuf};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::{watch, Notify, Semaphore};
use tokio::time::{sleep_until, Instant, Sleep};
use tower_service::Service;

use super::api::{ErrorBody, ErrorDetail};

/// Refusals (503) written at a time; past them a connection beyond the cap is closed at once.
pub const REFUSALS: usize = 32;

/// What the connections of the server may hold.
#[derive(Debug, Clone, Copy)]
pub struct Limits {
    /// Connections open at most.
    pub max_connections: usize,
    /// A request's header must arrive within it (and its body within it again).
    pub header_timeout: Duration,
    /// A connection with no request in progress, or a response unread, is closed after it.
    pub idle_timeout: Duration,
}

/// Serve `app` on `listener` under `limits` until `shutdown` resolves; then stop accepting, close
/// the connections with no request in progress, let the requests in progress finish, and return
/// once every connection is closed.
pub async fn serve(listener: TcpListener, app: axum::Router, limits: Limits, shutdown: impl Future<Output = ()>) {
    let registry = Arc::new(Registry::default());
    let refusals = Arc::new(Semaphore::new(REFUSALS));
    let (stop_tx, stop_rx) = watch::channel(false);
    tokio::pin!(shutdown);
    let mut next_id = 0u64;
    loop {
        let stream = tokio::select! {
            () = &mut shutdown => break,
            accepted = listener.accept() => match accepted {
                Ok((stream, _)) => stream,
                Err(e) => {
                    // Out of descriptors, most likely: give the closing connections a moment.
                    tracing::warn!("accepting a connection: {e}");
                    tokio::time::sleep(Duration::from_millis(100)).await;
                    continue;
                }
            },
        };
        if !registry.make_room(limits.max_connections).await {
            metrics::counter!("duet_edge_serve_connections_refused_total").increment(1);
            match refusals.clone().try_acquire_owned() {
                Ok(permit) => {
                    tokio::spawn(async move {
                        refuse(stream, limits.max_connections).await;
                        drop(permit);
                    });
                }
                Err(_) => drop(stream),
            }
            continue;
        }
        // Streamed tokens are small writes: send each at once.
        if let Err(e) = stream.set_nodelay(true) {
            tracing::debug!("TCP_NODELAY: {e}");
        }
        next_id += 1;
        let conn = registry.insert(next_id);
        tokio::spawn(serve_connection(stream, next_id, conn, app.clone(), limits, stop_rx.clone(), registry.clone()));
    }
    stop_tx.send_replace(true);
    drop(stop_rx);
    stop_tx.closed().await;
}

/// Why a connection was closed by the server.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Close {
    /// Its place was given to a new connection at the cap.
    Evicted,
    /// Its request's header did not arrive in time.
    HeaderTimeout,
    /// No request came for the idle timeout.
    IdleTimeout,
    /// The client stopped reading its response.
    Unread,
}

impl Close {
    fn label(self) -> &'static str {
        match self {
            Close::Evicted => "evicted",
            Close::HeaderTimeout => "header_timeout",
            Close::IdleTimeout => "idle_timeout",
            Close::Unread => "unread_response",
        }
    }
}

/// The open connections, for the cap.
#[derive(Default)]
struct Registry {
    conns: Mutex<HashMap<u64, Arc<Conn>>>,
    /// Wakes the accept loop when a connection has closed.
    freed: Notify,
}

impl Registry {
    fn lock(&self) -> MutexGuard<'_, HashMap<u64, Arc<Conn>>> {
        self.conns.lock().unwrap_or_else(PoisonError::into_inner)
    }

    fn insert(&self, id: u64) -> Arc<Conn> {
        let conn = Arc::new(Conn::new());
        let mut conns = self.lock();
        conns.insert(id, conn.clone());
        metrics::gauge!("duet_edge_serve_connections").set(conns.len() as f64);
        conn
    }

    fn remove(&self, id: u64) {
        let mut conns = self.lock();
        conns.remove(&id);
        metrics::gauge!("duet_edge_serve_connections").set(conns.len() as f64);
        drop(conns);
        self.freed.notify_one();
    }

    /// Whether a new connection may open: at once below the cap; at the cap, once the
    /// connection waiting longest with no request in progress has been told to close and has
    /// closed (so that the descriptors in use never pass the cap); false when every connection
    /// has a request in progress.
    async fn make_room(&self, cap: usize) -> bool {
        // A connection told to close is gone within a scheduling round; this only bounds the
        // wait should one not be.
        let until = Instant::now() + Duration::from_secs(1);
        loop {
            let freed = self.freed.notified();
            tokio::pin!(freed);
            freed.as_mut().enable();
            {
                let conns = self.lock();
                if conns.len() < cap {
                    return true;
                }
                if !conns.values().any(|c| c.is_evicted()) {
                    let oldest = conns.iter().filter_map(|(id, c)| c.evictable_since().map(|since| (since, *id))).min();
                    let Some(conn) = oldest.and_then(|(_, id)| conns.get(&id)) else { return false };
                    conn.evict();
                }
            }
            if tokio::time::timeout_at(until, freed).await.is_err() {
                return true;
            }
        }
    }
}

/// One connection's progress, shared by its socket, its requests and its watchdog.
struct Conn {
    state: Mutex<State>,
    /// Wakes the watchdog when a deadline may have moved.
    changed: Notify,
}

struct State {
    /// Requests whose response is not yet sent.
    open: usize,
    /// Since when no request has been in progress (the accept, or the end of the last response).
    since: Instant,
    /// Whether a request was served (the first one's header counts from the accept).
    served: bool,
    /// The first byte read since `since`: a later request's header counts from it.
    head_from: Option<Instant>,
    /// Since when a write has been waiting for the client to read.
    write_blocked: Option<Instant>,
    evicted: bool,
}

impl Conn {
    fn new() -> Self {
        let state = State { open: 0, since: Instant::now(), served: false, head_from: None, write_blocked: None, evicted: false };
        Self { state: Mutex::new(state), changed: Notify::new() }
    }

    fn lock(&self) -> MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// When the connection is to be closed and why, as things stand (none: not while they do).
    fn deadline(&self, limits: &Limits) -> Option<(Instant, Close)> {
        let s = self.lock();
        if s.evicted {
            return Some((s.since, Close::Evicted));
        }
        if s.open > 0 {
            return s.write_blocked.map(|t| (t + limits.idle_timeout, Close::Unread));
        }
        Some(match (s.served, s.head_from) {
            (false, _) => (s.since + limits.header_timeout, Close::HeaderTimeout),
            (true, Some(t)) => (t + limits.header_timeout, Close::HeaderTimeout),
            (true, None) => (s.since + limits.idle_timeout, Close::IdleTimeout),
        })
    }

    fn evictable_since(&self) -> Option<Instant> {
        let s = self.lock();
        (s.open == 0 && !s.evicted).then_some(s.since)
    }

    fn evict(&self) {
        self.lock().evicted = true;
        self.changed.notify_one();
    }

    fn is_evicted(&self) -> bool {
        self.lock().evicted
    }

    fn bytes_read(&self) {
        let mut s = self.lock();
        if s.open == 0 && s.head_from.is_none() {
            s.head_from = Some(Instant::now());
            drop(s);
            self.changed.notify_one();
        }
    }

    fn write_waits(&self, waiting: bool) {
        let mut s = self.lock();
        match (waiting, s.write_blocked) {
            (true, None) => {
                s.write_blocked = Some(Instant::now());
                drop(s);
                self.changed.notify_one();
            }
            (false, Some(_)) => s.write_blocked = None,
            _ => {}
        }
    }
}

/// Resolves when the connection is to be closed, with why.
async fn watchdog(conn: &Conn, limits: Limits) -> Close {
    loop {
        let changed = conn.changed.notified();
        tokio::pin!(changed);
        changed.as_mut().enable();
        match conn.deadline(&limits) {
            Some((at, why)) if at <= Instant::now() => return why,
            Some((at, _)) => {
                tokio::select! {
                    () = changed => {}
                    () = sleep_until(at) => {}
                }
            }
            None => changed.await,
        }
    }
}

async fn serve_connection(stream: TcpStream, id: u64, conn: Arc<Conn>, app: axum::Router, limits: Limits, mut stop: watch::Receiver<bool>, registry: Arc<Registry>) {
    let io = TokioIo::new(Watched { io: stream, conn: conn.clone() });
    let requests = conn.clone();
    let service = hyper::service::service_fn(move |req: Request<Incoming>| {
        let open = RequestGuard::begin(requests.clone());
        let timeout = limits.header_timeout;
        let req = req.map(|inner| Deadlined { inner, sleep: Box::pin(sleep_until(Instant::now() + timeout)), timeout });
        let mut app = app.clone();
        async move {
            std::future::poll_fn(|cx| Service::<Request<Deadlined>>::poll_ready(&mut app, cx)).await?;
            let response = app.call(req).await?;
            Ok::<_, Infallible>(response.map(|inner| Body::new(Tracked { inner, _open: open })))
        }
    });
    let mut builder = hyper::server::conn::http1::Builder::new();
    builder.header_read_timeout(None);
    let mut http = Box::pin(builder.serve_connection(io, service));
    let mut stopping = false;
    loop {
        tokio::select! {
            done = http.as_mut() => {
                if let Err(e) = done {
                    tracing::debug!("connection {id}: {e}");
                }
                break;
            }
            why = watchdog(&conn, limits) => {
                tracing::debug!("connection {id} closed: {}", why.label());
                metrics::counter!("duet_edge_serve_connections_closed_total", "reason" => why.label()).increment(1);
                break;
            }
            _ = stop.changed(), if !stopping => {
                // A connection with no request in progress closes now (one still sending its
                // header would otherwise hold the stop for the header timeout); one with a
                // request finishes it.
                if conn.evictable_since().is_some() {
                    break;
                }
                stopping = true;
                http.as_mut().graceful_shutdown();
            }
        }
    }
    // The socket closes with the connection, before the accept loop is told there is room.
    drop(http);
    registry.remove(id);
}

/// Answer a connection beyond the cap with 503, then read what it sent until it closes (a
/// second at most), so that closing does not reset the connection before the answer is read.
async fn refuse(mut stream: TcpStream, cap: usize) {
    let detail = ErrorDetail {
        message: format!("the server is at its limit of {cap} connections, each with a request in progress; retry shortly"),
        kind: "server_error",
        param: None,
        code: Some("too_many_connections"),
    };
    let body = serde_json::to_string(&ErrorBody { error: detail }).unwrap_or_default();
    let head = format!("HTTP/1.1 503 Service Unavailable\r\ncontent-type: application/json\r\ncontent-length: {}\r\nretry-after: 1\r\nconnection: close\r\n\r\n", body.len());
    let answered = async {
        stream.write_all(head.as_bytes()).await?;
        stream.write_all(body.as_bytes()).await?;
        stream.shutdown().await?;
        let (mut buf, mut read) = ([0u8; 4096], 0usize);
        while read < 64 * 1024 {
            match stream.read(&mut buf).await? {
                0 => break,
                n => read += n,
            }
        }
        Ok::<_, io::Error>(())
    };
    if let Ok(Err(e)) = tokio::time::timeout(Duration::from_secs(1), answered).await {
        tracing::debug!("refusing a connection: {e}");
    }
}

/// The socket, noting for the watchdog when a request begins and when writes wait.
struct Watched {
    io: TcpStream,
    conn: Arc<Conn>,
}

impl AsyncRead for Watched {
    fn poll_read(self: Pin<&mut Self>, cx: &mut Context<'_>, buf: &mut ReadBuf<'_>) -> Poll<io::Result<()>> {
        let this = self.get_mut();
        let before = buf.filled().len();
        let polled = Pin::new(&mut this.io).poll_read(cx, buf);
        if matches!(polled, Poll::Ready(Ok(()))) && buf.filled().len() > before {
            this.conn.bytes_read();
        }
        polled
    }
}

impl Watched {
    fn note<T>(&self, polled: Poll<T>) -> Poll<T> {
        self.conn.write_waits(polled.is_pending());
        polled
    }
}

impl AsyncWrite for Watched {
    fn poll_write(self: Pin<&mut Self>, cx: &mut Context<'_>, buf: &[u8]) -> Poll<io::Result<usize>> {
        let this = self.get_mut();
        let polled = Pin::new(&mut this.io).poll_write(cx, buf);
        this.note(polled)
    }

    fn poll_write_vectored(self: Pin<&mut Self>, cx: &mut Context<'_>, bufs: &[io::IoSlice<'_>]) -> Poll<io::Result<usize>> {
        let this = self.get_mut();
        let polled = Pin::new(&mut this.io).poll_write_vectored(cx, bufs);
        this.note(polled)
    }

    fn is_write_vectored(&self) -> bool {
        self.io.is_write_vectored()
    }

    fn poll_flush(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        let this = self.get_mut();
        let polled = Pin::new(&mut this.io).poll_flush(cx);
        this.note(polled)
    }

    fn poll_shutdown(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.get_mut().io).poll_shutdown(cx)
    }
}

/// A request in progress, from its header to the end (or drop) of its response.
struct RequestGuard(Arc<Conn>);

impl RequestGuard {
    fn begin(conn: Arc<Conn>) -> Self {
        {
            let mut s = conn.lock();
            s.open += 1;
            s.head_from = None;
        }
        conn.changed.notify_one();
        Self(conn)
    }
}

impl Drop for RequestGuard {
    fn drop(&mut self) {
        {
            let mut s = self.0.lock();
            s.open = s.open.saturating_sub(1);
            if s.open == 0 {
                s.since = Instant::now();
                s.served = true;
                s.head_from = None;
                s.write_blocked = None;
            }
        }
        self.0.changed.notify_one();
    }
}

/// A response body that keeps its request in progress until it is sent or dropped.
struct Tracked {
    inner: Body,
    _open: RequestGuard,
}

impl HttpBody for Tracked {
    type Data = Bytes;
    type Error = axum::Error;

    fn poll_frame(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<Result<Frame<Bytes>, axum::Error>>> {
        Pin::new(&mut self.get_mut().inner).poll_frame(cx)
    }

    fn is_end_stream(&self) -> bool {
        self.inner.is_end_stream()
    }

    fn size_hint(&self) -> SizeHint {
        self.inner.size_hint()
    }
}

/// Why a request body could not be read.
#[derive(Debug, thiserror::Error)]
enum BodyError {
    /// It did not arrive in time.
    #[error("the request body did not arrive within {} ms (the server's --header-timeout-ms)", .0.as_millis())]
    Late(Duration),
    /// The connection failed.
    #[error(transparent)]
    Read(#[from] hyper::Error),
}

/// A request body that must arrive before a deadline.
struct Deadlined {
    inner: Incoming,
    sleep: Pin<Box<Sleep>>,
    timeout: Duration,
}

impl HttpBody for Deadlined {
    type Data = Bytes;
    type Error = BodyError;

    fn poll_frame(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<Result<Frame<Bytes>, BodyError>>> {
        let this = self.get_mut();
        match Pin::new(&mut this.inner).poll_frame(cx) {
            Poll::Ready(frame) => Poll::Ready(frame.map(|f| f.map_err(BodyError::Read))),
            Poll::Pending if this.sleep.as_mut().poll(cx).is_ready() => Poll::Ready(Some(Err(BodyError::Late(this.timeout)))),
            Poll::Pending => Poll::Pending,
        }
    }

    fn is_end_stream(&self) -> bool {
        self.inner.is_end_stream()
    }

    fn size_hint(&self) -> SizeHint {
        self.inner.size_hint()
    }
}
