//! Search-R1's `POST /retrieve`: the golden request and responses (in the exact bytes
//! Search-R1's client and FastAPI server write) parsed and produced, and the client
//! against a stub server that is down, slow, wrong, flaky or busy.

use drmas_search::{
    Passage, RetrieveError, Retriever,
    protocol::{RetrieveRequest, RetrieveResponse, parse_response},
    remote::{RemoteConfig, RemoteRetriever},
};
use std::{
    io::{BufRead, BufReader, Read, Write},
    net::{TcpListener, TcpStream},
    sync::{
        Arc, Barrier, Condvar, Mutex,
        atomic::{AtomicUsize, Ordering},
    },
    time::{Duration, Instant},
};

fn fixture(name: &str) -> String {
    let path = format!(
        "{}/tests/fixtures/search-r1/{name}",
        env!("CARGO_MANIFEST_DIR")
    );
    std::fs::read_to_string(&path)
        .unwrap_or_else(|e| panic!("{path}: {e}"))
        .trim_end()
        .to_string()
}

fn passage(id: &str, title: &str, text: &str, score: f32) -> Passage {
    Passage {
        id: id.into(),
        title: title.into(),
        text: text.into(),
        score,
    }
}

/// The passages of the golden responses, scores as in `response_scores.json`.
fn golden_passages() -> Vec<Vec<Passage>> {
    vec![
        vec![
            passage(
                "2712889",
                "Paris",
                "Paris is the capital and most populous city of France.",
                0.8125,
            ),
            passage(
                "1033",
                "France",
                "France, officially the French Republic, is a country in Western Europe. Its capital is Paris.",
                0.78125,
            ),
        ],
        vec![
            passage(
                "13",
                "Hamlet",
                "The Tragedy of Hamlet, Prince of Denmark, is a tragedy written by William Shakespeare.",
                0.875,
            ),
            passage(
                "98127",
                "William Shakespeare",
                "William Shakespeare was an English playwright, poet and actor.",
                0.5,
            ),
        ],
    ]
}

fn without_scores(mut results: Vec<Vec<Passage>>) -> Vec<Vec<Passage>> {
    for p in results.iter_mut().flatten() {
        p.score = 0.0;
    }
    results
}

