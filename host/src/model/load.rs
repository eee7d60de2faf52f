//! Loading a checkpoint folder onto a device: its sizes are checked against the
//! tensors' headers and the machine's memory before anything is allocated.

use super::{
    checkpoint::load_weights,
    config::ModelConfig,
    decoder::Decoder,
    error::Result,
    memory::{check_fits, estimate_load},
    shapes::CheckpointShapes,
};
use std::path::Path;
use tch::{Device, Kind};

/// The default dtype: float32 on the CPU, bfloat16 on CUDA.
pub fn default_kind(device: Device) -> Kind {
    if device.is_cuda() {
        Kind::BFloat16
    } else {
        Kind::Float
    }
}

/// Reads `config.json`, checks its sizes against the checkpoint's tensor shapes and the
/// estimate of the weights and RoPE tables against the device's memory, then builds the
/// decoder on `device` in `kind` (default per device) and loads the weights (which
/// must all be finite).
pub fn load_pretrained(dir: &Path, device: Device, kind: Option<Kind>) -> Result<Decoder> {
    let config = checked_config(dir)?;
    let kind = kind.unwrap_or_else(|| default_kind(device));
    check_fits(
        &format!("loading {} in {kind:?} on {device:?}", dir.display()),
        &estimate_load(&config, kind),
        device,
    )?;
    let mut model = Decoder::new(config, device, kind);
    load_weights(&mut model, dir)?;
    Ok(model)
}

/// `config.json` of the checkpoint in `dir`, its sizes checked against the tensor
/// shapes in the safetensors headers (the data is not read).
pub fn checked_config(dir: &Path) -> Result<ModelConfig> {
    let config_path = dir.join("config.json");
    let config = ModelConfig::from_file(&config_path)?;
    CheckpointShapes::read(dir)?.check(&config_path, &config)?;
    Ok(config)
}

/// The context length of the checkpoint in `dir`: `max_position_embeddings` of its
/// `config.json` (positions past it are refused, never clamped).
pub fn context_length(dir: &Path) -> Result<i64> {
    Ok(ModelConfig::from_file(&dir.join("config.json"))?.max_position_embeddings)
}
