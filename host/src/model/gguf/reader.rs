//! The GGUF container (versions 2 and 3, little-endian): header, typed metadata, tensor
//! infos, and the tensor data, memory-mapped. Nothing is dequantized here.
//!
//! Layout: magic `GGUF`, `u32` version, `u64` tensor count, `u64` metadata count; the
//! metadata as (string key, `u32` type, value); the tensor infos as (string name, `u32`
//! dims, `u64` × dims sizes, innermost first, `u32` ggml type, `u64` offset); then the
//! data, starting at the next multiple of `general.alignment` (default 32), each
//! tensor's offset relative to that start. Strings are a `u64` length and UTF-8 bytes.

use super::super::error::{ModelError, Result};
use super::quant::GgmlType;
use std::{
    collections::BTreeMap,
    path::{Path, PathBuf},
};

const MAGIC: &[u8; 4] = b"GGUF";
const DEFAULT_ALIGNMENT: u64 = 32;
/// Sanity bound on counts read from the file, so a corrupt header fails cleanly instead
/// of asking for a huge allocation.
const MAX_COUNT: u64 = 1 << 28;
/// ggml's GGML_MAX_DIMS.
const MAX_DIMS: u32 = 4;

/// A metadata value.
#[derive(Debug, Clone, PartialEq)]
pub enum Value {
    U8(u8),
    I8(i8),
    U16(u16),
    I16(i16),
    U32(u32),
    I32(i32),
    U64(u64),
    I64(i64),
    F32(f32),
    F64(f64),
    Bool(bool),
    String(String),
    Array(Vec<Value>),
}

impl Value {
    /// An integer of any width, if it is one (and fits).
    pub fn as_i64(&self) -> Option<i64> {
        Some(match *self {
            Value::U8(v) => v.into(),
            Value::I8(v) => v.into(),
            Value::U16(v) => v.into(),
            Value::I16(v) => v.into(),
            Value::U32(v) => v.into(),
            Value::I32(v) => v.into(),
            Value::U64(v) => i64::try_from(v).ok()?,
            Value::I64(v) => v,
            _ => return None,
        })
    }

    /// A float, or an integer read as one.
    pub fn as_f64(&self) -> Option<f64> {
        match *self {
            Value::F32(v) => Some(v.into()),
            Value::F64(v) => Some(v),
            _ => self.as_i64().map(|v| v as f64),
        }
    }

    pub fn as_bool(&self) -> Option<bool> {
        match *self {
            Value::Bool(b) => Some(b),
            _ => None,
        }
    }

    pub fn as_str(&self) -> Option<&str> {
        match self {
            Value::String(s) => Some(s),
            _ => None,
        }
    }

    pub fn as_array(&self) -> Option<&[Value]> {
        match self {
            Value::Array(a) => Some(a),
            _ => None,
        }
    }

    /// A short description for error messages.
    pub fn describe(&self) -> String {
        match self {
            Value::String(s) => format!("{s:?}"),
            Value::Array(a) => format!("an array of {}", a.len()),
            other => match other.as_f64() {
                Some(v) => v.to_string(),
                None => format!("{other:?}"),
            },
        }
    }
}

/// One tensor's entry in the file.
#[derive(Debug, Clone)]
pub struct TensorInfo {
    pub name: String,
    /// Sizes in ggml order: innermost (contiguous) first, the reverse of torch's shape.
    pub dims: Vec<u64>,
    /// The raw ggml type id.
    pub type_id: u32,
    /// Offset of the data from the start of the data section.
    pub offset: u64,
}

impl TensorInfo {
    pub fn elements(&self) -> u64 {
        self.dims.iter().product()
    }

    /// The torch shape: the ggml sizes reversed.
    pub fn torch_shape(&self) -> Vec<usize> {
        self.dims.iter().rev().map(|&d| d as usize).collect()
    }
}

/// A memory-mapped GGUF file with its metadata and tensor infos parsed.
pub struct GgufFile {
    pub path: PathBuf,
    pub version: u32,
    pub metadata: BTreeMap<String, Value>,
    pub tensors: Vec<TensorInfo>,
    pub alignment: u64,
    data_start: u64,
    mmap: memmap2::Mmap,
}

struct Cursor<'a> {
    bytes: &'a [u8],
    pos: usize,
    path: &'a Path,
}

impl<'a> Cursor<'a> {
    fn err(&self, message: impl std::fmt::Display) -> ModelError {
        ModelError::io(
            self.path,
            format!("not a valid GGUF file: {message} (at byte {})", self.pos),
        )
    }

