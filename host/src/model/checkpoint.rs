//! HF checkpoints: `model.safetensors` or a sharded `model.safetensors.index.json`,
//! memory-mapped one shard at a time; saved back in the same layout so transformers
//! loads what drmas wrote.

use super::{
    decoder::Decoder,
    error::{ModelError, Result},
    finite::all_finite,
    tensor_file::{Bytes, kind_of, to_bytes},
};
use safetensors::SafeTensors;
use std::{
    collections::{BTreeMap, BTreeSet, HashMap},
    path::{Path, PathBuf},
};
use tch::{Kind, Tensor};

/// Shards above this size are split, as transformers does by default.
const MAX_SHARD_BYTES: usize = 5 << 30;

/// The safetensors files of the checkpoint in `dir`.
pub fn weight_files(dir: &Path) -> Result<Vec<PathBuf>> {
    let index = dir.join("model.safetensors.index.json");
    if index.exists() {
        let text = std::fs::read_to_string(&index).map_err(|e| ModelError::io(&index, e))?;
        let json: serde_json::Value =
            serde_json::from_str(&text).map_err(|e| ModelError::io(&index, e))?;
        let map = json
            .get("weight_map")
            .and_then(|m| m.as_object())
            .ok_or_else(|| ModelError::Config {
                path: index.clone(),
                field: "weight_map".into(),
                message: "missing or not an object".into(),
            })?;
        let files: BTreeSet<&str> = map.values().filter_map(|v| v.as_str()).collect();
        return Ok(files.into_iter().map(|f| dir.join(f)).collect());
    }
    let single = dir.join("model.safetensors");
    if single.exists() {
        return Ok(vec![single]);
    }
    Err(ModelError::io(
        dir,
        "no model.safetensors or model.safetensors.index.json",
    ))
}

/// Loads the weights of the checkpoint in `dir` into `decoder`, converting dtypes.
/// Every weight the decoder needs must be present; weights it does not know are an
/// error (they mean the checkpoint is another architecture), except RoPE buffers and a
/// duplicate `lm_head` of tied embeddings. Every weight must be finite after conversion
/// (one pass over each tensor where it lives; a float32 value past float16's range
/// becomes infinite in float16).
pub fn load_weights(decoder: &mut Decoder, dir: &Path) -> Result<()> {
    let vars = decoder.vs.variables();
    let tied = decoder.config.tie_word_embeddings;
    let mut loaded: BTreeSet<String> = BTreeSet::new();
    let mut unexpected: Vec<String> = Vec::new();
    let mut scan_seconds = 0.0;
    let _guard = tch::no_grad_guard();
    for file in weight_files(dir)? {
        let handle = std::fs::File::open(&file).map_err(|e| ModelError::io(&file, e))?;
        // SAFETY: the file is only read; a concurrent writer would be a user error that
        // at worst gives wrong weights, as with any reader.
        let mmap = unsafe { memmap2::Mmap::map(&handle) }.map_err(|e| ModelError::io(&file, e))?;
        let st = SafeTensors::deserialize(&mmap).map_err(|e| ModelError::io(&file, e))?;
        // In name order, so the first problem reported is the same on every run.
        let mut tensors = st.tensors();
        tensors.sort_by(|a, b| a.0.cmp(&b.0));
        for (name, view) in tensors {
            if name.ends_with("rotary_emb.inv_freq") || (tied && name == "lm_head.weight") {
                continue;
            }
            let Some(var) = vars.get(&name) else {
                unexpected.push(name);
                continue;
            };
            let tensor_err = |message: String| ModelError::Tensor {
                path: file.clone(),
                name: name.clone(),
                message,
            };
            let shape: Vec<i64> = view.shape().iter().map(|&d| d as i64).collect();
            if shape != var.size() {
                return Err(tensor_err(format!(
                    "shape {shape:?}, the config implies {:?}",
                    var.size()
                )));
            }
            let kind = kind_of(view.dtype())
                .ok_or_else(|| tensor_err(format!("unsupported dtype {:?}", view.dtype())))?;
            let src = Tensor::f_from_data_size(view.data(), &shape, kind)?;
            var.shallow_clone().f_copy_(&src)?;
            let started = std::time::Instant::now();
            let finite = all_finite(var)?;
            scan_seconds += started.elapsed().as_secs_f64();
            if !finite {
                return Err(tensor_err(non_finite_text(var, kind)?));
            }
            loaded.insert(name);
        }
    }
    tracing::debug!(
        dir = %dir.display(),
        seconds = scan_seconds,
        "weights checked for NaN and infinite values"
    );
    if let Some(name) = vars.keys().filter(|k| !loaded.contains(*k)).min() {
        return Err(ModelError::MissingTensor {
            dir: dir.into(),
            name: name.clone(),
            family: decoder.config.family.to_string(),
        });
    }
    if !unexpected.is_empty() {
        unexpected.sort();
        let shown: Vec<&str> = unexpected.iter().take(3).map(String::as_str).collect();
        return Err(ModelError::Tensor {
            path: dir.into(),
            name: shown.join("`, `"),
            message: format!(
                "{} weight(s) the {} decoder does not have: is config.json for this checkpoint?",
                unexpected.len(),
                decoder.config.family
            ),
        });
    }
    Ok(())
}

