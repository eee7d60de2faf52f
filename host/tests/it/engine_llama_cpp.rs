//! Against a real engine: llama.cpp's `llama-server`, built from the pinned source by
//! `scripts/build-llama-server.sh` (the test command runs it; the binary is cached
//! outside the checkout), serving SmolLM2-135M-Instruct exported by drmas's own GGUF
//! writer in F32 from the weights drmas holds:
//! - token ids make the round trip, and the engine's log-probs of its own tokens agree
//!   with drmas's recompute on the same weights within the measured tolerance;
//! - after new weights are exported and the engine restarted on them, its log-probs are
//!   the new weights' (within the tolerance) and no longer the old ones';
//! - a killed engine fails a request with an error naming it, after the retries.

use crate::common;
use drmas::engine::{
    EngineClient, EngineRequest, LlamaCpp, ManagedServer, Retry, free_port, start_server,
};
use drmas::model::{
    Decoder, SequencePair, TextTokenizer,
    gguf::{ExportType, GgufFile, export_gguf},
    response_logprobs,
};
use std::{
    collections::BTreeMap,
    path::{Path, PathBuf},
    time::{Duration, Instant},
};
use tch::Tensor;

/// The tolerance on |engine − drmas| per token log-prob, F32 weights on both sides:
/// measured at most 5.7e-3 (mean 9.7e-4) on this test's 72 tokens, from llama.cpp's
/// own CPU kernels (blocked sums, its own softmax); the bound is 3.5× that.
const TOLERANCE: f32 = 2e-2;

/// The same with LoRA adapters on four projections, which llama.cpp applies as matmuls
/// of their own: measured at most 1.4e-2 (mean 1.2e-3) over this file's LoRA test,
/// where a wrong adapter (the base's, the other one's) is off by 0.78 to 3.1.
const LORA_TOLERANCE: f32 = 4e-2;

fn llama_server() -> PathBuf {
    // Where scripts/build-llama-server.sh puts it (the test command passes its path).
    let cache = std::env::var_os("DRMAS_CACHE_DIR")
        .map(PathBuf::from)
        .or_else(|| std::env::var_os("XDG_CACHE_HOME").map(|c| PathBuf::from(c).join("drmas")))
        .unwrap_or_else(|| {
            std::env::var_os("HOME")
                .map_or_else(common::root, PathBuf::from)
                .join(".cache/drmas")
        });
    let path = std::env::var_os("DRMAS_LLAMA_SERVER")
        .map(PathBuf::from)
        .unwrap_or_else(|| cache.join("llama-server-11434.0.0/llama-server"));
    assert!(
        path.exists(),
        "no llama-server at {}: run scripts/build-llama-server.sh (scripts/test.sh does)",
        path.display()
    );
    path
}

fn model_dir() -> PathBuf {
    let dir = common::root().join("models/smollm2-135m-instruct");
    assert!(
        dir.join("config.json").exists(),
        "no {}: run scripts/fetch-assets.sh",
        dir.display()
    );
    dir
}

fn template() -> GgufFile {
    GgufFile::open(&common::root().join("models/gguf/SmolLM2-135M-Instruct.Q4_1.gguf")).unwrap()
}

fn weights(model: &Decoder) -> BTreeMap<String, Tensor> {
    model.vs.variables().into_iter().collect()
}

/// llama-server on `{model}` and `{port}` of 127.0.0.1: one thread, 4 parallel slots.
fn server_command() -> Vec<String> {
    let server = llama_server().display().to_string();
    [
        server.as_str(),
        "-m",
        "{model}",
        "--port",
        "{port}",
        "--host",
        "127.0.0.1",
        "-t",
        "1",
        "-np",
        "4",
        "-c",
        "2048",
    ]
    .map(String::from)
    .into()
}

/// The engine on `gguf`, one thread, 4 parallel slots, ready.
fn start(gguf: &Path, log: &Path) -> (ManagedServer, EngineClient) {
    let command = server_command();
    let server = start_server(&command, &[], free_port().unwrap(), gguf, log).unwrap();
    let client = EngineClient::new(
        &server.url(),
        Box::new(LlamaCpp),
        Duration::from_secs(120),
        Retry {
            attempts: 2,
            backoff: Duration::from_millis(100),
        },
    );
    let started = Instant::now();
    client
        .wait_ready(Duration::from_secs(60))
        .unwrap_or_else(|e| panic!("{e}\n{}", server.log_tail(20)));
    eprintln!(
        "llama-server ready in {:.2} s",
        started.elapsed().as_secs_f64()
    );
    (server, client)
}

