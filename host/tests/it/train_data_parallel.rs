//! Data parallelism inside an update: two ranks (threads, each with its own model copy,
//! optimizer and Gloo group over 127.0.0.1, as two processes would have), each on its
//! share of a step's samples, take the optimizer step one process takes on all of them.
//! In float64 on the tiny Llama the weights agree to summation order; across the ranks
//! they are identical.

use crate::common;

use common::train::update_settings;
use drmas::config::LossAgg;
use drmas::model::{Decoder, ModelConfig, load_weights};
use drmas::update::{AdamW, TrainSample, UpdateBatch, UpdateProgress, UpdateReport, run_update};
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

fn batch(samples: Vec<TrainSample>) -> UpdateBatch {
    UpdateBatch {
        step: 0,
        lr: 1e-3,
        samples,
        agents: vec!["a".into(), "b".into()],
        progress: Arc::new(UpdateProgress::default()),
    }
}

fn weights(optimizer: &AdamW) -> Vec<Tensor> {
    optimizer
        .params()
        .iter()
        .map(|(_, p)| p.detach().copy())
        .collect()
}

fn max_abs_diff(a: &[Tensor], b: &[Tensor]) -> f64 {
    a.iter()
        .zip(b)
        .map(|(x, y)| (x - y).abs().max().double_value(&[]))
        .fold(0.0, f64::max)
}

/// Two optimizer steps on one process, on all samples.
fn one_process(agg: LossAgg) -> (Vec<Tensor>, Vec<UpdateReport>) {
    let (model, mut optimizer) = model_f64();
    let settings = update_settings(agg);
    let all: Vec<TrainSample> = samples().into_iter().map(|(_, s)| s).collect();
    let reports = (0..2)
        .map(|_| {
            run_update(
                &model,
                &mut optimizer,
                None,
                &batch(all.clone()),
                &settings,
                None,
            )
            .unwrap()
        })
        .collect();
    (weights(&optimizer), reports)
}

/// The same two steps on two ranks.
fn two_ranks(agg: LossAgg) -> Vec<(Vec<Tensor>, Vec<UpdateReport>)> {
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let timeout = Duration::from_secs(60);
    let handles: Vec<_> = (0..2)
        .map(|rank| {
            std::thread::spawn(move || {
                let store = Store::connect("127.0.0.1", port, 2, rank == 0, timeout).unwrap();
                let mut group = Group::new(&store, Backend::Gloo, "m", rank, 2, timeout).unwrap();
                let (model, mut optimizer) = model_f64();
                let settings = update_settings(agg);
                let mine: Vec<TrainSample> = samples()
                    .into_iter()
                    .filter(|(r, _)| *r == rank)
                    .map(|(_, s)| s)
                    .collect();
                let reports = (0..2)
                    .map(|_| {
                        run_update(
                            &model,
                            &mut optimizer,
                            None,
                            &batch(mine.clone()),
                            &settings,
                            Some(&mut group),
                        )
                        .unwrap()
                    })
                    .collect();
                (weights(&optimizer), reports)
            })
        })
        .collect();
    handles.into_iter().map(|h| h.join().unwrap()).collect()
}

#[test]
fn two_ranks_take_the_step_one_process_takes() {
    for agg in [LossAgg::TokenMean, LossAgg::SeqMeanTokenMean] {
        let (w1, r1) = one_process(agg);
        let ranks = two_ranks(agg);
        // Across ranks: the same gradients, the same AdamW arithmetic: identical weights.
        assert_eq!(max_abs_diff(&ranks[0].0, &ranks[1].0), 0.0, "{agg:?}");
        // Against one process: the same sums in another order (f64).
        let d = max_abs_diff(&ranks[0].0, &w1);
        assert!(d < 1e-12, "{agg:?}: weights differ by {d}");
        for (rank, (_, reports)) in ranks.iter().enumerate() {
            for (step, (r, one)) in reports.iter().zip(&r1).enumerate() {
                let (a, b) = (r.grad_norms[0], one.grad_norms[0]);
                assert!(
                    (a - b).abs() < 1e-10 * b,
                    "{agg:?} rank {rank} step {step}: {a} vs {b}"
                );
                assert_eq!(r.tokens, one.tokens);
                assert_eq!(r.applied, 1);
                for agent in ["a", "b"] {
                    let (x, y) = (&r.agents[agent], &one.agents[agent]);
                    assert_eq!(x.samples, y.samples, "{agent}");
                    assert!(
                        (x.grad_norm - y.grad_norm).abs() < 1e-10 * y.grad_norm,
                        "{agent}"
                    );
                    assert!((x.stats.pg_loss - y.stats.pg_loss).abs() < 1e-12, "{agent}");
                    assert_eq!(x.stats.tokens, y.stats.tokens, "{agent}");
                }
            }
        }
    }
}

#[test]
fn data_parallelism_refuses_several_mini_batches() {
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let timeout = Duration::from_secs(30);
    let errors: Vec<String> = (0..2)
        .map(|rank| {
            std::thread::spawn(move || {
                let store = Store::connect("127.0.0.1", port, 2, rank == 0, timeout).unwrap();
                let mut group = Group::new(&store, Backend::Gloo, "m", rank, 2, timeout).unwrap();
                let (model, mut optimizer) = model_f64();
                let mut settings = update_settings(LossAgg::TokenMean);
                settings.mini_batches = 2;
                let mine: Vec<TrainSample> = samples().into_iter().map(|(_, s)| s).collect();
                run_update(
                    &model,
                    &mut optimizer,
                    None,
                    &batch(mine),
                    &settings,
                    Some(&mut group),
                )
                .unwrap_err()
                .to_string()
            })
        })
        .collect::<Vec<_>>()
        .into_iter()
        .map(|h| h.join().unwrap())
        .collect();
    for e in errors {
        assert_eq!(
            e,
            "mini_batches = 2: data parallelism takes one optimizer step per PPO epoch for now (mini_batches = 1)"
        );
    }
}
