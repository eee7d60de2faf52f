//! The engines' wire protocols and the engine client, against answers shaped as the
//! engines' sources write them (tests/fixtures/engines/) and a loopback server that
//! replays them: request bodies, parsing, retries, final errors, the health wait.

use crate::common::http_stub::Stub;
use drmas::engine::{
    EngineClient, EngineError, EngineFinish, EngineRequest, LlamaCpp, Protocol, Retry, Sglang, Vllm,
};
use serde_json::{Value, json};
use std::time::Duration;

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
        adapter: None,
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
    // The base: no adapter named, so every `--lora` runs at scale 0.
    assert_eq!(body["lora"], json!([]));
    let adapted = LlamaCpp.generate_body(&EngineRequest {
        adapter: Some(drmas::engine::AdapterRef {
            name: "verifier-lm".into(),
            index: 1,
        }),
        ..request()
    });
    assert_eq!(adapted["lora"], json!([{"id": 1, "scale": 1.0}]));
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
        "llama.cpp: generate: unexpected answer: tokens has 3 ids but completion_probabilities has 2 log-probs (one per id)"
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
    // The wait is bounded by its own deadline, which the message states; how long it
    // took on this machine is not asserted (a loaded machine is slow).
    let e = client(&url, 1)
        .wait_ready(Duration::from_millis(300))
        .unwrap_err()
        .to_string();
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

// Contract tests: SGLang and vLLM have no build that runs here; their answers are the
// golden examples of tests/fixtures/engines/ (README there: the source files and lines
// each shape comes from), replayed by a loopback server.

#[test]
fn sglang_contract_generate_body_and_answers() {
    let body = Sglang.generate_body(&EngineRequest {
        adapter: Some(drmas::engine::AdapterRef {
            name: "policy".into(),
            index: 0,
        }),
        ..request()
    });
    let golden = fixture("sglang/generate_request.json");
    // Every top-level key of SGLang's example request is set, and nothing SGLang refuses
    // (`sampling_params.seed` is a 400: the field is `sampling_seed`).
    for key in golden.as_object().unwrap().keys() {
        assert!(body.get(key).is_some(), "{key}");
    }
    let sp = &body["sampling_params"];
    assert!(sp.get("seed").is_none());
    assert_eq!(sp["sampling_seed"], json!((7u64 << 32) | 42));
    assert_eq!(sp["top_k"], -1, "SGLang's top-k off");
    assert_eq!(sp["stop_token_ids"], json!([2]));
    assert_eq!(sp["no_stop_trim"], true);
    assert_eq!(body["input_ids"], json!([1, 9707, 28, 2]));
    assert_eq!(body["return_logprob"], true);
    assert_eq!(body["lora_path"], "policy");

    let out = Sglang
        .parse_generate(&fixture("sglang/generate_response_stop_token.json"))
        .unwrap();
    assert_eq!(out.tokens, [39814, 13, 198]);
    assert_eq!(out.logprobs, [-0.61, -0.52, -0.27]);
    assert_eq!(out.finish, EngineFinish::StopToken);
    let eos = Sglang
        .parse_generate(&fixture("sglang/generate_response_eos.json"))
        .unwrap();
    assert_eq!(eos.finish, EngineFinish::StopToken);
    let s = Sglang
        .parse_generate(&fixture("sglang/generate_response_stop_str.json"))
        .unwrap();
    assert_eq!(s.finish, EngineFinish::StopString("!".into()));
    assert_eq!(s.tokens, [13048, 1052, 0], "the ids run through the stop");
    let l = Sglang
        .parse_generate(&fixture("sglang/generate_response_length.json"))
        .unwrap();
    assert_eq!(l.finish, EngineFinish::Length);
    let a = Sglang
        .parse_generate(&fixture("sglang/generate_response_abort.json"))
        .unwrap();
    assert_eq!(a.finish, EngineFinish::Abort("Aborted".into()));

    let mut bad = fixture("sglang/generate_response_length.json");
    bad["meta_info"]["output_token_logprobs"][2][1] = json!(7);
    assert_eq!(
        Sglang.parse_generate(&bad).unwrap_err().to_string(),
        "SGLang: generate: unexpected answer: log-prob 2 is of token 7 but token 2 is 1588"
    );
}