fn requests(tok: &TextTokenizer) -> Vec<EngineRequest> {
    [
        "What is 7 + 5?",
        "Name a prime number above 20.",
        "Say hello.",
    ]
    .iter()
    .enumerate()
    .map(|(i, q)| EngineRequest {
        prompt: tok
            .chat_ids(&[drmas_plugin_api::Message::new("user", *q)])
            .unwrap(),
        max_new_tokens: 24,
        temperature: 0.7,
        top_p: 1.0,
        top_k: 0,
        seed: 100 + i as u64,
        stop_token_ids: tok.stop_token_ids().to_vec(),
        stop: vec![],
        adapter: None,
    })
    .collect()
}

/// drmas's log-probs of each (prompt, tokens) at the requests' temperature.
fn recompute(model: &Decoder, reqs: &[EngineRequest], tokens: &[Vec<i64>]) -> Vec<Vec<f32>> {
    let pairs: Vec<SequencePair> = reqs
        .iter()
        .zip(tokens)
        .map(|(r, t)| SequencePair {
            prompt: &r.prompt,
            response: t,
        })
        .collect();
    let out = response_logprobs(model, &pairs, reqs[0].temperature, false).unwrap();
    tokens
        .iter()
        .enumerate()
        .map(|(i, t)| out.row(i as i64, t.len()))
        .collect()
}

fn worst(a: &[Vec<f32>], b: &[Vec<f32>]) -> (f32, f32) {
    let d: Vec<f32> = a
        .iter()
        .zip(b)
        .flat_map(|(x, y)| x.iter().zip(y).map(|(p, q)| (p - q).abs()))
        .collect();
    (
        d.iter().copied().fold(0.0, f32::max),
        d.iter().sum::<f32>() / d.len() as f32,
    )
}

#[test]
fn llama_server_generates_with_drmas_weights_and_takes_new_ones() {
    let dir = tempfile::tempdir().unwrap();
    let model = common::load_dir(&model_dir());
    let tok = TextTokenizer::from_dir(&model_dir()).unwrap();
    let template = template();
    let v1 = dir.path().join("v1.gguf");
    let started = Instant::now();
    export_gguf(&template, &weights(&model), ExportType::F32, &v1).unwrap();
    eprintln!("export F32: {:.2} s", started.elapsed().as_secs_f64());
    let (mut server, client) = start(&v1, &dir.path().join("engine.log"));

    let reqs = requests(&tok);
    let started = Instant::now();
    let outs: Vec<_> = client
        .generate_all(&reqs, 4)
        .into_iter()
        .map(|o| o.unwrap())
        .collect();
    let generated: usize = outs.iter().map(|o| o.tokens.len()).sum();
    eprintln!(
        "engine: {generated} tokens in {:.2} s",
        started.elapsed().as_secs_f64()
    );
    for (o, r) in outs.iter().zip(&reqs) {
        assert!(!o.tokens.is_empty() && o.tokens.len() <= r.max_new_tokens);
        assert_eq!(o.logprobs.len(), o.tokens.len());
        assert!(o.logprobs.iter().all(|lp| lp.is_finite() && *lp <= 0.0));
    }
    // Round trip: the ids decode to text and the engine's ids are what drmas scores.
    let tokens: Vec<Vec<i64>> = outs.iter().map(|o| o.tokens.clone()).collect();
    let engine: Vec<Vec<f32>> = outs.iter().map(|o| o.logprobs.clone()).collect();
    let ours = recompute(&model, &reqs, &tokens);
    let (max, mean) = worst(&engine, &ours);
    eprintln!("engine vs drmas log-probs (F32 weights): max {max:.2e}, mean {mean:.2e}");
    assert!(max <= TOLERANCE, "engine log-probs differ by up to {max}");
    // The same seed gives the same tokens.
    let again = client.generate(&reqs[0]).unwrap();
    assert_eq!(
        again.tokens, outs[0].tokens,
        "a seeded request is reproducible"
    );

    // New weights: the head moved. The engine is restarted on their export.
    let mut new = weights(&model);
    tch::no_grad(|| {
        let head = new.get_mut("model.embed_tokens.weight").unwrap();
        let noise = head.randn_like() * 0.02;
        let _ = head.g_add_(&noise);
    });
    let v2 = dir.path().join("v2.gguf");
    let sync = Instant::now();
    export_gguf(&template, &new, ExportType::F32, &v2).unwrap();
    server.stop(Duration::from_secs(5));
    let (mut server, client) = start(&v2, &dir.path().join("engine.log"));
    eprintln!(
        "sync (export + restart + ready): {:.2} s",
        sync.elapsed().as_secs_f64()
    );
    let outs2: Vec<_> = client
        .generate_all(&reqs, 4)
        .into_iter()
        .map(|o| o.unwrap())
        .collect();
    let tokens2: Vec<Vec<i64>> = outs2.iter().map(|o| o.tokens.clone()).collect();
    let engine2: Vec<Vec<f32>> = outs2.iter().map(|o| o.logprobs.clone()).collect();
    // `model` now holds the new weights (the map's tensors are its variables).
    let new_ours = recompute(&model, &reqs, &tokens2);
    let (max2, _) = worst(&engine2, &new_ours);
    assert!(max2 <= TOLERANCE, "after the sync: {max2}");
    // And not the old ones: the old weights' log-probs of the same tokens are far.
    let old_model = common::load_dir(&model_dir());
    let (_, mean_old) = worst(&engine2, &recompute(&old_model, &reqs, &tokens2));
    eprintln!(
        "after the sync: max {max2:.2e} from the new weights, mean {mean_old:.2e} from the old"
    );
    assert!(
        mean_old > 10.0 * TOLERANCE,
        "the engine still has the old weights"
    );

    // A killed engine: the request fails, naming it, after the retries.
    let url = server.url();
    // SAFETY: a signal to the child this test started.
    unsafe {
        libc::kill(server.pid() as libc::pid_t, libc::SIGKILL);
    }
    // Reaped once the kernel has ended it: wait on that, not on a clock.
    common::process::wait_until(
        "the killed llama-server exits",
        Duration::from_millis(20),
        || server.exited().is_some(),
    );
    let e = client.generate(&reqs[0]).unwrap_err().to_string();
    assert!(
        e.starts_with(&format!(
            "llama.cpp at {url}: generate failed after 2 attempts: "
        )),
        "{e}"
    );
}

