//! `POST /retrieve`: the body read within its limits, the request checked against the
//! work a request may ask for, the searches run on tokio's blocking pool (at most one
//! per core at once) and the answer written query by query, refused as soon as it
//! crosses the size limit.

use super::limits::{LimitArgs, secs, size};
use axum::{
    body::Body,
    extract::{Request, State},
    http::{StatusCode, header},
    response::{IntoResponse, Response},
};
use drmas_search::{
    index::LocalIndex,
    protocol::{ResponseWriter, RetrieveRequest},
};
use http_body::Body as _;
use std::{pin::Pin, sync::Arc, time::Instant};
use tokio::sync::Semaphore;

/// What the handler shares: the index, the default topk, the limits.
pub struct Served {
    pub index: Arc<LocalIndex>,
    pub topk: usize,
    pub limits: LimitArgs,
    /// Searches running at once. They are CPU-bound, so more than the cores only adds
    /// answers held in memory at the same time.
    pub searches: Arc<Semaphore>,
}

/// Why a search stopped before its answer was whole.
enum Stopped {
    TooLarge { queries_done: usize },
    Index(drmas_search::RetrieveError),
}

/// `POST /retrieve`: Search-R1's request in, its response out.
pub async fn retrieve(State(served): State<Arc<Served>>, request: Request) -> Response {
    let limits = &served.limits;
    let body = match read_body(request, limits.max_request_bytes, limits.body_timeout).await {
        Ok(body) => body,
        Err(refusal) => return refusal,
    };
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
    drop(body);
    let k = request.topk.unwrap_or(served.topk);
    if let Err(detail) = check_work(&request, k, limits) {
        return refuse(StatusCode::UNPROCESSABLE_ENTITY, detail);
    }
    let permit = match served.searches.clone().acquire_owned().await {
        Ok(p) => p,
        // Closed only if the server is going away.
        Err(_) => return refuse(StatusCode::SERVICE_UNAVAILABLE, "stopping".into()),
    };
    let index = served.index.clone();
    let max_bytes = limits.max_response_bytes;
    let started = Instant::now();
    let queries = request.queries.len();
    let outcome = tokio::task::spawn_blocking(move || {
        let _permit = permit;
        answer(&index, &request, k, max_bytes)
    })
    .await;
    match outcome {
        Ok(Ok(json)) => {
            tracing::debug!(
                "{queries} queries, {} in {:.1} ms",
                size(json.len()),
                started.elapsed().as_secs_f64() * 1000.0
            );
            ([(header::CONTENT_TYPE, "application/json")], json).into_response()
        }
        Ok(Err(Stopped::TooLarge { queries_done })) => refuse(
            StatusCode::UNPROCESSABLE_ENTITY,
            format!(
                "the answer is over this server's --max-response-bytes of {} after {queries_done} of \
                 {queries} queries (topk {k}); ask for fewer queries or a smaller topk",
                size(max_bytes)
            ),
        ),
        Ok(Err(Stopped::Index(e))) => refuse(StatusCode::INTERNAL_SERVER_ERROR, e.to_string()),
        Err(e) => refuse(
            StatusCode::INTERNAL_SERVER_ERROR,
            format!("the search failed: {e}"),
        ),
    }
}

/// The request's topk and passages against the limits; the refusal names the flag and
/// what the request asked for.
fn check_work(request: &RetrieveRequest, k: usize, limits: &LimitArgs) -> Result<(), String> {
    if k > limits.max_topk {
        return Err(format!(
            "topk {k} is above this server's --max-topk of {}",
            limits.max_topk
        ));
    }
    let queries = request.queries.len();
    // A query costs its analysis and lookup even when it asks for no passage.
    let hits = queries.saturating_mul(k.max(1));
    if hits > limits.max_hits {
        return Err(format!(
            "{queries} queries × topk {k} = {hits} passages is above this server's --max-hits of {}; \
             send the queries in several requests",
            limits.max_hits
        ));
    }
    Ok(())
}

