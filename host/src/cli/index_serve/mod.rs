//! `drmas index serve INDEX --addr HOST:PORT`: a local index behind Search-R1's
//! `POST /retrieve`, so several trainers (or Search-R1 itself) share one index in memory.
//! Requests are served concurrently: each search runs on tokio's blocking pool against
//! the one shared searcher. A bad request is answered with 4xx and a message naming the
//! limit or field at fault; the server goes on. Ctrl-C or SIGTERM stops it after the
//! requests in flight.
//!
//! | file             | job                                                              |
//! |------------------|------------------------------------------------------------------|
//! | `limits.rs`      | the flags bounding requests and connections, checked and printed |
//! | `handler.rs`     | `POST /retrieve`: body, work check, search, the answer's bytes   |
//! | `connections.rs` | the accept loop: connection slots, header and idle timeouts      |

mod connections;
mod handler;
mod limits;

use anyhow::Context;
use axum::{Router, routing::post};
use drmas_search::index::LocalIndex;
use std::{net::SocketAddr, path::PathBuf, process::ExitCode, sync::Arc};

#[derive(clap::Args)]
pub struct Args {
    /// The index folder (`drmas index build` writes one).
    #[arg(value_name = "INDEX")]
    index: PathBuf,
    /// Where to listen; port 0 picks a free one (the address is printed).
    #[arg(long, default_value = "127.0.0.1:8000")]
    addr: SocketAddr,
    /// Passages per query when a request gives no `topk` (Search-R1's server default).
    #[arg(long, default_value_t = 3)]
    topk: usize,
    #[command(flatten)]
    limits: limits::LimitArgs,
}

pub fn run(args: Args) -> anyhow::Result<ExitCode> {
    if args.topk > args.limits.max_topk {
        anyhow::bail!(
            "--topk {} is above --max-topk {}: the default would refuse every request that gives none",
            args.topk,
            args.limits.max_topk
        );
    }
    let index = LocalIndex::open(&args.index)?;
    let passages = index.passages();
    let cores = std::thread::available_parallelism().map_or(1, |n| n.get());
    let served = Arc::new(handler::Served {
        index: Arc::new(index),
        topk: args.topk,
        limits: args.limits.clone(),
        searches: Arc::new(tokio::sync::Semaphore::new(cores)),
    });
    let guard = Arc::new(connections::Guard::new(&args.limits));
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .context("starting the server's runtime")?;
    runtime.block_on(async move {
        let listener = tokio::net::TcpListener::bind(args.addr)
            .await
            .with_context(|| format!("listening on {}", args.addr))?;
        let addr = listener.local_addr().context("reading the bound address")?;
        let stop = stop_signal()?;
        outln!("serving {} ({passages} passages)", args.index.display());
        outln!("{}", args.limits.describe());
        // Tests and scripts read the real port from this line (with `--addr HOST:0`).
        outln!("listening on http://{addr}/retrieve");
        let app = Router::new()
            .route("/retrieve", post(handler::retrieve))
            .with_state(served);
        connections::serve(listener, app, guard, stop).await;
        errln!("stopped");
        anyhow::Ok(())
    })?;
    Ok(ExitCode::SUCCESS)
}

/// Ctrl-C (SIGINT) or SIGTERM (what `kill` and service managers send). The handlers
/// are installed here, before the address is printed, so a signal sent as soon as the
/// address is known stops the server cleanly rather than killing it.
fn stop_signal() -> anyhow::Result<impl Future<Output = ()>> {
    use tokio::signal::unix::{SignalKind, signal};
    let mut interrupt = signal(SignalKind::interrupt()).context("handling Ctrl-C")?;
    let mut terminate = signal(SignalKind::terminate()).context("handling SIGTERM")?;
    Ok(async move {
        tokio::select! {
            _ = interrupt.recv() => {}
            _ = terminate.recv() => {}
        }
    })
}
