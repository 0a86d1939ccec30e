//! Connections: accepting them within a cap, the deadlines a client must meet (request
//! head, whole body, idle keep-alive), and a graceful shutdown that waits for requests in
//! flight only up to a deadline. A client that misbehaves costs one socket for at most
//! these times, never the server's ability to serve paying callers.

use std::future::Future;
use std::net::SocketAddr;
use std::pin::Pin;
use std::sync::atomic::{AtomicU32, AtomicU64, Ordering};
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::{Duration, Instant};

use axum::body::{Body, Bytes, HttpBody};
use axum::extract::ConnectInfo;
use axum::http::Request;
use hyper::body::{Frame, Incoming, SizeHint};
use hyper_util::rt::{TokioIo, TokioTimer};
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::{watch, Semaphore};
use tokio::task::JoinSet;
use tower::ServiceExt;

use super::paced::Paced;

/// The limits every connection lives within.
#[derive(Debug, Clone, Copy)]
pub struct Limits {
    /// A request's head must arrive whole within this (hyper also runs it while a
    /// keep-alive connection waits for its next request).
    pub header_read_timeout: Duration,
    /// A request's whole body must arrive within this of its head.
    pub body_timeout: Duration,
    /// A connection with no bytes either way for this long is closed (after any request
    /// in flight; dropped if it then stays that long with an answer the client does not
    /// read).
    pub idle_timeout: Duration,
    /// Connections open at once; past it, new ones are closed as soon as accepted.
    pub max_connections: usize,
    /// After a shutdown signal, requests in flight get this long; then their connections
    /// are closed.
    pub shutdown_grace: Duration,
    /// After a shutdown signal and before the listener closes, requests are still served
    /// this long while `/ready` says the server is draining, so a load balancer moves
    /// new ones elsewhere first.
    pub drain: Duration,
}

/// The error a request body gives once its deadline has passed.
#[derive(Debug, thiserror::Error)]
#[error("the request body did not arrive within its deadline")]
pub struct BodyDeadline;

/// Serves `router` on `listener` within `limits` until `shutdown` completes; then lets
/// requests in flight finish for up to `limits.shutdown_grace` and closes the rest.
pub async fn serve(
    listener: TcpListener,
    router: super::HttpService,
    limits: Limits,
    shutdown: impl Future<Output = ()>,
) {
    let slots = Arc::new(Semaphore::new(limits.max_connections));
    let (stop, stopping) = watch::channel(false);
    let mut connections = JoinSet::new();
    // A client holding every slot and connecting in a loop would write a line a try.
    let mut refused_at_limit = Paced::default();
    let mut http = hyper::server::conn::http1::Builder::new();
    http.timer(TokioTimer::new())
        .header_read_timeout(limits.header_read_timeout);
    tokio::pin!(shutdown);
    loop {
        let unsaid = refused_at_limit
            .unsaid_until()
            .map(tokio::time::Instant::from_std);
        let accepted = tokio::select! {
            accepted = listener.accept() => accepted,
            () = &mut shutdown => break,
            // Reap finished connections as we go, so the set holds only live ones.
            Some(_) = connections.join_next(), if !connections.is_empty() => continue,
            // Refusals not yet said are said a second after the last line, even if no
            // more come.
            () = tokio::time::sleep_until(unsaid.unwrap_or_else(tokio::time::Instant::now)),
                if unsaid.is_some() => {
                let refused = refused_at_limit.said(Instant::now());
                say_refused(None, limits.max_connections, refused);
                continue;
            }
        };
        let (tcp, peer) = match accepted {
            Ok(accepted) => accepted,
            Err(error) => {
                // Out of file descriptors, most likely: back off instead of spinning.
                tracing::warn!(%error, "accept failed");
                tokio::time::sleep(Duration::from_millis(50)).await;
                continue;
            }
        };
        let Ok(slot) = Arc::clone(&slots).try_acquire_owned() else {
            if let Some(earlier) = refused_at_limit.occurred(Instant::now()) {
                say_refused(Some(peer), limits.max_connections, earlier + 1);
            }
            continue;
        };
        // Small responses on keep-alive connections: don't let Nagle hold them back.
        let _ = tcp.set_nodelay(true);
        let activity = Arc::new(Activity::new());
        let io = TokioIo::new(Watched {
            inner: tcp,
            activity: Arc::clone(&activity),
        });
        let router = router.clone();
        let body_timeout = limits.body_timeout;
        let refusals = Arc::new(Refusals::default());
        let service = hyper::service::service_fn(move |request: Request<Incoming>| {
            let router = router.clone();
            let refusals = Arc::clone(&refusals);
            async move {
                if let Some(pause) = refusals.pause() {
                    tokio::time::sleep(pause).await;
                }
                let mut request = request.map(|body| Body::new(Deadline::new(body, body_timeout)));
                request.extensions_mut().insert(ConnectInfo(peer));
                request.extensions_mut().insert(refusals);
                router.oneshot(request).await
            }
        });
        let connection = http.serve_connection(io, service);
        let mut stopping = stopping.clone();
        let idle_timeout = limits.idle_timeout;
        connections.spawn(async move {
            let _slot = slot;
            tokio::pin!(connection);
            // Both made once per connection, not per wake-up: a request wakes the task a
            // few times, and a timer or a watch waiter registered each time is most of
            // what an idle check would cost.
            let stop = async move {
                // A closed channel means the server is gone: close as well.
                while stopping.changed().await.is_ok() {
                    if *stopping.borrow() {
                        return;
                    }
                }
            };
            tokio::pin!(stop);
            let idle = tokio::time::sleep(idle_timeout);
            tokio::pin!(idle);
            let mut closing = false;
            loop {
                tokio::select! {
                    _ = connection.as_mut() => break,
                    () = &mut stop, if !closing => {
                        connection.as_mut().graceful_shutdown();
                        closing = true;
                        idle.as_mut().reset(tokio::time::Instant::now() + idle_timeout);
                    }
                    // Activity moves the deadline only when the timer fires: then it
                    // sleeps again until the connection has been idle for the whole time.
                    // Idle while closing with a write blocked, a response is stuck on a
                    // client that reads nothing (a graceful shutdown waits for it): the
                    // connection is dropped, or it would hold its slot for ever. (Idle
                    // while closing otherwise, a request is still computing: it goes on.)
                    () = idle.as_mut() => {
                        let left = activity.idle_left(idle_timeout);
                        if !left.is_zero() {
                            idle.as_mut().reset(tokio::time::Instant::now() + left);
                        } else if closing && activity.write_blocked() {
                            break;
                        } else if closing {
                            idle.as_mut().reset(tokio::time::Instant::now() + idle_timeout);
                        } else {
                            connection.as_mut().graceful_shutdown();
                            closing = true;
                            idle.as_mut().reset(tokio::time::Instant::now() + idle_timeout);
                        }
                    }
                }
            }
        });
    }
    drop(listener);
    if refused_at_limit.unsaid_until().is_some() {
        let refused = refused_at_limit.said(Instant::now());
        say_refused(None, limits.max_connections, refused);
    }
    let _ = stop.send(true);
    let open = connections.len();
    let drained = tokio::time::timeout(limits.shutdown_grace, async {
        while connections.join_next().await.is_some() {}
    })
    .await;
    if drained.is_err() {
        tracing::warn!(
            open = connections.len(),
            of = open,
            "connections still open at the shutdown deadline: closed"
        );
        connections.shutdown().await;
    }
}