/// A model worker whose rollouts run on llama-server: generation through the handle
/// comes from the engine (tagged with the engine's policy version), an update through
/// the handle trains drmas's weights and restarts the engine on their export, and the
/// next generation is tagged with the new version.
#[test]
fn a_model_worker_generates_on_the_engine_and_syncs_after_each_update() {
    use common::train::update_settings;
    use drmas::config::LossAgg;
    use drmas::engine::Retry;
    use drmas::model::SamplingParams;
    use drmas::pool::{BackendRequest, EngineBackend, ModelBackend, WeightSync, WorkerConfig};
    use drmas::update::{TrainSample, UpdateBatch};
    use std::sync::Arc;

    let dir = tempfile::tempdir().unwrap();
    let sync_dir = dir.path().join("sync");
    let log = dir.path().join("engine.log");
    let port = free_port().unwrap();
    let command = server_command();
    let (sd, lg) = (sync_dir.clone(), log.clone());
    let handle = drmas::pool::spawn_worker("solver-lm", WorkerConfig::default(), move || {
        let model = common::load_dir(&model_dir());
        let tok = Arc::new(TextTokenizer::from_dir(&model_dir()).unwrap());
        let inner = ModelBackend::new(model, Some(tok), model_dir())
            .with_training(update_settings(LossAgg::TokenMean), None);
        let client = EngineClient::new(
            &format!("http://127.0.0.1:{port}"),
            Box::new(LlamaCpp),
            Duration::from_secs(120),
            Retry::default(),
        );
        let backend = EngineBackend::start(
            inner,
            client,
            4,
            WeightSync::Restart {
                dir: sd,
                port,
                template: common::root().join("models/gguf/SmolLM2-135M-Instruct.Q4_1.gguf"),
                kind: ExportType::F32,
                command,
                log: lg,
                ready_within: Duration::from_secs(60),
            },
        )?;
        Ok(Box::new(backend) as Box<dyn drmas::pool::Backend>)
    })
    .unwrap();
    assert!(sync_dir.join("v000000.gguf").exists());
    let tok = TextTokenizer::from_dir(&model_dir()).unwrap();
    let prompt = tok
        .chat_ids(&[drmas_plugin_api::Message::new("user", "What is 2 + 3?")])
        .unwrap();
    let request = BackendRequest {
        prompt: prompt.clone(),
        params: SamplingParams {
            temperature: 0.7,
            max_new_tokens: 12,
            stop_token_ids: tok.stop_token_ids().to_vec(),
            seed: 5,
            ..SamplingParams::default()
        },
        stop: vec![],
        shared_prefix: 0,
    };
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    let first = rt.block_on(handle.generate(request.clone())).unwrap();
    assert!(!first.tokens.is_empty());
    assert_eq!(first.policy_version, 0);

    let sample = TrainSample {
        agent: "solver".into(),
        prompt,
        response: first.tokens.clone(),
        sample_logprobs: first.logprobs.clone(),
        temperature: 0.7,
        advantage: 1.0,
    };
    let batch = UpdateBatch {
        step: 0,
        lr: 1e-3,
        samples: vec![sample],
        share: None,
        progress: Arc::default(),
        shadow_advantages: None,
    };
    let started = Instant::now();
    let report = handle.update(batch).unwrap();
    eprintln!(
        "update + sync: {:.2} s (update {:.2} s)",
        started.elapsed().as_secs_f64(),
        report.seconds
    );
    assert_eq!(report.applied, 1);
    assert!(sync_dir.join("v000001.gguf").exists());
    assert!(
        !sync_dir.join("v000000.gguf").exists(),
        "the old export is removed"
    );
    let second = rt.block_on(handle.generate(request)).unwrap();
    assert_eq!(second.policy_version, 1, "generated by the synced weights");
}

