//! `config.json` of an HF checkpoint, for the Llama family: Llama / SmolLM2, Qwen2 /
//! Qwen2.5 (q/k/v bias) and Qwen3 (per-head q/k RMSNorm, explicit `head_dim`).
//! Anything the decoder does not implement is refused by name.

use super::error::{ModelError, Result};
use serde::Deserialize;
use std::path::Path;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Family {
    Llama,
    Qwen2,
    Qwen3,
}

impl std::fmt::Display for Family {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            Family::Llama => "llama",
            Family::Qwen2 => "qwen2",
            Family::Qwen3 => "qwen3",
        })
    }
}

/// The fields of `config.json` the decoder uses. Unknown fields are ignored (HF configs
/// carry many), but fields that change the architecture are checked.
#[derive(Debug, Clone, Deserialize)]
pub struct RawConfig {
    #[serde(default)]
    pub model_type: Option<String>,
    #[serde(default)]
    pub architectures: Vec<String>,
    pub vocab_size: i64,
    pub hidden_size: i64,
    pub intermediate_size: i64,
    pub num_hidden_layers: i64,
    pub num_attention_heads: i64,
    #[serde(default)]
    pub num_key_value_heads: Option<i64>,
    #[serde(default)]
    pub head_dim: Option<i64>,
    #[serde(default = "default_eps")]
    pub rms_norm_eps: f64,
    #[serde(default = "default_theta")]
    pub rope_theta: f64,
    #[serde(default)]
    pub rope_scaling: Option<serde_json::Value>,
    #[serde(default)]
    pub rope_parameters: Option<serde_json::Value>,
    #[serde(default = "default_max_pos")]
    pub max_position_embeddings: i64,
    #[serde(default)]
    pub tie_word_embeddings: Option<bool>,
    #[serde(default)]
    pub attention_bias: Option<bool>,
    #[serde(default)]
    pub mlp_bias: Option<bool>,
    #[serde(default)]
    pub hidden_act: Option<String>,
    #[serde(default)]
    pub use_sliding_window: Option<bool>,
    #[serde(default)]
    pub sliding_window: Option<serde_json::Value>,
    #[serde(default)]
    pub num_experts: Option<i64>,
    #[serde(default)]
    pub bos_token_id: Option<serde_json::Value>,
    #[serde(default)]
    pub eos_token_id: Option<serde_json::Value>,
    #[serde(default)]
    pub torch_dtype: Option<String>,
    #[serde(default)]
    pub dtype: Option<String>,
}

fn default_eps() -> f64 {
    1e-6
}
fn default_theta() -> f64 {
    10000.0
}
fn default_max_pos() -> i64 {
    4096
}

/// A validated architecture.
#[derive(Debug, Clone, PartialEq)]
pub struct ModelConfig {
    pub family: Family,
    pub vocab_size: i64,
    pub hidden_size: i64,
    pub intermediate_size: i64,
    pub num_layers: i64,
    pub num_heads: i64,
    pub num_kv_heads: i64,
    pub head_dim: i64,
    pub rms_norm_eps: f64,
    pub rope_theta: f64,
    pub max_position_embeddings: i64,
    pub tie_word_embeddings: bool,
    /// Bias on q, k and v projections (Qwen2 always; others when `attention_bias`).
    pub qkv_bias: bool,
    /// Bias on the output projection (`attention_bias` on Llama / Qwen3).
    pub o_bias: bool,
    /// Per-head RMSNorm of q and k (Qwen3).
    pub qk_norm: bool,
    pub eos_token_ids: Vec<i64>,
    pub bos_token_id: Option<i64>,
}

impl ModelConfig {
    pub fn from_file(path: &Path) -> Result<Self> {
        let text = std::fs::read_to_string(path).map_err(|e| ModelError::io(path, e))?;
        Self::from_json(path, &text)
    }

    pub fn from_json(path: &Path, text: &str) -> Result<Self> {
        let raw: RawConfig = serde_json::from_str(text).map_err(|e| ModelError::Config {
            path: path.into(),
            field: "config.json".into(),
            message: e.to_string(),
        })?;
        Self::from_raw(path, raw)
    }

