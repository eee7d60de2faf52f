//! Memory before it is allocated: what loading a checkpoint and a generation batch hold
//! at their peak, and what the machine has available, so that a request that cannot fit
//! is refused with both numbers instead of being killed by the kernel halfway.
//!
//! The estimates count the large tensors (weights, KV cache, logits, the prefill's
//! activations); allocator overhead and small tensors are left out, so they are a floor
//! for what will be used, not a ceiling.

use super::{
    config::ModelConfig,
    error::{ModelError, Result},
};
// The size formatter lives below the errors that print sizes; it is part of this API.
pub use super::units::gib;
use std::sync::atomic::{AtomicU64, Ordering};
use tch::{Device, Kind};

/// Bytes of float32 work per logit while sampling: the scaled logits, their log-softmax,
/// the sorted values and their int64 indices (top-p), probabilities, the masked copy,
/// two cumulative sums and the boolean masks.
const SAMPLING_BYTES_PER_LOGIT: u64 = 40;

/// An estimate of peak memory, by part.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct MemoryEstimate {
    pub parts: Vec<(&'static str, u64)>,
}

impl MemoryEstimate {
    pub fn total(&self) -> u64 {
        self.parts
            .iter()
            .fold(0u64, |sum, (_, b)| sum.saturating_add(*b))
    }

    /// `KV cache 1.0 GiB, logits 2.0 MiB, …`
    pub fn describe(&self) -> String {
        self.parts
            .iter()
            .map(|(name, b)| format!("{name} {}", gib(*b)))
            .collect::<Vec<_>>()
            .join(", ")
    }
}

/// The product of `factors`, saturating at `u64::MAX` (sizes from a hostile config or
/// request must not wrap around to something small).
fn product(factors: &[u64]) -> u64 {
    factors.iter().fold(1u64, |p, &f| p.saturating_mul(f))
}

fn dim(v: i64) -> u64 {
    v.max(0) as u64
}

fn elt(kind: Kind) -> u64 {
    kind.elt_size_in_bytes() as u64
}

/// Peak memory of one generation batch ([`crate::model::generate`]) of `rows` requests
/// whose longest prompt has `prompt_len` tokens and which generate up to `new_tokens`
/// each, with the model's weights in `kind`:
///
/// - KV cache: keys and values of every layer for every row over prompt + new tokens,
///   twice (forking prompts into rows and dropping finished rows copy the cache);
/// - logits: the last position's logits of every row and the float32 work of sampling;
/// - prefill: the activations of one layer over all prompts at once (residual stream,
///   float32 norms, q/k/v before and after RoPE, the MLP) and the attention mask.
pub fn estimate_generation(
    config: &ModelConfig,
    rows: u64,
    prompt_len: u64,
    new_tokens: u64,
    kind: Kind,
) -> MemoryEstimate {
    let c = config;
    let e = elt(kind);
    let capacity = prompt_len.saturating_add(new_tokens.max(1));
    let kv_per_token = product(&[
        2,
        dim(c.num_layers),
        dim(c.num_kv_heads),
        dim(c.head_dim),
        e,
    ]);
    let kv_cache = product(&[2, rows, capacity, kv_per_token]);
    let logits = product(&[rows, dim(c.vocab_size), e + SAMPLING_BYTES_PER_LOGIT]);
    let tokens = product(&[rows, prompt_len]);
    let qkv_width = dim(c.num_heads + 2 * c.num_kv_heads) * dim(c.head_dim);
    let per_token = product(&[4, dim(c.hidden_size), e])
        .saturating_add(product(&[2, dim(c.hidden_size), 4]))
        .saturating_add(product(&[2, qkv_width, e]))
        .saturating_add(product(&[3, dim(c.intermediate_size), e]));
    let mask = product(&[rows, prompt_len, prompt_len, 1 + e]);
    let prefill = product(&[tokens, per_token]).saturating_add(mask);
    MemoryEstimate {
        parts: vec![
            ("KV cache", kv_cache),
            ("logits", logits),
            ("prefill", prefill),
        ],
    }
}