/// `drmas train` of the shipped math team, 2 steps, both models' rollouts on their own
/// llama-server (started, synced after each update and stopped by drmas): the steps'
/// samples carry the engines' policy versions, and each engine's sync folder holds
/// the last version's export alone.
#[test]
fn the_math_team_trains_two_steps_with_rollouts_on_llama_server() {
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("run");
    let engine = |id: &str| {
        format!(
            "models.{id}.engine={{ kind = \"llama-cpp\", command = [{:?}, \"-m\", \"{{model}}\", \"--port\", \"{{port}}\", \"--host\", \"127.0.0.1\", \"-t\", \"1\", \"-np\", \"4\", \"-c\", \"4096\"], gguf = {:?}, parallel = 4 }}",
            llama_server().display().to_string(),
            common::root()
                .join("models/gguf/SmolLM2-135M-Instruct.Q4_1.gguf")
                .display()
                .to_string(),
        )
    };
    let started = Instant::now();
    let o = std::process::Command::new(env!("CARGO_BIN_EXE_drmas"))
        .current_dir(common::root())
        .arg("train")
        .arg("configs/math-drmas.toml")
        .args([
            "--set",
            &format!("experiment.output_dir={:?}", out.display().to_string()),
        ])
        .args(["--set", "trainer.steps=2"])
        .args(["--set", "trainer.prompts_per_step=2"])
        .args(["--set", "trainer.group_size=2"])
        .args(["--set", "trainer.eval_every=0"])
        .args(["--set", "trainer.save_every=2"])
        .args(["--set", &engine("solver-lm")])
        .args(["--set", &engine("verifier-lm")])
        .arg("--quiet")
        .env_remove("DRMAS_PLUGIN_PATH")
        .output()
        .unwrap();
    let text = common::output_text(&o);
    assert!(o.status.success(), "{text}");
    eprintln!(
        "2 steps on llama-server: {:.1} s",
        started.elapsed().as_secs_f64()
    );
    let lines = crate::sweep_cli::metrics_lines(&out.join("metrics.jsonl"));
    assert_eq!(lines.len(), 2);
    for l in &lines {
        assert_eq!(l["failed_episodes"], 0, "{l}");
        assert!(l["tokens_generated"].as_u64().unwrap() > 0);
        for id in ["solver-lm", "verifier-lm"] {
            // Synced after every update: every sample is of the weights it trains.
            assert_eq!(l["models"][id]["stale_samples"], 0, "{l}");
            assert_eq!(l["models"][id]["staleness_max"], 0, "{l}");
            // The sync after the update: an export and a restart, timed.
            let sync = l["models"][id]["engine_sync_seconds"].as_f64().unwrap();
            assert!(sync > 0.0 && sync < 120.0, "{l}");
        }
        eprintln!(
            "step {}: reward {}, rollout {:.1} s, update {:.1} s",
            l["step"], l["reward_mean"], l["time"]["rollout"], l["time"]["update"]
        );
    }
    for id in ["solver-lm", "verifier-lm"] {
        let sync: Vec<String> = std::fs::read_dir(out.join("engine").join(id))
            .unwrap()
            .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
            .filter(|n| n.ends_with(".gguf"))
            .collect();
        assert_eq!(sync, ["v000002.gguf"], "{id}");
    }
    assert!(out.join("checkpoints/step-000002").is_dir());
}

