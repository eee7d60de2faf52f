//! Data parallelism inside an update: two ranks (threads, each with its own model copy,
//! optimizer and Gloo group over 127.0.0.1, as two processes would have), each on its
//! share of a step's samples, take the optimizer step one process takes on all of them.
//! In float64 on the tiny Llama the weights agree to summation order; across the ranks
//! they are identical.

use crate::common;
use crate::common::process::HANG;

use common::train::update_settings;
use drmas::config::LossAgg;
use drmas::model::{Decoder, ModelConfig, load_weights};
use drmas::update::{
    AdamW, BatchShare, ShardedAdamW, TrainSample, UpdateBatch, UpdateProgress, UpdateReport,
    UpdateSettings, run_update, run_update_full, run_update_sharded,
};
use drmas_dist::{Backend, Group, Store};
use std::{sync::Arc, time::Duration};
use tch::{Device, Kind, Tensor};

fn model_f64() -> (Decoder, AdamW) {
    let dir = common::tiny_models().join("llama");
    let config = ModelConfig::from_file(&dir.join("config.json")).unwrap();
    let mut model = Decoder::new(config, Device::Cpu, Kind::Double);
    load_weights(&mut model, &dir).unwrap();
    let mut params: Vec<(String, Tensor)> = model.vs.variables().into_iter().collect();
    params.sort_by(|a, b| a.0.cmp(&b.0));
    let optimizer = AdamW::new(params, update_settings(LossAgg::TokenMean).optimizer);
    (model, optimizer)
}

/// Two agents; rank 0 gets the first task's samples, rank 1 the second's (agent `b`
/// only there: rank 0 takes part in its gradient sum without samples of it).
fn samples() -> Vec<(usize, TrainSample)> {
    let s = |agent: &str, prompt: &[i64], response: &[i64], adv: f32| TrainSample {
        agent: agent.into(),
        prompt: prompt.to_vec(),
        response: response.to_vec(),
        sample_logprobs: vec![-1.0; response.len()],
        temperature: 1.0,
        advantage: adv,
    };
    let p1 = [4i64, 8, 15, 16, 23, 42];
    let p2 = [9i64, 9, 3, 7];
    vec![
        (0, s("a", &p1, &[7, 1, 9], 1.2)),
        (0, s("a", &p1, &[30], -0.7)),
        (0, s("a", &p1, &[5, 5, 6, 2], 0.4)),
        (1, s("a", &p2, &[12, 13], -1.5)),
        (1, s("a", &p2, &[3], 0.6)),
        (1, s("b", &[1, 2, 3, 4], &[44, 45, 46], 0.9)),
        (1, s("b", &[1, 2, 3, 4], &[40], -0.9)),
    ]
}

fn batch(samples: Vec<TrainSample>, share: Option<BatchShare>) -> UpdateBatch {
    UpdateBatch {
        step: 0,
        lr: 1e-3,
        samples,
        share,
        progress: Arc::new(UpdateProgress::default()),
        shadow_advantages: None,
    }
}

/// Rank `rank`'s samples and their places among each agent's samples of both ranks
/// (the order of [`samples`], which is one process's).
fn rank_batch(rank: usize) -> UpdateBatch {
    let mut totals = std::collections::BTreeMap::<String, usize>::new();
    let mut mine = Vec::new();
    let mut positions = Vec::new();
    for (r, s) in samples() {
        let place = totals.entry(s.agent.clone()).or_default();
        if r == rank {
            positions.push(*place);
            mine.push(s);
        }
        *place += 1;
    }
    batch(
        mine,
        Some(BatchShare {
            agent_totals: totals,
            positions,
        }),
    )
}

fn weights(params: &[(String, Tensor)]) -> Vec<Tensor> {
    params.iter().map(|(_, p)| p.detach().copy()).collect()
}

fn max_abs_diff(a: &[Tensor], b: &[Tensor]) -> f64 {
    a.iter()
        .zip(b)
        .map(|(x, y)| (x - y).abs().max().double_value(&[]))
        .fold(0.0, f64::max)
}

/// A free port on 127.0.0.1 for a test's store.
fn free_port() -> u16 {
    drmas::engine::free_port().unwrap()
}

