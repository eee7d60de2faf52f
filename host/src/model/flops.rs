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

/// The tokens an ideal prefix cache computes for `prompts`: each distinct prefix once,
/// i.e. the nodes of the prompts' token trie. Returns (nodes, Σ depth), a node at depth
/// d being a token that attends to d tokens (itself and the d − 1 before it).
pub fn distinct_prefix_tokens(prompts: &[&[i64]]) -> (u64, u64) {
    let mut sorted: Vec<&[i64]> = prompts.to_vec();
    sorted.sort_unstable();
    let (mut nodes, mut depth_sum) = (0u64, 0u64);
    let mut previous: &[i64] = &[];
    for p in sorted {
        // In sorted order the longest prefix a prompt shares with any earlier one is
        // the one it shares with the prompt just before it.
        let shared = p.iter().zip(previous).take_while(|(a, b)| a == b).count() as u64;
        let len = p.len() as u64;
        if len > shared {
            nodes += len - shared;
            depth_sum += (shared + 1..=len).sum::<u64>();
        }
        previous = p;
    }
    (nodes, depth_sum)
}

/// Forward FLOPs of computing each distinct prefix of `prompts` once (no logits).
pub fn distinct_prefix_flops(c: &ModelConfig, prompts: &[&[i64]]) -> f64 {
    let (nodes, depth_sum) = distinct_prefix_tokens(prompts);
    if nodes == 0 {
        return 0.0;
    }
    forward_flops(c, nodes as f64, depth_sum as f64 / nodes as f64, 0.0)
}

/// Forward FLOPs of a response of `n` tokens after a prompt of `p`, with logits at each
/// of its tokens (the sampler's, or the loss's).
pub fn response_flops(c: &ModelConfig, p: usize, n: usize) -> f64 {
    let n = n as f64;
    forward_flops(c, n, p as f64 + (n + 1.0) / 2.0, n)
}

#[cfg(test)]
mod tests {
    use super::distinct_prefix_tokens;

    #[test]
    fn distinct_prefixes_are_the_nodes_of_the_prompt_trie() {
        // [1,2,3] makes 3 nodes (depths 1+2+3), its duplicate none, [1,2,4] one at depth
        // 3, [5] one at depth 1: 5 nodes, Σ depth 10.
        let prompts: [&[i64]; 4] = [&[1, 2, 4], &[1, 2, 3], &[5], &[1, 2, 3]];
        assert_eq!(distinct_prefix_tokens(&prompts), (5, 10));
        assert_eq!(distinct_prefix_tokens(&[]), (0, 0));
        // A prompt that is a prefix of another adds nothing.
        assert_eq!(distinct_prefix_tokens(&[&[1, 2], &[1, 2, 3]]), (3, 6));
    }
}
