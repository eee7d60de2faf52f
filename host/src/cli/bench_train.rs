//! `drmas bench train`: GRPO optimizer steps on fixed work — P prompts × G samples of
//! exactly N tokens, f32 — through the same model worker and update the trainer uses,
//! with the machine's GEMM rate and the bound it implies measured in the same run.

use super::bench::{peak_rss_mib, read_prompts};
use drmas::config::{LossAgg, TrainerSection};
use drmas::model::{
    ModelConfig, SamplingParams, TextTokenizer, flops::forward_flops, load_pretrained,
};
use drmas::plugin::{Registry, ResolvePolicy};
use drmas::pool::{Backend, BackendRequest, ModelBackend, WorkerConfig, spawn_worker};
use drmas::update::{AdamWConfig, LogpOld, LossSettings, TrainSample, UpdateBatch, UpdateSettings};
use drmas_plugin_api::{Message, SampleRow};
use std::{path::PathBuf, process::ExitCode, sync::Arc, time::Instant};

#[derive(clap::Args)]
pub struct Args {
    #[arg(long)]
    model: PathBuf,
    /// JSONL with a `prompt` field per line, each sent as one user message.
    #[arg(long)]
    prompts: PathBuf,
    /// Samples per prompt (the GRPO group).
    #[arg(long, default_value_t = 4)]
    generations: usize,
    /// Exactly this many new tokens per sample (stop tokens are ignored).
    #[arg(long, default_value_t = 128)]
    new_tokens: usize,
    #[arg(long, default_value_t = 5)]
    steps: usize,
    /// Intra-op threads (libtorch).
    #[arg(long, default_value_t = 2)]
    threads: i32,
    #[arg(long, default_value_t = 1e-6)]
    lr: f64,
    /// `cpu`, `cuda:N` or `auto`.
    #[arg(long, default_value = "cpu", value_parser = super::values::device)]
    device: drmas::pool::DeviceSpec,
    /// f32, bf16 or f16 (bf16 trains with f32 master weights).
    #[arg(long, default_value = "f32")]
    dtype: drmas::model::Dtype,
    /// Tokens per update micro-batch (`[trainer] micro_batch_tokens`): the activations
    /// the update holds at once. Absent: 4096 on the CPU, sized from the free memory on
    /// a GPU, as a run would (`pool::sizing`; the logits chunk too).
    #[arg(long)]
    micro_batch_tokens: Option<u32>,
    /// The device's nominal dense peak for this dtype in TFLOP/s, for a model-FLOPs
    /// utilisation against the spec sheet besides the one against the GEMM rate
    /// measured here.
    #[arg(long)]
    peak_tflops: Option<f64>,
}

/// The update settings of the benchmarks: `[trainer]`'s defaults, token-mean loss,
/// AdamW's defaults, no KL, one optimizer step per batch.
pub fn bench_settings(norm_len: f64) -> UpdateSettings {
    let trainer = TrainerSection::default();
    UpdateSettings {
        loss: LossSettings {
            clip_low: trainer.clip.low,
            clip_high: trainer.clip.high,
            dual_clip: trainer.clip.dual,
            agg: LossAgg::TokenMean,
            kl: None,
            entropy_coef: 0.0,
            gspo: false,
            tis_cap: None,
            norm_len,
        },
        optimizer: AdamWConfig::default(),
        grad_clip: 1.0,
        micro_batch_tokens: drmas::pool::sizing::CPU.micro_batch_tokens,
        logits_budget_bytes: drmas::pool::sizing::CPU.logits_bytes,
        ppo_epochs: 1,
        mini_batches: 1,
        logp_old: LogpOld::Recompute,
        share_prompts: true,
        shadow_gradients: false,
    }
}

/// GEMM rate of `device` in `kind` in GFLOP/s, from large square matmuls.
pub fn gemm_gflops(device: tch::Device, kind: tch::Kind) -> f64 {
    let _guard = tch::no_grad_guard();
    let n = if device.is_cuda() { 8192i64 } else { 2048 };
    let a = tch::Tensor::randn([n, n], (kind, device));
    let b = tch::Tensor::randn([n, n], (kind, device));
    let sync = || drmas::pool::synchronize(device);
    let _ = a.matmul(&b); // warm-up
    sync();
    let started = Instant::now();
    let mut iters = 0;
    while started.elapsed().as_secs_f64() < 2.0 {
        let _ = a.matmul(&b);
        sync();
        iters += 1;
    }
    2.0 * (n * n * n) as f64 * iters as f64 / started.elapsed().as_secs_f64() / 1e9
}