#[test]
fn vllm_contract_generate_body_and_answers() {
    let protocol = Vllm {
        model: Some("policy-base".into()),
    };
    let body = protocol.generate_body(&request());
    let golden = fixture("vllm/completions_request.json");
    for key in golden.as_object().unwrap().keys() {
        assert!(body.get(key).is_some(), "{key}");
    }
    assert_eq!(body["prompt"], json!([1, 9707, 28, 2]));
    assert_eq!(body["model"], "policy-base");
    assert_eq!(body["return_token_ids"], true);
    assert_eq!(body["logprobs"], 0, "the sampled token's log-prob alone");
    assert_eq!(body["include_stop_str_in_output"], true);
    let with_adapter = protocol.generate_body(&EngineRequest {
        adapter: Some(drmas::engine::AdapterRef {
            name: "policy".into(),
            index: 0,
        }),
        ..request()
    });
    assert_eq!(
        with_adapter["model"], "policy",
        "an adapter is a model of its own"
    );

    let t = protocol
        .parse_generate(&fixture("vllm/completions_response_stop_token.json"))
        .unwrap();
    assert_eq!(t.tokens, [39814, 13, 198]);
    assert_eq!(t.finish, EngineFinish::StopToken);
    let e = protocol
        .parse_generate(&fixture("vllm/completions_response_eos.json"))
        .unwrap();
    assert_eq!(e.finish, EngineFinish::StopToken);
    assert_eq!(e.logprobs, [-0.52, -0.47, -0.02]);
    let s = protocol
        .parse_generate(&fixture("vllm/completions_response_stop_str.json"))
        .unwrap();
    assert_eq!(s.finish, EngineFinish::StopString("!".into()));
    let l = protocol
        .parse_generate(&fixture("vllm/completions_response_length.json"))
        .unwrap();
    assert_eq!(l.finish, EngineFinish::Length);
    let mut bad = fixture("vllm/completions_response_length.json");
    bad["choices"][0]
        .as_object_mut()
        .unwrap()
        .remove("token_ids");
    assert_eq!(
        protocol.parse_generate(&bad).unwrap_err().to_string(),
        "vLLM: generate: unexpected answer: no `token_ids` (is `return_token_ids` supported?)"
    );
}

