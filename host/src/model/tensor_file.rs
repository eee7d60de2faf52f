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

/// A tensor whose bytes are taken when the writer reaches it, so a file of many large
/// tensors (an optimizer state) never holds a second copy of all of them in memory.
struct Lazy<'a> {
    tensor: &'a Tensor,
    dtype: Dtype,
    shape: Vec<usize>,
}

impl View for &Lazy<'_> {
    fn dtype(&self) -> Dtype {
        self.dtype
    }
    fn shape(&self) -> &[usize] {
        &self.shape
    }
    fn data(&self) -> Cow<'_, [u8]> {
        let t = self.tensor.to_device(tch::Device::Cpu).contiguous();
        let numel = t.numel();
        let mut data = vec![0u8; numel * t.kind().elt_size_in_bytes()];
        t.f_copy_data_u8(&mut data, numel)
            .expect("a tensor's bytes copy to host memory");
        Cow::Owned(data)
    }
    fn data_len(&self) -> usize {
        self.tensor.numel() * self.tensor.kind().elt_size_in_bytes()
    }
}

/// Writes `tensors` (in the given order) to one safetensors file at `path` with one
/// `(key, value)` as its header's metadata, each tensor's bytes taken as it is written
/// (plain write: the caller stages the folder it is in).
///
/// One entry, not several, and not beside `format = pt`: safetensors keeps the metadata
/// in a `HashMap`, whose order differs from process to process, and a run's checkpoint
/// must be the same bytes whenever the run is (the determinism tests compare files).
pub fn write_tensors_with(
    path: &Path,
    tensors: &[(String, Tensor)],
    metadata: (&str, &str),
) -> Result<()> {
    let mut views = Vec::with_capacity(tensors.len());
    for (name, t) in tensors {
        let dtype = dtype_of(t.kind()).ok_or_else(|| ModelError::Other {
            what: name.clone(),
            message: format!("cannot save dtype {:?}", t.kind()),
        })?;
        let shape = t.size().iter().map(|&d| d as usize).collect();
        views.push((
            name.as_str(),
            Lazy {
                tensor: t,
                dtype,
                shape,
            },
        ));
    }
    let meta: HashMap<String, String> = [(metadata.0.to_string(), metadata.1.to_string())].into();
    let items = views.iter().map(|(n, v)| (*n, v));
    safetensors::serialize_to_file(items, Some(meta), path).map_err(|e| ModelError::io(path, e))
}

/// The `__metadata__` of a safetensors file's header (empty when it has none), read
/// without its tensors.
pub fn read_metadata(path: &Path) -> std::io::Result<HashMap<String, String>> {
    use std::io::Read;
    let bad = |m: String| std::io::Error::new(std::io::ErrorKind::InvalidData, m);
    let mut file = std::fs::File::open(path)?;
    let mut len = [0u8; 8];
    file.read_exact(&mut len)?;
    let len = u64::from_le_bytes(len);
    // safetensors' own bound on a header.
    if len > 100_000_000 {
        return Err(bad(format!(
            "a header of {len} bytes is not a safetensors header"
        )));
    }
    let mut header = vec![0u8; len as usize];
    file.read_exact(&mut header)?;
    let header: serde_json::Value = serde_json::from_slice(&header)
        .map_err(|e| bad(format!("the safetensors header does not parse: {e}")))?;
    Ok(header
        .get("__metadata__")
        .and_then(|m| m.as_object())
        .map(|m| {
            m.iter()
                .filter_map(|(k, v)| Some((k.clone(), v.as_str()?.to_string())))
                .collect()
        })
        .unwrap_or_default())
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