    pub fn from_raw(path: &Path, raw: RawConfig) -> Result<Self> {
        let unsupported = |field: &str, value: String, why: &str| ModelError::Unsupported {
            path: path.into(),
            field: field.into(),
            value,
            why: why.into(),
        };
        let model_type = raw.model_type.clone().unwrap_or_default();
        let family = match model_type.as_str() {
            "llama" => Family::Llama,
            "qwen2" => Family::Qwen2,
            "qwen3" => Family::Qwen3,
            "" => match raw.architectures.first().map(String::as_str) {
                Some("LlamaForCausalLM") => Family::Llama,
                Some("Qwen2ForCausalLM") => Family::Qwen2,
                Some("Qwen3ForCausalLM") => Family::Qwen3,
                other => {
                    return Err(unsupported(
                        "architectures",
                        format!("{other:?}"),
                        "supported: LlamaForCausalLM, Qwen2ForCausalLM, Qwen3ForCausalLM",
                    ));
                }
            },
            other => {
                return Err(unsupported(
                    "model_type",
                    format!("{other:?}"),
                    "supported: \"llama\", \"qwen2\", \"qwen3\"",
                ));
            }
        };
        if raw.num_experts.is_some_and(|n| n > 0) {
            return Err(unsupported(
                "num_experts",
                format!("{:?}", raw.num_experts),
                "mixture-of-experts layers are not implemented",
            ));
        }
        if let Some(scaling) = rope_scaling(&raw) {
            return Err(unsupported(
                "rope_scaling",
                scaling,
                "only plain rotate-half RoPE (`rope_theta`) is implemented",
            ));
        }
        if raw.use_sliding_window == Some(true) {
            return Err(unsupported(
                "use_sliding_window",
                "true".into(),
                "sliding-window attention is not implemented",
            ));
        }
        if family == Family::Llama && raw.sliding_window.as_ref().is_some_and(|v| !v.is_null()) {
            return Err(unsupported(
                "sliding_window",
                raw.sliding_window.as_ref().unwrap().to_string(),
                "sliding-window attention is not implemented",
            ));
        }
        if let Some(act) = &raw.hidden_act
            && act != "silu"
        {
            return Err(unsupported(
                "hidden_act",
                format!("{act:?}"),
                "only \"silu\" (SwiGLU) is implemented",
            ));
        }
        if raw.mlp_bias == Some(true) {
            return Err(unsupported(
                "mlp_bias",
                "true".into(),
                "MLP biases are not implemented",
            ));
        }
        let positive = |field: &str, v: i64| -> Result<i64> {
            if v > 0 {
                Ok(v)
            } else {
                Err(ModelError::Config {
                    path: path.into(),
                    field: field.into(),
                    message: format!("must be positive, got {v}"),
                })
            }
        };
        let num_heads = positive("num_attention_heads", raw.num_attention_heads)?;
        let num_kv_heads = positive(
            "num_key_value_heads",
            raw.num_key_value_heads.unwrap_or(num_heads),
        )?;
        if num_heads % num_kv_heads != 0 {
            return Err(ModelError::Config {
                path: path.into(),
                field: "num_key_value_heads".into(),
                message: format!(
                    "{num_kv_heads} does not divide num_attention_heads = {num_heads}"
                ),
            });
        }
        let hidden_size = positive("hidden_size", raw.hidden_size)?;
        let head_dim = match raw.head_dim {
            Some(d) => positive("head_dim", d)?,
            None if hidden_size % num_heads == 0 => hidden_size / num_heads,
            None => {
                return Err(ModelError::Config {
                    path: path.into(),
                    field: "head_dim".into(),
                    message: format!(
                        "absent, and hidden_size {hidden_size} is not divisible by {num_heads} heads"
                    ),
                });
            }
        };
        let attention_bias = raw.attention_bias.unwrap_or(false);
        Ok(Self {
            family,
            vocab_size: positive("vocab_size", raw.vocab_size)?,
            hidden_size,
            intermediate_size: positive("intermediate_size", raw.intermediate_size)?,
            num_layers: positive("num_hidden_layers", raw.num_hidden_layers)?,
            num_heads,
            num_kv_heads,
            head_dim,
            rms_norm_eps: raw.rms_norm_eps,
            rope_theta: rope_theta(&raw),
            max_position_embeddings: positive(
                "max_position_embeddings",
                raw.max_position_embeddings,
            )?,

            // Llama and Qwen default to untied (`PretrainedConfig` default is True, but
            // the Llama/Qwen configs pass False unless the checkpoint sets it).
            tie_word_embeddings: raw.tie_word_embeddings.unwrap_or(false),
            qkv_bias: family == Family::Qwen2 || attention_bias,
            o_bias: family != Family::Qwen2 && attention_bias,
            qk_norm: family == Family::Qwen3,
            eos_token_ids: token_ids(&raw.eos_token_id),
            bos_token_id: token_ids(&raw.bos_token_id).first().copied(),
        })
    }
}

