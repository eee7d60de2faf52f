//! From llama.cpp's layout to transformers': the architecture and `config.json`, the
//! tensor names, and the Q/K row permutation llama.cpp applies to Llama attention.

use super::super::error::{ModelError, Result};
use super::{
    quant::{GgmlType, type_name},
    reader::{GgufFile, TensorInfo, Value},
};
use serde_json::json;

/// The architectures imported (`general.architecture`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Arch {
    Llama,
    Qwen2,
    Qwen3,
}

impl Arch {
    pub fn gguf_name(self) -> &'static str {
        match self {
            Arch::Llama => "llama",
            Arch::Qwen2 => "qwen2",
            Arch::Qwen3 => "qwen3",
        }
    }

    fn hf_class(self) -> &'static str {
        match self {
            Arch::Llama => "LlamaForCausalLM",
            Arch::Qwen2 => "Qwen2ForCausalLM",
            Arch::Qwen3 => "Qwen3ForCausalLM",
        }
    }
}

/// The sizes of the model, read from `{arch}.*` metadata.
#[derive(Debug, Clone)]
pub struct Hparams {
    pub arch: Arch,
    pub layers: usize,
    pub hidden: usize,
    pub intermediate: usize,
    pub heads: usize,
    pub kv_heads: usize,
    pub head_dim: usize,
    pub vocab: usize,
    pub rms_norm_eps: f64,
    pub rope_theta: f64,
    pub context_length: usize,
}

/// One output tensor: where it comes from and how to turn it into the HF tensor.
#[derive(Debug, Clone)]
pub struct TensorPlan {
    pub hf_name: String,
    pub info: TensorInfo,
    pub kind: GgmlType,
    /// The torch shape.
    pub shape: Vec<usize>,
    /// Undo llama.cpp's rotary permutation of the rows, over this many heads.
    pub unpermute_heads: Option<usize>,
}

/// What the GGUF file becomes.
pub struct Plan {
    pub hparams: Hparams,
    pub config: serde_json::Value,
    pub generation_config: serde_json::Value,
    pub tensors: Vec<TensorPlan>,
    pub tied_embeddings: bool,
}

fn unsupported(file: &GgufFile, field: &str, value: String, why: &str) -> ModelError {
    ModelError::Unsupported {
        path: file.path.clone(),
        field: field.into(),
        value,
        why: why.into(),
    }
}

fn config_err(file: &GgufFile, field: &str, message: impl Into<String>) -> ModelError {
    ModelError::Config {
        path: file.path.clone(),
        field: field.into(),
        message: message.into(),
    }
}

/// A required positive integer.
fn size(file: &GgufFile, key: &str) -> Result<usize> {
    match file.get(key) {
        None => Err(config_err(file, key, "missing")),
        Some(v) => match v.as_i64() {
            Some(n) if n > 0 => Ok(n as usize),
            _ => Err(config_err(
                file,
                key,
                format!("expected a positive integer, got {}", v.describe()),
            )),
        },
    }
}

fn optional_size(file: &GgufFile, key: &str) -> Result<Option<usize>> {
    file.get(key).map(|_| size(file, key)).transpose()
}

fn float(file: &GgufFile, key: &str) -> Result<Option<f64>> {
    match file.get(key) {
        None => Ok(None),
        Some(v) => v
            .as_f64()
            .filter(|x| x.is_finite())
            .map(Some)
            .ok_or_else(|| {
                config_err(
                    file,
                    key,
                    format!("expected a number, got {}", v.describe()),
                )
            }),
    }
}

/// `attention.head_count_kv` may be one number or one per layer (all equal here).
fn kv_heads(file: &GgufFile, key: &str, heads: usize) -> Result<usize> {
    match file.get(key) {
        None => Ok(heads),
        Some(Value::Array(items)) => {
            let counts: Vec<Option<i64>> = items.iter().map(Value::as_i64).collect();
            match counts.first() {
                Some(Some(first)) if *first > 0 && counts.iter().all(|c| *c == Some(*first)) => {
                    Ok(*first as usize)
                }
                _ => Err(unsupported(
                    file,
                    key,
                    format!("{counts:?}"),
                    "per-layer key/value head counts that differ are not implemented",
                )),
            }
        }
        Some(_) => size(file, key),
    }
}

