//! Loading a checkpoint folder onto a device.

use super::{checkpoint::load_weights, config::ModelConfig, decoder::Decoder, error::Result};
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

/// Reads `config.json`, builds the decoder on `device` in `kind` (default per device),
/// and loads the weights.
pub fn load_pretrained(dir: &Path, device: Device, kind: Option<Kind>) -> Result<Decoder> {
    let config = ModelConfig::from_file(&dir.join("config.json"))?;
    let mut model = Decoder::new(config, device, kind.unwrap_or_else(|| default_kind(device)));
    load_weights(&mut model, dir)?;
    Ok(model)
}