/// Peak memory of one forward over `rows` × `tokens` positions with logits at every
/// position (`drmas model logits`): the prefill's activations and float32 logits.
pub fn estimate_forward(
    config: &ModelConfig,
    rows: u64,
    tokens: u64,
    kind: Kind,
) -> MemoryEstimate {
    let generation = estimate_generation(config, rows, tokens, 0, kind);
    let prefill = generation
        .parts
        .iter()
        .find(|(name, _)| *name == "prefill")
        .map_or(0, |p| p.1);
    // Logits in the model's dtype and their float32 copy.
    let logits = product(&[rows, tokens, dim(config.vocab_size), elt(kind) + 4]);
    MemoryEstimate {
        parts: vec![("activations", prefill), ("logits", logits)],
    }
}

/// Weights of the decoder `config` describes, in elements.
pub fn parameter_count(config: &ModelConfig) -> u64 {
    let (layer, outer) = parameter_split(config);
    product(&[dim(config.num_layers), layer]).saturating_add(outer)
}

/// The parameters of one decoder layer, and of the rest (embeddings, an untied head,
/// the final norm): sharding's units (`update::flat`).
pub fn parameter_split(config: &ModelConfig) -> (u64, u64) {
    let c = config;
    let (h, i) = (dim(c.hidden_size), dim(c.intermediate_size));
    let q = dim(c.num_heads) * dim(c.head_dim);
    let kv = dim(c.num_kv_heads) * dim(c.head_dim);
    let mut layer = product(&[h, q])
        .saturating_add(product(&[2, h, kv]))
        .saturating_add(product(&[q, h]))
        .saturating_add(product(&[3, h, i]))
        .saturating_add(2 * h);
    if c.qkv_bias {
        layer = layer.saturating_add(q + 2 * kv);
    }
    if c.o_bias {
        layer = layer.saturating_add(h);
    }
    if c.qk_norm {
        layer = layer.saturating_add(2 * dim(c.head_dim));
    }
    let embed = product(&[dim(c.vocab_size), h]);
    let lm_head = if c.tie_word_embeddings { 0 } else { embed };
    (layer, embed.saturating_add(lm_head).saturating_add(h))
}

/// Peak memory of loading the decoder `config` describes in `kind`: the weights (made
/// in float32 first, then converted) and the RoPE tables for `max_position_embeddings`
/// positions (cos and sin in `kind`, built from float32 angles).
pub fn estimate_load(config: &ModelConfig, kind: Kind) -> MemoryEstimate {
    let weights = product(&[parameter_count(config), elt(kind).max(4)]);
    let hd = dim(config.head_dim);
    let per_position = product(&[hd, 10 + 2 * elt(kind)]).saturating_add(12);
    let rope = product(&[dim(config.max_position_embeddings), per_position]);
    MemoryEstimate {
        parts: vec![("weights", weights), ("RoPE tables", rope)],
    }
}

/// Memory that can still be allocated on a device, and where the number comes from.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Available {
    pub bytes: u64,
    pub source: String,
}

/// What `device` can still allocate: on the CPU, `MemAvailable` of `/proc/meminfo`; on
/// CUDA, the driver's free memory plus what this process's generation batches already
/// hold in torch's caching allocator (which the driver counts as used). `None` where
/// neither can be read: then nothing is refused.
pub fn available_memory(device: Device) -> Option<Available> {
    match device {
        Device::Cuda(index) => {
            let free = cuda_free_memory(index)?;
            Some(Available {
                bytes: free.saturating_add(cached_on(index)),
                source: format!("free on cuda:{index}"),
            })
        }
        _ => {
            let text = std::fs::read_to_string("/proc/meminfo").ok()?;
            Some(Available {
                bytes: mem_available(&text)?,
                source: "MemAvailable".into(),
            })
        }
    }
}

