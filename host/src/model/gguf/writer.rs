//! Streaming safetensors output: the headers are laid out from the shapes alone, then
//! each tensor is produced and written in turn, so only one tensor is ever in memory.
//! F32, metadata `format = pt`, sharded past 5 GiB with a `model.safetensors.index.json`
//! as transformers writes.

use super::super::error::{ModelError, Result};
use std::{
    collections::BTreeMap,
    io::{BufWriter, Write},
    path::Path,
};

/// Shards above this size are split, as transformers does by default.
const MAX_SHARD_BYTES: u64 = 5 << 30;

/// A tensor to write: its name and torch shape (F32).
pub struct Entry {
    pub name: String,
    pub shape: Vec<usize>,
}

impl Entry {
    fn bytes(&self) -> u64 {
        self.shape.iter().product::<usize>() as u64 * 4
    }
}

fn shards(entries: &[Entry]) -> Vec<Vec<usize>> {
    let mut shards: Vec<Vec<usize>> = vec![Vec::new()];
    let mut size = 0;
    for (i, e) in entries.iter().enumerate() {
        if size + e.bytes() > MAX_SHARD_BYTES && !shards.last().expect("one shard").is_empty() {
            shards.push(Vec::new());
            size = 0;
        }
        size += e.bytes();
        shards.last_mut().expect("one shard").push(i);
    }
    shards
}

/// The header of one file: JSON, padded with spaces to a multiple of 8 bytes.
fn header(entries: &[Entry], members: &[usize]) -> Vec<u8> {
    let mut map = serde_json::Map::new();
    map.insert("__metadata__".into(), serde_json::json!({ "format": "pt" }));
    let mut offset = 0u64;
    for &i in members {
        let e = &entries[i];
        let end = offset + e.bytes();
        map.insert(
            e.name.clone(),
            serde_json::json!({ "dtype": "F32", "shape": e.shape, "data_offsets": [offset, end] }),
        );
        offset = end;
    }
    let mut json = serde_json::to_vec(&map).expect("json");
    while !json.len().is_multiple_of(8) {
        json.push(b' ');
    }
    json
}

fn write_f32(w: &mut impl Write, values: &[f32]) -> std::io::Result<()> {
    #[cfg(target_endian = "little")]
    {
        // SAFETY: f32 has no padding and any byte pattern is a valid u8; the slice
        // covers exactly the values' memory, and on a little-endian target that memory is
        // the little-endian encoding safetensors wants.
        let bytes = unsafe {
            std::slice::from_raw_parts(values.as_ptr().cast::<u8>(), std::mem::size_of_val(values))
        };
        w.write_all(bytes)
    }
    #[cfg(not(target_endian = "little"))]
    {
        for v in values {
            w.write_all(&v.to_le_bytes())?;
        }
        Ok(())
    }
}

/// Writes `entries` into `dir` (`model.safetensors`, or shards and an index), calling
/// `fill(i, buffer)` for the values of entry `i` in order; returns the bytes written.
pub fn write_safetensors(
    dir: &Path,
    entries: &[Entry],
    mut fill: impl FnMut(usize, &mut Vec<f32>) -> Result<()>,
) -> Result<u64> {
    let shards = shards(entries);
    let n = shards.len();
    let file_name = |s: usize| {
        if n == 1 {
            "model.safetensors".to_string()
        } else {
            format!("model-{:05}-of-{n:05}.safetensors", s + 1)
        }
    };
    let mut total = 0u64;
    let mut buffer = Vec::new();
    let mut weight_map = BTreeMap::new();
    for (s, members) in shards.iter().enumerate() {
        let path = dir.join(file_name(s));
        let io = |e: std::io::Error| ModelError::io(&path, e);
        let file = std::fs::File::create(&path).map_err(io)?;
        let mut w = BufWriter::with_capacity(1 << 20, file);
        let head = header(entries, members);
        w.write_all(&(head.len() as u64).to_le_bytes())
            .map_err(io)?;
        w.write_all(&head).map_err(io)?;
        total += 8 + head.len() as u64;
        for &i in members {
            buffer.clear();
            fill(i, &mut buffer)?;
            let want = entries[i].bytes() / 4;
            if buffer.len() as u64 != want {
                return Err(ModelError::Tensor {
                    path: path.clone(),
                    name: entries[i].name.clone(),
                    message: format!(
                        "produced {} values, its shape {:?} holds {want}",
                        buffer.len(),
                        entries[i].shape
                    ),
                });
            }
            write_f32(&mut w, &buffer).map_err(io)?;
            total += entries[i].bytes();
            weight_map.insert(entries[i].name.clone(), file_name(s));
        }
        w.into_inner()
            .map_err(|e| io(e.into_error()))?
            .sync_all()
            .map_err(io)?;
    }
    if n > 1 {
        let data: u64 = entries.iter().map(Entry::bytes).sum();
        let index =
            serde_json::json!({ "metadata": { "total_size": data }, "weight_map": weight_map });
        let path = dir.join("model.safetensors.index.json");
        std::fs::write(&path, serde_json::to_string_pretty(&index).expect("json"))
            .map_err(|e| ModelError::io(&path, e))?;
    }
    Ok(total)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn written_file_reads_back() {
        let dir = tempfile::tempdir().unwrap();
        let entries = vec![
            Entry {
                name: "b".into(),
                shape: vec![2, 3],
            },
            Entry {
                name: "a".into(),
                shape: vec![5],
            },
        ];
        let bytes = write_safetensors(dir.path(), &entries, |i, buf| {
            buf.extend(
                (0..entries[i].shape.iter().product::<usize>()).map(|v| v as f32 + 10.0 * i as f32),
            );
            Ok(())
        })
        .unwrap();
        let data = std::fs::read(dir.path().join("model.safetensors")).unwrap();
        assert_eq!(bytes, data.len() as u64);
        let st = safetensors::SafeTensors::deserialize(&data).unwrap();
        let a = st.tensor("a").unwrap();
        assert_eq!(a.shape(), &[5]);
        let values: Vec<f32> = a
            .data()
            .chunks(4)
            .map(|c| f32::from_le_bytes(c.try_into().unwrap()))
            .collect();
        assert_eq!(values, vec![10.0, 11.0, 12.0, 13.0, 14.0]);
        let (_, meta) = safetensors::SafeTensors::read_metadata(&data).unwrap();
        assert_eq!(meta.metadata().as_ref().unwrap()["format"], "pt");
    }
}
