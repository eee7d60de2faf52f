//! The batch sizes a worker runs with when the experiment leaves them unset: the
//! generation batch's rows (`[pool] max_batch_rows`), the update's micro-batch tokens
//! (`[trainer] micro_batch_tokens`) and one log-softmax chunk's logits
//! (`[trainer] logits_budget_mb`).
//!
//! On the CPU they are fixed (the sizes the CPU benchmarks were tuned at, and what the
//! reproducibility tests pin). On a GPU the CPU's sizes leave the device idle: 64 rows
//! of decode are bound by launching kernels, and a 4,096-token micro-batch with one
//! logits row per chunk syncs hundreds of times an update. There they are sized from
//! what the device has free after the worker's state (weights, gradients, optimizer):
//! the rollout's KV cache and the update's activations are never resident together
//! (the placement's rule, `placement::need`), so each may use the same spare memory.
//! A size the experiment sets is kept as it is, on every device.

use super::placement::{Budget, Footprint, Sharding, Trains, footprint};
use crate::model::ModelConfig;
use tch::Kind;

/// The sizes of one worker, and where they came from.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Sizes {
    pub rows: usize,
    pub micro_batch_tokens: usize,
    pub logits_bytes: usize,
    /// Whether any of them was sized from the device's free memory.
    pub from_device: bool,
}

/// The sizes on the CPU (and on a GPU whose free memory is unknown).
pub const CPU: Sizes = Sizes {
    rows: 64,
    micro_batch_tokens: 4096,
    logits_bytes: 256 << 20,
    from_device: false,
};

/// The bounds of device sizing: never below the CPU's sizes (a device with less spare
/// memory than that is refused by the placement, as before), and no more rows or
/// tokens than make a GPU step longer without making it faster.
pub const MAX_ROWS: usize = 1024;
pub const MAX_MICRO_BATCH_TOKENS: usize = 65_536;
pub const MAX_LOGITS_BYTES: usize = 4 << 30;

/// Share of the device's free memory the sizes may plan for: the rest is left to the
/// allocator's fragmentation and the tensors the estimates leave out.
const USABLE: f64 = 0.8;

/// What the experiment asked for (`None`: unset, sized here).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Asked {
    pub rows: Option<usize>,
    pub micro_batch_tokens: Option<usize>,
    pub logits_bytes: Option<usize>,
}

impl Asked {
    /// The CPU's sizes where unset.
    pub fn on_cpu(&self) -> Sizes {
        Sizes {
            rows: self.rows.unwrap_or(CPU.rows),
            micro_batch_tokens: self.micro_batch_tokens.unwrap_or(CPU.micro_batch_tokens),
            logits_bytes: self.logits_bytes.unwrap_or(CPU.logits_bytes),
            from_device: false,
        }
    }

    fn all_set(&self) -> bool {
        self.rows.is_some() && self.micro_batch_tokens.is_some() && self.logits_bytes.is_some()
    }
}

/// What a worker is sized for besides its free memory.
#[derive(Debug, Clone, Copy)]
pub struct Worker<'a> {
    pub config: &'a ModelConfig,
    pub kind: Kind,
    pub adapter_params: u64,
    pub trains: Trains,
    pub sharding: Sharding,
    /// The longest prompt a row is budgeted for, and the most tokens it generates.
    pub prompt_tokens: u64,
    pub new_tokens: u64,
}