/// The shipped engine config (configs/math-drmas-engine.toml), as a user runs it: its
/// `llama-server` found on PATH, shrunk to one step of 2 × 2 by `--set` alone. `drmas
/// check` passes it, and one step trains with both models' rollouts on their engines,
/// each synced after its update; the servers end with the run.
#[test]
fn the_shipped_engine_config_checks_and_trains_a_step() {
    let server = llama_server();
    let path = std::env::join_paths(
        std::iter::once(server.parent().unwrap().to_path_buf()).chain(
            std::env::var_os("PATH")
                .map(|p| std::env::split_paths(&p).collect::<Vec<_>>())
                .unwrap_or_default(),
        ),
    )
    .unwrap();
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("run");
    let drmas = |command: &str| {
        let mut c = std::process::Command::new(env!("CARGO_BIN_EXE_drmas"));
        c.current_dir(common::root())
            .arg(command)
            .arg("configs/math-drmas-engine.toml")
            .env("PATH", &path)
            .env_remove("DRMAS_PLUGIN_PATH");
        c
    };
    let shrink = [
        format!("experiment.output_dir={:?}", out.display().to_string()),
        "trainer.steps=1".into(),
        "trainer.prompts_per_step=2".into(),
        "trainer.group_size=2".into(),
        "trainer.save_every=1".into(),
    ];
    let o = drmas("check").output().unwrap();
    let text = common::output_text(&o);
    // The placement is judged against this machine's free memory at this moment (other
    // work shares it): the rest of the check must pass either way.
    assert!(
        o.status.success() || text.contains("do not fit the pool's devices"),
        "{text}"
    );
    // Both models' rollouts are on their engines: no KV cache is budgeted in drmas.
    for id in ["solver-lm", "verifier-lm"] {
        let line = text
            .lines()
            .find(|l| l.trim_start().starts_with(id))
            .unwrap_or_else(|| panic!("no {id} in {text}"));
        assert!(!line.contains("KV cache"), "{text}");
    }
    let mut train = drmas("train");
    for s in &shrink {
        train.arg("--set").arg(s);
    }
    let o = train.arg("--quiet").output().unwrap();
    let text = common::output_text(&o);
    assert!(o.status.success(), "{text}");
    let lines = crate::sweep_cli::metrics_lines(&out.join("metrics.jsonl"));
    assert_eq!(lines.len(), 1);
    let l = &lines[0];
    assert_eq!(l["failed_episodes"], 0, "{l}");
    assert!(l["tokens_generated"].as_u64().unwrap() > 0, "{l}");
    for id in ["solver-lm", "verifier-lm"] {
        assert_eq!(l["models"][id]["stale_samples"], 0, "{l}");
        let sync = l["models"][id]["engine_sync_seconds"].as_f64().unwrap();
        assert!(sync > 0.0, "{l}");
        // The engine ran from the run folder's export and is gone with the run.
        let needle = out.join("engine").join(id).display().to_string();
        assert!(
            pids_with(&needle).is_empty(),
            "{id}'s engine outlived the run"
        );
    }
    assert!(out.join("checkpoints/step-000001").is_dir());
}

/// The pids of the processes whose command line holds `needle` (read from /proc).
fn pids_with(needle: &str) -> Vec<u32> {
    let mut pids = Vec::new();
    for entry in std::fs::read_dir("/proc").unwrap().flatten() {
        let Ok(pid) = entry.file_name().to_string_lossy().parse::<u32>() else {
            continue;
        };
        if let Ok(cmd) = std::fs::read(entry.path().join("cmdline"))
            && String::from_utf8_lossy(&cmd).contains(needle)
        {
            pids.push(pid);
        }
    }
    pids
}

