//! The experiment's `[trainer]` and `[[models]]` settings turned into what a model worker
//! needs for its updates, in one place.

use crate::config::{ExperimentFile, ModelSection};
use crate::pool::sizing::{Asked, Sizes};
use crate::update::{AdamWConfig, LossSettings, UpdateSettings};

/// The batch sizes the experiment sets (the rest are sized per worker, `pool::sizing`).
pub fn asked_sizes(f: &ExperimentFile) -> Asked {
    Asked {
        rows: f.pool.max_batch_rows,
        micro_batch_tokens: f.trainer.micro_batch_tokens.map(|m| m as usize),
        logits_bytes: f.trainer.logits_budget_mb.map(|m| (m.get() as usize) << 20),
    }
}

/// The update settings of model `m`, whose worker runs with `sizes`.
pub fn update_settings(f: &ExperimentFile, m: &ModelSection, sizes: &Sizes) -> UpdateSettings {
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
        grad_clip: m.grad_clip.unwrap_or(t.grad_clip),
        micro_batch_tokens: sizes.micro_batch_tokens,
        logits_budget_bytes: sizes.logits_bytes,
        ppo_epochs: t.ppo_epochs.get(),
        mini_batches: t.mini_batches.get(),
        logp_old: t.logp_old,
        share_prompts: t.share_prompts,
        shadow_gradients: t.shadow_gradients,
    }
}