/// Searches each query and writes its list at once, so no more than one query's
/// passages and the answer's bytes are held; stops once the answer passes `max_bytes`.
fn answer(
    index: &LocalIndex,
    request: &RetrieveRequest,
    k: usize,
    max_bytes: usize,
) -> Result<Vec<u8>, Stopped> {
    let mut out = ResponseWriter::new(request.return_scores);
    for (done, query) in request.queries.iter().enumerate() {
        let passages = index.search(query, k).map_err(Stopped::Index)?;
        out.begin_list();
        for (i, p) in passages.iter().enumerate() {
            out.push(p, i == 0);
            if out.bytes() > max_bytes {
                return Err(Stopped::TooLarge { queries_done: done });
            }
        }
        out.end_list();
    }
    let json = out.finish();
    if json.len() > max_bytes {
        return Err(Stopped::TooLarge {
            queries_done: request.queries.len(),
        });
    }
    Ok(json)
}

/// A body over the limit is still read, and thrown away, up to this many bytes (and
/// within the body timeout), so that its client, which is still sending, gets to read
/// the 413 instead of a reset connection (a broken pipe on its side); past it the
/// connection is closed.
pub const DRAIN_LIMIT: u64 = 256 << 20;

/// The whole body, at most `max` bytes, within `timeout`: a declared length over it is
/// refused without keeping a byte, a chunked body as soon as it passes it; either way
/// the rest is read and dropped (at most [`DRAIN_LIMIT`] bytes, unless the client waits
/// for `100 Continue` and sends nothing) before the 413, which closes the connection.
async fn read_body(
    request: Request,
    max: usize,
    timeout: std::time::Duration,
) -> Result<Vec<u8>, Response> {
    let too_large = |what: String| {
        let mut r = refuse(
            StatusCode::PAYLOAD_TOO_LARGE,
            format!(
                "the request body ({what}) is over this server's --max-request-bytes of {}",
                size(max)
            ),
        );
        r.headers_mut().insert(
            header::CONNECTION,
            header::HeaderValue::from_static("close"),
        );
        r
    };
    let timed_out = || {
        refuse(
            StatusCode::REQUEST_TIMEOUT,
            format!(
                "the request body did not arrive within this server's --body-timeout of {}",
                secs(timeout)
            ),
        )
    };
    let declared = request
        .headers()
        .get(header::CONTENT_LENGTH)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.parse::<u64>().ok());
    let waits_to_send = request
        .headers()
        .get(header::EXPECT)
        .is_some_and(|v| v.as_bytes().eq_ignore_ascii_case(b"100-continue"));
    let mut body: Body = request.into_body();
    // One deadline for the body, read or drained: a connection is held at most the
    // --body-timeout.
    let deadline = tokio::time::Instant::now() + timeout;
    if let Some(n) = declared
        && n > max as u64
    {
        if !waits_to_send && n <= DRAIN_LIMIT {
            drain(&mut body, deadline).await;
        }
        return Err(too_large(format!("{n} bytes")));
    }
    let mut buf = Vec::with_capacity(declared.map_or(0, |n| n as usize));
    loop {
        let frame = tokio::time::timeout_at(
            deadline,
            std::future::poll_fn(|cx| Pin::new(&mut body).poll_frame(cx)),
        )
        .await
        .map_err(|_| timed_out())?;
        let Some(frame) = frame else { break };
        let frame = frame.map_err(|e| {
            refuse(
                StatusCode::BAD_REQUEST,
                format!("reading the request body: {e}"),
            )
        })?;
        if let Ok(data) = frame.into_data() {
            if buf.len() + data.len() > max {
                let so_far = buf.len() + data.len();
                drop(buf);
                drain(&mut body, deadline).await;
                return Err(too_large(format!("at least {so_far} bytes so far")));
            }
            buf.extend_from_slice(&data);
        }
    }
    Ok(buf)
}

/// Reads and drops what is left of `body`, at most [`DRAIN_LIMIT`] bytes, until
/// `deadline`.
async fn drain(body: &mut Body, deadline: tokio::time::Instant) {
    let mut read = 0u64;
    let _ = tokio::time::timeout_at(deadline, async {
        while read <= DRAIN_LIMIT {
            match std::future::poll_fn(|cx| Pin::new(&mut *body).poll_frame(cx)).await {
                Some(Ok(frame)) => {
                    read += frame.data_ref().map_or(0, |d| d.len() as u64);
                }
                _ => break,
            }
        }
    })
    .await;
}

/// An error answer in FastAPI's shape, `{"detail": "…"}`, which Search-R1's tools print.
pub fn refuse(status: StatusCode, detail: String) -> Response {
    tracing::warn!("{status}: {detail}");
    let body = serde_json::json!({ "detail": detail }).to_string();
    (status, [(header::CONTENT_TYPE, "application/json")], body).into_response()
}
