//! Tensors to safetensors bytes, and one safetensors file written from named tensors:
//! the low-level writer that full checkpoints (`checkpoint`) and LoRA adapters (`lora`)
//! share, so neither depends on the other.

use super::error::{ModelError, Result};
use safetensors::{Dtype, View};
use std::{borrow::Cow, collections::HashMap, path::Path};
use tch::{Kind, Tensor};

/// One tensor as safetensors bytes (its dtype, shape and little-endian data).
pub(crate) struct Bytes {
    pub(super) dtype: Dtype,
    pub(super) shape: Vec<usize>,
    pub(super) data: Vec<u8>,
}

impl View for &Bytes {
    fn dtype(&self) -> Dtype {
        self.dtype
    }
    fn shape(&self) -> &[usize] {
        &self.shape
    }
    fn data(&self) -> Cow<'_, [u8]> {
        Cow::Borrowed(&self.data)
    }
    fn data_len(&self) -> usize {
        self.data.len()
    }
}

pub(crate) fn to_bytes(name: &str, t: &Tensor) -> Result<Bytes> {
    let t = t.to_device(tch::Device::Cpu).contiguous();
    let dtype = dtype_of(t.kind()).ok_or_else(|| ModelError::Other {
        what: name.into(),
        message: format!("cannot save dtype {:?}", t.kind()),
    })?;
    let numel = t.numel();
    let mut data = vec![0u8; numel * t.kind().elt_size_in_bytes()];
    t.f_copy_data_u8(&mut data, numel)?;
    Ok(Bytes {
        dtype,
        shape: t.size().iter().map(|&d| d as usize).collect(),
        data,
    })
}

/// Writes `tensors` (in the given order) to one safetensors file at `path` (plain write:
/// the caller stages the folder it is in).
pub(crate) fn write_tensors(path: &Path, tensors: &[(String, Tensor)]) -> Result<()> {
    let mut bytes = Vec::with_capacity(tensors.len());
    for (name, t) in tensors {
        bytes.push((name.as_str(), to_bytes(name, t)?));
    }
    let metadata: Option<HashMap<String, String>> =
        Some([("format".to_string(), "pt".to_string())].into());
    let items = bytes.iter().map(|(n, b)| (*n, b));
    safetensors::serialize_to_file(items, metadata, path).map_err(|e| ModelError::io(path, e))
}

/// The safetensors dtype of a tensor kind drmas writes.
fn dtype_of(kind: Kind) -> Option<Dtype> {
    Some(match kind {
        Kind::Float => Dtype::F32,
        Kind::Half => Dtype::F16,
        Kind::BFloat16 => Dtype::BF16,
        Kind::Double => Dtype::F64,
        Kind::Int64 => Dtype::I64,
        _ => return None,
    })
}
