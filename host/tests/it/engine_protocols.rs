//! The engines' wire protocols and the engine client, against answers shaped as the
//! engines' sources write them (tests/fixtures/engines/) and a loopback server that
//! replays them: request bodies, parsing, retries, final errors, the health wait.

use crate::common::http_stub::Stub;
use drmas::engine::{
    EngineClient, EngineError, EngineFinish, EngineRequest, Protocol, Retry, llama_cpp::LlamaCpp,
};
use serde_json::{Value, json};
use std::time::{Duration, Instant};

fn fixture(path: &str) -> Value {
    let path = crate::common::root()
        .join("tests/fixtures/engines")
        .join(path);
    serde_json::from_str(&std::fs::read_to_string(&path).unwrap())
        .unwrap_or_else(|e| panic!("{}: {e}", path.display()))
}

fn request() -> EngineRequest {
    EngineRequest {
        prompt: vec![1, 9707, 28, 2],
        max_new_tokens: 8,
        temperature: 0.7,
        top_p: 1.0,
        top_k: 0,
        seed: (7u64 << 32) | 42,
        stop_token_ids: vec![2],
        stop: vec!["</answer>".into()],
    }
}

#[test]
fn llama_cpp_asks_for_token_ids_and_post_sampling_log_probs() {
    let body = LlamaCpp.generate_body(&request());
    assert_eq!(body["prompt"], json!([1, 9707, 28, 2]));
    assert_eq!(body["n_predict"], 8);
    // drmas's own sampler chain, nothing else.
    assert_eq!(body["samplers"], json!(["temperature", "top_k", "top_p"]));
    assert_eq!(body["min_p"], 0.0);
    assert_eq!(body["repeat_penalty"], 1.0);
    assert_eq!(body["seed"], 42, "the engine's seed is 32 bits");
    assert_eq!(body["post_sampling_probs"], true);
    assert_eq!(body["return_tokens"], true);
    assert_eq!(body["n_probs"], 1);
    assert_eq!(body["stop"], json!(["</answer>"]));
    let greedy = LlamaCpp.generate_body(&EngineRequest {
        temperature: 0.0,
        ..request()
    });
    assert_eq!(
        greedy["post_sampling_probs"], false,
        "raw log-probs when greedy"
    );
}

#[test]
fn llama_cpp_answers_parse_with_their_finish() {
    let eos = LlamaCpp
        .parse_generate(&fixture("llama_cpp/completion_response_eos.json"))
        .unwrap();
    assert_eq!(eos.tokens, [216, 36, 2]);
    assert_eq!(eos.finish, EngineFinish::StopToken);
    // `prob` becomes its log.
    let want = [
        0.59f64.ln() as f32,
        0.875f64.ln() as f32,
        0.25f64.ln() as f32,
    ];
    assert_eq!(eos.logprobs, want);

    let word = LlamaCpp
        .parse_generate(&fixture("llama_cpp/completion_response_word.json"))
        .unwrap();
    assert_eq!(word.tokens, [9, 8806, 14]);
    assert_eq!(word.logprobs, [-0.5, -1.25, -0.125], "`logprob` as it is");
    assert_eq!(word.finish, EngineFinish::StopString("</answer>".into()));

    let limit = LlamaCpp
        .parse_generate(&fixture("llama_cpp/completion_response_limit.json"))
        .unwrap();
    assert_eq!((limit.tokens, limit.logprobs), (vec![504], vec![0.0]));
    assert_eq!(limit.finish, EngineFinish::Length);
}

#[test]
fn llama_cpp_answers_of_the_wrong_shape_are_refused_with_the_reason() {
    let mut v = fixture("llama_cpp/completion_response_eos.json");
    let err = |v: &Value| LlamaCpp.parse_generate(v).unwrap_err().to_string();
    v["completion_probabilities"].as_array_mut().unwrap().pop();
    assert_eq!(
        err(&v),
        "llama.cpp: generate: unexpected answer: 3 tokens but 2 log-probs"
    );
    let mut v = fixture("llama_cpp/completion_response_eos.json");
    v["completion_probabilities"][1]["id"] = json!(99);
    assert_eq!(
        err(&v),
        "llama.cpp: generate: unexpected answer: log-prob 1 is of token 99 but token 1 is 36"
    );
    let mut v = fixture("llama_cpp/completion_response_eos.json");
    v.as_object_mut().unwrap().remove("tokens");
    assert_eq!(
        err(&v),
        "llama.cpp: generate: unexpected answer: no `tokens` array (is `return_tokens` supported?)"
    );
    let mut v = fixture("llama_cpp/completion_response_eos.json");
    v["stop_type"] = json!("none");
    let out = LlamaCpp.parse_generate(&v).unwrap();
    assert_eq!(out.finish, EngineFinish::Abort("stop_type none".into()));
}