/// `MemAvailable` of a `/proc/meminfo` text, in bytes.
fn mem_available(meminfo: &str) -> Option<u64> {
    let line = meminfo
        .lines()
        .find_map(|l| l.strip_prefix("MemAvailable:"))?;
    let kib: u64 = line.trim().trim_end_matches("kB").trim().parse().ok()?;
    Some(kib.saturating_mul(1024))
}

/// Refuses `estimate` of `what` when it is larger than what `device` has available.
pub fn check_fits(what: &str, estimate: &MemoryEstimate, device: Device) -> Result<()> {
    let Some(available) = available_memory(device) else {
        return Ok(());
    };
    let needed = estimate.total();
    if needed > available.bytes {
        return Err(ModelError::Memory {
            what: what.to_string(),
            needed,
            parts: estimate.describe(),
            available: available.bytes,
            limit: available.source,
        });
    }
    Ok(())
}

/// Refuses a generation batch that cannot fit (see [`estimate_generation`]); returns the
/// estimate otherwise.
pub fn check_generation(
    config: &ModelConfig,
    kind: Kind,
    device: Device,
    rows: u64,
    prompt_len: u64,
    new_tokens: u64,
) -> Result<MemoryEstimate> {
    let estimate = estimate_generation(config, rows, prompt_len, new_tokens, kind);
    let what = format!(
        "a generation batch of {rows} row(s) × ({prompt_len} prompt + {new_tokens} new tokens)"
    );
    check_fits(&what, &estimate, device)?;
    Ok(estimate)
}

/// Whether a generation batch fits in what `device` has available (true where that
/// cannot be read).
pub fn generation_fits(
    config: &ModelConfig,
    kind: Kind,
    device: Device,
    rows: u64,
    prompt_len: u64,
    new_tokens: u64,
) -> bool {
    let estimate = estimate_generation(config, rows, prompt_len, new_tokens, kind);
    available_memory(device).is_none_or(|a| estimate.total() <= a.bytes)
}

const MAX_CUDA_DEVICES: usize = 64;
static CUDA_CACHED: [AtomicU64; MAX_CUDA_DEVICES] = [const { AtomicU64::new(0) }; MAX_CUDA_DEVICES];

/// Notes that a generation batch of `bytes` ran on `device`: torch's caching allocator
/// keeps that memory after the batch, free for the next one but used for the driver.
pub fn note_generation_peak(device: Device, bytes: u64) {
    if let Device::Cuda(index) = device
        && let Some(slot) = CUDA_CACHED.get(index)
    {
        slot.fetch_max(bytes, Ordering::Relaxed);
    }
}

fn cached_on(index: usize) -> u64 {
    CUDA_CACHED
        .get(index)
        .map_or(0, |s| s.load(Ordering::Relaxed))
}

/// The CUDA runtime's free memory on device `index`, through the runtime libtorch
/// already loaded into this process (`cudaMemGetInfo` counts CUDA_VISIBLE_DEVICES as
/// torch does). `None` where the runtime is not loaded.
fn cuda_free_memory(index: usize) -> Option<u64> {
    cuda_mem_info(index).map(|(free, _)| free)
}

/// Bytes in use on `device` now: on CUDA, the device's total minus its free memory (every
/// process's, as the driver counts it); on the CPU, this process's resident set.
pub fn device_used(device: Device) -> Option<u64> {
    match device {
        Device::Cuda(index) => cuda_mem_info(index).map(|(free, total)| total.saturating_sub(free)),
        _ => {
            let text = std::fs::read_to_string("/proc/self/status").ok()?;
            let kib: u64 = text
                .lines()
                .find_map(|l| l.strip_prefix("VmRSS:"))?
                .trim()
                .trim_end_matches("kB")
                .trim()
                .parse()
                .ok()?;
            Some(kib.saturating_mul(1024))
        }
    }
}