/// FLOPs of the work that must be done: each distinct prompt prefilled once and each
/// sample decoded; in the update, each group's prompt once and its responses, forward
/// and backward (twice the forward), logits only at responses.
fn necessary_flops(c: &ModelConfig, prompt_lens: &[usize], g: usize, n: usize) -> (f64, f64) {
    let n = n as f64;
    let mut generation = 0.0;
    let mut update = 0.0;
    for &p in prompt_lens {
        let p = p as f64;
        let prefill = forward_flops(c, p, (p + 1.0) / 2.0, 1.0);
        let responses = g as f64 * forward_flops(c, n, p + (n + 1.0) / 2.0, n);
        generation += prefill + responses;
        update += 3.0 * (forward_flops(c, p, (p + 1.0) / 2.0, 0.0) + responses);
    }
    (generation, update)
}

fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(f64::total_cmp);
    if v.is_empty() {
        return f64::NAN;
    }
    let m = v.len() / 2;
    if v.len() % 2 == 1 {
        v[m]
    } else {
        (v[m - 1] + v[m]) / 2.0
    }
}

pub fn run(args: Args) -> anyhow::Result<ExitCode> {
    anyhow::ensure!(
        args.steps >= 2,
        "--steps must be at least 2 (the first is warm-up)"
    );
    anyhow::ensure!(args.generations >= 2, "--generations must be at least 2");
    tch::set_num_threads(args.threads);
    let tokenizer = Arc::new(TextTokenizer::from_dir(&args.model)?);
    let prompts: Vec<Vec<i64>> = read_prompts(&args.prompts)?
        .iter()
        .map(|p| tokenizer.chat_ids(&[Message::user(p.clone())]))
        .collect::<Result<_, _>>()?;
    anyhow::ensure!(
        !prompts.is_empty(),
        "{}: no prompts",
        args.prompts.display()
    );
    let config = ModelConfig::from_file(&args.model.join("config.json"))?;
    let device = args.device.single()?;
    let kind = args.dtype.kind();
    let rate = gemm_gflops(device, kind);

    anyhow::ensure!(
        args.micro_batch_tokens != Some(0),
        "--micro-batch-tokens must be at least 1"
    );
    let asked = drmas::pool::sizing::Asked {
        micro_batch_tokens: args.micro_batch_tokens.map(|m| m as usize),
        ..Default::default()
    };
    let sizes = if device.is_cuda() {
        let prompt_tokens = prompts.iter().map(Vec::len).max().unwrap_or(1) as u64;
        drmas::pool::sizing::for_gpu(
            asked,
            drmas::model::memory::available_memory(device).map(|a| a.bytes),
            &drmas::pool::sizing::Worker {
                config: &config,
                kind,
                adapter_params: 0,
                trains: drmas::pool::placement::Trains::Full,
                sharding: drmas::pool::placement::Sharding::NONE,
                prompt_tokens,
                new_tokens: args.new_tokens as u64,
            },
        )
    } else {
        asked.on_cpu()
    };
    let settings = UpdateSettings {
        micro_batch_tokens: sizes.micro_batch_tokens,
        logits_budget_bytes: sizes.logits_bytes,
        ..bench_settings(args.new_tokens as f64)
    };
    let total = prompts.len() * args.generations;
    let model_dir = args.model.clone();
    let worker_tokenizer = tokenizer.clone();
    let handle = spawn_worker(
        "policy",
        WorkerConfig {
            max_sequences: total,
            gather_window: std::time::Duration::from_secs(10),
            ..WorkerConfig::default()
        },
        move || {
            let model = load_pretrained(&model_dir, device, Some(kind))?;
            Ok(Box::new(
                ModelBackend::new(model, Some(worker_tokenizer), model_dir)
                    .with_training(settings, None),
            ) as Box<dyn Backend>)
        },
    )?;
    let normalizer =
        Registry::builtin().create_normalizer("norms/grpo", "", &ResolvePolicy::default())?;
    let runtime = drmas::rollout::EpisodeRuntime::new()?;

    let mut steps = Vec::new();
    let mut update_gflops = Vec::new();
    let mut tokens = 0;
    for step in 0..args.steps {
        let started = Instant::now();
        let requests: Vec<BackendRequest> = prompts
            .iter()
            .flat_map(|p| (0..args.generations).map(move |g| (p, g)))
            .enumerate()
            .map(|(i, (p, _))| BackendRequest {
                prompt: p.clone(),
                params: SamplingParams {
                    temperature: 1.0,
                    max_new_tokens: args.new_tokens,
                    seed: (step * total + i) as u64,
                    ..SamplingParams::default()
                },
                stop: vec![],
                shared_prefix: 0,
            })
            .collect();
        let generations = runtime.block_on(futures_join(&handle, requests))?;
        let generation = started.elapsed().as_secs_f64();
        tokens = generations.iter().map(|g| g.tokens.len()).sum::<usize>();
        anyhow::ensure!(
            tokens == total * args.new_tokens,
            "generated {tokens} tokens, expected {}",
            total * args.new_tokens
        );
        // A cheap reward with spread: the completion's length in characters modulo 7.
        let rows: Vec<SampleRow> = generations
            .iter()
            .enumerate()
            .map(|(i, g)| {
                let text = tokenizer.decode(&g.tokens, true).unwrap_or_default();
                let uid = format!("p{}", i / args.generations);
                SampleRow::new(
                    &uid,
                    (i % args.generations) as u32,
                    "policy",
                    0,
                    (text.chars().count() % 7) as f32,
                )
            })
            .collect();
        let advantages = normalizer.advantages(&rows)?;
        let batch = UpdateBatch {
            step: step as u32,
            lr: args.lr,
            samples: generations
                .into_iter()
                .enumerate()
                .map(|(i, g)| TrainSample {
                    agent: "policy".into(),
                    prompt: prompts[i / args.generations].clone(),
                    response: g.tokens,
                    sample_logprobs: g.logprobs,
                    temperature: 1.0,
                    advantage: advantages[i],
                })
                .collect(),
            share: None,
            progress: Arc::default(),
            shadow_advantages: None,
        };
        let update_started = Instant::now();
        let report = handle.call("update", move |b, slot| b.update(slot, &batch))?;
        let update = update_started.elapsed().as_secs_f64();
        update_gflops.push(report.flops / 1e9 / report.seconds);
        let total_s = started.elapsed().as_secs_f64();
        errln!(
            "step {}: generation {generation:.1}s update {update:.1}s (grad norm {:.3})",
            step + 1,
            report.grad_norm().as_f64()
        );
        steps.push((generation, update, total_s));
    }
    let lens: Vec<usize> = prompts.iter().map(Vec::len).collect();
    let (gen_flops, update_flops) =
        necessary_flops(&config, &lens, args.generations, args.new_tokens);
    let timed = &steps[1..];
    let json = serde_json::json!({
        "impl": "drmas",
        "steps": steps.iter().map(|(g, u, t)| serde_json::json!({"generation": g, "update": u, "total": t})).collect::<Vec<_>>(),
        "median_step": median(timed.iter().map(|s| s.2).collect()),
        "median_generation": median(timed.iter().map(|s| s.0).collect()),
        "median_update": median(timed.iter().map(|s| s.1).collect()),
        "peak_rss_mib": peak_rss_mib(),
        "completion_tokens": tokens,
        "gemm_gflops": rate,
        "bound_generation_seconds": gen_flops / 1e9 / rate,
        "bound_update_seconds": update_flops / 1e9 / rate,
        "bound_seconds": (gen_flops + update_flops) / 1e9 / rate,
        "update_gflops": median(update_gflops[1..].to_vec()),
        "device": args.device.to_string(),
        "dtype": args.dtype.name(),
        "micro_batch_tokens": sizes.micro_batch_tokens,
        "logits_budget_bytes": sizes.logits_bytes,
        // Completion tokens trained per second of update (the prompts run too).
        "update_tokens_per_s": tokens as f64 / median(timed.iter().map(|s| s.1).collect()),
        "mfu_vs_gemm": median(update_gflops[1..].to_vec()) / rate,
        "mfu_vs_peak": args.peak_tflops.map(|p| median(update_gflops[1..].to_vec()) / (p * 1e3)),
    });
    outln!("{json}");
    Ok(ExitCode::SUCCESS)
}

/// Sends every request at once (they meet in one batch) and waits for all.
async fn futures_join(
    handle: &drmas::pool::ModelHandle,
    requests: Vec<BackendRequest>,
) -> anyhow::Result<Vec<drmas::model::Generation>> {
    let mut set = tokio::task::JoinSet::new();
    for (i, r) in requests.into_iter().enumerate() {
        let h = handle.clone();
        set.spawn(async move { (i, h.generate(r).await) });
    }
    let mut out: Vec<Option<drmas::model::Generation>> = Vec::new();
    while let Some(joined) = set.join_next().await {
        let (i, g) = joined?;
        if out.len() <= i {
            out.resize(i + 1, None);
        }
        out[i] = Some(g?);
    }
    Ok(out
        .into_iter()
        .map(|g| g.expect("every request answered"))
        .collect())
}
