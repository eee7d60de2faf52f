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

/// The tensor kind of a safetensors dtype drmas reads.
pub(super) fn kind_of(dtype: Dtype) -> Option<Kind> {
    Some(match dtype {
        Dtype::F32 => Kind::Float,
        Dtype::F16 => Kind::Half,
        Dtype::BF16 => Kind::BFloat16,
        Dtype::F64 => Kind::Double,
        Dtype::I64 => Kind::Int64,
        _ => return None,
    })
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

/// One tensor a [`StreamedTensors`] file will hold: its name, dtype and shape.
#[derive(Debug, Clone, PartialEq)]
pub struct TensorEntry {
    pub name: String,
    pub kind: Kind,
    pub shape: Vec<i64>,
}

impl TensorEntry {
    fn bytes(&self) -> u64 {
        self.shape.iter().map(|&d| d.max(0) as u64).product::<u64>()
            * self.kind.elt_size_in_bytes() as u64
    }
}

/// A safetensors file written tensor by tensor: the header (every name, dtype, shape and
/// offset) first, then each tensor's bytes in the entries' order as they come, so a state
/// gathered one piece at a time is never whole in memory. Plain write, synced by
/// [`Self::finish`]: the caller stages the folder it is in.
pub struct StreamedTensors {
    file: std::io::BufWriter<std::fs::File>,
    path: std::path::PathBuf,
    entries: Vec<TensorEntry>,
    next: usize,
}

impl StreamedTensors {
    /// Creates `path` with the header of `entries` and one `(key, value)` of metadata.
    pub fn create(path: &Path, entries: Vec<TensorEntry>, metadata: (&str, &str)) -> Result<Self> {
        use std::io::Write;
        let mut header = serde_json::Map::new();
        header.insert(
            "__metadata__".into(),
            serde_json::json!({ metadata.0: metadata.1 }),
        );
        let mut offset = 0u64;
        for e in &entries {
            let dtype = dtype_of(e.kind).ok_or_else(|| ModelError::Other {
                what: e.name.clone(),
                message: format!("cannot save dtype {:?}", e.kind),
            })?;
            let end = offset + e.bytes();
            header.insert(
                e.name.clone(),
                serde_json::json!({
                    "dtype": dtype,
                    "shape": e.shape,
                    "data_offsets": [offset, end],
                }),
            );
            offset = end;
        }
        let mut text = serde_json::to_vec(&header).expect("a header serializes");
        // The data starts 8-aligned, as safetensors writes it.
        text.resize(text.len().div_ceil(8) * 8, b' ');
        let io = |e| ModelError::io(path, e);
        let mut file = std::io::BufWriter::new(std::fs::File::create(path).map_err(io)?);
        file.write_all(&(text.len() as u64).to_le_bytes())
            .map_err(io)?;
        file.write_all(&text).map_err(io)?;
        Ok(StreamedTensors {
            file,
            path: path.to_path_buf(),
            entries,
            next: 0,
        })
    }

    /// Appends the next entry's bytes: `t` must have its dtype and as many elements.
    pub fn append(&mut self, t: &Tensor) -> Result<()> {
        use std::io::Write;
        let entry = self
            .entries
            .get(self.next)
            .ok_or_else(|| ModelError::Other {
                what: self.path.display().to_string(),
                message: format!(
                    "a tensor beyond the {} the header names",
                    self.entries.len()
                ),
            })?;
        let bytes = to_bytes(&entry.name, t)?;
        if t.kind() != entry.kind || bytes.data.len() as u64 != entry.bytes() {
            return Err(ModelError::Other {
                what: entry.name.clone(),
                message: format!(
                    "{:?} of {} bytes where the header says {:?} of {}",
                    t.kind(),
                    bytes.data.len(),
                    entry.kind,
                    entry.bytes()
                ),
            });
        }
        self.file
            .write_all(&bytes.data)
            .map_err(|e| ModelError::io(&self.path, e))?;
        self.next += 1;
        Ok(())
    }

    /// Flushes and syncs the file; every entry must have been appended.
    pub fn finish(self) -> Result<()> {
        if self.next != self.entries.len() {
            return Err(ModelError::Other {
                what: self.path.display().to_string(),
                message: format!(
                    "{} of the {} tensors its header names were written",
                    self.next,
                    self.entries.len()
                ),
            });
        }
        let file = self
            .file
            .into_inner()
            .map_err(|e| ModelError::io(&self.path, e.into_error()))?;
        file.sync_all().map_err(|e| ModelError::io(&self.path, e))
    }
}

/// A safetensors file's tensors on the CPU as views of the file mapped into memory: read
/// where they are used, so a process that needs a slice of each (its shard) never holds
/// the file whole in its own memory.
pub struct MappedTensors {
    // Before the map: dropped first, as they point into it.
    tensors: Vec<(String, Tensor)>,
    _map: memmap2::Mmap,
}

impl MappedTensors {
    pub fn open(path: &Path) -> Result<MappedTensors> {
        let file = std::fs::File::open(path).map_err(|e| ModelError::io(path, e))?;
        // SAFETY: the file is only read; a concurrent writer would be a user error that
        // at worst gives wrong values, as with any reader.
        let map = unsafe { memmap2::Mmap::map(&file) }.map_err(|e| ModelError::io(path, e))?;
        let st =
            safetensors::SafeTensors::deserialize(&map).map_err(|e| ModelError::io(path, e))?;
        let mut tensors = Vec::new();
        for (name, view) in st.tensors() {
            let kind = kind_of(view.dtype()).ok_or_else(|| ModelError::Tensor {
                path: path.to_path_buf(),
                name: name.clone(),
                message: format!("unsupported dtype {:?}", view.dtype()),
            })?;
            let shape: Vec<i64> = view.shape().iter().map(|&d| d as i64).collect();
            let data = view.data();
            let t = if (data.as_ptr() as usize).is_multiple_of(kind.elt_size_in_bytes()) {
                // SAFETY: `data` lies in the map, which outlives the tensor (field order),
                // holds `shape`'s elements of `kind` (safetensors checked the offsets)
                // and is aligned for them; the tensor is only read.
                unsafe { Tensor::f_from_blob(data.as_ptr(), &shape, &[], kind, tch::Device::Cpu)? }
            } else {
                Tensor::f_from_data_size(data, &shape, kind)?
            };
            tensors.push((name, t));
        }
        tensors.sort_by(|a, b| a.0.cmp(&b.0));
        Ok(MappedTensors { tensors, _map: map })
    }

    /// The tensors, name-sorted; views of the map: copy what must outlive it.
    pub fn tensors(&self) -> &[(String, Tensor)] {
        &self.tensors
    }
}