/// (free, total) bytes of CUDA device `index`.
fn cuda_mem_info(index: usize) -> Option<(u64, u64)> {
    use libloading::os::unix::{Library, Symbol};
    use std::ffi::c_int;
    let this = Library::this();
    // SAFETY: the CUDA runtime's C API is called with the signatures of its public
    // header; the thread's current device is restored before returning.
    unsafe {
        let get: Symbol<unsafe extern "C" fn(*mut c_int) -> c_int> =
            this.get(b"cudaGetDevice\0").ok()?;
        let set: Symbol<unsafe extern "C" fn(c_int) -> c_int> =
            this.get(b"cudaSetDevice\0").ok()?;
        let info: Symbol<unsafe extern "C" fn(*mut usize, *mut usize) -> c_int> =
            this.get(b"cudaMemGetInfo\0").ok()?;
        let mut current: c_int = 0;
        if get(&mut current) != 0 || set(index as c_int) != 0 {
            return None;
        }
        let (mut free, mut total) = (0usize, 0usize);
        let ok = info(&mut free, &mut total) == 0;
        set(current);
        ok.then_some((free as u64, total as u64))
    }
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;
    use std::path::Path;

    /// A tiny Llama's config, for the memory estimates' hand-computed fixtures (the
    /// pool's placement tests use it too).
    pub(crate) fn tiny() -> ModelConfig {
        ModelConfig::from_json(
            Path::new("config.json"),
            r#"{"model_type": "llama", "vocab_size": 128, "hidden_size": 64, "intermediate_size": 96,
                "num_hidden_layers": 2, "num_attention_heads": 4, "num_key_value_heads": 2,
                "max_position_embeddings": 256}"#,
        )
        .unwrap()
    }

    #[test]
    fn the_generation_estimate_matches_the_formula_by_hand() {
        // 3 rows, prompt 5, 7 new tokens, float32; head_dim 64 / 4 = 16.
        let e = estimate_generation(&tiny(), 3, 5, 7, Kind::Float);
        // 2 (k, v) · 2 layers · 2 kv heads · 16 · 4 bytes = 512 per token and row,
        // · 12 positions · 3 rows · 2 copies.
        assert_eq!(e.parts[0], ("KV cache", 512 * 12 * 3 * 2));
        // 3 rows · 128 vocab · (4 + 40).
        assert_eq!(e.parts[1], ("logits", 3 * 128 * 44));
        // 15 tokens · (4·64·4 + 2·64·4 + 2·(4 + 4)·16·4 + 3·96·4) + mask 3·5·5·5.
        let per_token = 1024 + 512 + 1024 + 1152;
        assert_eq!(e.parts[2], ("prefill", 15 * per_token + 375));
        assert_eq!(e.total(), 36864 + 16896 + 56055);
        assert_eq!(
            e.describe(),
            "KV cache 0.0 MiB, logits 0.0 MiB, prefill 0.1 MiB"
        );
    }

    #[test]
    fn estimates_saturate_instead_of_wrapping() {
        let e = estimate_generation(&tiny(), u64::MAX, 5, u64::MAX, Kind::Float);
        assert_eq!(e.total(), u64::MAX);
        assert_eq!(gib(3 << 30), "3.0 GiB");
        assert_eq!(gib(512 << 20), "512.0 MiB");
    }

    #[test]
    fn the_load_estimate_counts_every_weight_and_the_rope_tables() {
        let c = tiny();
        // embed 128·64, lm_head 128·64 (untied), norm 64; per layer q 64·64, k and v
        // 2·64·32, o 64·64, MLP 3·64·96, two norms 2·64.
        let layer = 4096 + 4096 + 4096 + 18432 + 128;
        assert_eq!(parameter_count(&c), 2 * layer + 2 * 8192 + 64);
        let e = estimate_load(&c, Kind::BFloat16);
        assert_eq!(e.parts[0].1, parameter_count(&c) * 4);
        assert_eq!(e.parts[1], ("RoPE tables", 256 * (16 * 14 + 12)));
    }

    #[test]
    fn mem_available_is_read_in_bytes() {
        let text = "MemTotal:       24000000 kB\nMemFree:  1 kB\nMemAvailable:   2048 kB\n";
        assert_eq!(mem_available(text), Some(2048 * 1024));
        assert_eq!(mem_available("MemTotal: 1 kB\n"), None);
    }
}