pub fn architecture(file: &GgufFile) -> Result<Arch> {
    let key = "general.architecture";
    let value = file
        .get(key)
        .ok_or_else(|| config_err(file, key, "missing"))?;
    match value.as_str() {
        Some("llama") => Ok(Arch::Llama),
        Some("qwen2") => Ok(Arch::Qwen2),
        Some("qwen3") => Ok(Arch::Qwen3),
        _ => Err(unsupported(
            file,
            key,
            value.describe(),
            "supported: \"llama\", \"qwen2\", \"qwen3\"",
        )),
    }
}

pub fn hparams(file: &GgufFile) -> Result<Hparams> {
    let arch = architecture(file)?;
    let a = arch.gguf_name();
    let k = |s: &str| format!("{a}.{s}");
    for moe in ["expert_count", "expert_used_count"] {
        if let Some(v) = file.get(&k(moe))
            && v.as_i64().is_some_and(|n| n > 0)
        {
            return Err(unsupported(
                file,
                &k(moe),
                v.describe(),
                "mixture-of-experts layers are not implemented",
            ));
        }
    }
    let scaling = k("rope.scaling.type");
    if let Some(v) = file.get(&scaling) {
        let plain = match v.as_str() {
            Some("none") => true,
            Some("linear") => matches!(float(file, &k("rope.scaling.factor"))?, None | Some(1.0)),
            _ => false,
        };
        if !plain {
            return Err(unsupported(
                file,
                &scaling,
                v.describe(),
                "only plain rotate-half RoPE (`rope.freq_base`) is implemented",
            ));
        }
    }
    let heads = size(file, &k("attention.head_count"))?;
    let kv_heads = kv_heads(file, &k("attention.head_count_kv"), heads)?;
    if heads % kv_heads != 0 {
        return Err(config_err(
            file,
            &k("attention.head_count_kv"),
            format!("{kv_heads} does not divide {heads} heads"),
        ));
    }
    let hidden = size(file, &k("embedding_length"))?;
    let head_dim = match optional_size(file, &k("attention.key_length"))? {
        Some(d) => d,
        None if hidden % heads == 0 => hidden / heads,
        None => {
            return Err(config_err(
                file,
                &k("attention.key_length"),
                format!("missing, and embedding_length {hidden} is not divisible by {heads} heads"),
            ));
        }
    };
    if let Some(v) = optional_size(file, &k("attention.value_length"))?
        && v != head_dim
    {
        return Err(unsupported(
            file,
            &k("attention.value_length"),
            v.to_string(),
            "value heads of another size than key heads are not implemented",
        ));
    }
    if let Some(rot) = optional_size(file, &k("rope.dimension_count"))?
        && rot != head_dim
    {
        return Err(unsupported(
            file,
            &k("rope.dimension_count"),
            rot.to_string(),
            "partial rotary embeddings (fewer rotated dimensions than the head size) are not implemented",
        ));
    }
    let embed = file
        .tensor("token_embd.weight")
        .ok_or_else(|| config_err(file, "token_embd.weight", "no such tensor"))?;
    let vocab = match embed.dims.as_slice() {
        [h, v] if *h as usize == hidden => *v as usize,
        dims => {
            return Err(file.tensor_err(
                &embed.name,
                format!("sizes {dims:?}, expected [{hidden}, vocab] (ggml order)"),
            ));
        }
    };
    if let Some(n) = optional_size(file, &k("vocab_size"))?
        && n != vocab
    {
        return Err(config_err(
            file,
            &k("vocab_size"),
            format!("{n}, but token_embd.weight has {vocab} rows"),
        ));
    }
    Ok(Hparams {
        arch,
        layers: size(file, &k("block_count"))?,
        hidden,
        intermediate: size(file, &k("feed_forward_length"))?,
        heads,
        kv_heads,
        head_dim,
        vocab,
        rms_norm_eps: float(file, &k("attention.layer_norm_rms_epsilon"))?.unwrap_or(1e-6),
        rope_theta: float(file, &k("rope.freq_base"))?.unwrap_or(10000.0),
        context_length: optional_size(file, &k("context_length"))?.unwrap_or(4096),
    })
}

