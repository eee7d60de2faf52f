//! The experiment's `[trainer]` and `[[models]]` settings turned into what a model worker
//! needs for its updates, in one place.

use crate::config::{ExperimentFile, ModelSection};
use crate::update::{AdamWConfig, LossSettings, UpdateSettings};

/// The update settings of model `m`.
pub fn update_settings(f: &ExperimentFile, m: &ModelSection) -> UpdateSettings {
    let t = &f.trainer;
    // seq-mean-token-sum-norm divides by the generation budget of the model's agents.
    let norm_len = f
        .agents
        .iter()
        .filter(|a| a.model == m.id)
        .map(|a| a.sampling.max_new_tokens.get())
        .max()
        .unwrap_or(1);
    UpdateSettings {
        loss: LossSettings {
            clip_low: t.clip.low,
            clip_high: t.clip.high,
            dual_clip: t.clip.dual,
            agg: t.loss_agg,
            kl: t.kl.as_ref().map(|k| (k.coef, k.estimator)),
            entropy_coef: t.entropy_coef,
            gspo: t.gspo,
            tis_cap: t.tis_cap,
            norm_len: f64::from(norm_len),
        },
        optimizer: AdamWConfig {
            weight_decay: m.weight_decay,
            ..AdamWConfig::default()
        },
        grad_clip: t.grad_clip,
        micro_batch_tokens: t.micro_batch_tokens as usize,
        logits_budget_bytes: (t.logits_budget_mb.get() as usize) << 20,
        ppo_epochs: t.ppo_epochs.get(),
        mini_batches: t.mini_batches.get(),
        logp_old: t.logp_old,
        share_prompts: t.share_prompts,
    }
}