/// Rank `rank` of 2 in the model's group `m` (rank 0 hosts the store).
fn join(port: u16, rank: usize, timeout: Duration) -> Group {
    let store = Store::connect("127.0.0.1", port, 2, rank == 0, timeout).unwrap();
    Group::new(&store, Backend::Gloo, "m", rank, 2, timeout).unwrap()
}

/// `settings` with `mini_batches` and `ppo_epochs` (several optimizer steps per update).
fn settings_with(agg: LossAgg, mini_batches: u32, ppo_epochs: u32) -> UpdateSettings {
    let mut settings = update_settings(agg);
    settings.mini_batches = mini_batches;
    settings.ppo_epochs = ppo_epochs;
    settings
}

/// Two updates on one process, on all samples.
fn one_process(settings: &UpdateSettings) -> (Vec<Tensor>, Vec<UpdateReport>) {
    let (model, mut optimizer) = model_f64();
    let all: Vec<TrainSample> = samples().into_iter().map(|(_, s)| s).collect();
    let reports = (0..2)
        .map(|_| {
            run_update(
                &model,
                &mut optimizer,
                None,
                &batch(all.clone(), None),
                settings,
                None,
            )
            .unwrap()
        })
        .collect();
    (weights(optimizer.params()), reports)
}

/// What each rank keeps only its share of (`[[models]] shard`).
#[derive(Debug, Clone, Copy, PartialEq)]
enum Mode {
    None,
    Optimizer,
    Full,
}

/// The same two updates on two ranks, with the whole optimizer on each, its state
/// sharded across them, or the weights sharded too.
fn two_ranks(settings: &UpdateSettings, mode: Mode) -> Vec<(Vec<Tensor>, Vec<UpdateReport>)> {
    let port = free_port();
    // The collectives' timeout: a hang guard, generous because a rank's thread may be
    // slow to reach a collective on a loaded machine.
    let timeout = HANG;
    let handles: Vec<_> = (0..2)
        .map(|rank| {
            let settings = settings.clone();
            std::thread::spawn(move || {
                let mut group = join(port, rank, timeout);
                let (model, mut optimizer) = model_f64();
                if mode != Mode::None {
                    let params = optimizer
                        .params()
                        .iter()
                        .map(|(n, t)| (n.clone(), t.shallow_clone()))
                        .collect();
                    let config = update_settings(LossAgg::TokenMean).optimizer;
                    let mut sharded = ShardedAdamW::new(params, config, 2, group.rank()).unwrap();
                    let update = match mode {
                        Mode::Full => run_update_full,
                        _ => run_update_sharded,
                    };
                    let reports = (0..2)
                        .map(|_| {
                            let report = update(
                                &model,
                                &mut sharded,
                                None,
                                &rank_batch(rank),
                                &settings,
                                &mut group,
                            )
                            .unwrap();
                            // Whole again after the update, whatever the mode.
                            for (name, t) in sharded.params() {
                                assert!(t.numel() > 0, "{name} is whole after the update");
                            }
                            report
                        })
                        .collect();
                    return (weights(sharded.params()), reports);
                }
                let reports = (0..2)
                    .map(|_| {
                        run_update(
                            &model,
                            &mut optimizer,
                            None,
                            &rank_batch(rank),
                            &settings,
                            Some(&mut group),
                        )
                        .unwrap()
                    })
                    .collect();
                (weights(optimizer.params()), reports)
            })
        })
        .collect();
    handles.into_iter().map(|h| h.join().unwrap()).collect()
}

/// Two ranks against one process under `settings`: identical weights across ranks,
/// the one process's weights to summation order, the same norms, counts and losses.
fn assert_two_ranks_match_one_process(settings: &UpdateSettings, what: &str, mode: Mode) {
    let (w1, r1) = one_process(settings);
    let ranks = two_ranks(settings, mode);
    // Across ranks: the same gradients, the same AdamW arithmetic: identical weights.
    assert_eq!(max_abs_diff(&ranks[0].0, &ranks[1].0), 0.0, "{what}");
    // Against one process: the same sums in another order (f64).
    let d = max_abs_diff(&ranks[0].0, &w1);
    assert!(d < 1e-12, "{what}: weights differ by {d}");
    for (rank, (_, reports)) in ranks.iter().enumerate() {
        for (update, (r, one)) in reports.iter().zip(&r1).enumerate() {
            let at = format!("{what} rank {rank} update {update}");
            assert_eq!(r.grad_norms.len(), one.grad_norms.len(), "{at}");
            for (a, b) in r.grad_norms.iter().zip(&one.grad_norms) {
                assert!((a - b).abs() <= 1e-10 * b, "{at}: {a} vs {b}");
            }
            assert_eq!(r.tokens, one.tokens, "{at}");
            assert_eq!(r.applied, one.applied, "{at}");
            for agent in ["a", "b"] {
                let (x, y) = (&r.agents[agent], &one.agents[agent]);
                assert_eq!(x.samples, y.samples, "{at} {agent}");
                assert!(
                    (x.grad_norm - y.grad_norm).abs() <= 1e-10 * y.grad_norm,
                    "{at} {agent}"
                );
                assert!(
                    (x.stats.pg_loss - y.stats.pg_loss).abs() < 1e-12,
                    "{at} {agent}"
                );
                assert_eq!(x.stats.tokens, y.stats.tokens, "{at} {agent}");
            }
        }
    }
}

