//! A checkpoint's tensor shapes, read from its safetensors headers without the data,
//! and the sizes in `config.json` checked against them before anything is allocated: a
//! config that says 100000 layers or a vocabulary of 2^40 must fail with both numbers,
//! not grow memory until the kernel steps in.

use super::{
    checkpoint::weight_files,
    config::{Family, ModelConfig},
    error::{ModelError, Result},
};
use std::{
    collections::{BTreeMap, BTreeSet},
    io::Read,
    path::{Path, PathBuf},
};

/// safetensors refuses headers above 100 MB; so do we, before reading one.
const MAX_HEADER_BYTES: u64 = 100 << 20;

/// Every tensor of a checkpoint: its shape and the file that holds it.
#[derive(Debug, Clone, Default)]
pub struct CheckpointShapes {
    pub tensors: BTreeMap<String, (Vec<u64>, PathBuf)>,
    /// What to call the files together in messages: `model.safetensors`, or the shards
    /// of `model.safetensors.index.json`.
    pub files: String,
}

impl CheckpointShapes {
    /// Reads the header of every safetensors file of the checkpoint in `dir`.
    pub fn read(dir: &Path) -> Result<Self> {
        let files = weight_files(dir)?;
        let mut tensors = BTreeMap::new();
        for file in &files {
            for (name, shape) in read_header(file)? {
                tensors.insert(name, (shape, file.clone()));
            }
        }
        let files = match files.as_slice() {
            [one] => file_name(one),
            _ => "the shards of model.safetensors.index.json".into(),
        };
        Ok(Self { tensors, files })
    }

    /// The indices `i` of `model.layers.{i}.…` tensors.
    fn layers(&self) -> BTreeSet<u64> {
        self.tensors
            .keys()
            .filter_map(|n| {
                n.strip_prefix("model.layers.")?
                    .split('.')
                    .next()?
                    .parse()
                    .ok()
            })
            .collect()
    }

    /// Checks the sizes of `config` (read from `config_path`) against the tensors: layer
    /// count, vocabulary and hidden size (embeddings), intermediate size (MLP), heads ×
    /// head dim (q and k projections), head dim (Qwen3's q norm).
    pub fn check(&self, config_path: &Path, config: &ModelConfig) -> Result<()> {
        let mismatch = |key: &str, value: String, found: String| ModelError::SizeMismatch {
            config: config_path.into(),
            key: key.into(),
            value,
            found,
        };
        let layers = self.layers();
        // Distinct indices, n of them, from 0 to n − 1: exactly 0..n (the config's count
        // is never materialized: it may be 2^40).
        let n = config.num_layers.max(0) as u64;
        let exact = layers.len() as u64 == n
            && (n == 0 || (layers.first() == Some(&0) && layers.last() == Some(&(n - 1))));
        if !exact {
            let verb = if self.files.starts_with("the shards") {
                "hold"
            } else {
                "holds"
            };
            return Err(mismatch(
                "num_hidden_layers",
                config.num_layers.to_string(),
                format!("{} {verb} {}", self.files, describe_layers(&layers)),
            ));
        }
        let c = config;
        let heads = |n: i64| format!("{n} × {} = {}", c.head_dim, n * c.head_dim);
        // (tensor, axis, key, value as written, value the axis must have)
        let mut checks: Vec<(&str, usize, &str, String, i64)> = vec![
            (
                "model.embed_tokens.weight",
                0,
                "vocab_size",
                c.vocab_size.to_string(),
                c.vocab_size,
            ),
            (
                "model.embed_tokens.weight",
                1,
                "hidden_size",
                c.hidden_size.to_string(),
                c.hidden_size,
            ),
        ];
        if c.num_layers > 0 {
            checks.extend([
                (
                    "model.layers.0.mlp.gate_proj.weight",
                    0,
                    "intermediate_size",
                    c.intermediate_size.to_string(),
                    c.intermediate_size,
                ),
                (
                    "model.layers.0.self_attn.q_proj.weight",
                    0,
                    "num_attention_heads × head_dim",
                    heads(c.num_heads),
                    c.num_heads * c.head_dim,
                ),
                (
                    "model.layers.0.self_attn.k_proj.weight",
                    0,
                    "num_key_value_heads × head_dim",
                    heads(c.num_kv_heads),
                    c.num_kv_heads * c.head_dim,
                ),
            ]);
            if c.family == Family::Qwen3 {
                checks.push((
                    "model.layers.0.self_attn.q_norm.weight",
                    0,
                    "head_dim",
                    c.head_dim.to_string(),
                    c.head_dim,
                ));
            }
        }
        for (name, axis, key, value, want) in checks {
            let Some((shape, file)) = self.tensors.get(name) else {
                return Err(ModelError::MissingTensor {
                    dir: config_path.parent().unwrap_or(Path::new("")).into(),
                    name: name.into(),
                    family: c.family.to_string(),
                });
            };
            if shape.get(axis).is_none_or(|&d| d as i64 != want) {
                return Err(mismatch(
                    key,
                    value,
                    format!("{} has {name} of shape {shape:?}", file_name(file)),
                ));
            }
        }
        Ok(())
    }
}