/// `holds 2 NaN and 1 infinite value(s) of 6144`, for a tensor that is not finite.
fn non_finite_text(t: &Tensor, source: Kind) -> Result<String> {
    let count = |m: Tensor| -> Result<i64> { Ok(m.f_sum(Kind::Int64)?.f_int64_value(&[])?) };
    let nan = count(t.f_isnan()?)?;
    let inf = count(t.f_isinf()?)?;
    let converted = if t.kind() != source {
        format!(" after conversion from {source:?} to {:?}", t.kind())
    } else {
        String::new()
    };
    Ok(format!(
        "holds {nan} NaN and {inf} infinite value(s) of {}{converted}",
        t.numel()
    ))
}

/// Writes the decoder's weights to `out` as an HF checkpoint, with the non-weight files
/// (config, tokenizer, generation config) copied from `source`. Staged beside `out` and
/// swapped in whole ([`crate::output::StagedDir`]), so a crash leaves the old folder or
/// the new one.
pub fn save_checkpoint(decoder: &Decoder, source: &Path, out: &Path) -> Result<()> {
    save_checkpoint_sharded(decoder, source, out, MAX_SHARD_BYTES)
}

/// [`save_checkpoint`] with shards of at most `max_shard_bytes` (a single tensor larger
/// than that gets a shard alone).
pub fn save_checkpoint_sharded(
    decoder: &Decoder,
    source: &Path,
    out: &Path,
    max_shard_bytes: usize,
) -> Result<()> {
    let staged = crate::output::StagedDir::new(out).map_err(|e| ModelError::io(out, e))?;
    let tmp = staged.path();
    for entry in std::fs::read_dir(source).map_err(|e| ModelError::io(source, e))? {
        let path = entry.map_err(|e| ModelError::io(source, e))?.path();
        let name = path
            .file_name()
            .and_then(|n| n.to_str())
            .unwrap_or_default();
        if path.is_file()
            && (name.ends_with(".json") || name.ends_with(".jinja") || name == "tokenizer.model")
            && !name.starts_with("model.safetensors")
        {
            std::fs::copy(&path, tmp.join(name)).map_err(|e| ModelError::io(&path, e))?;
        }
    }
    write_weights(decoder, tmp, max_shard_bytes)?;
    mark_as_made(tmp)?;
    staged.commit().map_err(|e| ModelError::io(out, e))
}

fn write_weights(decoder: &Decoder, dir: &Path, max_shard_bytes: usize) -> Result<()> {
    let vars: BTreeMap<String, Tensor> = decoder.vs.variables().into_iter().collect();
    let mut tensors: Vec<(String, Bytes)> = Vec::with_capacity(vars.len());
    for (name, t) in &vars {
        tensors.push((name.clone(), to_bytes(name, t)?));
    }
    let metadata: Option<HashMap<String, String>> =
        Some([("format".to_string(), "pt".to_string())].into());
    let total: usize = tensors.iter().map(|(_, b)| b.data.len()).sum();
    // Group into shards of at most MAX_SHARD_BYTES, in name order.
    let mut shards: Vec<Vec<&(String, Bytes)>> = vec![Vec::new()];
    let mut size = 0;
    for t in &tensors {
        if size + t.1.data.len() > max_shard_bytes && !shards.last().unwrap().is_empty() {
            shards.push(Vec::new());
            size = 0;
        }
        size += t.1.data.len();
        shards.last_mut().unwrap().push(t);
    }
    let write = |path: &Path, shard: &[&(String, Bytes)]| -> Result<()> {
        let items = shard.iter().map(|(n, b)| (n.as_str(), b));
        safetensors::serialize_to_file(items, metadata.clone(), path)
            .map_err(|e| ModelError::io(path, e))
    };
    if shards.len() == 1 {
        return write(&dir.join("model.safetensors"), &shards[0]);
    }
    let n = shards.len();
    let mut weight_map = serde_json::Map::new();
    for (i, shard) in shards.iter().enumerate() {
        let file = format!("model-{:05}-of-{n:05}.safetensors", i + 1);
        write(&dir.join(&file), shard)?;
        for (name, _) in shard {
            weight_map.insert(name.clone(), serde_json::Value::String(file.clone()));
        }
    }
    let index =
        serde_json::json!({ "metadata": { "total_size": total }, "weight_map": weight_map });
    let path = dir.join("model.safetensors.index.json");
    std::fs::write(&path, serde_json::to_string_pretty(&index).expect("json"))
        .map_err(|e| ModelError::io(&path, e))
}

/// The hidden file that marks a model folder drmas wrote (an import or a saved
/// checkpoint): only such a folder may be replaced by `drmas model import --force`.
pub const MADE_BY_DRMAS: &str = ".drmas-model";

/// Marks `dir` as a model folder drmas wrote (see [`MADE_BY_DRMAS`]).
pub fn mark_as_made(dir: &Path) -> Result<()> {
    let path = dir.join(MADE_BY_DRMAS);
    let text = format!("written by drmas {}\n", env!("CARGO_PKG_VERSION"));
    crate::output::write_atomic(&path, text.as_bytes()).map_err(|e| ModelError::io(&path, e))
}

/// Whether `dir` is a model folder drmas wrote.
pub fn is_made_by_drmas(dir: &Path) -> bool {
    dir.join(MADE_BY_DRMAS).is_file()
}
