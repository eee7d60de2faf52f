//! Generation on the tiny checkpoints: greedy parity with transformers, seeded
//! reproducibility, log-probs equal to the training forward, prefix fork.

use crate::common;

use common::{load_tiny, read_reference, tiny_models};
use drmas::model::{
    FinishReason, GenerationRequest, SamplingParams, SequencePair, StopCheck, generate,
    response_logprobs,
};

fn prompts_of(reference: &std::collections::HashMap<String, tch::Tensor>) -> Vec<Vec<i64>> {
    let ids = Vec::<Vec<i64>>::try_from(&reference["input_ids"]).unwrap();
    let mask = Vec::<Vec<i64>>::try_from(&reference["attention_mask"]).unwrap();
    ids.into_iter()
        .zip(mask)
        .map(|(row, m)| {
            row.into_iter()
                .zip(m)
                .filter(|(_, v)| *v == 1)
                .map(|(t, _)| t)
                .collect()
        })
        .collect()
}

#[test]
fn greedy_generation_matches_transformers_token_for_token() {
    for name in ["llama", "llama-tied", "qwen2", "qwen3", "qwen3-untied"] {
        let model = load_tiny(name);
        let reference = read_reference(&tiny_models().join(name).join("reference.safetensors"));
        let want = Vec::<Vec<i64>>::try_from(&reference["greedy"]).unwrap();
        let requests: Vec<GenerationRequest> = prompts_of(&reference)
            .into_iter()
            .map(|prompt| GenerationRequest {
                prompt,
                params: SamplingParams {
                    temperature: 0.0,
                    max_new_tokens: want[0].len(),
                    ..Default::default()
                },
                shared_prefix: 0,
            })
            .collect();
        let got = generate(&model, &requests, None).unwrap();
        for (i, g) in got.iter().enumerate() {
            assert_eq!(g.tokens, want[i], "{name}: row {i}");
            assert_eq!(g.finish, FinishReason::Length);
        }
    }
}

fn sampled(prompt: &[i64], seed: u64) -> GenerationRequest {
    GenerationRequest {
        prompt: prompt.to_vec(),
        params: SamplingParams {
            temperature: 0.7,
            top_p: 0.9,
            top_k: 50,
            max_new_tokens: 10,
            seed,
            ..Default::default()
        },
        shared_prefix: 0,
    }
}

#[test]
fn same_seed_same_tokens_and_seeds_differ() {
    let model = load_tiny("qwen3");
    let prompt = [1, 5, 9, 33];
    let a = generate(&model, &[sampled(&prompt, 7), sampled(&prompt, 8)], None).unwrap();
    let b = generate(&model, &[sampled(&prompt, 7), sampled(&prompt, 8)], None).unwrap();
    assert_eq!(a, b);
    assert_ne!(
        a[0].tokens, a[1].tokens,
        "two seeds gave the same 10 tokens"
    );
}

#[test]
fn sampling_logprobs_equal_the_training_forward() {
    for name in ["llama", "qwen2", "qwen3"] {
        let model = load_tiny(name);
        let prompts = [
            vec![1i64, 17, 33, 5],
            vec![1, 120, 3, 45, 46, 47, 48],
            vec![1, 8],
        ];
        let requests: Vec<_> = prompts
            .iter()
            .enumerate()
            .map(|(i, p)| sampled(p, i as u64))
            .collect();
        let gens = generate(&model, &requests, None).unwrap();
        let pairs: Vec<SequencePair> = prompts
            .iter()
            .zip(&gens)
            .map(|(p, g)| SequencePair {
                prompt: p,
                response: &g.tokens,
            })
            .collect();
        let forward = response_logprobs(&model, &pairs, 0.7, true).unwrap();
        for (i, g) in gens.iter().enumerate() {
            let train = forward.row(i as i64, g.tokens.len());
            for (j, (a, b)) in g.logprobs.iter().zip(&train).enumerate() {
                assert!(
                    (a - b).abs() <= 1e-4,
                    "{name} row {i} token {j}: sampling {a} vs forward {b}"
                );
            }
        }
        // The forward keeps the graph for the update.
        assert!(forward.logprobs.requires_grad());
        let entropy = forward.entropy.unwrap();
        assert!(f64::try_from(entropy.min()).unwrap() >= 0.0);
    }
}

