//! GGUF export: a model's current weights as a GGUF file llama.cpp loads, with the
//! metadata (architecture, hyper-parameters, tokenizer, chat template) of the GGUF the
//! model was imported from, and its tensors in that file's order and names, written as
//! F32 or F16 with llama.cpp's Q/K row permutation applied again. This is how an
//! engine that cannot load HF folders (llama.cpp) takes the weights of each update.
//!
//! The file is written to a temporary name beside `out`, synced and renamed: whole or
//! absent.

use super::{
    convert::{self, Arch},
    reader::{GgufFile, Value},
};
use crate::model::error::{ModelError, Result};
use std::{
    collections::BTreeMap,
    io::{BufWriter, Write},
    path::Path,
};
use tch::{Kind, Tensor};

/// The element type the exported tensors are stored in.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ExportType {
    /// Exact: the engine computes with the trainer's weights.
    F32,
    /// Half the bytes; the engine's log-probs then differ by the rounding.
    F16,
}

impl ExportType {
    fn ggml_type(self) -> u32 {
        match self {
            ExportType::F32 => 0,
            ExportType::F16 => 1,
        }
    }
    fn bytes(self) -> u64 {
        match self {
            ExportType::F32 => 4,
            ExportType::F16 => 2,
        }
    }
    /// `general.file_type` (llama_ftype): all F32, mostly F16.
    fn file_type(self) -> u32 {
        match self {
            ExportType::F32 => 0,
            ExportType::F16 => 1,
        }
    }
}

fn put_str(w: &mut impl Write, s: &str) -> std::io::Result<()> {
    w.write_all(&(s.len() as u64).to_le_bytes())?;
    w.write_all(s.as_bytes())
}

fn type_id(v: &Value) -> u32 {
    match v {
        Value::U8(_) => 0,
        Value::I8(_) => 1,
        Value::U16(_) => 2,
        Value::I16(_) => 3,
        Value::U32(_) => 4,
        Value::I32(_) => 5,
        Value::F32(_) => 6,
        Value::Bool(_) => 7,
        Value::String(_) => 8,
        Value::Array(_) => 9,
        Value::U64(_) => 10,
        Value::I64(_) => 11,
        Value::F64(_) => 12,
    }
}

fn put_value(w: &mut impl Write, v: &Value) -> std::io::Result<()> {
    match v {
        Value::U8(x) => w.write_all(&[*x]),
        Value::I8(x) => w.write_all(&x.to_le_bytes()),
        Value::U16(x) => w.write_all(&x.to_le_bytes()),
        Value::I16(x) => w.write_all(&x.to_le_bytes()),
        Value::U32(x) => w.write_all(&x.to_le_bytes()),
        Value::I32(x) => w.write_all(&x.to_le_bytes()),
        Value::F32(x) => w.write_all(&x.to_le_bytes()),
        Value::Bool(x) => w.write_all(&[u8::from(*x)]),
        Value::String(s) => put_str(w, s),
        Value::Array(items) => {
            // An empty array keeps the string type (what llama.cpp's writer uses).
            let elem = items.first().map_or(8, type_id);
            w.write_all(&elem.to_le_bytes())?;
            w.write_all(&(items.len() as u64).to_le_bytes())?;
            items.iter().try_for_each(|i| put_value(w, i))
        }
        Value::U64(x) => w.write_all(&x.to_le_bytes()),
        Value::I64(x) => w.write_all(&x.to_le_bytes()),
        Value::F64(x) => w.write_all(&x.to_le_bytes()),
    }
}

/// llama.cpp's `permute(w, heads)`: each head's two rotary halves interleaved row by row
/// (the inverse of [`convert::unpermute_rows`]).
pub fn permute_rows(data: &[f32], rows: usize, heads: usize) -> Vec<f32> {
    convert::move_rotary_rows(data, rows, heads, true)
}

/// One tensor to write: its GGUF name, ggml dims (innermost first), its values and,
/// for llama.cpp's Q/K layout, the head count whose rotary halves its rows interleave.
struct Entry<'t> {
    name: String,
    dims: Vec<u64>,
    tensor: &'t Tensor,
    permute_heads: Option<usize>,
}

impl Entry<'_> {
    fn elements(&self) -> u64 {
        self.dims.iter().product()
    }
}