/// The solver's engine is killed once the first step is logged: the next step's
/// episodes fail on it, are counted under the failure budget and blamed on the model,
/// and the run stops with that count and the engine's own end named: never a hang,
/// and the first step's line and checkpoint are kept.
#[test]
fn a_killed_engine_fails_the_steps_episodes_with_a_count() {
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("run");
    let engine = format!(
        "models.solver-lm.engine={{ kind = \"llama-cpp\", command = [{:?}, \"-m\", \"{{model}}\", \"--port\", \"{{port}}\", \"--host\", \"127.0.0.1\", \"-t\", \"1\", \"-np\", \"4\", \"-c\", \"4096\"], gguf = {:?}, parallel = 4 }}",
        llama_server().display().to_string(),
        common::root()
            .join("models/gguf/SmolLM2-135M-Instruct.Q4_1.gguf")
            .display()
            .to_string(),
    );
    let mut child = std::process::Command::new(env!("CARGO_BIN_EXE_drmas"))
        .current_dir(common::root())
        .arg("train")
        .arg("configs/math-drmas.toml")
        .args([
            "--set",
            &format!("experiment.output_dir={:?}", out.display().to_string()),
        ])
        .args(["--set", "trainer.steps=4"])
        .args(["--set", "trainer.prompts_per_step=2"])
        .args(["--set", "trainer.group_size=2"])
        .args(["--set", "trainer.eval_every=0"])
        .args(["--set", "trainer.save_every=1"])
        .args(["--set", "workflow.max_failed_episodes=0.5"])
        .args(["--set", &engine])
        .arg("--quiet")
        .env_remove("DRMAS_PLUGIN_PATH")
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let metrics = out.join("metrics.jsonl");
    let deadline = Instant::now() + Duration::from_secs(600);
    while std::fs::read_to_string(&metrics).map_or(0, |t| t.lines().count()) < 1 {
        assert!(Instant::now() < deadline, "no first step in 10 minutes");
        assert!(child.try_wait().unwrap().is_none(), "drmas ended early");
        std::thread::sleep(Duration::from_millis(100));
    }
    // The engine runs on the export of the newest version, inside the run folder.
    let needle = out.join("engine/solver-lm").display().to_string();
    let pids = pids_with(&needle);
    assert!(!pids.is_empty(), "no engine process runs {needle}");
    for pid in &pids {
        // SAFETY: a plain signal to a process this test's run started.
        unsafe { libc::kill(*pid as i32, libc::SIGKILL) };
    }
    let killed = Instant::now();
    let o = child.wait_with_output().unwrap();
    let text = common::output_text(&o);
    eprintln!(
        "the run stopped {:.1} s after the kill",
        killed.elapsed().as_secs_f64()
    );
    assert!(!o.status.success(), "{text}");
    let tail = " of 4 episodes failed, more than [workflow] max_failed_episodes = 0.5 allows; model solver-lm: ";
    let at = text.find(tail).unwrap_or_else(|| panic!("{text}"));
    let digits: String = text[..at]
        .chars()
        .rev()
        .take_while(|c| c.is_ascii_digit())
        .collect();
    let failed: u32 = digits.chars().rev().collect::<String>().parse().unwrap();
    eprintln!(
        "{}",
        text.lines().find(|l| l.contains(tail.trim())).unwrap_or("")
    );
    assert!(failed > 2, "{text}");
    assert!(text.contains("the engine at http://127.0.0.1:"), "{text}");
    assert!(text.contains("ended (signal: 9"), "{text}");
    let lines = std::fs::read_to_string(&metrics).unwrap();
    assert_eq!(lines.lines().count(), 1, "{lines}");
    assert!(out.join("checkpoints/step-000001").is_dir());
}