#[test]
fn forked_prefix_samples_like_separate_prefills() {
    let model = load_tiny("llama");
    let prompt = [1i64, 17, 33, 5, 99];
    let forked = generate(
        &model,
        &(0..4).map(|s| sampled(&prompt, s)).collect::<Vec<_>>(),
        None,
    )
    .unwrap();
    for seed in 0..4u64 {
        let alone = generate(&model, &[sampled(&prompt, seed)], None)
            .unwrap()
            .remove(0);
        let f = &forked[seed as usize];
        assert_eq!(f.tokens, alone.tokens, "seed {seed}");
        for (a, b) in f.logprobs.iter().zip(&alone.logprobs) {
            assert!((a - b).abs() <= 1e-4, "seed {seed}: {a} vs {b}");
        }
    }
}

#[test]
fn stop_tokens_and_stop_checks_end_rows_early() {
    struct StopAfterThree;
    impl StopCheck for StopAfterThree {
        fn check(&self, request: usize, tokens: &[i64]) -> Option<usize> {
            (request == 1 && tokens.len() == 3).then_some(2)
        }
    }
    let model = load_tiny("qwen3");
    let prompt = [1i64, 5, 9];
    let free = generate(&model, &[sampled(&prompt, 3)], None)
        .unwrap()
        .remove(0);
    let stop_at = free.tokens[4];
    let mut with_stop = sampled(&prompt, 3);
    with_stop.params.stop_token_ids = vec![stop_at];
    let out = generate(
        &model,
        &[with_stop, sampled(&prompt, 3)],
        Some(&StopAfterThree),
    )
    .unwrap();
    let first_stop = free.tokens.iter().position(|&t| t == stop_at).unwrap();
    assert_eq!(out[0].tokens, free.tokens[..=first_stop].to_vec());
    assert_eq!(out[0].finish, FinishReason::StopToken);
    assert_eq!(out[1].tokens, free.tokens[..2].to_vec());
    assert_eq!(out[1].finish, FinishReason::StopString);
}

/// Empirical first-token frequencies over many seeded rows (one forked prefill) against
/// the model's own distribution, filtered as the settings say.
#[test]
fn sampled_tokens_follow_the_filtered_distribution() {
    use tch::{Kind, Tensor};
    let model = load_tiny("qwen2");
    let prompt = vec![1i64, 40, 41, 42];
    let n = 20000;
    let logits = tch::no_grad(|| {
        let ids = Tensor::from_slice(&prompt).view([1, -1]);
        let valid = ids.ones_like().to_kind(Kind::Bool);
        let h = model.forward(
            &ids,
            &drmas::model::positions_from_mask(&valid),
            &drmas::model::prefill_mask(&valid),
            None,
        );
        model.logits(&h.select(1, 3)).squeeze_dim(0)
    });
    for (temperature, top_k, top_p) in [(1.0, 0, 1.0), (0.7, 5, 1.0), (1.3, 0, 0.5)] {
        let mut probs = Vec::<f64>::try_from(
            (logits.to_kind(Kind::Double) / temperature).softmax(-1, Kind::Double),
        )
        .unwrap();
        let mut order: Vec<usize> = (0..probs.len()).collect();
        order.sort_by(|&a, &b| probs[b].total_cmp(&probs[a]));
        let mut mass = 0.0;
        for (rank, &tok) in order.iter().enumerate() {
            let keep = (top_k == 0 || rank < top_k as usize) && (rank == 0 || mass < top_p);
            mass += probs[tok];
            if !keep {
                probs[tok] = 0.0;
            }
        }
        let total: f64 = probs.iter().sum();
        probs.iter_mut().for_each(|p| *p /= total);

        let requests: Vec<GenerationRequest> = (0..n)
            .map(|seed| GenerationRequest {
                prompt: prompt.clone(),
                params: SamplingParams {
                    temperature,
                    top_k,
                    top_p,
                    max_new_tokens: 1,
                    seed,
                    ..Default::default()
                },
                shared_prefix: 0,
            })
            .collect();
        let mut counts = vec![0f64; probs.len()];
        for g in generate(&model, &requests, None).unwrap() {
            assert!(
                probs[g.tokens[0] as usize] > 0.0,
                "T={temperature} k={top_k} p={top_p}: token {} was filtered out",
                g.tokens[0]
            );
            counts[g.tokens[0] as usize] += 1.0 / n as f64;
        }
        let tv: f64 = counts
            .iter()
            .zip(&probs)
            .map(|(c, p)| (c - p).abs())
            .sum::<f64>()
            / 2.0;
        // Sampling noise alone gives E|c − p| ≈ sqrt(2p(1−p) / (π n)) per token.
        let noise: f64 = probs
            .iter()
            .map(|p| (2.0 * p * (1.0 - p) / (std::f64::consts::PI * n as f64)).sqrt())
            .sum::<f64>()
            / 2.0;
        assert!(
            tv < 1.5 * noise + 0.003,
            "T={temperature} k={top_k} p={top_p}: total variation {tv}, noise level {noise}"
        );
    }
}
