//! The model worker trains where the weights live: after an update through its handle,
//! generation uses the new weights, every weight moved by AdamW's first step (at most
//! lr), the same update run directly on a copy gives the same weights, and the frozen
//! reference copy does not change. A non-finite loss skips the step.

use crate::common;

use common::train::{update_settings, weights, worker_config};
use drmas::config::{KlEstimator, LossAgg};
use drmas::model::{GenerationRequest, SamplingParams, generate};
use drmas::pool::{BackendError, BackendRequest};
use drmas::update::{AdamW, UpdateBatch, run_update};

fn batch(advantage: f32, lr: f64) -> UpdateBatch {
    use common::train::{train_sample, update_batch};
    update_batch(
        vec![
            train_sample("a", vec![9, 12, 40], 0.7, advantage),
            train_sample("a", vec![70, 3], 0.7, -advantage),
            train_sample("b", vec![64], 0.7, advantage),
        ],
        lr,
    )
}

fn greedy(prompt: &[i64]) -> BackendRequest {
    BackendRequest {
        prompt: prompt.to_vec(),
        params: SamplingParams {
            temperature: 0.0,
            max_new_tokens: 6,
            ..SamplingParams::default()
        },
        stop: vec![],
        shared_prefix: 0,
    }
}

#[test]
fn an_update_moves_the_weights_generation_uses_and_leaves_the_reference() {
    let mut settings = update_settings(LossAgg::TokenMean);
    settings.loss.kl = Some((0.1, KlEstimator::K3));
    settings.grad_clip = 1e9;
    let lr = 1e-3;
    let handle =
        common::train::training_worker("lm", "llama", settings.clone(), true, worker_config(1));
    let before = weights(&handle);
    let reference_before = handle
        .call("reference", |b, slot| {
            let t = b.model_backend().unwrap().training(slot).unwrap();
            let r = t.reference.as_ref().unwrap();
            Ok(r.vs.variables().len())
        })
        .unwrap();
    assert_eq!(reference_before, before.len());

    let runtime = tokio::runtime::Runtime::new().unwrap();
    let prompt = [5i64, 17, 33, 2, 9];
    let gen_before = runtime.block_on(handle.generate(greedy(&prompt))).unwrap();
    assert_eq!(gen_before.policy_version, 0);

    let report = handle
        .call("update", {
            let b = batch(1.0, lr);
            move |backend, slot| backend.update(slot, &b)
        })
        .unwrap();
    assert_eq!((report.applied, report.skipped), (1, 0));
    assert_eq!(report.tokens, 6);
    assert_eq!(report.agents["a"].samples, 2);
    assert_eq!(report.agents["b"].samples, 1);
    assert!(report.grad_norm().finite().is_some_and(|n| n > 0.0));

    let after = weights(&handle);
    // AdamW's first step with no weight decay moves each weight by lr·g/(|g| + eps):
    // exactly lr in size for every weight whose gradient is well above eps.
    let mut moved = 0usize;
    let mut total = 0usize;
    for ((name, a), (_, b)) in before.iter().zip(&after) {
        for (x, y) in a.iter().zip(b) {
            let d = (y - x).abs() as f64;
            assert!(d <= lr * 1.0001, "{name}: moved by {d}");
            total += 1;
            if (d - lr).abs() < lr * 0.01 {
                moved += 1;
            }
        }
    }
    assert!(moved * 2 > total, "{moved} of {total} weights moved by lr");

    // Generation now runs on the new weights: it equals a copy updated directly (on a
    // thread of its own, as the worker's: libtorch's CPU threading is per thread, and
    // the order of a sum decides its last bit).
    let (copy, direct) = std::thread::spawn(move || {
        let copy = common::load_tiny("llama");
        let reference = common::load_tiny("llama");
        let mut params: Vec<(String, tch::Tensor)> = copy.vs.variables().into_iter().collect();
        params.sort_by(|a, b| a.0.cmp(&b.0));
        let mut optimizer = AdamW::new(params, settings.optimizer);
        let direct = run_update(
            &copy,
            &mut optimizer,
            Some(&reference),
            &batch(1.0, lr),
            &settings,
            None,
        )
        .unwrap();
        (copy, direct)
    })
    .join()
    .unwrap();
    assert_eq!(direct.grad_norms, report.grad_norms);
    let gen_after = runtime.block_on(handle.generate(greedy(&prompt))).unwrap();
    let gen_direct = generate(
        &copy,
        &[GenerationRequest {
            prompt: prompt.to_vec(),
            params: greedy(&prompt).params,
            shared_prefix: 0,
        }],
        None,
    )
    .unwrap()
    .remove(0);
    assert_eq!(gen_after.tokens, gen_direct.tokens);
    assert_eq!(gen_after.logprobs, gen_direct.logprobs);
    assert_ne!(gen_after.logprobs, gen_before.logprobs);
    assert_eq!(gen_after.policy_version, 1);
    assert_eq!(common::train::decoder_weights(&copy), after);

    // The reference copy in the worker still holds the starting weights.
    let reference_now: Vec<(String, Vec<f32>)> = handle
        .call("reference weights", |b, slot| {
            let t = b.model_backend().unwrap().training(slot).unwrap();
            Ok(common::train::decoder_weights(
                t.reference.as_ref().unwrap(),
            ))
        })
        .unwrap();
    assert_eq!(reference_now, before);
}

