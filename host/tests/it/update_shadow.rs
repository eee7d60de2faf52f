//! Shadow gradients (`[trainer] shadow_gradients`): before the update, the pre-clip
//! gradient norms the same samples would give on the same weights with the shadow
//! normalizer's advantages, per agent and for the model, without a step. On the first
//! optimizer step the ratio is exactly 1, so the clipped objective's gradient is A·∇log p:
//! linear in the advantages, and the norms follow from them.

use crate::common;

use common::train::update_settings;
use drmas::config::LossAgg;
use drmas::update::{AdamW, UpdateBatch, UpdateReport, run_update};

const ADV: [f32; 4] = [1.0, -1.0, 0.5, -0.5];

fn batch(shadow: Option<Vec<f32>>) -> UpdateBatch {
    use common::train::{train_sample, update_batch};
    let mut batch = update_batch(
        vec![
            train_sample("a", vec![9, 12, 40], 1.0, ADV[0]),
            train_sample("a", vec![70, 3], 1.0, ADV[1]),
            train_sample("b", vec![64, 8], 1.0, ADV[2]),
            train_sample("b", vec![11], 1.0, ADV[3]),
        ],
        1e-3,
    );
    batch.shadow_advantages = shadow;
    batch
}

/// One update of a fresh tiny model (on a thread of its own, as a worker's).
fn update(shadow: Option<Vec<f32>>) -> (UpdateReport, Vec<(String, Vec<f32>)>) {
    std::thread::spawn(move || {
        let model = common::load_tiny("llama");
        let mut params: Vec<(String, tch::Tensor)> = model.vs.variables().into_iter().collect();
        params.sort_by(|a, b| a.0.cmp(&b.0));
        let mut settings = update_settings(LossAgg::TokenMean);
        settings.shadow_gradients = shadow.is_some();
        let mut optimizer = AdamW::new(params, settings.optimizer);
        let report = run_update(
            &model,
            &mut optimizer,
            None,
            &batch(shadow),
            &settings,
            None,
        )
        .unwrap();
        (report, common::train::decoder_weights(&model))
    })
    .join()
    .unwrap()
}

#[test]
fn shadow_norms_are_the_runs_for_the_same_advantages_and_scale_with_them() {
    let (plain, plain_weights) = update(None);
    assert_eq!(plain.shadow, None);

    // The shadow equal to the run's advantages: the very same norms, and the update
    // itself untouched by the extra pass.
    let (same, weights) = update(Some(ADV.to_vec()));
    let shadow = same.shadow.clone().unwrap();
    assert_eq!(same.grad_norms, plain.grad_norms);
    assert_eq!(weights, plain_weights);
    assert_eq!(shadow.model.to_bits(), plain.grad_norms[0].to_bits());
    assert_eq!(
        shadow.agents["a"].to_bits(),
        plain.agents["a"].grad_norm.to_bits()
    );
    // The update takes a later agent's share as the gradient after it less a snapshot
    // before it; the shadow pass has it alone: equal to float32 rounding.
    let b = (shadow.agents["b"] / plain.agents["b"].grad_norm - 1.0).abs();
    assert!(b < 1e-6, "{b}");

    // Agent a's advantages tripled, b's halved: its norms follow.
    let scaled = vec![3.0 * ADV[0], 3.0 * ADV[1], 0.5 * ADV[2], 0.5 * ADV[3]];
    let (report, _) = update(Some(scaled));
    let shadow = report.shadow.unwrap();
    let ratio = |agent: &str| shadow.agents[agent] / plain.agents[agent].grad_norm;
    assert!((ratio("a") - 3.0).abs() < 1e-5, "{}", ratio("a"));
    assert!((ratio("b") - 0.5).abs() < 1e-5, "{}", ratio("b"));
    // The model's gradient is the agents' sum: between the two scales.
    let model = shadow.model / plain.grad_norms[0];
    assert!(model > 0.5 && model < 3.0, "{model}");
    assert!(plain.agents["a"].grad_norm > 0.0 && plain.agents["b"].grad_norm > 0.0);
}
