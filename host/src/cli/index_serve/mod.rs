//! `drmas index serve INDEX --addr HOST:PORT`: a local index behind Search-R1's
//! `POST /retrieve`, so several trainers (or Search-R1 itself) share one index in memory.
//! Requests are served concurrently: each search runs on tokio's blocking pool against
//! the one shared searcher. A bad request is answered with 400/422 and a message; the
//! server goes on. Ctrl-C or SIGTERM stops it after the requests in flight.

use anyhow::Context;
use axum::{
    Router,
    body::Bytes,
    extract::{DefaultBodyLimit, State},
    http::{StatusCode, header},
    response::{IntoResponse, Response},
    routing::post,
};
use drmas_search::{
    Retriever,
    index::LocalIndex,
    protocol::{RetrieveRequest, RetrieveResponse},
};
use std::{net::SocketAddr, path::PathBuf, process::ExitCode, sync::Arc, time::Instant};

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
}

/// A request asking for more passages per query is refused: it would make the server
/// hold and send that many passages per query.
const MAX_TOPK: usize = 1000;

/// Requests bigger than this are refused (axum's default, 2 MB, is too small for a
/// trainer's batch of long queries).
const MAX_REQUEST_BYTES: usize = 64 << 20;

struct Served {
    index: Arc<LocalIndex>,
    topk: usize,
}

pub fn run(args: Args) -> anyhow::Result<ExitCode> {
    let index = LocalIndex::open(&args.index)?;
    let passages = index.passages();
    let served = Arc::new(Served {
        index: Arc::new(index),
        topk: args.topk,
    });
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .context("starting the server's runtime")?;
    runtime.block_on(async move {
        let listener = tokio::net::TcpListener::bind(args.addr)
            .await
            .with_context(|| format!("listening on {}", args.addr))?;
        let addr = listener.local_addr().context("reading the bound address")?;
        println!("serving {} ({passages} passages)", args.index.display());
        // Tests and scripts read the real port from this line (with `--addr HOST:0`).
        println!("listening on http://{addr}/retrieve");
        let app = Router::new()
            .route("/retrieve", post(retrieve))
            .layer(DefaultBodyLimit::max(MAX_REQUEST_BYTES))
            .with_state(served);
        axum::serve(listener, app)
            .with_graceful_shutdown(stop_signal())
            .await
            .context("serving")?;
        eprintln!("stopped");
        anyhow::Ok(())
    })?;
    Ok(ExitCode::SUCCESS)
}

/// Ctrl-C (SIGINT) or SIGTERM (what `kill` and service managers send).
async fn stop_signal() {
    let terminate = async {
        match tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()) {
            Ok(mut s) => {
                s.recv().await;
            }
            // Without a SIGTERM handler, Ctrl-C still stops it.
            Err(_) => std::future::pending().await,
        }
    };
    tokio::select! {
        _ = tokio::signal::ctrl_c() => {}
        _ = terminate => {}
    }
}

/// `POST /retrieve`: Search-R1's request in, its response out.
async fn retrieve(State(served): State<Arc<Served>>, body: Bytes) -> Response {
    let request: RetrieveRequest = match serde_json::from_slice(&body) {
        Ok(r) => r,
        Err(e) => {
            // Not JSON at all is a bad request; JSON of the wrong shape, unprocessable.
            let status = if e.is_data() {
                StatusCode::UNPROCESSABLE_ENTITY
            } else {
                StatusCode::BAD_REQUEST
            };
            return refuse(
                status,
                format!(
                    "{e}; expected {{\"queries\": [\"…\"], \"topk\": 3, \"return_scores\": true}}"
                ),
            );
        }
    };
    let k = request.topk.unwrap_or(served.topk);
    if k > MAX_TOPK {
        return refuse(
            StatusCode::UNPROCESSABLE_ENTITY,
            format!("topk {k} is above this server's limit of {MAX_TOPK}"),
        );
    }
    let index = served.index.clone();
    let started = Instant::now();
    let outcome = tokio::task::spawn_blocking(move || {
        let results = index.search_batch(&request.queries, k)?;
        let response = RetrieveResponse::from_passages(&results, request.return_scores);
        Ok::<_, drmas_search::RetrieveError>((
            request.queries.len(),
            serde_json::to_string(&response).expect("a response serializes"),
        ))
    })
    .await;
    match outcome {
        Ok(Ok((queries, json))) => {
            tracing::debug!(
                "{queries} queries in {:.1} ms",
                started.elapsed().as_secs_f64() * 1000.0
            );
            ([(header::CONTENT_TYPE, "application/json")], json).into_response()
        }
        Ok(Err(e)) => refuse(StatusCode::INTERNAL_SERVER_ERROR, e.to_string()),
        Err(e) => refuse(
            StatusCode::INTERNAL_SERVER_ERROR,
            format!("the search failed: {e}"),
        ),
    }
}

/// An error answer in FastAPI's shape, `{"detail": "…"}`, which Search-R1's tools print.
fn refuse(status: StatusCode, detail: String) -> Response {
    tracing::warn!("{status}: {detail}");
    let body = serde_json::json!({ "detail": detail }).to_string();
    (status, [(header::CONTENT_TYPE, "application/json")], body).into_response()
}