/// Says connections refused at the connection limit: `peer`, the one refused now, if the
/// line is its own, and `refused`, how many the line stands for.
fn say_refused(peer: Option<SocketAddr>, limit: usize, refused: u64) {
    let peer = peer.map_or_else(|| "-".to_owned(), |peer| peer.to_string());
    tracing::warn!(
        peer,
        limit,
        refused,
        "connections refused at the connection limit (the last one's peer, if any, and how many since the last line)"
    );
}

/// Requests refused for their credentials in a row on one connection. Past a few, each
/// further request on it waits before it is answered, longer the more there were (up to
/// [`Refusals::MAX_PAUSE`]): a flood of guessed keys over a few connections then gets a
/// few answers a second instead of the machine, while its address's pace (which a shared
/// address makes loose) is not needed to stop it. Good credentials start the count over.
#[derive(Debug, Default)]
pub struct Refusals(AtomicU32);

impl Refusals {
    /// Refusals in a row answered at once.
    const FREE: u32 = 16;
    /// The pause per refusal past the free ones.
    const STEP: Duration = Duration::from_millis(10);
    /// The longest pause.
    const MAX_PAUSE: Duration = Duration::from_secs(1);

    /// A request was refused for its credentials.
    pub fn refused(&self) {
        let _ = self
            .0
            .fetch_update(Ordering::Relaxed, Ordering::Relaxed, |n| n.checked_add(1));
    }

    /// A request's credentials were good.
    pub fn accepted(&self) {
        if self.0.load(Ordering::Relaxed) != 0 {
            self.0.store(0, Ordering::Relaxed);
        }
    }

    /// How long the connection's next request waits, if at all.
    fn pause(&self) -> Option<Duration> {
        let past = self.0.load(Ordering::Relaxed).checked_sub(Self::FREE)?;
        Some(
            Self::STEP
                .saturating_mul(past.saturating_add(1))
                .min(Self::MAX_PAUSE),
        )
    }
}

/// The refusal count of the connection a request came on; `None` for a request that came
/// through no listener (in-process tests).
pub fn refusals(request_extensions: &axum::http::Extensions) -> Option<&Refusals> {
    request_extensions.get::<Arc<Refusals>>().map(Arc::as_ref)
}

/// When a connection last moved a byte, and whether its last write found the socket
/// full (the client is not reading).
#[derive(Debug)]
struct Activity {
    started: Instant,
    last_ms: AtomicU64,
    write_blocked: std::sync::atomic::AtomicBool,
}