/// The sizes of a worker on a GPU with `free` bytes (`None`: unknown, the CPU's).
///
/// The state (weights, gradients, optimizer, and the gathered weights of a sharded
/// update) is taken from `free`·0.8; of what is left, the rollout's rows take it all
/// (a row's KV cache and sampling work over prompt + new tokens), and the update
/// splits it: an eighth to one chunk's logits (between 256 MiB and 4 GiB), the rest
/// to the micro-batch's saved activations (`placement::saved_per_token_layer` per
/// layer and token). Rows are a multiple of 8 and tokens of 256, so that shapes
/// repeat.
pub fn for_gpu(asked: Asked, free: Option<u64>, w: &Worker) -> Sizes {
    let cpu = asked.on_cpu();
    let Some(free) = free else {
        return cpu;
    };
    if asked.all_set() {
        return cpu;
    }
    let budget = |rows: u64, tokens: u64, logits: u64| Budget {
        rows,
        prompt_tokens: w.prompt_tokens,
        new_tokens: w.new_tokens,
        micro_batch_tokens: tokens,
        logits_bytes: logits,
    };
    let print = |b: &Budget| -> Footprint {
        footprint(w.config, w.kind, w.adapter_params, w.trains, b, w.sharding)
    };
    let empty = print(&budget(0, 0, 0));
    let state = empty
        .weights
        .max(empty.update_weights.unwrap_or(0))
        .saturating_add(empty.gradients)
        .saturating_add(empty.optimizer);
    let spare = ((free as f64 * USABLE) as u64).saturating_sub(state);
    // The KV cache and the activations are linear in rows and tokens.
    let per_row = print(&budget(1, 0, 0)).kv_cache.max(1);
    let per_token = print(&budget(0, 1, 0)).activations.max(1);
    let rows = asked.rows.unwrap_or_else(|| {
        let fit = (spare / per_row) as usize;
        (fit / 8 * 8).clamp(CPU.rows, MAX_ROWS)
    });
    let logits = asked
        .logits_bytes
        .unwrap_or_else(|| ((spare / 8) as usize).clamp(CPU.logits_bytes, MAX_LOGITS_BYTES));
    let trains = w.trains != Trains::Nothing;
    let tokens = asked.micro_batch_tokens.unwrap_or_else(|| {
        if !trains {
            return CPU.micro_batch_tokens;
        }
        let fit = (spare.saturating_sub(logits as u64) / per_token) as usize;
        (fit / 256 * 256).clamp(CPU.micro_batch_tokens, MAX_MICRO_BATCH_TOKENS)
    });
    Sizes {
        rows,
        micro_batch_tokens: tokens,
        logits_bytes: logits,
        from_device: true,
    }
}

impl Sizes {
    /// `rows 256, micro-batch 16384 tokens, logits 1.0 GiB (sized for the device)`
    pub fn describe(&self) -> String {
        format!(
            "generation rows {}, micro-batch {} tokens, logits chunk {} ({})",
            self.rows,
            self.micro_batch_tokens,
            crate::model::memory::gib(self.logits_bytes as u64),
            if self.from_device {
                "sized for the device where unset"
            } else {
                "the CPU's where unset"
            }
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::update::Shard;

    /// Qwen3-0.6B's published shape.
    fn qwen3_06b() -> ModelConfig {
        let json = r#"{"model_type": "qwen3", "vocab_size": 151936, "hidden_size": 1024,
            "intermediate_size": 3072, "num_hidden_layers": 28, "num_attention_heads": 16,
            "num_key_value_heads": 8, "head_dim": 128, "max_position_embeddings": 40960,
            "tie_word_embeddings": true}"#;
        ModelConfig::from_json(std::path::Path::new("config.json"), json).unwrap()
    }

    fn worker(c: &ModelConfig, trains: Trains) -> Worker<'_> {
        Worker {
            config: c,
            kind: Kind::BFloat16,
            adapter_params: 0,
            trains,
            sharding: Sharding::NONE,
            prompt_tokens: 1024,
            new_tokens: 1024,
        }
    }

    const GIB: u64 = 1 << 30;

    #[test]
    fn without_free_memory_or_with_every_size_set_the_sizes_are_the_cpus_or_the_asked() {
        let c = qwen3_06b();
        let w = worker(&c, Trains::Full);
        assert_eq!(for_gpu(Asked::default(), None, &w), CPU);
        let asked = Asked {
            rows: Some(3),
            micro_batch_tokens: Some(512),
            logits_bytes: Some(1 << 20),
        };
        let s = for_gpu(asked, Some(140 * GIB), &w);
        assert_eq!(
            (s.rows, s.micro_batch_tokens, s.logits_bytes),
            (3, 512, 1 << 20)
        );
        assert!(!s.from_device);
    }