/// The HF name of a GGUF tensor, or `None` for a name this importer does not know.
pub(crate) fn hf_name(arch: Arch, gguf: &str) -> Option<String> {
    let top = match gguf {
        "token_embd.weight" => Some("model.embed_tokens.weight"),
        "output_norm.weight" => Some("model.norm.weight"),
        "output.weight" => Some("lm_head.weight"),
        _ => None,
    };
    if let Some(name) = top {
        return Some(name.into());
    }
    let rest = gguf.strip_prefix("blk.")?;
    let (layer, rest) = rest.split_once('.')?;
    let layer: usize = layer.parse().ok()?;
    let (module, param) = rest.rsplit_once('.')?;
    if param != "weight" && param != "bias" {
        return None;
    }
    let hf = match module {
        "attn_q" => "self_attn.q_proj",
        "attn_k" => "self_attn.k_proj",
        "attn_v" => "self_attn.v_proj",
        "attn_output" => "self_attn.o_proj",
        "attn_q_norm" if arch == Arch::Qwen3 && param == "weight" => "self_attn.q_norm",
        "attn_k_norm" if arch == Arch::Qwen3 && param == "weight" => "self_attn.k_norm",
        "ffn_gate" if param == "weight" => "mlp.gate_proj",
        "ffn_up" if param == "weight" => "mlp.up_proj",
        "ffn_down" if param == "weight" => "mlp.down_proj",
        "attn_norm" if param == "weight" => "input_layernorm",
        "ffn_norm" if param == "weight" => "post_attention_layernorm",
        _ => return None,
    };
    Some(format!("model.layers.{layer}.{hf}.{param}"))
}

