//! The prefix-shared training forward: rows that share one prompt run it once, and give
//! the same log-probs, entropies and gradients as each row padded with its own copy of
//! the prompt — on Llama (tied) and Qwen3 (q/k norm, GQA) tiny checkpoints.

use crate::common;

use drmas::model::{
    Decoder, PrefixGroup, SequencePair, packed_hidden, response_hidden, shared_prompt_hidden,
    token_logprobs,
};
use tch::{Kind, Tensor};

const PROMPT: [i64; 7] = [3, 14, 15, 92, 65, 35, 89];
const RESPONSES: [&[i64]; 4] = [&[7, 9, 3], &[11], &[2, 71, 82, 81, 8], &[28, 18]];

/// Each parameter's gradient, by name.
type Grads = Vec<(String, Vec<f32>)>;

/// Every parameter's gradient, by name.
fn grads(model: &Decoder) -> Grads {
    let mut grads: Grads = model
        .vs
        .variables()
        .into_iter()
        .map(|(n, p)| (n, Vec::<f32>::try_from(p.grad().flatten(0, -1)).unwrap()))
        .collect();
    grads.sort_by(|a, b| a.0.cmp(&b.0));
    grads
}

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
    (loss.double_value(&[]), values, grads(model))
}

/// Two (loss, log-probs, gradients) agree up to summation order: the loss within 1e-4
/// relative, log-probs within 1e-5, each gradient within 1e-4 of its largest entry.
fn assert_close(label: &str, a: &(f64, Vec<f32>, Grads), b: &(f64, Vec<f32>, Grads)) {
    assert!(
        (a.0 - b.0).abs() < 1e-4 * a.0.abs().max(1.0),
        "{label}: loss {} vs {}",
        a.0,
        b.0
    );
    let worst =
        a.1.iter()
            .zip(&b.1)
            .map(|(x, y)| (x - y).abs())
            .fold(0f32, f32::max);
    assert!(worst < 1e-5, "{label}: log-probs differ by {worst}");
    for ((name, ga), (_, gb)) in a.2.iter().zip(&b.2) {
        let scale = ga.iter().map(|x| x.abs()).fold(0f32, f32::max).max(1e-3);
        let diff = ga
            .iter()
            .zip(gb)
            .map(|(x, y)| (x - y).abs())
            .fold(0f32, f32::max);
        assert!(
            diff < 1e-4 * scale,
            "{label} {name}: gradients differ by {diff} (scale {scale})"
        );
    }
}