impl ModelConfig {
    /// Refuses `tokens` positions where the model has fewer (`max_position_embeddings`):
    /// `what` says whose they are (`request 0: prompt of 40 tokens + max_new_tokens
    /// 9000`). Positions past the context are an error, never clamped.
    /// The first field in which two configs describe different models, with both
    /// values: a checkpoint's config against the model it is loaded into (resume, warm
    /// start).
    pub fn first_difference(&self, other: &Self) -> Option<(&'static str, String, String)> {
        macro_rules! first {
            ($($field:ident),*) => {$(
                if self.$field != other.$field {
                    return Some((
                        stringify!($field),
                        format!("{:?}", self.$field),
                        format!("{:?}", other.$field),
                    ));
                }
            )*};
        }
        first!(
            family,
            vocab_size,
            hidden_size,
            intermediate_size,
            num_layers,
            num_heads,
            num_kv_heads,
            head_dim,
            rms_norm_eps,
            rope_theta,
            max_position_embeddings,
            tie_word_embeddings,
            qkv_bias,
            o_bias,
            qk_norm,
            eos_token_ids,
            bos_token_id
        );
        None
    }

    pub fn check_context(&self, what: impl FnOnce() -> String, tokens: u64) -> Result<()> {
        if tokens > self.max_position_embeddings.max(0) as u64 {
            return Err(ModelError::Context {
                what: what(),
                tokens,
                context: self.max_position_embeddings,
            });
        }
        Ok(())
    }
}

/// A `rope_scaling` that changes RoPE, as text; `None` for absent, null, or "default".
fn rope_scaling(raw: &RawConfig) -> Option<String> {
    let kind_of = |v: &serde_json::Value| {
        v.get("rope_type")
            .or_else(|| v.get("type"))
            .and_then(|t| t.as_str())
            .map(str::to_string)
    };
    if let Some(v) = raw.rope_scaling.as_ref().filter(|v| !v.is_null()) {
        return match kind_of(v).as_deref() {
            Some("default") => None,
            _ => Some(v.to_string()),
        };
    }
    let params = raw.rope_parameters.as_ref().filter(|v| !v.is_null())?;
    match kind_of(params).as_deref() {
        None | Some("default") => None,
        Some(_) => Some(params.to_string()),
    }
}

/// `rope_theta`, or transformers 5's `rope_parameters.rope_theta`.
fn rope_theta(raw: &RawConfig) -> f64 {
    raw.rope_parameters
        .as_ref()
        .and_then(|p| p.get("rope_theta"))
        .and_then(|t| t.as_f64())
        .unwrap_or(raw.rope_theta)
}

fn token_ids(v: &Option<serde_json::Value>) -> Vec<i64> {
    match v {
        Some(serde_json::Value::Number(n)) => n.as_i64().into_iter().collect(),
        Some(serde_json::Value::Array(a)) => a.iter().filter_map(|x| x.as_i64()).collect(),
        _ => Vec::new(),
    }
}