/// The tensors to write, the config, checked against each other.
pub fn plan(file: &GgufFile) -> Result<Plan> {
    let hp = hparams(file)?;
    let mut tensors = Vec::with_capacity(file.tensors.len());
    for info in &file.tensors {
        let hf = hf_name(hp.arch, &info.name).ok_or_else(|| {
            let hint = if info.name.starts_with("rope_freqs") {
                " (RoPE frequency factors: rope scaling is not implemented)"
            } else {
                ""
            };
            file.tensor_err(
                &info.name,
                format!("not a tensor of the {} decoder{hint}", hp.arch.gguf_name()),
            )
        })?;
        if let Some(layer) = hf
            .strip_prefix("model.layers.")
            .and_then(|r| r.split('.').next()?.parse::<usize>().ok())
            && layer >= hp.layers
        {
            return Err(file.tensor_err(
                &info.name,
                format!("layer {layer}, but block_count is {}", hp.layers),
            ));
        }
        let kind = GgmlType::from_id(info.type_id).ok_or_else(|| {
            let implemented: Vec<String> = GgmlType::ALL.iter().map(|t| t.name()).collect();
            ModelError::Unsupported {
                path: file.path.clone(),
                field: format!("tensor `{}` type", info.name),
                value: type_name(info.type_id),
                why: format!("dequantization implemented for {}", implemented.join(", ")),
            }
        })?;
        kind.bytes_for(info)
            .map_err(|m| file.tensor_err(&info.name, m))?;
        let unpermute_heads = match (hp.arch, info.name.rsplit('.').nth(1)) {
            (Arch::Llama, Some("attn_q")) => Some(hp.heads),
            (Arch::Llama, Some("attn_k")) => Some(hp.kv_heads),
            _ => None,
        };
        let shape = info.torch_shape();
        if let Some(heads) = unpermute_heads
            && shape[0] % (2 * heads) != 0
        {
            return Err(file.tensor_err(
                &info.name,
                format!("{} rows do not split into {heads} rotary heads", shape[0]),
            ));
        }
        tensors.push(TensorPlan {
            hf_name: hf,
            info: info.clone(),
            kind,
            shape,
            unpermute_heads,
        });
    }
    let has = |name: &str| tensors.iter().any(|t| t.hf_name == name);
    let tied = !has("lm_head.weight");
    let attention_bias = has("model.layers.0.self_attn.q_proj.bias");
    if hp.arch == Arch::Qwen2 && !attention_bias {
        return Err(config_err(
            file,
            "blk.0.attn_q.bias",
            "missing: Qwen2 has q/k/v biases",
        ));
    }
    let o_bias = has("model.layers.0.self_attn.o_proj.bias");
    // Every tensor the decoder needs must be there.
    let mut expected = vec![
        "token_embd.weight".to_string(),
        "output_norm.weight".to_string(),
    ];
    for l in 0..hp.layers {
        let mut names = vec![
            "attn_norm.weight",
            "ffn_norm.weight",
            "ffn_gate.weight",
            "ffn_up.weight",
            "ffn_down.weight",
        ];
        names.extend([
            "attn_q.weight",
            "attn_k.weight",
            "attn_v.weight",
            "attn_output.weight",
        ]);
        if attention_bias {
            names.extend(["attn_q.bias", "attn_k.bias", "attn_v.bias"]);
        }
        if o_bias {
            names.push("attn_output.bias");
        }
        if hp.arch == Arch::Qwen3 {
            names.extend(["attn_q_norm.weight", "attn_k_norm.weight"]);
        }
        expected.extend(names.into_iter().map(|n| format!("blk.{l}.{n}")));
    }
    if let Some(missing) = expected.iter().find(|n| file.tensor(n).is_none()) {
        return Err(file.tensor_err(
            missing,
            format!(
                "missing from the file (block_count = {}, {} decoder)",
                hp.layers,
                hp.arch.gguf_name()
            ),
        ));
    }
    let token_id = |key: &str| file.get(key).and_then(Value::as_i64);
    let (bos, eos, pad) = (
        token_id("tokenizer.ggml.bos_token_id"),
        token_id("tokenizer.ggml.eos_token_id"),
        token_id("tokenizer.ggml.padding_token_id"),
    );
    let mut config = json!({
        "architectures": [hp.arch.hf_class()],
        "model_type": hp.arch.gguf_name(),
        "vocab_size": hp.vocab,
        "hidden_size": hp.hidden,
        "intermediate_size": hp.intermediate,
        "num_hidden_layers": hp.layers,
        "num_attention_heads": hp.heads,
        "num_key_value_heads": hp.kv_heads,
        "head_dim": hp.head_dim,
        "hidden_act": "silu",
        "rms_norm_eps": hp.rms_norm_eps,
        "rope_theta": hp.rope_theta,
        "rope_scaling": null,
        "max_position_embeddings": hp.context_length,
        "tie_word_embeddings": tied,
        "bos_token_id": bos,
        "eos_token_id": eos,
        "pad_token_id": pad,
        "torch_dtype": "float32",
        "use_cache": true,
    });
    let obj = config.as_object_mut().expect("object");
    match hp.arch {
        Arch::Llama => {
            obj.insert("attention_bias".into(), json!(attention_bias));
            obj.insert("mlp_bias".into(), json!(false));
        }
        Arch::Qwen2 => {
            obj.insert("use_sliding_window".into(), json!(false));
        }
        Arch::Qwen3 => {
            obj.insert("attention_bias".into(), json!(attention_bias));
            obj.insert("use_sliding_window".into(), json!(false));
        }
    }
    // drmas (as transformers) has q/k/v and o biases together on Llama / Qwen3, and
    // only q/k/v biases on Qwen2.
    let o_bias_expected = attention_bias && hp.arch != Arch::Qwen2;
    if o_bias != o_bias_expected {
        let why = if o_bias { "is present" } else { "is missing" };
        return Err(file.tensor_err(
            "blk.0.attn_output.bias",
            format!("{why}, which this {} decoder does not implement with q/k/v biases = {attention_bias}", hp.arch.gguf_name()),
        ));
    }
    let generation_config =
        json!({ "bos_token_id": bos, "eos_token_id": eos, "pad_token_id": pad });
    Ok(Plan {
        hparams: hp,
        config,
        generation_config,
        tensors,
        tied_embeddings: tied,
    })
}