/// A LoRA model on llama-server: drmas exports the frozen base once and each adapter as
/// a GGUF LoRA (`--lora`, in slot order); requests name their adapter, and the engine's
/// log-probs are drmas's on that adapter (not the base's, not the other adapter's).
/// After one adapter's update only its export is replaced, and the engine generates
/// with the new adapter.
#[test]
fn lora_adapters_generate_on_llama_server_as_drmas_computes_them() {
    use common::train::update_settings;
    use drmas::config::LossAgg;
    use drmas::model::{SamplingParams, lora::LoraConfig};
    use drmas::pool::{Backend, BackendRequest, EngineBackend, ModelBackend, WeightSync};
    use drmas::update::{TrainSample, UpdateBatch};
    use std::sync::Arc;

    let dir = tempfile::tempdir().unwrap();
    let sync_dir = dir.path().join("sync");
    let config = LoraConfig {
        rank: 8,
        alpha: 16.0,
        dropout: 0.0,
        targets: ["q_proj", "k_proj", "v_proj", "o_proj"]
            .map(String::from)
            .into(),
        rslora: false,
    };
    let tok = Arc::new(TextTokenizer::from_dir(&model_dir()).unwrap());
    let inner = ModelBackend::with_adapters(
        common::load_dir(&model_dir()),
        Some(tok.clone()),
        model_dir(),
        &[
            ("solver-lm".into(), config.clone()),
            ("verifier-lm".into(), config),
        ],
        3,
    );
    // B starts at zero (the base's outputs): random B makes each adapter its own model.
    tch::manual_seed(11);
    tch::no_grad(|| {
        for a in inner.model.adapters() {
            for (name, t) in &a.params {
                if name.contains("lora_B") {
                    let mut t = t.shallow_clone();
                    t.copy_(&(Tensor::randn_like(&t) * 0.05));
                }
            }
        }
    });
    let settings = update_settings(LossAgg::TokenMean);
    let inner = inner.with_training(settings, None);
    let port = free_port().unwrap();
    let client = EngineClient::new(
        &format!("http://127.0.0.1:{port}"),
        Box::new(LlamaCpp),
        Duration::from_secs(120),
        Retry::default(),
    );
    let mut engine = EngineBackend::start(
        inner,
        client,
        4,
        WeightSync::Restart {
            dir: sync_dir.clone(),
            port,
            template: common::root().join("models/gguf/SmolLM2-135M-Instruct.Q4_1.gguf"),
            kind: ExportType::F32,
            command: server_command(),
            log: dir.path().join("engine.log"),
            ready_within: Duration::from_secs(60),
        },
    )
    .unwrap();
    let files = |d: &Path| {
        let mut v: Vec<String> = std::fs::read_dir(d)
            .unwrap()
            .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
            .filter(|n| n.ends_with(".gguf"))
            .collect();
        v.sort();
        v
    };
    assert_eq!(
        files(&sync_dir),
        [
            "base.gguf",
            "solver-lm-v000000.gguf",
            "verifier-lm-v000000.gguf"
        ]
    );
    let reqs = requests(&tok);
    let backend_requests: Vec<BackendRequest> = reqs
        .iter()
        .map(|r| BackendRequest {
            prompt: r.prompt.clone(),
            params: SamplingParams {
                temperature: r.temperature,
                max_new_tokens: r.max_new_tokens,
                stop_token_ids: r.stop_token_ids.clone(),
                seed: r.seed,
                ..SamplingParams::default()
            },
            stop: vec![],
            shared_prefix: 0,
        })
        .collect();
    // drmas's log-probs of `tokens` with slot `slot`'s adapter (None: the base alone).
    let drmas_lps = |engine: &mut EngineBackend, slot: Option<usize>, tokens: &[Vec<i64>]| {
        let mb = engine.model_backend().unwrap();
        let mode = mb.model.mode();
        mode.route_all(slot);
        recompute(&mb.model, &reqs, tokens)
    };
    let generate = |engine: &mut EngineBackend, slot: usize| {
        let gens = engine
            .generate_slots(&backend_requests, &vec![slot; backend_requests.len()])
            .unwrap();
        let tokens: Vec<Vec<i64>> = gens.iter().map(|g| g.tokens.clone()).collect();
        let lps: Vec<Vec<f32>> = gens.iter().map(|g| g.logprobs.clone()).collect();
        (tokens, lps, gens[0].policy_version)
    };
    let mut before = Vec::new();
    for slot in [0, 1] {
        let (tokens, engine_lps, version) = generate(&mut engine, slot);
        assert_eq!(version, 0);
        let own = worst(&engine_lps, &drmas_lps(&mut engine, Some(slot), &tokens));
        let base = worst(&engine_lps, &drmas_lps(&mut engine, None, &tokens));
        let other = worst(
            &engine_lps,
            &drmas_lps(&mut engine, Some(1 - slot), &tokens),
        );
        eprintln!(
            "slot {slot}: |engine - drmas| max {:.2e} mean {:.2e}; against the base max {:.3}, the other adapter max {:.3}",
            own.0, own.1, base.0, other.0
        );
        assert!(own.0 < LORA_TOLERANCE, "slot {slot}: {own:?}");
        assert!(base.0 > 10.0 * LORA_TOLERANCE, "slot {slot}: {base:?}");
        assert!(other.0 > 10.0 * LORA_TOLERANCE, "slot {slot}: {other:?}");
        before.push((tokens, engine_lps));
    }

    // One update of the verifier's adapter, with a learning rate that moves it visibly.
    let (tokens, lps) = &before[1];
    let batch = UpdateBatch {
        step: 0,
        lr: 2e-2,
        samples: reqs
            .iter()
            .zip(tokens.iter().zip(lps))
            .map(|(r, (t, l))| TrainSample {
                agent: "verifier".into(),
                prompt: r.prompt.clone(),
                response: t.clone(),
                sample_logprobs: l.clone(),
                temperature: r.temperature,
                advantage: 1.0,
            })
            .collect(),
        share: None,
        progress: Arc::default(),
        shadow_advantages: None,
    };
    let started = Instant::now();
    let report = engine.update(1, &batch).unwrap();
    assert_eq!(report.applied, 1);
    eprintln!(
        "adapter update + export + restart: {:.2} s (the sync {:.2} s)",
        started.elapsed().as_secs_f64(),
        engine.sync_seconds.last().unwrap()
    );
    assert_eq!(
        files(&sync_dir),
        [
            "base.gguf",
            "solver-lm-v000000.gguf",
            "verifier-lm-v000001.gguf"
        ]
    );
    let (tokens, engine_lps, version) = generate(&mut engine, 1);
    assert_eq!(version, 1, "generated by the synced adapter");
    let new = worst(&engine_lps, &drmas_lps(&mut engine, Some(1), &tokens));
    eprintln!("after the sync: max {:.2e} mean {:.2e}", new.0, new.1);
    assert!(new.0 < LORA_TOLERANCE, "{new:?}");
    // The solver's adapter is untouched and still served under id 0.
    let (tokens, engine_lps, version) = generate(&mut engine, 0);
    assert_eq!(version, 0);
    let solver = worst(&engine_lps, &drmas_lps(&mut engine, Some(0), &tokens));
    assert!(solver.0 < LORA_TOLERANCE, "{solver:?}");
}