#[test]
fn a_non_finite_loss_skips_the_step_and_keeps_the_weights() {
    let settings = update_settings(LossAgg::TokenMean);
    let handle = common::train::training_worker("lm", "llama", settings, false, worker_config(1));
    let before = weights(&handle);
    let report = handle
        .call("update", {
            let b = batch(f32::NAN, 1e-3);
            move |backend, slot| backend.update(slot, &b)
        })
        .unwrap();
    assert_eq!((report.applied, report.skipped), (0, 1));
    assert_eq!(report.grad_norm(), drmas::update::GradNorm::NonFinite);
    assert_eq!(weights(&handle), before);
    // The next finite update goes through.
    let report = handle
        .call("update", {
            let b = batch(1.0, 1e-3);
            move |backend, slot| backend.update(slot, &b)
        })
        .unwrap();
    assert_eq!((report.applied, report.skipped), (1, 0));
    assert_ne!(weights(&handle), before);
}

#[test]
fn a_bad_sample_is_refused_with_its_index() {
    let handle = common::train::training_worker(
        "lm",
        "llama",
        update_settings(LossAgg::TokenMean),
        false,
        worker_config(1),
    );
    let mut b = batch(1.0, 1e-3);
    b.samples[2].sample_logprobs.push(0.0);
    let err = handle
        .call("update", move |backend, slot| backend.update(slot, &b))
        .unwrap_err();
    assert_eq!(
        err.to_string(),
        "model `lm`: update: sample 2 (agent `b`): 2 sampling log-probs for 1 response tokens"
    );
    assert!(matches!(err.backend_error(), Some(BackendError::Train(_))));
    assert!(!err.is_out_of_memory());
}

#[test]
fn scoring_through_the_handle_equals_the_sampling_logprobs_and_moves_keep_the_weights() {
    let handle = common::train::training_worker(
        "lm",
        "llama",
        update_settings(LossAgg::TokenMean),
        false,
        worker_config(1),
    );
    let runtime = tokio::runtime::Runtime::new().unwrap();
    let prompt = vec![5i64, 17, 33, 2, 9];
    let request = BackendRequest {
        prompt: prompt.clone(),
        params: SamplingParams {
            temperature: 0.7,
            max_new_tokens: 6,
            seed: 4,
            ..SamplingParams::default()
        },
        stop: vec![],
        shared_prefix: 0,
    };
    let sampled = runtime.block_on(handle.generate(request.clone())).unwrap();
    let score = |h: &drmas::pool::ModelHandle| {
        h.logprobs(vec![drmas::pool::ScoreRequest {
            prompt: prompt.clone(),
            response: sampled.tokens.clone(),
            temperature: 0.7,
        }])
        .unwrap()
        .remove(0)
    };
    let scored = score(&handle);
    assert_eq!(scored.len(), sampled.tokens.len());
    for (a, b) in scored.iter().zip(&sampled.logprobs) {
        assert!((a - b).abs() < 1e-5, "{scored:?} vs {:?}", sampled.logprobs);
    }
    // A move to where the model already is changes nothing; a GPU, where there is one,
    // and back gives the same weights and generation.
    let before = weights(&handle);
    handle.to_device(tch::Device::Cpu).unwrap();
    if tch::Cuda::is_available() {
        handle.to_device(tch::Device::Cuda(0)).unwrap();
        handle.to_device(tch::Device::Cpu).unwrap();
    }
    assert_eq!(weights(&handle), before);
    let again = runtime.block_on(handle.generate(request)).unwrap();
    assert_eq!(again.tokens, sampled.tokens);
}

#[test]
fn a_backend_that_cannot_train_says_so() {
    let handle = drmas::pool::spawn_worker("fake", worker_config(1), || {
        Ok(Box::new(common::fake::ScriptedBackend {
            script: |_: &str| "x".to_string(),
            calls: Default::default(),
        }) as Box<dyn drmas::pool::Backend>)
    })
    .unwrap();
    let err = handle.to_device(tch::Device::Cpu).unwrap_err();
    assert_eq!(
        err.to_string(),
        "model `fake`: move to a device: this backend cannot do that (it is not a trainable model)"
    );
    let err = handle
        .call("update", |b, slot| b.update(slot, &batch(1.0, 1e-3)))
        .unwrap_err();
    assert!(matches!(
        err.backend_error(),
        Some(BackendError::Unsupported)
    ));
}