/// The heads whose rotary halves llama.cpp interleaves in the rows of GGUF tensor
/// `gguf` (`blk.N.attn_q.weight`, `blk.N.attn_k.weight.lora_b`, …), if any.
fn rotary_heads(hp: &convert::Hparams, gguf: &str) -> Option<usize> {
    let base = gguf.strip_suffix(".lora_b").unwrap_or(gguf);
    match (hp.arch, base.rsplit('.').nth(1)) {
        (Arch::Llama, Some("attn_q")) => Some(hp.heads),
        (Arch::Llama, Some("attn_k")) => Some(hp.kv_heads),
        _ => None,
    }
}

/// Writes `weights` (HF names → tensors, as the decoder holds them) as a GGUF at `out`
/// laid out like `template` (its metadata, tensor names and order). Every tensor of the
/// template must have its weight, of the template's shape. Returns the bytes written.
pub fn export_gguf(
    template: &GgufFile,
    weights: &BTreeMap<String, Tensor>,
    kind: ExportType,
    out: &Path,
) -> Result<u64> {
    let hp = convert::hparams(template)?;
    // Every tensor is checked before a byte is written.
    let mut plan = Vec::with_capacity(template.tensors.len());
    for info in &template.tensors {
        let hf = convert::hf_name(hp.arch, &info.name).ok_or_else(|| {
            template.tensor_err(&info.name, "not a tensor this exporter knows".into())
        })?;
        let tensor = weights.get(&hf).ok_or_else(|| {
            template.tensor_err(&info.name, format!("the model has no weight `{hf}`"))
        })?;
        let shape: Vec<usize> = tensor.size().iter().map(|&d| d as usize).collect();
        if shape != info.torch_shape() {
            return Err(template.tensor_err(
                &info.name,
                format!(
                    "the model's `{hf}` is {shape:?}, the template's tensor {:?}",
                    info.torch_shape()
                ),
            ));
        }
        plan.push(Entry {
            name: info.name.clone(),
            dims: info.dims.clone(),
            tensor,
            permute_heads: rotary_heads(&hp, &info.name),
        });
    }
    let mut metadata = template.metadata.clone();
    metadata.insert("general.file_type".into(), Value::U32(kind.file_type()));
    write_gguf(out, &metadata, &plan, kind, template.alignment)
}

/// Writes a LoRA adapter (`params`: PEFT names → A [r, in] and B [out, r], as the
/// decoder holds them) as the GGUF adapter llama.cpp loads with `--lora` for the base
/// laid out like `template`: `general.type = adapter`, `adapter.type = lora`, tensors
/// `<base tensor>.lora_a` / `.lora_b`, B's rows in llama.cpp's Q/K order. llama.cpp
/// scales an adapter by alpha / rank, so `adapter.lora.alpha` is `scale` × rank: the
/// scale drmas applies, whichever rule (LoRA or rsLoRA) gave it.
pub fn export_lora_gguf(
    template: &GgufFile,
    params: &[(String, Tensor)],
    rank: i64,
    scale: f64,
    kind: ExportType,
    out: &Path,
) -> Result<u64> {
    let hp = convert::hparams(template)?;
    let gguf_of: BTreeMap<String, &str> = template
        .tensors
        .iter()
        .filter_map(|t| convert::hf_name(hp.arch, &t.name).map(|hf| (hf, t.name.as_str())))
        .collect();
    let mut plan = Vec::with_capacity(params.len());
    for (peft, tensor) in params {
        let bad = |why: String| ModelError::Other {
            what: format!("exporting the LoRA adapter to {}", out.display()),
            message: format!("tensor `{peft}`: {why}"),
        };
        let (module, half) = peft
            .strip_prefix("base_model.model.")
            .and_then(|n| n.strip_suffix(".weight"))
            .and_then(|n| {
                n.strip_suffix(".lora_A")
                    .map(|m| (m, "lora_a"))
                    .or_else(|| n.strip_suffix(".lora_B").map(|m| (m, "lora_b")))
            })
            .ok_or_else(|| bad("not a PEFT LoRA tensor name".into()))?;
        let base = gguf_of
            .get(&format!("{module}.weight"))
            .ok_or_else(|| bad(format!("the template has no tensor for `{module}`")))?;
        let name = format!("{base}.{half}");
        let dims: Vec<u64> = tensor.size().iter().rev().map(|&d| d as u64).collect();
        if dims.len() != 2 {
            return Err(bad(format!("is {:?}, not 2-d", tensor.size())));
        }
        let permute_heads = rotary_heads(&hp, &name);
        plan.push(Entry {
            name,
            dims,
            tensor,
            permute_heads,
        });
    }
    let mut metadata = BTreeMap::new();
    let arch = template
        .metadata
        .get("general.architecture")
        .cloned()
        .unwrap_or_else(|| Value::String(hp.arch.gguf_name().into()));
    metadata.insert("general.architecture".into(), arch);
    metadata.insert("general.type".into(), Value::String("adapter".into()));
    metadata.insert("adapter.type".into(), Value::String("lora".into()));
    metadata.insert(
        "adapter.lora.alpha".into(),
        Value::F32((scale * rank as f64) as f32),
    );
    metadata.insert("general.file_type".into(), Value::U32(kind.file_type()));
    write_gguf(out, &metadata, &plan, kind, template.alignment)
}