    #[test]
    fn an_h200_sizes_a_qwen3_06b_worker_from_its_spare_memory() {
        let c = qwen3_06b();
        let w = worker(&c, Trains::Full);
        let free = 139 * GIB;
        let s = for_gpu(Asked::default(), Some(free), &w);
        // By hand: 596,049,920 parameters (tied head) in bf16 = 1.11 GiB of weights and
        // of gradients, 12 bytes each of f32 moments and master = 6.66 GiB; spare =
        // 0.8 × 139 GiB − 8.88 GiB = 102.3 GiB. A row's KV cache over 2,048 tokens:
        // 2 (k, v) × 28 layers × 8 heads × 128 × 2 bytes × 2 (copies) = 229,376 B a
        // token, 448 MiB a row, plus its sampling work and its share of the prefill: ~507 MiB.
        let params = crate::model::memory::parameter_count(&c);
        assert_eq!(params, 596_049_920);
        let spare = (free as f64 * 0.8) as u64 - params * (2 + 2 + 12);
        let per_row = footprint(
            &c,
            Kind::BFloat16,
            0,
            Trains::Full,
            &Budget {
                rows: 1,
                prompt_tokens: 1024,
                new_tokens: 1024,
                micro_batch_tokens: 0,
                logits_bytes: 0,
            },
            Sharding::NONE,
        )
        .kv_cache;
        assert!(per_row > 448 << 20 && per_row < 520 << 20, "{per_row}");
        assert_eq!(s.rows as u64, spare / per_row / 8 * 8);
        assert!((190..=224).contains(&s.rows), "{s:?}");
        // The logits chunk: an eighth of the spare memory, capped at 4 GiB.
        assert_eq!(s.logits_bytes, MAX_LOGITS_BYTES);
        // The activations: 28 × saved_per_token_layer per token in what is left.
        let per_token = 28 * crate::pool::placement::saved_per_token_layer(&c, Kind::BFloat16);
        let tokens = ((spare - (4 << 30)) / per_token) as usize / 256 * 256;
        assert_eq!(s.micro_batch_tokens, tokens.min(MAX_MICRO_BATCH_TOKENS));
        assert_eq!(s.micro_batch_tokens, MAX_MICRO_BATCH_TOKENS);
        assert!(s.from_device);
    }

    #[test]
    fn a_tight_device_keeps_the_cpus_sizes_as_a_floor_and_an_asked_size_is_kept() {
        let c = qwen3_06b();
        let w = worker(&c, Trains::Full);
        let s = for_gpu(Asked::default(), Some(10 * GIB), &w);
        assert_eq!((s.rows, s.logits_bytes), (CPU.rows, CPU.logits_bytes));
        assert_eq!(s.micro_batch_tokens, CPU.micro_batch_tokens);
        let asked = Asked {
            rows: Some(100),
            ..Asked::default()
        };
        let s = for_gpu(asked, Some(139 * GIB), &w);
        assert_eq!(s.rows, 100);
        assert_eq!(s.micro_batch_tokens, MAX_MICRO_BATCH_TOKENS);
    }

    #[test]
    fn a_worker_that_does_not_train_gives_every_spare_byte_to_rows() {
        let c = qwen3_06b();
        let s = for_gpu(
            Asked::default(),
            Some(80 * GIB),
            &worker(&c, Trains::Nothing),
        );
        let t = for_gpu(Asked::default(), Some(80 * GIB), &worker(&c, Trains::Full));
        assert!(s.rows > t.rows, "{s:?} vs {t:?}");
        assert_eq!(s.micro_batch_tokens, CPU.micro_batch_tokens);
        // A sharded optimizer leaves more for rows.
        let mut sharded = worker(&c, Trains::Full);
        sharded.sharding = Sharding {
            mode: Shard::Optimizer,
            ranks: 8,
        };
        assert!(for_gpu(Asked::default(), Some(80 * GIB), &sharded).rows > t.rows);
    }
}