#[test]
fn the_golden_request_is_read_and_written() {
    let text = fixture("request.json");
    let request: RetrieveRequest = serde_json::from_str(&text).unwrap();
    assert_eq!(
        request,
        RetrieveRequest {
            queries: vec![
                "What is the capital of France?".into(),
                "who wrote Hamlet".into()
            ],
            topk: Some(2),
            return_scores: true,
        }
    );
    // Same JSON value (Search-R1's client writes `", "` separators, serde_json none).
    let ours: serde_json::Value = serde_json::to_value(&request).unwrap();
    assert_eq!(
        ours,
        serde_json::from_str::<serde_json::Value>(&text).unwrap()
    );
    // `topk` and `return_scores` may be left out (the server's defaults) or null.
    let minimal: RetrieveRequest =
        serde_json::from_str(r#"{"queries": ["x"], "topk": null}"#).unwrap();
    assert_eq!((minimal.topk, minimal.return_scores), (None, false));
}

#[test]
fn golden_responses_with_and_without_scores_round_trip_to_the_byte() {
    let scored = fixture("response_scores.json");
    assert_eq!(parse_response(&scored, 2).unwrap(), golden_passages());
    let produced = RetrieveResponse::from_passages(&golden_passages(), true);
    assert_eq!(serde_json::to_string(&produced).unwrap(), scored);

    let plain = fixture("response.json");
    assert_eq!(
        parse_response(&plain, 2).unwrap(),
        without_scores(golden_passages())
    );
    let produced = RetrieveResponse::from_passages(&golden_passages(), false);
    assert_eq!(serde_json::to_string(&produced).unwrap(), plain);
}

#[test]
fn search_r1_bm25_documents_and_unquoted_titles_are_read() {
    // Search-R1's BM25 server: title, text and contents, no id.
    let bm25 = r#"{"result": [[{"document": {"title": "Paris", "text": "Paris is the capital.", "contents": "\"Paris\"\nParis is the capital."}, "score": 12.5}]]}"#;
    assert_eq!(
        parse_response(bm25, 1).unwrap(),
        vec![vec![passage("", "Paris", "Paris is the capital.", 12.5)]]
    );
    let unquoted =
        r#"{"result": [[{"id": 7, "contents": "Paris\nParis is the capital.\nMore."}], []]}"#;
    assert_eq!(
        parse_response(unquoted, 2).unwrap(),
        vec![
            vec![passage("7", "Paris", "Paris is the capital.\nMore.", 0.0)],
            vec![]
        ]
    );
    let only_title_text = r#"{"result": [[{"title": "T", "text": "x"}]]}"#;
    assert_eq!(parse_response(only_title_text, 1).unwrap()[0][0].title, "T");
}

#[test]
fn malformed_responses_say_what_is_wrong() {
    assert_eq!(
        parse_response(r#"{"result": [[]]}"#, 2).unwrap_err(),
        "1 result lists for 2 queries"
    );
    assert_eq!(
        parse_response(r#"{"result": [[{"id": "1"}]]}"#, 1).unwrap_err(),
        "result 0, document 0: a document has no `contents` (nor `title` and `text`)"
    );
    let err = parse_response("Internal Server Error", 1).unwrap_err();
    assert!(
        err.starts_with("expected value at line 1 column 1 (expected {\"result\": "),
        "{err}"
    );
    assert!(
        err.ends_with("the body starts \"Internal Server Error\")"),
        "{err}"
    );
    let err = parse_response(r#"{"results": []}"#, 1).unwrap_err();
    assert!(err.starts_with("missing field `result`"), "{err}");
}

// ---- the client against a stub server ----

/// What the stub does with the N-th request (from 0).
enum Reply {
    /// Status and body.
    Json(u16, String),
    /// Reads the request and says nothing until the gate opens; then answers as
    /// [`echo`] does (to a client that has long given up).
    Hold(Arc<Gate>),
}

/// Holds the stub's answers until the test opens it.
#[derive(Default)]
struct Gate {
    open: Mutex<bool>,
    changed: Condvar,
}

impl Gate {
    /// Waits until the gate opens. A client without a working timeout would wait on
    /// the stub for ever, so after a minute the gate gives way: the stub answers, and
    /// the test fails on the answer instead of hanging.
    fn wait(&self) {
        let open = self.open.lock().unwrap();
        let _open = self
            .changed
            .wait_timeout_while(open, Duration::from_secs(60), |open| !*open)
            .unwrap();
    }
    fn open(&self) {
        *self.open.lock().unwrap() = true;
        self.changed.notify_all();
    }
}

struct Stub {
    url: String,
    /// Requests received (POSTs read whole).
    requests: Arc<AtomicUsize>,
    /// The queries of each request, in arrival order.
    seen: Arc<Mutex<Vec<Vec<String>>>>,
}

/// A one-thread-per-connection HTTP/1.1 server on a free loopback port; each
/// connection gets one reply and is closed.
fn stub(reply: impl Fn(usize, &RetrieveRequest) -> Reply + Send + Sync + 'static) -> Stub {
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let url = format!("http://{}/retrieve", listener.local_addr().unwrap());
    let requests = Arc::new(AtomicUsize::new(0));
    let seen = Arc::new(Mutex::new(Vec::new()));
    let reply = Arc::new(reply);
    let (r, s) = (requests.clone(), seen.clone());
    std::thread::spawn(move || {
        for conn in listener.incoming() {
            let Ok(conn) = conn else { continue };
            let (reply, r, s) = (reply.clone(), r.clone(), s.clone());
            std::thread::spawn(move || serve_one(conn, &*reply, &r, &s));
        }
    });
    Stub {
        url,
        requests,
        seen,
    }
}

fn serve_one(
    mut conn: TcpStream,
    reply: &dyn Fn(usize, &RetrieveRequest) -> Reply,
    requests: &AtomicUsize,
    seen: &Mutex<Vec<Vec<String>>>,
) {
    let mut reader = BufReader::new(conn.try_clone().unwrap());
    let mut length = 0;
    loop {
        let mut line = String::new();
        if reader.read_line(&mut line).unwrap_or(0) == 0 {
            return;
        }
        let line = line.trim_end();
        if line.is_empty() {
            break;
        }
        if let Some((name, value)) = line.split_once(':')
            && name.eq_ignore_ascii_case("content-length")
        {
            length = value.trim().parse().unwrap();
        }
    }
    let mut body = vec![0; length];
    reader.read_exact(&mut body).unwrap();
    let request: RetrieveRequest = serde_json::from_slice(&body).unwrap();
    let n = {
        let mut seen = seen.lock().unwrap();
        seen.push(request.queries.clone());
        requests.fetch_add(1, Ordering::SeqCst)
    };
    match reply(n, &request) {
        Reply::Json(status, body) => {
            let _ = write!(
                conn,
                "HTTP/1.1 {status} X\r\ncontent-type: application/json\r\ncontent-length: {}\r\nconnection: close\r\n\r\n{body}",
                body.len()
            );
        }
        Reply::Hold(gate) => {
            gate.wait();
            if let Reply::Json(status, body) = echo(&request) {
                let _ = write!(
                    conn,
                    "HTTP/1.1 {status} X\r\ncontent-type: application/json\r\ncontent-length: {}\r\nconnection: close\r\n\r\n{body}",
                    body.len()
                );
            }
        }
    }
}

/// One passage per query whose id is the query itself: each caller can check it got its
/// own lists back.
fn echo(request: &RetrieveRequest) -> Reply {
    let results: Vec<Vec<Passage>> = request
        .queries
        .iter()
        .map(|q| vec![passage(q, "T", &format!("about {q}"), 1.0)])
        .collect();
    let body = serde_json::to_string(&RetrieveResponse::from_passages(&results, true)).unwrap();
    Reply::Json(200, body)
}

fn client(url: &str, edit: impl FnOnce(&mut RemoteConfig)) -> RemoteRetriever {
    let mut config = RemoteConfig {
        url: url.into(),
        timeout_ms: 2000,
        retries: 2,
        backoff_ms: 10,
        batch_window_ms: 0,
        max_batch: 64,
    };
    edit(&mut config);
    RemoteRetriever::new(config).unwrap()
}

fn queries(q: &[&str]) -> Vec<String> {
    q.iter().map(|s| s.to_string()).collect()
}

/// Waits until the stub has read `n` requests (it reads a request as soon as it
/// arrives; the client may return before the stub thread has counted it).
fn wait_for_requests(stub: &Stub, n: usize) -> usize {
    let start = Instant::now();
    while stub.requests.load(Ordering::SeqCst) < n && start.elapsed() < Duration::from_secs(300) {
        std::thread::sleep(Duration::from_millis(5));
    }
    stub.requests.load(Ordering::SeqCst)
}

#[test]
fn a_server_that_is_down_is_a_remote_error_after_the_retries() {
    // A port nothing listens on: bound, then released.
    let port = TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let url = format!("http://127.0.0.1:{port}/retrieve");
    let c = client(&url, |_| {});
    let err = c.search_batch(&queries(&["x"]), 3).unwrap_err();
    match &err {
        RetrieveError::Remote { url: u, message } => {
            assert_eq!(u, &url);
            assert!(message.contains("Connection refused"), "{message}");
            assert!(message.ends_with("(3 attempts)"), "{message}");
        }
        other => panic!("{other:?}"),
    }
    assert!(err.to_string().starts_with(&format!("retriever {url}: ")));
}

#[test]
fn a_slow_server_is_a_timeout_and_the_timeout_is_retried() {
    // The stub answers nothing until the gate opens, and the gate opens only after the
    // client has returned: the client can only have returned by its own timeout.
    let gate = Arc::new(Gate::default());
    let held = gate.clone();
    let s = stub(move |_, _| Reply::Hold(held.clone()));
    let c = client(&s.url, |c| {
        c.timeout_ms = 300;
        c.retries = 1;
        c.backoff_ms = 20;
    });
    let err = c.search_batch(&queries(&["x"]), 3).unwrap_err();
    gate.open();
    // The message says the truth: the per-attempt limit, the attempts, the time in all.
    let text = err.to_string();
    assert!(
        text.starts_with(&format!(
            "retriever {}: no answer within 300 ms per attempt; 2 of 2 attempts timed out, ",
            s.url
        )) && text.ends_with(" s in all"),
        "{text}"
    );
    let RetrieveError::Timeout {
        millis: 300,
        timed_out: 2,
        attempts: 2,
        seconds,
        ..
    } = err
    else {
        panic!("{err:?}")
    };
    assert!(seconds >= 0.6, "two attempts of 300 ms took {seconds} s");
    // A timeout is retried: the first attempt and one retry, no more.
    assert_eq!(wait_for_requests(&s, 2), 2);
    assert_eq!(
        s.seen.lock().unwrap().clone(),
        [vec!["x".to_string()], vec!["x".to_string()]]
    );
}

#[test]
fn malformed_and_wrong_length_answers_are_malformed_errors_not_retried() {
    let s = stub(|_, _| Reply::Json(200, "<html>oops</html>".into()));
    let err = client(&s.url, |_| {})
        .search_batch(&queries(&["x"]), 3)
        .unwrap_err();
    let RetrieveError::Malformed { url, message } = &err else {
        panic!("{err:?}")
    };
    assert_eq!(url, &s.url);
    assert!(
        message.contains("the body starts \"<html>oops</html>\""),
        "{message}"
    );
    // The stub counts a request before it answers it.
    assert_eq!(s.requests.load(Ordering::SeqCst), 1);

    // One list for two queries.
    let s = stub(|_, _| Reply::Json(200, r#"{"result": [[]]}"#.into()));
    let err = client(&s.url, |_| {})
        .search_batch(&queries(&["a", "b"]), 3)
        .unwrap_err();
    assert_eq!(
        err.to_string(),
        format!(
            "retriever {}: malformed response: 1 result lists for 2 queries",
            s.url
        )
    );
    assert_eq!(s.requests.load(Ordering::SeqCst), 1);
}

#[test]
fn failures_that_may_pass_are_retried_and_others_are_not() {
    // 503 twice, then an answer: the third attempt succeeds.
    let s = stub(|n, r| {
        if n < 2 {
            Reply::Json(503, "busy".into())
        } else {
            echo(r)
        }
    });
    let got = client(&s.url, |_| {})
        .search_batch(&queries(&["q"]), 3)
        .unwrap();
    assert_eq!(got[0][0].id, "q");
    assert_eq!(s.requests.load(Ordering::SeqCst), 3);

    // Always 503: retries + 1 requests, then the status and body.
    let s = stub(|_, _| Reply::Json(503, "busy".into()));
    let err = client(&s.url, |c| c.retries = 3)
        .search_batch(&queries(&["q"]), 3)
        .unwrap_err();
    assert_eq!(
        err.to_string(),
        format!("retriever {}: HTTP 503: busy (4 attempts)", s.url)
    );
    assert_eq!(s.requests.load(Ordering::SeqCst), 4);

    // A 422 (a request the server refuses) will not pass by retrying.
    let s = stub(|_, _| Reply::Json(422, r#"{"detail": "bad"}"#.into()));
    let err = client(&s.url, |_| {})
        .search_batch(&queries(&["q"]), 3)
        .unwrap_err();
    assert_eq!(
        err.to_string(),
        format!("retriever {}: HTTP 422: {{\"detail\": \"bad\"}}", s.url)
    );
    assert_eq!(s.requests.load(Ordering::SeqCst), 1);
}

#[test]
fn concurrent_calls_are_merged_and_each_caller_gets_its_own_lists() {
    const N: usize = 8;
    let s = stub(|_, r| echo(r));
    // The window is long and the batch holds exactly N queries: the request goes as soon
    // as all N callers have joined, so the test does not depend on timing.
    let c = client(&s.url, |c| {
        c.batch_window_ms = 30_000;
        c.max_batch = N;
    });
    let barrier = Barrier::new(N);
    std::thread::scope(|scope| {
        let handles: Vec<_> = (0..N)
            .map(|i| {
                let (c, barrier) = (&c, &barrier);
                scope.spawn(move || {
                    barrier.wait();
                    (i, c.search_batch(&[format!("q{i}")], 3).unwrap())
                })
            })
            .collect();
        for h in handles {
            let (i, got) = h.join().unwrap();
            assert_eq!(got.len(), 1);
            assert_eq!(got[0][0].id, format!("q{i}"));
            assert_eq!(got[0][0].text, format!("about q{i}"));
        }
    });
    let posts = s.requests.load(Ordering::SeqCst);
    assert!(posts < N, "{posts} requests for {N} callers");
    let mut all: Vec<String> = s.seen.lock().unwrap().concat();
    all.sort();
    let mut expected: Vec<String> = (0..N).map(|i| format!("q{i}")).collect();
    expected.sort();
    assert_eq!(all, expected);
}

#[test]
fn a_failed_merged_request_fails_every_caller_in_it() {
    const N: usize = 4;
    let s = stub(|_, _| Reply::Json(400, "no".into()));
    let c = client(&s.url, |c| {
        c.batch_window_ms = 30_000;
        c.max_batch = N;
    });
    let barrier = Barrier::new(N);
    std::thread::scope(|scope| {
        for _ in 0..N {
            let (c, barrier) = (&c, &barrier);
            scope.spawn(move || {
                barrier.wait();
                let err = c.search_batch(&queries(&["x"]), 3).unwrap_err();
                assert_eq!(
                    err.to_string(),
                    format!("retriever {}: HTTP 400: no", c.url())
                );
            });
        }
    });
    assert!(s.requests.load(Ordering::SeqCst) < N);
}

#[test]
fn a_call_bigger_than_max_batch_goes_in_several_requests_in_order() {
    let s = stub(|_, r| echo(r));
    let c = client(&s.url, |c| {
        c.batch_window_ms = 5;
        c.max_batch = 2;
    });
    let q = queries(&["a", "b", "c", "d", "e"]);
    let got = c.search_batch(&q, 3).unwrap();
    let ids: Vec<&str> = got.iter().map(|l| l[0].id.as_str()).collect();
    assert_eq!(ids, ["a", "b", "c", "d", "e"]);
    assert_eq!(s.requests.load(Ordering::SeqCst), 3);
    assert_eq!(
        *s.seen.lock().unwrap(),
        vec![queries(&["a", "b"]), queries(&["c", "d"]), queries(&["e"])]
    );
    // Nothing to ask: no request.
    assert!(c.search_batch(&[], 3).unwrap().is_empty());
    assert_eq!(s.requests.load(Ordering::SeqCst), 3);
}