/// Writes a GGUF (version 3) of `metadata` and `entries` at `out`, whole or not at all.
/// Returns the bytes written.
fn write_gguf(
    out: &Path,
    metadata: &BTreeMap<String, Value>,
    entries: &[Entry<'_>],
    kind: ExportType,
    alignment: u64,
) -> Result<u64> {
    let pad = |n: u64| (alignment - n % alignment) % alignment;
    let mut written = 0u64;
    crate::output::write_atomic_with(out, |tmp| {
        let file = std::fs::File::create(tmp)?;
        let mut w = BufWriter::with_capacity(1 << 20, file);
        w.write_all(b"GGUF")?;
        w.write_all(&3u32.to_le_bytes())?;
        w.write_all(&(entries.len() as u64).to_le_bytes())?;
        w.write_all(&(metadata.len() as u64).to_le_bytes())?;
        let mut pos = 24u64;
        let mut count = CountingWriter(&mut w, &mut pos);
        for (key, value) in metadata {
            put_str(&mut count, key)?;
            count.write_all(&type_id(value).to_le_bytes())?;
            put_value(&mut count, value)?;
        }
        let mut offset = 0u64;
        for e in entries {
            put_str(&mut count, &e.name)?;
            count.write_all(&(e.dims.len() as u32).to_le_bytes())?;
            for d in &e.dims {
                count.write_all(&d.to_le_bytes())?;
            }
            count.write_all(&kind.ggml_type().to_le_bytes())?;
            count.write_all(&offset.to_le_bytes())?;
            let bytes = e.elements() * kind.bytes();
            offset += bytes + pad(bytes);
        }
        let header_pad = pad(*count.1);
        count.write_all(&vec![0u8; header_pad as usize])?;
        for e in entries {
            let flat = e.tensor.detach().to_kind(Kind::Float).contiguous().view(-1);
            let mut data = Vec::<f32>::try_from(&flat).map_err(std::io::Error::other)?;
            if let Some(heads) = e.permute_heads {
                let rows = *e.dims.last().expect("2-d") as usize;
                data = permute_rows(&data, rows, heads);
            }
            let bytes: Vec<u8> = match kind {
                ExportType::F32 => data.iter().flat_map(|x| x.to_le_bytes()).collect(),
                ExportType::F16 => data
                    .iter()
                    .flat_map(|x| half::f16::from_f32(*x).to_le_bytes())
                    .collect(),
            };
            count.write_all(&bytes)?;
            let bytes = e.elements() * kind.bytes();
            count.write_all(&vec![0u8; pad(bytes) as usize])?;
        }
        written = *count.1;
        w.flush()
    })
    .map_err(|e| ModelError::io(out, e))?;
    Ok(written)
}

/// A writer that counts the bytes through it (for the alignment padding).
struct CountingWriter<'a, W: Write>(&'a mut W, &'a mut u64);

impl<W: Write> Write for CountingWriter<'_, W> {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        let n = self.0.write(buf)?;
        *self.1 += n as u64;
        Ok(n)
    }
    fn flush(&mut self) -> std::io::Result<()> {
        self.0.flush()
    }
}
