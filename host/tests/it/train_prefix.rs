//! The prefix-shared training forward: rows that share one prompt run it once, and give
//! the same log-probs, entropies and gradients as each row padded with its own copy of
//! the prompt — on Llama (tied) and Qwen3 (q/k norm, GQA) tiny checkpoints.

use crate::common;

use drmas::model::{Decoder, SequencePair, response_hidden, shared_prompt_hidden, token_logprobs};
use tch::{Kind, Tensor};

const PROMPT: [i64; 7] = [3, 14, 15, 92, 65, 35, 89];
const RESPONSES: [&[i64]; 4] = [&[7, 9, 3], &[11], &[2, 71, 82, 81, 8], &[28, 18]];

/// Each parameter's gradient, by name.
type Grads = Vec<(String, Vec<f32>)>;

/// Σ weight · logp + Σ entropy over the rows, its value, the per-token log-probs and
/// every parameter's gradient.
fn loss_and_grads(model: &Decoder, shared: bool) -> (f64, Vec<f32>, Grads) {
    for (_, p) in model.vs.variables() {
        let mut g = p.grad();
        if g.defined() {
            let _ = g.zero_();
        }
    }
    let h = if shared {
        shared_prompt_hidden(model, &PROMPT, &RESPONSES).unwrap()
    } else {
        let pairs: Vec<SequencePair> = RESPONSES
            .iter()
            .map(|r| SequencePair {
                prompt: &PROMPT,
                response: r,
            })
            .collect();
        response_hidden(model, &pairs).unwrap()
    };
    let temps = Tensor::from_slice(&[1.0f32, 0.7, 1.3, 0.9]);
    let (logp, entropy) = token_logprobs(model, &h.hidden, &h.targets, &temps, true);
    let weights = Tensor::from_slice(&[1.0f32, -2.0, 0.5, 3.0]).view([4, 1]);
    let loss = ((&logp * &weights + entropy.unwrap()) * &h.mask).sum(Kind::Float);
    loss.backward();
    let values = Vec::<f32>::try_from((logp * &h.mask).flatten(0, -1)).unwrap();
    let mut grads: Vec<(String, Vec<f32>)> = model
        .vs
        .variables()
        .into_iter()
        .map(|(n, p)| (n, Vec::<f32>::try_from(p.grad().flatten(0, -1)).unwrap()))
        .collect();
    grads.sort_by(|a, b| a.0.cmp(&b.0));
    (loss.double_value(&[]), values, grads)
}

fn assert_equivalent(tiny: &str) {
    let model = common::load_tiny(tiny);
    let (loss_a, lp_a, grads_a) = loss_and_grads(&model, false);
    let (loss_b, lp_b, grads_b) = loss_and_grads(&model, true);
    assert!(
        (loss_a - loss_b).abs() < 1e-4 * loss_a.abs().max(1.0),
        "{tiny}: {loss_a} vs {loss_b}"
    );
    let worst = lp_a
        .iter()
        .zip(&lp_b)
        .map(|(a, b)| (a - b).abs())
        .fold(0f32, f32::max);
    assert!(worst < 1e-5, "{tiny}: log-probs differ by {worst}");
    for ((name, a), (_, b)) in grads_a.iter().zip(&grads_b) {
        let scale = a.iter().map(|x| x.abs()).fold(0f32, f32::max).max(1e-3);
        let diff = a
            .iter()
            .zip(b)
            .map(|(x, y)| (x - y).abs())
            .fold(0f32, f32::max);
        assert!(
            diff < 1e-4 * scale,
            "{tiny} {name}: gradients differ by {diff} (scale {scale})"
        );
    }
}

#[test]
fn a_shared_prompt_gives_the_same_logprobs_and_gradients_llama() {
    assert_equivalent("llama");
}

#[test]
fn a_shared_prompt_gives_the_same_logprobs_and_gradients_qwen3() {
    assert_equivalent("qwen3");
}

#[test]
fn a_shared_prompt_gives_the_same_logprobs_and_gradients_qwen2() {
    assert_equivalent("qwen2");
}