impl Activity {
    fn new() -> Activity {
        Activity {
            started: Instant::now(),
            last_ms: AtomicU64::new(0),
            write_blocked: std::sync::atomic::AtomicBool::new(false),
        }
    }

    /// Notes how a write went: blocked (`Pending`) or not.
    fn wrote<T>(&self, polled: &Poll<T>) {
        self.write_blocked
            .store(polled.is_pending(), Ordering::Relaxed);
    }

    fn write_blocked(&self) -> bool {
        self.write_blocked.load(Ordering::Relaxed)
    }

    fn touch(&self) {
        let now = u64::try_from(self.started.elapsed().as_millis()).unwrap_or(u64::MAX);
        self.last_ms.store(now, Ordering::Relaxed);
    }

    /// How long until the connection has been idle for `timeout`.
    fn idle_left(&self, timeout: Duration) -> Duration {
        let last = Duration::from_millis(self.last_ms.load(Ordering::Relaxed));
        (last + timeout).saturating_sub(self.started.elapsed())
    }
}

/// A socket that records its activity.
struct Watched {
    inner: TcpStream,
    activity: Arc<Activity>,
}

impl AsyncRead for Watched {
    fn poll_read(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<std::io::Result<()>> {
        let before = buf.filled().len();
        let polled = Pin::new(&mut self.inner).poll_read(cx, buf);
        if buf.filled().len() > before {
            self.activity.touch();
        }
        polled
    }
}

impl AsyncWrite for Watched {
    fn poll_write(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        data: &[u8],
    ) -> Poll<std::io::Result<usize>> {
        let polled = Pin::new(&mut self.inner).poll_write(cx, data);
        self.activity.wrote(&polled);
        if matches!(polled, Poll::Ready(Ok(n)) if n > 0) {
            self.activity.touch();
        }
        polled
    }

    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        Pin::new(&mut self.inner).poll_flush(cx)
    }

    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        Pin::new(&mut self.inner).poll_shutdown(cx)
    }

    fn poll_write_vectored(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[std::io::IoSlice<'_>],
    ) -> Poll<std::io::Result<usize>> {
        let polled = Pin::new(&mut self.inner).poll_write_vectored(cx, bufs);
        self.activity.wrote(&polled);
        if matches!(polled, Poll::Ready(Ok(n)) if n > 0) {
            self.activity.touch();
        }
        polled
    }

    fn is_write_vectored(&self) -> bool {
        self.inner.is_write_vectored()
    }
}

/// A request body that fails once its deadline has passed, however steadily it trickles.
struct Deadline {
    inner: Incoming,
    at: tokio::time::Instant,
    /// Made when the body first has to be waited for: a body that has arrived whole by
    /// the time it is read (most) costs no timer.
    timer: Option<Pin<Box<tokio::time::Sleep>>>,
}

impl Deadline {
    fn new(inner: Incoming, within: Duration) -> Deadline {
        Deadline {
            inner,
            at: tokio::time::Instant::now() + within,
            timer: None,
        }
    }
}

impl HttpBody for Deadline {
    type Data = Bytes;
    type Error = axum::Error;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, axum::Error>>> {
        if self.inner.is_end_stream() {
            return Poll::Ready(None);
        }
        if let Some(timer) = &mut self.timer {
            if timer.as_mut().poll(cx).is_ready() {
                return Poll::Ready(Some(Err(axum::Error::new(BodyDeadline))));
            }
        }
        let frame = Pin::new(&mut self.inner)
            .poll_frame(cx)
            .map_err(axum::Error::new);
        if frame.is_ready() {
            return frame;
        }
        // Waiting for more of the body: from here on the deadline must wake the request.
        let at = self.at;
        let timer = self
            .timer
            .get_or_insert_with(|| Box::pin(tokio::time::sleep_until(at)));
        if timer.as_mut().poll(cx).is_ready() {
            return Poll::Ready(Some(Err(axum::Error::new(BodyDeadline))));
        }
        Poll::Pending
    }

    fn is_end_stream(&self) -> bool {
        self.inner.is_end_stream()
    }

    fn size_hint(&self) -> SizeHint {
        self.inner.size_hint()
    }
}

/// The address a request came from, as the connection saw it.
pub fn peer(request_extensions: &axum::http::Extensions) -> Option<SocketAddr> {
    request_extensions
        .get::<ConnectInfo<SocketAddr>>()
        .map(|ConnectInfo(address)| *address)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_connection_refused_again_and_again_waits_longer_and_good_credentials_reset_it() {
        let refusals = Refusals::default();
        for _ in 0..Refusals::FREE {
            assert_eq!(refusals.pause(), None);
            refusals.refused();
        }
        assert_eq!(refusals.pause(), Some(Duration::from_millis(10)));
        refusals.refused();
        assert_eq!(refusals.pause(), Some(Duration::from_millis(20)));
        for _ in 0..1000 {
            refusals.refused();
        }
        assert_eq!(refusals.pause(), Some(Refusals::MAX_PAUSE));
        refusals.accepted();
        assert_eq!(refusals.pause(), None);
    }
}