fn assert_equivalent(tiny: &str) {
    let model = common::load_tiny(tiny);
    assert_close(
        tiny,
        &loss_and_grads(&model, false),
        &loss_and_grads(&model, true),
    );
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

/// Rows of three prompts: two that share their first five tokens (and one of them
/// twice), one that shares only its first two with them, and one alone.
const PACKED_PROMPTS: [&[i64]; 5] = [
    &[3, 14, 15, 92, 65, 35, 89],
    &[3, 14, 15, 92, 65, 11, 12, 13, 40],
    &[3, 14, 15, 92, 65, 35, 89],
    &[3, 14, 77, 6],
    &[50, 51, 52],
];
const PACKED_RESPONSES: [&[i64]; 5] = [&[7, 9, 3], &[11], &[2, 71, 82, 81, 8], &[28, 18], &[5, 6]];

/// The loss, log-probs and gradients of the rows above, padded (each row its own
/// prompt) or packed in the groups given as (prefix length, rows).
fn packed_loss_and_grads(
    model: &Decoder,
    groups: Option<&[(usize, &[usize])]>,
) -> (f64, Vec<f32>, Grads) {
    for (_, p) in model.vs.variables() {
        let mut g = p.grad();
        if g.defined() {
            let _ = g.zero_();
        }
    }
    let pair = |i: usize| SequencePair {
        prompt: PACKED_PROMPTS[i],
        response: PACKED_RESPONSES[i],
    };
    let (h, order): (_, Vec<usize>) = match groups {
        None => (
            response_hidden(model, &(0..5).map(pair).collect::<Vec<_>>()).unwrap(),
            (0..5).collect(),
        ),
        Some(groups) => (
            packed_hidden(
                model,
                &groups
                    .iter()
                    .map(|(prefix, rows)| PrefixGroup {
                        prefix: *prefix,
                        rows: rows.iter().map(|&i| pair(i)).collect(),
                    })
                    .collect::<Vec<_>>(),
            )
            .unwrap(),
            groups.iter().flat_map(|(_, r)| r.iter().copied()).collect(),
        ),
    };
    let temps_of = [1.0f32, 0.7, 1.3, 0.9, 1.1];
    let weights_of = [1.0f32, -2.0, 0.5, 3.0, -1.0];
    let temps = Tensor::from_slice(&order.iter().map(|&i| temps_of[i]).collect::<Vec<_>>());
    let weights =
        Tensor::from_slice(&order.iter().map(|&i| weights_of[i]).collect::<Vec<_>>()).view([5, 1]);
    let (logp, entropy) = token_logprobs(model, &h.hidden, &h.targets, &temps, true);
    let loss = ((&logp * &weights + entropy.unwrap()) * &h.mask).sum(Kind::Float);
    loss.backward();
    // Each row's log-probs in response order, rows in the padded order.
    let r = h.targets.size()[1];
    let mut values = vec![Vec::new(); 5];
    for (j, &i) in order.iter().enumerate() {
        let len = PACKED_RESPONSES[i].len() as i64;
        values[i] = Vec::<f32>::try_from(logp.get(j as i64).narrow(0, r - len, len)).unwrap();
    }
    (loss.double_value(&[]), values.concat(), grads(model))
}

fn assert_packed_equivalent(tiny: &str) {
    let model = common::load_tiny(tiny);
    let padded = packed_loss_and_grads(&model, None);
    // Two prefixes of different lengths in one pass (left-padded), a group whose prefix
    // is shorter than what some of its rows share, and a row alone.
    // The last layout packs two continuations into one lane: row 2's rest is 11
    // tokens, rows 0 and 1's are 5 each after their shared 5.
    let layouts: [&[(usize, &[usize])]; 4] = [
        &[(5, &[0, 1, 2]), (2, &[4]), (3, &[3])],
        &[(2, &[0, 3, 1, 2]), (2, &[4])],
        &[(6, &[2, 0]), (8, &[1]), (1, &[3]), (2, &[4])],
        &[(1, &[2]), (5, &[0, 1]), (2, &[4]), (3, &[3])],
    ];
    for layout in layouts {
        let packed = packed_loss_and_grads(&model, Some(layout));
        assert_close(&format!("{tiny} {layout:?}"), &padded, &packed);
    }
}

#[test]
fn packed_prefix_groups_give_the_padded_logprobs_and_gradients_llama() {
    assert_packed_equivalent("llama");
}

#[test]
fn packed_prefix_groups_give_the_padded_logprobs_and_gradients_qwen3() {
    assert_packed_equivalent("qwen3");
}

#[test]
fn a_packed_group_whose_rows_do_not_share_its_prefix_is_refused() {
    let model = common::load_tiny("llama");
    let err = packed_hidden(
        &model,
        &[PrefixGroup {
            prefix: 3,
            rows: vec![
                SequencePair {
                    prompt: PACKED_PROMPTS[0],
                    response: PACKED_RESPONSES[0],
                },
                SequencePair {
                    prompt: PACKED_PROMPTS[4],
                    response: PACKED_RESPONSES[4],
                },
            ],
        }],
    )
    .err()
    .expect("refused")
    .to_string();
    assert!(
        err.contains("share a non-empty prefix shorter than each prompt"),
        "{err}"
    );
}