    fn take(&mut self, n: usize) -> Result<&'a [u8]> {
        let end = self
            .pos
            .checked_add(n)
            .filter(|&e| e <= self.bytes.len())
            .ok_or_else(|| {
                self.err(format!(
                    "needs {n} more bytes, the file ends at {}",
                    self.bytes.len()
                ))
            })?;
        let out = &self.bytes[self.pos..end];
        self.pos = end;
        Ok(out)
    }

    fn array<const N: usize>(&mut self) -> Result<[u8; N]> {
        Ok(self.take(N)?.try_into().expect("length checked"))
    }

    fn u32(&mut self) -> Result<u32> {
        Ok(u32::from_le_bytes(self.array()?))
    }

    fn u64(&mut self) -> Result<u64> {
        Ok(u64::from_le_bytes(self.array()?))
    }

    fn count(&mut self, what: &str) -> Result<usize> {
        let n = self.u64()?;
        if n > MAX_COUNT {
            return Err(self.err(format!("{what} count {n} is implausible")));
        }
        Ok(n as usize)
    }

    fn string(&mut self) -> Result<String> {
        let n = self.u64()?;
        if n > self.bytes.len() as u64 {
            return Err(self.err(format!("string length {n} exceeds the file")));
        }
        let raw = self.take(n as usize)?;
        // llama.cpp writes UTF-8; a stray invalid byte should not make a file unreadable.
        Ok(String::from_utf8_lossy(raw).into_owned())
    }

    fn value(&mut self, type_id: u32, depth: usize) -> Result<Value> {
        Ok(match type_id {
            0 => Value::U8(self.array::<1>()?[0]),
            1 => Value::I8(self.array::<1>()?[0] as i8),
            2 => Value::U16(u16::from_le_bytes(self.array()?)),
            3 => Value::I16(i16::from_le_bytes(self.array()?)),
            4 => Value::U32(self.u32()?),
            5 => Value::I32(i32::from_le_bytes(self.array()?)),
            6 => Value::F32(f32::from_le_bytes(self.array()?)),
            7 => Value::Bool(self.array::<1>()?[0] != 0),
            8 => Value::String(self.string()?),
            9 => {
                if depth > 2 {
                    return Err(self.err("arrays nested too deep"));
                }
                let elem = self.u32()?;
                let n = self.count("array")?;
                let mut items = Vec::with_capacity(n.min(1 << 20));
                for _ in 0..n {
                    items.push(self.value(elem, depth + 1)?);
                }
                Value::Array(items)
            }
            10 => Value::U64(self.u64()?),
            11 => Value::I64(i64::from_le_bytes(self.array()?)),
            12 => Value::F64(f64::from_le_bytes(self.array()?)),
            other => return Err(self.err(format!("unknown metadata value type {other}"))),
        })
    }
}

impl GgufFile {
    pub fn open(path: &Path) -> Result<Self> {
        let file = std::fs::File::open(path).map_err(|e| ModelError::io(path, e))?;
        // SAFETY: the file is only read; a concurrent writer would be a user error that at
        // worst gives wrong weights, as with any reader.
        let mmap = unsafe { memmap2::Mmap::map(&file) }.map_err(|e| ModelError::io(path, e))?;
        let mut c = Cursor {
            bytes: &mmap,
            pos: 0,
            path,
        };
        if c.take(4).ok() != Some(MAGIC.as_slice()) {
            return Err(ModelError::io(path, "not a GGUF file (no `GGUF` magic)"));
        }
        let version = c.u32()?;
        if !(2..=3).contains(&version) {
            let why = if version.swap_bytes() <= 3 {
                "a big-endian GGUF, which is not supported".to_string()
            } else {
                format!("GGUF version {version}, only versions 2 and 3 are supported")
            };
            return Err(ModelError::io(path, why));
        }
        let tensor_count = c.count("tensor")?;
        let kv_count = c.count("metadata")?;
        let mut metadata = BTreeMap::new();
        for _ in 0..kv_count {
            let key = c.string()?;
            let type_id = c.u32()?;
            let value = c.value(type_id, 0)?;
            metadata.insert(key, value);
        }
        let mut tensors = Vec::with_capacity(tensor_count);
        for _ in 0..tensor_count {
            let name = c.string()?;
            let n_dims = c.u32()?;
            if n_dims == 0 || n_dims > MAX_DIMS {
                return Err(c.err(format!("tensor `{name}` has {n_dims} dimensions")));
            }
            let dims = (0..n_dims).map(|_| c.u64()).collect::<Result<Vec<u64>>>()?;
            let type_id = c.u32()?;
            let offset = c.u64()?;
            tensors.push(TensorInfo {
                name,
                dims,
                type_id,
                offset,
            });
        }
        let alignment = match metadata.get("general.alignment") {
            None => DEFAULT_ALIGNMENT,
            Some(v) => match v.as_i64() {
                Some(a) if a > 0 && (a as u64).is_power_of_two() => a as u64,
                _ => {
                    return Err(ModelError::Config {
                        path: path.into(),
                        field: "general.alignment".into(),
                        message: format!("{} is not a power of two", v.describe()),
                    });
                }
            },
        };
        let data_start = (c.pos as u64).div_ceil(alignment) * alignment;
        let gguf = Self {
            path: path.into(),
            version,
            metadata,
            tensors,
            alignment,
            data_start,
            mmap,
        };
        let mut names = std::collections::HashSet::new();
        for t in &gguf.tensors {
            if !names.insert(t.name.as_str()) {
                return Err(gguf.tensor_err(&t.name, "appears twice in the file".into()));
            }
        }
        Ok(gguf)
    }

    pub fn get(&self, key: &str) -> Option<&Value> {
        self.metadata.get(key)
    }

    pub fn tensor(&self, name: &str) -> Option<&TensorInfo> {
        self.tensors.iter().find(|t| t.name == name)
    }

    pub fn tensor_err(&self, name: &str, message: String) -> ModelError {
        ModelError::Tensor {
            path: self.path.clone(),
            name: name.into(),
            message,
        }
    }

    /// The stored bytes of `info`, whose type is `kind`; checks the size against the file.
    pub fn tensor_data(&self, info: &TensorInfo, kind: GgmlType) -> Result<&[u8]> {
        let bytes = kind
            .bytes_for(info)
            .map_err(|m| self.tensor_err(&info.name, m))?;
        let start = self.data_start.checked_add(info.offset);
        let end = start.and_then(|s| s.checked_add(bytes));
        match (start, end) {
            (Some(s), Some(e)) if e <= self.mmap.len() as u64 => Ok(&self.mmap[s as usize..e as usize]),
            _ => Err(self.tensor_err(
                &info.name,
                format!(
                    "data at offset {} + {bytes} bytes runs past the end of the file ({} bytes): is it truncated?",
                    info.offset,
                    self.mmap.len()
                ),
            )),
        }
    }
}