/// A stub that answers each path with its golden answer (and 404 otherwise).
fn engine_stub(answers: Vec<(&'static str, u16, String)>) -> Stub {
    Stub::start(move |_, seen| {
        answers
            .iter()
            .find(|(path, _, _)| *path == seen.path)
            .map(|(_, status, body)| (*status, body.clone()))
            .unwrap_or((404, format!("{{\"detail\": \"no route {}\"}}", seen.path)))
    })
}

fn calls(stub: &Stub) -> Vec<String> {
    stub.seen()
        .iter()
        .map(|s| format!("{} {}", s.method, s.path))
        .collect()
}

fn engine_client(stub: &Stub, protocol: Box<dyn Protocol>) -> EngineClient {
    EngineClient::new(
        &stub.url,
        protocol,
        Duration::from_secs(5),
        Retry {
            attempts: 2,
            backoff: Duration::from_millis(10),
        },
    )
}

#[test]
fn sglang_contract_weight_sync_pauses_loads_and_resumes_in_order() {
    let ok = |f: &str| fixture(f).to_string();
    let stub = engine_stub(vec![
        (
            "/pause_generation",
            200,
            ok("sglang/pause_generation_response.json"),
        ),
        (
            "/update_weights_from_disk",
            200,
            ok("sglang/update_weights_from_disk_response.json"),
        ),
        (
            "/continue_generation",
            200,
            ok("sglang/continue_generation_response.json"),
        ),
    ]);
    let client = engine_client(&stub, Box::new(Sglang));
    Sglang
        .reload_from_disk(&client, "/sync/solver-lm/v000003", "3")
        .unwrap();
    assert_eq!(
        calls(&stub),
        [
            "POST /pause_generation",
            "POST /update_weights_from_disk",
            "POST /continue_generation"
        ]
    );
    let load = &stub.seen()[1].body;
    assert_eq!(load["model_path"], "/sync/solver-lm/v000003");
    assert_eq!(load["weight_version"], "3");
    assert_eq!(load["flush_cache"], true);

    // The load refused (its 400 with success false): the engine is resumed anyway and
    // the error carries SGLang's message.
    let stub = engine_stub(vec![
        (
            "/pause_generation",
            200,
            ok("sglang/pause_generation_response.json"),
        ),
        (
            "/update_weights_from_disk",
            400,
            ok("sglang/update_weights_from_disk_response_flush_failed.json"),
        ),
        (
            "/continue_generation",
            200,
            ok("sglang/continue_generation_response.json"),
        ),
    ]);
    let client = engine_client(&stub, Box::new(Sglang));
    let e = Sglang
        .reload_from_disk(&client, "/sync/x", "4")
        .unwrap_err()
        .to_string();
    assert!(
        e.contains("update weights from disk: HTTP 400") && e.contains("cache was not flushed"),
        "{e}"
    );
    assert_eq!(calls(&stub).last().unwrap(), "POST /continue_generation");
}

#[test]
fn sglang_contract_lora_loads_under_its_name() {
    let stub = engine_stub(vec![
        ("/unload_lora_adapter", 400, "{\"success\": false}".into()),
        (
            "/load_lora_adapter",
            200,
            fixture("sglang/load_lora_adapter_response.json").to_string(),
        ),
    ]);
    let client = engine_client(&stub, Box::new(Sglang));
    Sglang
        .load_adapter(&client, "policy_lora", "/checkpoints/lora_step_100")
        .unwrap();
    let seen = stub.seen();
    assert_eq!(seen.last().unwrap().body, {
        let mut golden = fixture("sglang/load_lora_adapter_request.json");
        golden.as_object_mut().unwrap().remove("pinned");
        golden
    });
    // LoRA not enabled on the server: its 400, named.
    let stub = engine_stub(vec![(
        "/load_lora_adapter",
        400,
        fixture("sglang/load_lora_adapter_response_disabled.json").to_string(),
    )]);
    let client = engine_client(&stub, Box::new(Sglang));
    let e = Sglang
        .load_adapter(&client, "a", "/b")
        .unwrap_err()
        .to_string();
    assert!(e.contains("load LoRA adapter: HTTP 400"), "{e}");
}

#[test]
fn vllm_contract_weight_sync_pauses_reloads_resets_and_resumes_in_order() {
    let ok = |f: &str| fixture(f).to_string();
    let stub = engine_stub(vec![
        ("/pause?mode=abort", 200, ok("vllm/pause_response.json")),
        (
            "/collective_rpc",
            200,
            ok("vllm/collective_rpc_reload_response.json"),
        ),
        (
            "/reset_prefix_cache",
            200,
            ok("vllm/reset_prefix_cache_response.json"),
        ),
        ("/resume", 200, ok("vllm/resume_response.json")),
    ]);
    let protocol = Vllm { model: None };
    let client = engine_client(&stub, Box::new(Vllm { model: None }));
    protocol
        .reload_from_disk(&client, "/sync/solver-lm/v000003", "3")
        .unwrap();
    assert_eq!(
        calls(&stub),
        [
            "POST /pause?mode=abort",
            "POST /collective_rpc",
            "POST /reset_prefix_cache",
            "POST /resume"
        ]
    );
    let rpc = &stub.seen()[1].body;
    assert_eq!(rpc["method"], "reload_weights");
    assert_eq!(rpc["kwargs"]["weights_path"], "/sync/solver-lm/v000003");

    // Without VLLM_SERVER_DEV_MODE the routes are 404: named, and no retry of a 404.
    let stub = engine_stub(vec![]);
    let client = engine_client(&stub, Box::new(Vllm { model: None }));
    let e = protocol
        .reload_from_disk(&client, "/x", "1")
        .unwrap_err()
        .to_string();
    assert!(e.contains("pause: HTTP 404"), "{e}");
    assert_eq!(calls(&stub), ["POST /pause?mode=abort"]);

    // Generation while paused: 503 is retried, then named.
    let stub = engine_stub(vec![(
        "/v1/completions",
        503,
        ok("vllm/error_response_paused.json"),
    )]);
    let client = engine_client(&stub, Box::new(Vllm { model: None }));
    let e = client.generate(&request()).unwrap_err().to_string();
    assert!(
        e.contains("generate failed after 2 attempts: HTTP 503"),
        "{e}"
    );
}

#[test]
fn vllm_contract_lora_loads_in_place_and_answers_in_text() {
    let stub = engine_stub(vec![(
        "/v1/load_lora_adapter",
        200,
        std::fs::read_to_string(
            crate::common::root()
                .join("tests/fixtures/engines/vllm/load_lora_adapter_response.txt"),
        )
        .unwrap(),
    )]);
    let client = engine_client(&stub, Box::new(Vllm { model: None }));
    Vllm { model: None }
        .load_adapter(&client, "policy_lora", "/sync/lora/v000002")
        .unwrap();
    let body = &stub.seen()[0].body;
    assert_eq!(body["lora_name"], "policy_lora");
    assert_eq!(body["lora_path"], "/sync/lora/v000002");
    assert_eq!(body["load_inplace"], true);
}

#[test]
fn llama_cpp_has_no_run_time_reload() {
    let stub = engine_stub(vec![]);
    let client = engine_client(&stub, Box::new(LlamaCpp));
    assert_eq!(
        LlamaCpp
            .reload_from_disk(&client, "/x", "1")
            .unwrap_err()
            .to_string(),
        "llama.cpp has no way of loading new weights from disk at run time"
    );
    assert!(stub.seen().is_empty());
}

mod finish {
    //! An engine's answer made what the in-process generator would have returned.

    use drmas::engine::{EngineFinish, EngineOutput};
    use drmas::model::{FinishReason, SamplingParams, StopCheck};
    use drmas::pool::{BackendRequest, finish_generation};

    fn request(max_new_tokens: usize, stop_ids: &[i64]) -> BackendRequest {
        BackendRequest {
            prompt: vec![1, 2],
            params: SamplingParams {
                max_new_tokens,
                stop_token_ids: stop_ids.to_vec(),
                ..SamplingParams::default()
            },
            stop: vec!["END".into()],
            shared_prefix: 0,
        }
    }

    fn out(tokens: &[i64], finish: EngineFinish) -> EngineOutput {
        EngineOutput {
            tokens: tokens.to_vec(),
            logprobs: tokens.iter().map(|&t| -(t as f32) / 100.0).collect(),
            finish,
        }
    }

    /// Stops once token 50 has been generated, keeping it (a stop string that one token
    /// completes), for request 0 only.
    struct Fifty;
    impl StopCheck for Fifty {
        fn check(&self, request: usize, tokens: &[i64]) -> Option<usize> {
            (request == 0 && tokens.last() == Some(&50)).then_some(tokens.len())
        }
    }

    #[test]
    fn stop_ids_stop_strings_and_lengths_cut_as_in_process() {
        // The engine went past a stop id it does not know: cut after it, kept.
        let g = finish_generation(
            &request(8, &[7]),
            out(&[3, 7, 9], EngineFinish::Length),
            None,
            4,
        )
        .unwrap();
        assert_eq!(g.tokens, [3, 7]);
        assert_eq!(g.logprobs, [-0.03, -0.07]);
        assert_eq!(g.finish, FinishReason::StopToken);
        assert_eq!(g.policy_version, 4);
        // The engine's end-of-generation token.
        let g = finish_generation(
            &request(8, &[2]),
            out(&[3, 2], EngineFinish::StopToken),
            None,
            0,
        )
        .unwrap();
        assert_eq!((g.tokens.len(), g.finish), (2, FinishReason::StopToken));
        // drmas's stop-string check decides the cut, wherever the engine cut.
        let check = Fifty;
        let g = finish_generation(
            &request(8, &[]),
            out(&[3, 50, 9, 9], EngineFinish::StopString("END".into())),
            Some((&check, 0)),
            0,
        )
        .unwrap();
        assert_eq!(
            (g.tokens, g.finish),
            (vec![3, 50], FinishReason::StopString)
        );
        // No more than max_new_tokens, whatever the engine sent.
        let g = finish_generation(
            &request(2, &[]),
            out(&[3, 4, 5], EngineFinish::Length),
            None,
            0,
        )
        .unwrap();
        assert_eq!((g.tokens, g.finish), (vec![3, 4], FinishReason::Length));
        // An abort fails the request, with the engine's reason.
        let e = finish_generation(
            &request(2, &[]),
            out(&[3], EngineFinish::Abort("Aborted".into())),
            None,
            0,
        )
        .unwrap_err();
        assert_eq!(
            e.to_string(),
            "engine: the engine aborted the request: Aborted"
        );
    }
}

/// A LoRA model on SGLang, contract test: at start each slot's adapter is written as a
/// PEFT folder `<model id>-v<version>` and loaded under the model's id; requests name
/// their slot's adapter in `lora_path`; an update of one slot writes and loads that
/// adapter alone, removes its previous folder, and its generations carry the new
/// version. A server without LoRA refuses the first load, and the start says so.
#[test]
fn sglang_contract_a_lora_model_syncs_each_adapter_under_its_model_id() {
    use crate::common::{self, train::update_settings};
    use drmas::config::LossAgg;
    use drmas::model::{SamplingParams, lora::LoraConfig};
    use drmas::pool::{Backend, BackendRequest, EngineBackend, ModelBackend, WeightSync};
    use drmas::update::{TrainSample, UpdateBatch};
    use std::sync::Arc;

    let tiny = common::tiny_models().join("llama");
    let lora = LoraConfig {
        rank: 2,
        alpha: 4.0,
        dropout: 0.0,
        targets: vec!["q_proj".into(), "v_proj".into()],
        rslora: false,
    };
    let backend = || {
        ModelBackend::with_adapters(
            common::load_dir(&tiny),
            None,
            tiny.clone(),
            &[
                ("solver-lm".into(), lora.clone()),
                ("verifier-lm".into(), lora.clone()),
            ],
            3,
        )
        .with_training(update_settings(LossAgg::TokenMean), None)
    };
    // The golden answer with its ids mapped into the tiny model's vocabulary of 128
    // (an id outside it is refused).
    let mut eos = fixture("sglang/generate_response_eos.json");
    eos["output_ids"] = json!([39, 13, 2]);
    let entries = eos["meta_info"]["output_token_logprobs"]
        .as_array_mut()
        .unwrap();
    for (e, id) in entries.iter_mut().zip([39, 13, 2]) {
        e[1] = json!(id);
    }
    let stub = engine_stub(vec![
        ("/unload_lora_adapter", 200, "{\"success\": true}".into()),
        (
            "/load_lora_adapter",
            200,
            fixture("sglang/load_lora_adapter_response.json").to_string(),
        ),
        ("/generate", 200, eos.to_string()),
    ]);
    let dir = tempfile::tempdir().unwrap();
    let sync = dir.path().join("sync");
    let mut engine = EngineBackend::start(
        backend(),
        engine_client(&stub, Box::new(Sglang)),
        2,
        WeightSync::Folder { dir: sync.clone() },
    )
    .unwrap();
    let loads = |stub: &Stub| -> Vec<(String, String)> {
        stub.seen()
            .iter()
            .filter(|s| s.path == "/load_lora_adapter")
            .map(|s| {
                let path = s.body["lora_path"].as_str().unwrap();
                let name = std::path::Path::new(path).file_name().unwrap();
                (
                    s.body["lora_name"].as_str().unwrap().to_string(),
                    name.to_string_lossy().into_owned(),
                )
            })
            .collect()
    };
    let pair = |a: &str, b: &str| (a.to_string(), b.to_string());
    assert_eq!(
        loads(&stub),
        [
            pair("solver-lm", "solver-lm-v000000"),
            pair("verifier-lm", "verifier-lm-v000000")
        ]
    );
    for name in ["solver-lm-v000000", "verifier-lm-v000000"] {
        assert!(
            sync.join(name).join("adapter_config.json").is_file(),
            "{name}"
        );
    }

    let request = BackendRequest {
        prompt: vec![1, 5, 9],
        params: SamplingParams {
            max_new_tokens: 8,
            stop_token_ids: vec![2],
            ..SamplingParams::default()
        },
        stop: vec![],
        shared_prefix: 0,
    };
    let gens = engine
        .generate_slots(&[request.clone(), request.clone()], &[0, 1])
        .unwrap();
    assert_eq!(gens[0].tokens, [39, 13, 2]);
    let mut named: Vec<String> = stub
        .seen()
        .iter()
        .filter(|s| s.path == "/generate")
        .map(|s| s.body["lora_path"].as_str().unwrap().to_string())
        .collect();
    named.sort();
    assert_eq!(named, ["solver-lm", "verifier-lm"]);

    let batch = UpdateBatch {
        step: 0,
        lr: 1e-2,
        samples: vec![TrainSample {
            agent: "verifier".into(),
            prompt: vec![1, 5, 9],
            response: vec![7, 3],
            sample_logprobs: vec![-2.0, -2.0],
            temperature: 1.0,
            advantage: 1.0,
        }],
        share: None,
        progress: Arc::default(),
        shadow_advantages: None,
    };
    assert_eq!(engine.update(1, &batch).unwrap().applied, 1);
    assert_eq!(
        loads(&stub)[2..],
        [pair("verifier-lm", "verifier-lm-v000001")],
        "the updated adapter alone"
    );
    assert!(
        !sync.join("verifier-lm-v000000").exists(),
        "the old one is removed"
    );
    assert!(sync.join("solver-lm-v000000").is_dir());
    assert_eq!(engine.engine_version(1).unwrap(), 1);
    let gens = engine
        .generate_slots(std::slice::from_ref(&request), &[1])
        .unwrap();
    assert_eq!(gens[0].policy_version, 1);
    let gens = engine.generate_slots(&[request], &[0]).unwrap();
    assert_eq!(gens[0].policy_version, 0);

    let refusing = engine_stub(vec![
        ("/unload_lora_adapter", 400, "{\"success\": false}".into()),
        (
            "/load_lora_adapter",
            400,
            fixture("sglang/load_lora_adapter_response_disabled.json").to_string(),
        ),
    ]);
    let e = EngineBackend::start(
        backend(),
        engine_client(&refusing, Box::new(Sglang)),
        2,
        WeightSync::Folder {
            dir: dir.path().join("sync2"),
        },
    )
    .err()
    .unwrap()
    .to_string();
    assert!(e.contains("load LoRA adapter: HTTP 400"), "{e}");
}

/// A model whose rollouts run on an engine holds no KV cache in drmas's process: the
/// placement table of `drmas check` leaves it out for that model alone.
#[test]
fn an_engine_model_is_placed_without_a_kv_cache() {
    let o = std::process::Command::new(env!("CARGO_BIN_EXE_drmas"))
        .current_dir(crate::common::root())
        .args(["check", "configs/math-drmas.toml", "--for", "train"])
        .args([
            "--set",
            "models.solver-lm.engine={ kind = \"sglang\", url = \"http://127.0.0.1:9\" }",
        ])
        .env_remove("DRMAS_PLUGIN_PATH")
        .output()
        .unwrap();
    // The table is printed whether the models fit this machine's free memory or not
    // (which depends on what else runs): either outcome shows it.
    let text = crate::common::output_text(&o);
    assert!(
        o.status.success() || text.contains("do not fit the pool's devices"),
        "{text}"
    );
    let line = |id: &str| {
        text.lines()
            .find(|l| l.trim_start().starts_with(id))
            .unwrap_or_else(|| panic!("no {id} in {text}"))
            .to_string()
    };
    assert!(!line("solver-lm").contains("KV cache"), "{text}");
    assert!(line("solver-lm").contains("optimizer"), "{text}");
    assert!(line("verifier-lm").contains("KV cache"), "{text}");
}

/// The shipped engine config where `llama-server` is not on PATH (here a PATH of one
/// empty folder): the run stops at the engine's start, naming the program, where it was
/// looked for and what to do; no step is logged.
#[test]
fn an_engine_program_not_on_path_is_named_with_what_to_do() {
    let dir = tempfile::tempdir().unwrap();
    let empty = dir.path().join("bin");
    std::fs::create_dir(&empty).unwrap();
    let out = dir.path().join("run");
    let o = std::process::Command::new(env!("CARGO_BIN_EXE_drmas"))
        .current_dir(crate::common::root())
        .args(["train", "configs/math-drmas-engine.toml"])
        .args([
            "--set",
            "trainer.steps=1",
            "--set",
            "trainer.prompts_per_step=1",
        ])
        .args(["--set", "trainer.group_size=2", "--quiet"])
        .arg("--set")
        .arg(format!(
            "experiment.output_dir={:?}",
            out.display().to_string()
        ))
        .env("PATH", &empty)
        .env_remove("DRMAS_PLUGIN_PATH")
        .output()
        .unwrap();
    let text = crate::common::output_text(&o);
    assert_eq!(o.status.code(), Some(1), "{text}");
    let want = ": load: engine: cannot start the engine: llama-server: No such file or directory (os error 2); `llama-server` is looked up on PATH: put its folder on PATH or give its full path as the first word of [models.engine] command (scripts/build-llama-server.sh builds llama.cpp's and prints its path)\n";
    // Both models' workers start at once: either may be the one named.
    assert!(
        ["solver-lm", "verifier-lm"]
            .iter()
            .any(|m| text.ends_with(&format!("error: model `{m}`{want}"))),
        "{text}"
    );
    assert!(!out.join("metrics.jsonl").exists(), "{text}");
}

/// An SGLang drmas starts itself (`command`), contract test: a stand-in server speaking
/// SGLang's routes (tests/fixtures/engines/sglang/fake_server.py) is started once on
/// the model's folder and a free port, takes the weights of the start and of each of
/// the 2 updates through pause → load → resume, serves the rollouts, and is gone when
/// the run ends.
#[test]
fn sglang_contract_an_engine_drmas_starts_serves_the_run_and_ends_with_it() {
    let dir = tempfile::tempdir().unwrap();
    let config = crate::sweep_cli::experiment(dir.path());
    let run = dir.path().join("run");
    let fake = crate::common::root().join("tests/fixtures/engines/sglang/fake_server.py");
    let engine = format!(
        "models.solver-lm.engine={{ kind = \"sglang\", command = [\"python3\", {:?}, \"--model-path\", \"{{model}}\", \"--port\", \"{{port}}\"], parallel = 2, timeout_s = 30 }}",
        fake.display().to_string()
    );
    let o = std::process::Command::new(env!("CARGO_BIN_EXE_drmas"))
        .arg("train")
        .arg(&config)
        .args(["--set", "trainer.steps=2", "--set", &engine, "--quiet"])
        .env_remove("DRMAS_PLUGIN_PATH")
        .output()
        .unwrap();
    let text = crate::common::output_text(&o);
    assert!(o.status.success(), "{text}");
    let lines: Vec<Value> = std::fs::read_to_string(run.join("metrics.jsonl"))
        .unwrap()
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    assert_eq!(lines.len(), 2);
    for l in &lines {
        assert_eq!(l["failed_episodes"], 0, "{l}");
        assert!(
            l["models"]["solver-lm"]["engine_sync_seconds"]
                .as_f64()
                .is_some(),
            "{l}"
        );
        assert!(
            l["models"]["verifier-lm"]["engine_sync_seconds"].is_null(),
            "{l}"
        );
    }
    let log = std::fs::read_to_string(run.join("engine/solver-lm/engine.log")).unwrap();
    let model = crate::common::tiny_models().join("tiny-chat");
    assert!(
        log.starts_with(&format!("serving {} on ", model.display())),
        "{log}"
    );
    let routes: Vec<&str> = log
        .lines()
        .filter_map(|l| l.strip_prefix("POST "))
        .map(|l| l.split(' ').next().unwrap())
        .filter(|r| *r != "/generate")
        .collect();
    assert_eq!(
        routes,
        [
            "/pause_generation",
            "/update_weights_from_disk",
            "/continue_generation"
        ]
        .repeat(3),
        "{log}"
    );
    let loaded: Vec<String> = log
        .lines()
        .filter_map(|l| l.strip_prefix("POST /update_weights_from_disk "))
        .map(|b| {
            let v: Value = serde_json::from_str(b).unwrap();
            let path = v["model_path"].as_str().unwrap().to_string();
            std::path::Path::new(&path)
                .file_name()
                .unwrap()
                .to_string_lossy()
                .into_owned()
        })
        .collect();
    assert_eq!(loaded, ["v000000", "v000001", "v000002"]);
    assert!(log.contains("POST /generate "), "{log}");
    // The engine ended with the run.
    let alive = std::fs::read_dir("/proc")
        .unwrap()
        .flatten()
        .filter_map(|e| std::fs::read(e.path().join("cmdline")).ok())
        .any(|c| {
            String::from_utf8_lossy(&c).contains(&run.display().to_string()) || {
                let c = String::from_utf8_lossy(&c);
                c.contains("fake_server.py") && c.contains(&model.display().to_string())
            }
        });
    assert!(!alive, "the engine outlived the run");
}

mod answer_rules {
    //! Every engine answer is checked before anything of it reaches a model: ids within
    //! the vocabulary, one finite log-prob ≤ 0 per id, at most `max_new_tokens` ids;
    //! a bad answer is refused naming the engine, its address, the field and the value.

    use super::{engine_client, engine_stub, request};
    use drmas::engine::{
        AnswerFields, EngineClient, EngineFinish, EngineOutput, LlamaCpp, Protocol, Sglang, Vllm,
        check_output,
    };
    use serde_json::{Value, json};

    const FIELDS: AnswerFields = AnswerFields {
        ids: "output_ids",
        logprobs: "meta_info.output_token_logprobs",
    };

    fn out(tokens: &[i64], logprobs: &[f32]) -> EngineOutput {
        EngineOutput {
            tokens: tokens.to_vec(),
            logprobs: logprobs.to_vec(),
            finish: EngineFinish::Length,
        }
    }

    fn check(tokens: &[i64], logprobs: &[f32], max: usize) -> Result<EngineOutput, String> {
        let mut o = out(tokens, logprobs);
        check_output(&mut o, FIELDS, max, Some(259)).map(|()| o)
    }

    #[test]
    fn ids_must_be_within_the_vocabulary() {
        assert_eq!(
            check(&[1, 2, 3, 1_000_000_000], &[-0.1; 4], 8).unwrap_err(),
            "output_ids[3] = 1000000000 is outside the vocabulary of 259"
        );
        assert_eq!(
            check(&[-7], &[-0.1], 8).unwrap_err(),
            "output_ids[0] = -7 is outside the vocabulary of 259"
        );
        assert_eq!(
            check(&[259], &[-0.1], 8).unwrap_err(),
            "output_ids[0] = 259 is outside the vocabulary of 259"
        );
        assert!(check(&[0, 258], &[-0.1, -0.2], 8).is_ok());
        // Without a vocabulary, only a negative id is refused.
        let mut o = out(&[-7], &[-0.1]);
        assert_eq!(
            check_output(&mut o, FIELDS, 8, None).unwrap_err(),
            "output_ids[0] = -7 is not a token id"
        );
    }

    #[test]
    fn one_log_prob_per_id() {
        assert_eq!(
            check(&[1, 2], &[-0.1], 8).unwrap_err(),
            "output_ids has 2 ids but meta_info.output_token_logprobs has 1 log-probs (one per id)"
        );
    }

    #[test]
    fn log_probs_must_be_finite_and_at_most_zero() {
        assert_eq!(
            check(&[1, 2], &[-0.1, 0.5], 8).unwrap_err(),
            "meta_info.output_token_logprobs[1] = 0.5 is not a log-prob (a log-prob is at most 0)"
        );
        assert_eq!(
            check(&[1], &[f32::NAN], 8).unwrap_err(),
            "meta_info.output_token_logprobs[0] = NaN is not a finite log-prob"
        );
        assert_eq!(
            check(&[1], &[f32::NEG_INFINITY], 8).unwrap_err(),
            "meta_info.output_token_logprobs[0] = -inf is not a finite log-prob"
        );
        // A rounding above 0 (a certain token) is read as 0.
        assert_eq!(check(&[1], &[1e-6], 8).unwrap().logprobs, [0.0]);
    }

    #[test]
    fn no_more_ids_than_asked_for() {
        assert_eq!(
            check(&[1; 58], &[-0.1; 58], 8).unwrap_err(),
            "output_ids has 58 ids, more than the 8 asked for (max_new_tokens)"
        );
        assert!(check(&[1; 8], &[-0.1; 8], 8).is_ok());
    }

    /// A client of a stub that answers every generation with `answer`.
    fn client(protocol: Box<dyn Protocol>, answer: Value) -> (super::Stub, EngineClient) {
        let path = protocol.generate_path();
        let stub = engine_stub(vec![(path, 200, answer.to_string())]);
        let mut c = engine_client(&stub, protocol);
        c.set_vocab(259);
        (stub, c)
    }

    fn sglang(ids: Value, logprobs: Value) -> Value {
        json!({"output_ids": ids, "meta_info": {
            "output_token_logprobs": logprobs, "finish_reason": {"type": "length"}}})
    }

    #[test]
    fn the_client_refuses_each_engine_s_bad_answer_naming_engine_field_and_value() {
        let cases: Vec<(Box<dyn Protocol>, Value, String)> = vec![
            (
                Box::new(Sglang),
                sglang(
                    json!([5, 6, 7, 1_000_000_000]),
                    json!([[-0.1, 5, null], [-0.1, 6, null], [-0.1, 7, null], [-0.1, 1_000_000_000, null]]),
                ),
                "output_ids[3] = 1000000000 is outside the vocabulary of 259".into(),
            ),
            (
                Box::new(Sglang),
                sglang(json!([-7]), json!([[-0.1, -7, null]])),
                "output_ids[0] = -7 is outside the vocabulary of 259".into(),
            ),
            (
                Box::new(Sglang),
                sglang(json!([5]), json!([[0.5, 5, null]])),
                "meta_info.output_token_logprobs[0] = 0.5 is not a log-prob (a log-prob is at most 0)"
                    .into(),
            ),
            (
                Box::new(Sglang),
                sglang(json!([5]), json!([[1e300, 5, null]])),
                "meta_info.output_token_logprobs[0] = inf is not a finite log-prob".into(),
            ),
            (
                // NaN reaches JSON as null.
                Box::new(Sglang),
                sglang(json!([5]), json!([[null, 5, null]])),
                "generate: unexpected answer: meta_info.output_token_logprobs[0] = [null,5,null] is not [logprob, token id, text]"
                    .into(),
            ),
            (
                Box::new(Sglang),
                sglang(json!([5, 6]), json!([[-0.1, 5, null]])),
                "generate: unexpected answer: output_ids has 2 ids but meta_info.output_token_logprobs has 1 log-probs (one per id)"
                    .into(),
            ),
            (
                Box::new(Sglang),
                sglang(json!(vec![5; 58]), json!(vec![json!([-0.1, 5, null]); 58])),
                "output_ids has 58 ids, more than the 8 asked for (max_new_tokens)".into(),
            ),
            (
                Box::new(LlamaCpp),
                json!({"tokens": [5, 300], "stop_type": "limit",
                    "completion_probabilities": [{"id": 5, "logprob": -0.1}, {"id": 300, "logprob": -0.1}]}),
                "tokens[1] = 300 is outside the vocabulary of 259".into(),
            ),
            (
                Box::new(LlamaCpp),
                json!({"tokens": [5], "stop_type": "limit",
                    "completion_probabilities": [{"id": 5, "prob": 0.0}]}),
                "completion_probabilities[0] = -inf is not a finite log-prob".into(),
            ),
            (
                Box::new(Vllm { model: None }),
                json!({"choices": [{"token_ids": [5, -1], "finish_reason": "length",
                    "logprobs": {"token_logprobs": [-0.1, -0.2]}}]}),
                "choices[0].token_ids[1] = -1 is outside the vocabulary of 259".into(),
            ),
            (
                Box::new(Vllm { model: None }),
                json!({"choices": [{"token_ids": [5], "finish_reason": "length",
                    "logprobs": {"token_logprobs": [2.0]}}]}),
                "choices[0].logprobs.token_logprobs[0] = 2 is not a log-prob (a log-prob is at most 0)"
                    .into(),
            ),
        ];
        for (protocol, answer, why) in cases {
            let name = protocol.name();
            let (stub, c) = client(protocol, answer);
            let e = c.generate(&request()).unwrap_err();
            assert_eq!(e.to_string(), format!("{name} at {}: {why}", stub.url));
        }
    }
}

/// Through the real binary: an SGLang (a stand-in at a URL) whose first generation
/// carries an id outside the tiny model's vocabulary of 259 fails that episode alone,
/// named with the engine, its address, the field and the value; the run goes on, ends
/// with success and records the failed episode. Nothing panics.
#[test]
fn an_engine_answer_outside_the_vocabulary_fails_its_episode_and_the_run_goes_on() {
    use std::sync::atomic::{AtomicBool, Ordering};
    let bad_sent = AtomicBool::new(false);
    let stub = Stub::start(move |_, seen| match seen.path.as_str() {
        "/generate" => {
            let max = seen.body["sampling_params"]["max_new_tokens"]
                .as_u64()
                .unwrap_or(1) as usize;
            let mut ids: Vec<i64> = [5, 6, 7].into_iter().take(max).collect();
            if !bad_sent.swap(true, Ordering::SeqCst) {
                let last = ids.len() - 1;
                ids[last] = 1_000_000_000;
            }
            let lps: Vec<Value> = ids.iter().map(|&t| json!([-1.5, t, null])).collect();
            let answer = json!({"output_ids": ids, "meta_info": {
                "output_token_logprobs": lps, "finish_reason": {"type": "length"}}});
            (200, answer.to_string())
        }
        _ => (200, json!({"success": true, "message": "ok"}).to_string()),
    });
    let dir = tempfile::tempdir().unwrap();
    let config = crate::sweep_cli::experiment(dir.path());
    let run = dir.path().join("run");
    let engine = format!(
        "models.solver-lm.engine={{ kind = \"sglang\", url = \"{}\", attempts = 1, timeout_s = 30 }}",
        stub.url
    );
    let o = std::process::Command::new(env!("CARGO_BIN_EXE_drmas"))
        .arg("train")
        .arg(&config)
        .args(["--set", "trainer.steps=1", "--set", &engine])
        .args(["--set", "workflow.max_failed_episodes=0.5", "--quiet"])
        .env_remove("DRMAS_PLUGIN_PATH")
        .output()
        .unwrap();
    let text = crate::common::output_text(&o);
    assert!(o.status.success(), "{text}");
    assert!(!text.contains("panicked"), "{text}");
    let why = format!(
        "SGLang at {}: output_ids[2] = 1000000000 is outside the vocabulary of 259",
        stub.url
    );
    assert!(text.contains("failed: ") && text.contains(&why), "{text}");
    let line: Value = serde_json::from_str(
        std::fs::read_to_string(run.join("metrics.jsonl"))
            .unwrap()
            .lines()
            .next()
            .unwrap(),
    )
    .unwrap();
    assert_eq!(line["failed_episodes"], 1, "{line}");
}

/// Whatever the path, an id the model cannot embed never reaches libtorch's embedding
/// (which aborts the worker): the update and the log-prob recompute refuse it, naming the
/// sample, the part, the position and the id, and the weights are untouched.
#[test]
fn an_id_outside_the_vocabulary_never_reaches_the_embedding() {
    use crate::common::{self, train::update_settings};
    use drmas::config::LossAgg;
    use drmas::pool::{Backend, ModelBackend, ScoreRequest};
    use drmas::update::{TrainSample, UpdateBatch};
    use std::sync::Arc;

    let tiny = common::tiny_models().join("llama");
    let mut backend = ModelBackend::new(common::load_dir(&tiny), None, tiny.clone())
        .with_training(update_settings(LossAgg::TokenMean), None);
    let vocab = backend.model.config.vocab_size;
    let sample = |response: Vec<i64>| TrainSample {
        agent: "a".into(),
        prompt: vec![1, 5, 9],
        sample_logprobs: vec![-2.0; response.len()],
        response,
        temperature: 1.0,
        advantage: 1.0,
    };
    let batch = UpdateBatch {
        step: 0,
        lr: 1e-2,
        samples: vec![sample(vec![7, 3]), sample(vec![7, 1_000_000_000, 3])],
        share: None,
        progress: Arc::default(),
        shadow_advantages: None,
    };
    let e = backend.update(0, &batch).unwrap_err();
    assert_eq!(
        e.to_string(),
        format!(
            "sample 1: response token 1 is 1000000000, outside the model's vocabulary of {vocab}; nothing of it was computed"
        )
    );
    assert_eq!(backend.version(0).unwrap(), 0, "no step was taken");
    let e = backend
        .logprobs(
            0,
            &[ScoreRequest {
                prompt: vec![1, -7],
                response: vec![3],
                temperature: 1.0,
            }],
        )
        .unwrap_err();
    assert_eq!(
        e.to_string(),
        format!(
            "pair 0: prompt token 1 is -7, outside the model's vocabulary of {vocab}; nothing of it was computed"
        )
    );
}