#[test]
fn two_ranks_take_the_step_one_process_takes() {
    for agg in [LossAgg::TokenMean, LossAgg::SeqMeanTokenMean] {
        assert_two_ranks_match_one_process(
            &settings_with(agg, 1, 1),
            &format!("{agg:?}"),
            Mode::None,
        );
    }
}

/// Several optimizer steps per update: mini-batch k takes the places ≡ k (mod M) of
/// each agent's samples on all ranks. With M = 3, agent `a`'s third mini-batch lies on
/// rank 0 alone and agent `b` (2 samples, both on rank 1) has none: no rank walks it.
#[test]
fn two_ranks_split_mini_batches_as_one_process_does() {
    for (m, epochs) in [(2, 1), (3, 1), (2, 2)] {
        let settings = settings_with(LossAgg::TokenMean, m, epochs);
        let what = format!("{m} mini-batches × {epochs}");
        assert_two_ranks_match_one_process(&settings, &what, Mode::None);
        let (_, r1) = one_process(&settings);
        assert_eq!(r1[0].grad_norms.len(), (m * epochs) as usize);
    }
}

/// `shard = "optimizer"`: each rank keeps its shard of AdamW's state, the gradients of
/// the model's two agents are reduce-scattered agent by agent (the per-agent norms summed
/// from the shards), and the ranks take one process's steps, mini-batches too.
#[test]
fn two_ranks_with_the_optimizer_sharded_take_the_step_one_process_takes() {
    for (m, epochs) in [(1, 1), (3, 1), (2, 2)] {
        let settings = settings_with(LossAgg::TokenMean, m, epochs);
        let what = format!("sharded, {m} mini-batches × {epochs}");
        assert_two_ranks_match_one_process(&settings, &what, Mode::Optimizer);
    }
}

/// `shard = "full"`: the weights sharded too, each layer gathered for its forward and
/// again for its recomputed backward, its gradient reduce-scattered micro-batch by
/// micro-batch; rank 0 has no samples of agent `b` and runs idle micro-batches so the
/// ranks' collectives pair up. The ranks take one process's steps, mini-batches too.
#[test]
fn two_ranks_with_the_weights_sharded_take_the_step_one_process_takes() {
    for (m, epochs) in [(1, 1), (3, 1), (2, 2)] {
        let settings = settings_with(LossAgg::TokenMean, m, epochs);
        let what = format!("full, {m} mini-batches × {epochs}");
        assert_two_ranks_match_one_process(&settings, &what, Mode::Full);
    }
}

#[test]
fn a_data_parallel_update_needs_its_place_in_the_step() {
    let port = free_port();
    // The collectives' timeout: a hang guard, generous because a rank's thread may be
    // slow to reach a collective on a loaded machine.
    let timeout = HANG;
    let errors: Vec<String> = (0..2)
        .map(|rank| {
            std::thread::spawn(move || {
                let mut group = join(port, rank, timeout);
                let (model, mut optimizer) = model_f64();
                let mut no_share = rank_batch(rank);
                no_share.share = None;
                let mut short = rank_batch(rank);
                short.share.as_mut().unwrap().positions.pop();
                let settings = update_settings(LossAgg::TokenMean);
                [no_share, short]
                    .iter()
                    .map(|b| {
                        run_update(&model, &mut optimizer, None, b, &settings, Some(&mut group))
                            .unwrap_err()
                            .to_string()
                    })
                    .collect::<Vec<_>>()
            })
        })
        .collect::<Vec<_>>()
        .into_iter()
        .flat_map(|h| h.join().unwrap())
        .collect();
    assert_eq!(errors.len(), 4);
    for (rank, pair) in errors.chunks(2).enumerate() {
        assert_eq!(
            pair[0],
            "the batch's place in the step (UpdateBatch::share) is required when the update runs in a data-parallel job"
        );
        // Rank 0 holds 3 samples, rank 1 holds 4; each lost its last place.
        assert_eq!(
            pair[1],
            format!(
                "share.positions = {}: there must be one place per sample of the batch",
                rank + 2
            )
        );
    }
}

