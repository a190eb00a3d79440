//! Accepting connections within bounds. Each connection must send a
//! request's headers within the header timeout, counted from when it is
//! ready for one, so a slow sender and an idle keep-alive connection are
//! both closed after it (hyper's header timer). At most `max_connections`
//! are served at once; past that a few more are answered one request each:
//! `GET /health` as usual and everything else with a 503, so a health check
//! still gets through while the server is full. Beyond those, a connection
//! is closed as soon as it is accepted. The file-descriptor limit is checked
//! at start, so that the limit, not the kernel, refuses connections.

use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use axum::Router;
use hyper::server::conn::http1;
use hyper_util::rt::{TokioIo, TokioTimer};
use hyper_util::server::graceful::GracefulShutdown;
use hyper_util::service::TowerToHyperService;
use tokio::net::TcpListener;
use tokio::sync::Semaphore;
use tracing::{debug, info, warn};

/// Connections answered past the limit (one request each, health checks
/// first of all); more are closed at once.
pub const SPARE_CONNECTIONS: usize = 16;

/// File descriptors the process needs besides its connections: the model,
/// standard streams, the runtime's own (epoll, wakers), threads' files.
const OTHER_FDS: u64 = 64;

/// How connections are bounded.
#[derive(Debug, Clone, Copy)]
pub struct ConnLimits {
    /// Time a connection has to send a request's headers once it is ready
    /// for one (an idle keep-alive connection is closed after it too).
    pub header_timeout: Duration,
    /// Connections served at once.
    pub max_connections: usize,
}

/// Serves `app` on `listener` within `limits`, with `full` answering the
/// spare connections past the limit, until `shutdown` resolves; then waits
/// (at most `drain`) for open connections to finish.
pub async fn serve(
    listener: TcpListener,
    app: Router,
    full: Router,
    limits: ConnLimits,
    shutdown: impl Future<Output = ()>,
    drain: Duration,
) {
    let open = Arc::new(Semaphore::new(limits.max_connections));
    let spare = Arc::new(Semaphore::new(SPARE_CONNECTIONS));
    let graceful = GracefulShutdown::new();
    let mut shutdown = std::pin::pin!(shutdown);
    let mut accept_failed = false;
    loop {
        let accepted = tokio::select! {
            a = listener.accept() => a,
            () = &mut shutdown => break,
        };
        let stream = match accepted {
            Ok((s, _)) => s,
            Err(e) => {
                // out of descriptors or similar: say it once, retry shortly
                if !accept_failed {
                    warn!("cannot accept a connection: {e}");
                    accept_failed = true;
                }
                tokio::time::sleep(Duration::from_millis(20)).await;
                continue;
            }
        };
        accept_failed = false;
        let (service, permit, keep_alive) = match open.clone().try_acquire_owned() {
            Ok(p) => (app.clone(), p, true),
            Err(_) => match spare.clone().try_acquire_owned() {
                Ok(p) => (full.clone(), p, false),
                Err(_) => {
                    debug!("connection closed at once: {} open", limits.max_connections);
                    continue;
                }
            },
        };
        let _ = stream.set_nodelay(true);
        let conn = http1::Builder::new()
            .timer(TokioTimer::new())
            .header_read_timeout(limits.header_timeout)
            .keep_alive(keep_alive)
            .serve_connection(TokioIo::new(stream), TowerToHyperService::new(service));
        let conn = graceful.watch(conn);
        tokio::spawn(async move {
            if let Err(e) = conn.await {
                debug!("connection ended: {e}");
            }
            drop(permit);
        });
    }
    drop(listener);
    if tokio::time::timeout(drain, graceful.shutdown())
        .await
        .is_err()
    {
        info!("closing connections still open after {} s", drain.as_secs());
    }
}

/// Checks (and if need be raises, within the hard limit) the number of
/// files this process may open against what `max_connections` needs; the
/// message says what to change when it cannot be met.
#[cfg(unix)]
pub fn ensure_fd_limit(max_connections: usize) -> Result<(), String> {
    use rustix::process::{Resource, Rlimit, getrlimit, setrlimit};
    let need = (max_connections + SPARE_CONNECTIONS) as u64 + OTHER_FDS;
    let lim = getrlimit(Resource::Nofile);
    let fits = |n: Option<u64>| n.is_none_or(|n| n >= need);
    if fits(lim.current) {
        return Ok(());
    }
    if fits(lim.maximum) {
        let raised = Rlimit {
            current: Some(need),
            maximum: lim.maximum,
        };
        if setrlimit(Resource::Nofile, raised).is_ok() {
            info!("raised the open-file limit to {need} for --max-connections {max_connections}");
            return Ok(());
        }
    }
    Err(format!(
        "--max-connections {max_connections} needs about {need} open files, and this process \
         may open {} (ulimit -n): lower --max-connections or raise the limit",
        lim.current.unwrap_or(0)
    ))
}

/// Checks the open-file limit (only Unix has one to check).
#[cfg(not(unix))]
pub fn ensure_fd_limit(_max_connections: usize) -> Result<(), String> {
    Ok(())
}
