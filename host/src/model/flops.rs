//! Floating-point operations of the decoder's matmuls, for benchmarks' bounds and the
//! achieved rate of an update (2 FLOPs per multiply-add; norms and activations are
//! ignored, they are a few percent).

use super::config::ModelConfig;

/// Multiply-adds of one token through the decoder layers' projections.
fn layer_macs_per_token(c: &ModelConfig) -> f64 {
    let h = c.hidden_size as f64;
    let q = (c.num_heads * c.head_dim) as f64;
    let kv = (c.num_kv_heads * c.head_dim) as f64;
    let i = c.intermediate_size as f64;
    c.num_layers as f64 * (h * q + 2.0 * h * kv + q * h + 3.0 * h * i)
}

/// Forward FLOPs of `tokens` new tokens that attend to `context` earlier tokens (cached
/// or in the same pass) each on average, with logits computed for `logit_tokens` of them.
pub fn forward_flops(c: &ModelConfig, tokens: f64, mean_context: f64, logit_tokens: f64) -> f64 {
    let q = (c.num_heads * c.head_dim) as f64;
    let attention = c.num_layers as f64 * 2.0 * q * mean_context; // QKᵀ and AV per token
    2.0 * (tokens * (layer_macs_per_token(c) + attention)
        + logit_tokens * (c.hidden_size * c.vocab_size) as f64)
}

/// Forward FLOPs of one causal pass over a sequence of `len` tokens with logits at
/// `logit_tokens` positions.
pub fn sequence_flops(c: &ModelConfig, len: usize, logit_tokens: usize) -> f64 {
    let len = len as f64;
    forward_flops(c, len, (len + 1.0) / 2.0, logit_tokens as f64)
}