pub(crate) mod trainer {
    //! Whole steps: two ranks (threads, each with its own workers, trainer group and
    //! model groups) train 3 steps of a two-agent, two-model team as one process does on
    //! the same global batch.

    use crate::common;
    use common::train::Setup;
    use drmas::pool::DistJob;
    use drmas::train::TrainOptions;
    use drmas_dist::Store;
    use serde_json::Value;
    use std::{path::Path, sync::Arc};

    fn setup(dist: Option<Arc<DistJob>>) -> Setup {
        let mut s = Setup::new("norms/drmas");
        let q = s.questions.clone();
        s.agents = vec![
            (
                "first",
                "lm-a",
                common::train::pick_target("first", &q, 0.3),
            ),
            (
                "second",
                "lm-b",
                common::train::pick_target("second", &q, 0.3),
            ),
        ];
        s.models = vec![("lm-a", 1e-3), ("lm-b", 1e-3)];
        s.trainer.steps = 3;
        s.trainer.prompts_per_step = 4;
        s.trainer.group_size = 4;
        s.trainer.save_every = 3;
        s.dist = dist;
        s
    }

    fn one_process(dir: &Path, micro_batch_tokens: usize, mini_batches: u32) {
        let mut s = setup(None);
        s.settings.micro_batch_tokens = micro_batch_tokens;
        s.settings.mini_batches = mini_batches;
        s.trainer(dir, common::train::quiet())
            .unwrap()
            .run()
            .unwrap();
    }

    fn two_ranks(dir: &Path, mini_batches: u32) {
        let port = super::free_port();
        // The collectives' timeout: a hang guard, generous because a rank's thread may be
        // slow to reach a collective on a loaded machine.
        let timeout = super::HANG;
        let handles: Vec<_> = (0..2)
            .map(|rank| {
                let dir = dir.to_path_buf();
                std::thread::spawn(move || {
                    let store = Store::connect("127.0.0.1", port, 2, rank == 0, timeout).unwrap();
                    let job = Arc::new(DistJob {
                        store: Arc::new(store),
                        rank,
                        world_size: 2,
                        local_rank: rank,
                        timeout,
                        prefix: String::new(),
                    });
                    let mut s = setup(Some(job.clone()));
                    s.settings.mini_batches = mini_batches;
                    let opts = TrainOptions {
                        quiet: true,
                        dist: Some(job),
                        ..TrainOptions::default()
                    };
                    s.trainer(&dir, opts).unwrap().run().unwrap()
                })
            })
            .collect();
        for h in handles {
            let summary = h.join().unwrap();
            assert_eq!(summary.steps_done, 3);
        }
    }

    /// Numbers equal to `rel` relative (f32 sums in another order), everything else
    /// exactly; the timings and the pool's residency left out.
    pub(crate) fn assert_close(a: &Value, b: &Value, rel: f64, at: &str) {
        match (a, b) {
            (Value::Number(x), Value::Number(y)) => {
                let (x, y) = (x.as_f64().unwrap(), y.as_f64().unwrap());
                assert!(
                    (x - y).abs() <= rel * x.abs().max(y.abs()) + 1e-5,
                    "{at}: {x} vs {y}"
                );
            }
            (Value::Object(x), Value::Object(y)) => {
                let skip = |k: &&String| k.as_str() != "dist";
                let keys: Vec<&String> = x.keys().filter(skip).collect();
                assert_eq!(keys, y.keys().filter(skip).collect::<Vec<_>>(), "{at}");
                for k in keys {
                    if [
                        "pool",
                        "dist",
                        "time",
                        "tracking",
                        "tokens_per_s",
                        "update_seconds",
                        "update_gflops",
                        "update_phases",
                    ]
                    .contains(&k.as_str())
                    {
                        continue;
                    }
                    assert_close(&x[k], &y[k], rel, &format!("{at}.{k}"));
                }
            }
            (Value::Array(x), Value::Array(y)) => {
                assert_eq!(x.len(), y.len(), "{at}");
                for (i, (p, q)) in x.iter().zip(y).enumerate() {
                    assert_close(p, q, rel, &format!("{at}[{i}]"));
                }
            }
            _ => assert_eq!(a, b, "{at}"),
        }
    }