/// `30 layers (0..=29)`, or the indices themselves when they have gaps.
fn describe_layers(layers: &BTreeSet<u64>) -> String {
    match (layers.first(), layers.last()) {
        (None, _) | (_, None) => "no layers".into(),
        (Some(0), Some(0)) => "1 layer (0)".into(),
        (Some(0), Some(&last)) if layers.len() as u64 == last + 1 => {
            format!("{} layers (0..={last})", layers.len())
        }
        _ => {
            let shown: Vec<String> = layers.iter().take(8).map(u64::to_string).collect();
            let more = if layers.len() > 8 { ", …" } else { "" };
            format!("layers {}{more}", shown.join(", "))
        }
    }
}

fn file_name(path: &Path) -> String {
    path.file_name().map_or_else(
        || path.display().to_string(),
        |n| n.to_string_lossy().into(),
    )
}

/// The tensor names and shapes in the header of the safetensors file `path`; the data
/// is not read.
pub fn read_header(path: &Path) -> Result<Vec<(String, Vec<u64>)>> {
    let err = |message: String| ModelError::io(path, message);
    let mut file = std::fs::File::open(path).map_err(|e| ModelError::io(path, e))?;
    let mut len = [0u8; 8];
    file.read_exact(&mut len)
        .map_err(|e| err(format!("not a safetensors file: {e}")))?;
    let len = u64::from_le_bytes(len);
    if len > MAX_HEADER_BYTES {
        return Err(err(format!(
            "not a safetensors file: a header of {len} bytes (at most {MAX_HEADER_BYTES})"
        )));
    }
    let mut header = vec![0u8; len as usize];
    file.read_exact(&mut header)
        .map_err(|e| err(format!("not a safetensors file: truncated header: {e}")))?;
    let json: serde_json::Map<String, serde_json::Value> = serde_json::from_slice(&header)
        .map_err(|e| err(format!("not a safetensors file: header: {e}")))?;
    let mut out = Vec::with_capacity(json.len());
    for (name, info) in json {
        if name == "__metadata__" {
            continue;
        }
        let shape = info
            .get("shape")
            .and_then(|s| s.as_array())
            .and_then(|dims| dims.iter().map(|d| d.as_u64()).collect::<Option<Vec<_>>>())
            .ok_or_else(|| err(format!("tensor `{name}`: no shape in the header")))?;
        out.push((name, shape));
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::describe_layers;

    #[test]
    fn layer_sets_are_described_briefly() {
        assert_eq!(describe_layers(&(0..30).collect()), "30 layers (0..=29)");
        assert_eq!(describe_layers(&[0].into()), "1 layer (0)");
        assert_eq!(describe_layers(&[0, 1, 3].into()), "layers 0, 1, 3");
        assert_eq!(describe_layers(&[].into()), "no layers");
    }
}
