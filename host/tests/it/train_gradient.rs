//! The gradient the update accumulates — micro-batches, shared prompts, log-softmax
//! chunks, the decoder body back-propagated from its output's gradient, the clipped
//! loss with its aggregation, entropy bonus — equals central finite differences of the
//! loss, on the tiny Llama in float64.

use crate::common;

use common::train::update_settings;
use drmas::config::LossAgg;
use drmas::model::{Decoder, ModelConfig, load_weights};
use drmas::update::{TrainSample, accumulate_gradients};
use tch::{Device, Kind};

fn model_f64() -> Decoder {
    let dir = common::tiny_models().join("llama");
    let config = ModelConfig::from_file(&dir.join("config.json")).unwrap();
    let mut model = Decoder::new(config, Device::Cpu, Kind::Double);
    load_weights(&mut model, &dir).unwrap();
    model
}

fn samples() -> Vec<TrainSample> {
    let s = |agent: &str, prompt: &[i64], response: &[i64], adv: f32, t: f64| TrainSample {
        agent: agent.into(),
        prompt: prompt.to_vec(),
        response: response.to_vec(),
        sample_logprobs: vec![0.0; response.len()],
        temperature: t,
        advantage: adv,
    };
    let shared = [4i64, 8, 15, 16, 23, 42];
    vec![
        // Three rows of one group share their prompt (the shared-prompt path) ...
        s("a", &shared, &[7, 1, 9], 1.2, 1.0),
        s("a", &shared, &[30], -0.7, 1.0),
        s("a", &shared, &[5, 5, 6, 2], 0.4, 1.0),
        // ... one stands alone (the padded path), another agent at its own temperature.
        s("a", &[9, 9, 3], &[12, 13], -1.5, 1.0),
        s("b", &[1, 2, 3, 4], &[44, 45, 46], 0.9, 0.7),
    ]
}

#[test]
fn the_update_gradient_matches_finite_differences() {
    let model = model_f64();
    let samples = samples();
    let mut settings = update_settings(LossAgg::SeqMeanTokenMean);
    settings.loss.entropy_coef = 0.01;
    // Small budgets: several micro-batches and one row per log-softmax chunk.
    settings.micro_batch_tokens = 12;
    settings.logits_budget_bytes = 1;
    // logp_old fixed near the current log-probs, so the loss is a function of the
    // weights (with logp_old = detached logp its value would not move) and ratios sit
    // inside the clip range, where the loss is smooth.
    let current = {
        let _guard = tch::no_grad_guard();
        let pairs: Vec<drmas::model::SequencePair> = samples
            .iter()
            .map(|s| drmas::model::SequencePair {
                prompt: &s.prompt,
                response: &s.response,
            })
            .collect();
        let temps: Vec<f64> = samples.iter().map(|s| s.temperature).collect();
        let lp = drmas::model::response_logprobs_per_row(&model, &pairs, &temps, false, 1 << 20)
            .unwrap();
        samples
            .iter()
            .enumerate()
            .map(|(i, s)| {
                lp.row(i as i64, s.response.len())
                    .iter()
                    .enumerate()
                    .map(|(j, v)| v + 0.03 * ((i + j) % 3) as f32 - 0.03)
                    .collect::<Vec<f32>>()
            })
            .collect::<Vec<_>>()
    };
    let loss = |m: &Decoder| accumulate_gradients(m, &samples, Some(&current), &settings).unwrap();
    loss(&model);
    let vars = model.vs.variables();
    // Every later evaluation of the loss accumulates more gradient: keep this one.
    let grads: std::collections::HashMap<String, tch::Tensor> = vars
        .iter()
        .map(|(n, p)| (n.clone(), p.grad().copy()))
        .collect();
    // The largest gradient entries of a few weights of different kinds.
    let mut checked = 0;
    for name in [
        "model.embed_tokens.weight",
        "model.layers.0.self_attn.q_proj.weight",
        "model.layers.0.self_attn.k_proj.weight",
        "model.layers.1.mlp.down_proj.weight",
        "model.layers.1.input_layernorm.weight",
        "model.norm.weight",
    ] {
        let p = &vars[name];
        let flat = grads[name].flatten(0, -1);
        let top = flat.abs().topk(3, 0, true, true).1;
        for k in Vec::<i64>::try_from(top).unwrap() {
            let analytic = flat.double_value(&[k]);
            let h = 1e-6;
            let set = |value: Option<f64>, delta: f64| {
                let _guard = tch::no_grad_guard();
                let view = p.view(-1);
                let before = view.double_value(&[k]);
                let _ = view.get(k).fill_(value.unwrap_or(before + delta));
                before
            };
            let at = |delta: f64| {
                let before = set(None, delta);
                let value = loss(&model);
                set(Some(before), 0.0);
                value
            };
            let numeric = (at(h) - at(-h)) / (2.0 * h);
            assert!(
                (numeric - analytic).abs() <= 1e-6 * analytic.abs().max(1e-3),
                "{name}[{k}]: finite differences {numeric}, autograd {analytic}"
            );
            checked += 1;
        }
    }
    assert_eq!(checked, 18);
}