/// `drmas train` of the shipped LoRA math team, 2 steps: its two adapters share one base
/// and, with the same engine section, one worker and one llama-server (the base
/// exported once, an adapter file per model). Each step syncs both adapters, the
/// samples are of the synced versions, and the folder ends with the base and the last
/// version of each adapter.
#[test]
fn the_lora_math_team_trains_two_steps_on_one_llama_server() {
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("run");
    let engine = |id: &str| {
        format!(
            "models.{id}.engine={{ kind = \"llama-cpp\", command = [{:?}, \"-m\", \"{{model}}\", \"--port\", \"{{port}}\", \"--host\", \"127.0.0.1\", \"-t\", \"1\", \"-np\", \"4\", \"-c\", \"4096\"], gguf = {:?}, parallel = 4 }}",
            llama_server().display().to_string(),
            common::root()
                .join("models/gguf/SmolLM2-135M-Instruct.Q4_1.gguf")
                .display()
                .to_string(),
        )
    };
    let o = std::process::Command::new(env!("CARGO_BIN_EXE_drmas"))
        .current_dir(common::root())
        .arg("train")
        .arg("configs/math-lora.toml")
        .args([
            "--set",
            &format!("experiment.output_dir={:?}", out.display().to_string()),
        ])
        .args(["--set", "trainer.steps=2"])
        .args(["--set", "trainer.prompts_per_step=2"])
        .args(["--set", "trainer.group_size=2"])
        .args(["--set", "trainer.eval_every=0"])
        .args(["--set", "trainer.save_every=2"])
        .args(["--set", &engine("solver-lm")])
        .args(["--set", &engine("verifier-lm")])
        .arg("--quiet")
        .env_remove("DRMAS_PLUGIN_PATH")
        .output()
        .unwrap();
    let text = common::output_text(&o);
    assert!(o.status.success(), "{text}");
    let lines = crate::sweep_cli::metrics_lines(&out.join("metrics.jsonl"));
    assert_eq!(lines.len(), 2);
    for l in &lines {
        assert_eq!(l["failed_episodes"], 0, "{l}");
        for id in ["solver-lm", "verifier-lm"] {
            assert_eq!(l["models"][id]["stale_samples"], 0, "{l}");
        }
    }
    // One engine for both: its folder is the first model's.
    let mut files: Vec<String> = std::fs::read_dir(out.join("engine/solver-lm"))
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .filter(|n| n.ends_with(".gguf"))
        .collect();
    files.sort();
    assert_eq!(
        files,
        [
            "base.gguf",
            "solver-lm-v000002.gguf",
            "verifier-lm-v000002.gguf"
        ]
    );
    assert!(!out.join("engine/verifier-lm").exists());
}