fn client(url: &str, attempts: u32) -> EngineClient {
    EngineClient::new(
        url,
        Box::new(LlamaCpp),
        Duration::from_secs(5),
        Retry {
            attempts,
            backoff: Duration::from_millis(10),
        },
    )
}

#[test]
fn the_client_retries_what_may_pass_and_not_what_will_not() {
    let answer = fixture("llama_cpp/completion_response_eos.json").to_string();
    // Busy twice, then the answer.
    let stub = Stub::start(move |n, _| {
        if n < 2 {
            (
                503,
                r#"{"error": {"code": 503, "message": "Loading model"}}"#.into(),
            )
        } else {
            (200, answer.clone())
        }
    });
    let out = client(&stub.url, 3).generate(&request()).unwrap();
    assert_eq!(out.tokens, [216, 36, 2]);
    let seen = stub.seen();
    assert_eq!(seen.len(), 3);
    assert!(
        seen.iter()
            .all(|s| s.method == "POST" && s.path == "/completion")
    );
    assert_eq!(seen[0].body["prompt"], json!([1, 9707, 28, 2]));

    // Busy more often than the attempts allow.
    let stub = Stub::start(|_, _| (503, "busy".into()));
    let e = client(&stub.url, 2).generate(&request()).unwrap_err();
    assert_eq!(
        e.to_string(),
        format!(
            "llama.cpp at {}: generate failed after 2 attempts: HTTP 503: busy",
            stub.url
        )
    );
    assert_eq!(stub.seen().len(), 2);

    // A bad request is final: no retry.
    let error = fixture("llama_cpp/error_response.json").to_string();
    let stub = Stub::start(move |_, _| (400, error.clone()));
    let e = client(&stub.url, 3).generate(&request()).unwrap_err();
    assert!(matches!(e, EngineError::Status { status: 400, .. }), "{e}");
    assert!(
        e.to_string().starts_with(&format!(
            "llama.cpp at {}: generate: HTTP 400: {{\"error\"",
            stub.url
        )),
        "{e}"
    );
    assert_eq!(stub.seen().len(), 1);
}

#[test]
fn an_engine_that_is_not_there_is_named_after_the_retries() {
    // A port nothing listens on.
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let url = format!("http://127.0.0.1:{port}");
    let e = client(&url, 2)
        .generate(&request())
        .unwrap_err()
        .to_string();
    assert!(
        e.starts_with(&format!(
            "llama.cpp at {url}: generate failed after 2 attempts: "
        )),
        "{e}"
    );
    let started = Instant::now();
    let e = client(&url, 1)
        .wait_ready(Duration::from_millis(300))
        .unwrap_err()
        .to_string();
    assert!(started.elapsed() < Duration::from_secs(3));
    assert!(
        e.starts_with(&format!(
            "llama.cpp at {url} did not answer /health with 200 within 0 s: "
        )),
        "{e}"
    );
}

#[test]
fn concurrent_requests_come_back_in_order() {
    // Each answer carries the request's first prompt token as its only token.
    let stub = Stub::start(|_, seen| {
        let t = seen.body["prompt"][0].as_i64().unwrap();
        std::thread::sleep(Duration::from_millis((10 - t as u64) * 5));
        let answer = json!({
            "tokens": [t],
            "completion_probabilities": [{"id": t, "prob": 0.5}],
            "stop_type": "limit",
        });
        (200, answer.to_string())
    });
    let requests: Vec<EngineRequest> = (0..10)
        .map(|i| EngineRequest {
            prompt: vec![i, 5],
            ..request()
        })
        .collect();
    let out = client(&stub.url, 1).generate_all(&requests, 4);
    let tokens: Vec<i64> = out.into_iter().map(|o| o.unwrap().tokens[0]).collect();
    assert_eq!(tokens, (0..10).collect::<Vec<_>>());
    assert_eq!(stub.seen().len(), 10);
}