    pub(crate) fn weights(dir: &Path, model: &str) -> Vec<(String, Vec<f32>)> {
        let bytes = std::fs::read(
            dir.join("checkpoints/step-000003")
                .join(model)
                .join("model.safetensors"),
        )
        .unwrap();
        let st = safetensors::SafeTensors::deserialize(&bytes).unwrap();
        let mut out: Vec<(String, Vec<f32>)> = st
            .tensors()
            .into_iter()
            .map(|(name, view)| {
                let v = view
                    .data()
                    .chunks_exact(4)
                    .map(|c| f32::from_le_bytes([c[0], c[1], c[2], c[3]]))
                    .collect();
                (name, v)
            })
            .collect();
        out.sort_by(|a, b| a.0.cmp(&b.0));
        out
    }

    /// The largest difference of any weight of `model` between two runs' checkpoints.
    pub(crate) fn worst(a: &Path, b: &Path, model: &str) -> f32 {
        let (wa, wb) = (weights(a, model), weights(b, model));
        assert_eq!(wa.len(), wb.len());
        wa.iter()
            .zip(&wb)
            .flat_map(|((_, x), (_, y))| x.iter().zip(y).map(|(p, q)| (p - q).abs()))
            .fold(0f32, f32::max)
    }

    /// 3 steps of one process and of two ranks with `mini_batches` optimizer steps each:
    /// the metrics agree to f32 summation order, and the weights differ no more than one
    /// process's differ from itself with its rows in other micro-batches.
    fn assert_two_ranks_train_as_one_process(mini_batches: u32) {
        let one = tempfile::tempdir().unwrap();
        let two = tempfile::tempdir().unwrap();
        let reordered = tempfile::tempdir().unwrap();
        one_process(one.path(), 256, mini_batches);
        two_ranks(two.path(), mini_batches);
        // The yardstick: one process whose only change is the order of its gradient sums
        // (rows in other micro-batches). Two ranks change nothing else either.
        one_process(reordered.path(), 4, mini_batches);
        let a = common::train::metrics(one.path());
        let b = common::train::metrics(two.path());
        assert_eq!(a.len(), 3);
        assert_eq!(b.len(), 3, "rank 0 alone writes the metrics");
        for (i, (x, y)) in a.iter().zip(&b).enumerate() {
            assert_close(x, y, 1e-3, &format!("step {}", i + 1));
            assert!(x["agents"]["first"]["grad_norm"].as_f64().unwrap() > 0.0);
        }
        assert_eq!(b[0]["dist"]["world_size"], 2);
        // The weights after 3 steps: the same updates up to the order of f32 sums, which
        // AdamW turns into up to 2·lr for a weight whose gradient is near 0 (its step is
        // ±lr whatever the size): the ranks differ from one process no more than one
        // process differs from itself with its rows in other micro-batches.
        let optimizer_steps = 3.0 * f64::from(mini_batches);
        for model in ["lm-a", "lm-b"] {
            let ranks = worst(one.path(), two.path(), model);
            let order = worst(one.path(), reordered.path(), model);
            eprintln!(
                "{model}, {mini_batches} mini-batches: two ranks {ranks:e}, micro-batch order {order:e}"
            );
            assert!(
                f64::from(ranks) <= 2e-3 * optimizer_steps,
                "{model}: {ranks} beyond 2·lr per optimizer step"
            );
            assert!(
                ranks <= 4.0 * order.max(1e-6),
                "{model}: two ranks {ranks}, reordered sums {order}"
            );
        }
    }

    #[test]
    fn two_ranks_train_three_steps_as_one_process() {
        assert_two_ranks_train_as_one_process(1);
    }

    #[test]
    fn two_ranks_train_with_two_mini_batches_as_one_process() {
        assert_two_ranks_train_as_one_process(2);
    }
}