/// Undoes llama.cpp's `permute(w, n_head)`: it stored each head's rows as interleaved
/// pairs (row 2j + i of the head holds HF row i·half + j, i ∈ {0, 1}); HF's rotate-half
/// wants the two halves apart. `data` is [rows, cols] row-major (cols = 1 for a bias).
pub fn unpermute_rows(data: &[f32], rows: usize, heads: usize) -> Vec<f32> {
    move_rotary_rows(data, rows, heads, false)
}

/// llama.cpp's `permute(w, n_head)` itself (`interleave`), or its inverse: HF row
/// i·half + j of each head ↔ stored row 2j + i.
pub(crate) fn move_rotary_rows(
    data: &[f32],
    rows: usize,
    heads: usize,
    interleave: bool,
) -> Vec<f32> {
    let cols = data.len() / rows;
    let head_rows = rows / heads;
    let half = head_rows / 2;
    let mut out = vec![0f32; data.len()];
    for h in 0..heads {
        for i in 0..2 {
            for j in 0..half {
                let hf = h * head_rows + i * half + j;
                let stored = h * head_rows + 2 * j + i;
                let (dst, src) = if interleave {
                    (stored, hf)
                } else {
                    (hf, stored)
                };
                out[dst * cols..(dst + 1) * cols]
                    .copy_from_slice(&data[src * cols..(src + 1) * cols]);
            }
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn unpermute_undoes_the_llama_cpp_permutation() {
        let (rows, cols, heads) = (24, 3, 3);
        let w: Vec<f32> = (0..rows * cols).map(|v| v as f32).collect();
        assert_eq!(
            unpermute_rows(
                &super::super::export::permute_rows(&w, rows, heads),
                rows,
                heads
            ),
            w
        );
        // One head of 4 rows: stored order is HF rows 0, 2, 1, 3.
        let stored = [0.0, 2.0, 1.0, 3.0];
        assert_eq!(unpermute_rows(&stored, 4, 1), vec![0.0, 1.0, 2.0, 3.0]);
    }

    #[test]
    fn names_map_to_hf() {
        let n = |s: &str| hf_name(Arch::Llama, s);
        assert_eq!(
            n("token_embd.weight").as_deref(),
            Some("model.embed_tokens.weight")
        );
        assert_eq!(
            n("blk.7.attn_output.weight").as_deref(),
            Some("model.layers.7.self_attn.o_proj.weight")
        );
        assert_eq!(
            n("blk.0.ffn_norm.weight").as_deref(),
            Some("model.layers.0.post_attention_layernorm.weight")
        );
        assert_eq!(
            n("blk.0.attn_q.bias").as_deref(),
            Some("model.layers.0.self_attn.q_proj.bias")
        );
        assert_eq!(n("blk.0.attn_q_norm.weight"), None);
        assert_eq!(
            hf_name(Arch::Qwen3, "blk.2.attn_k_norm.weight").as_deref(),
            Some("model.layers.2.self_attn.k_norm.weight")
        );
        assert_eq!(n("rope_freqs.weight"), None);
        assert_eq!(n("blk.x.attn_q.weight"), None);
    }
}
