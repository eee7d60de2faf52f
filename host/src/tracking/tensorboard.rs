//! TensorBoard event files: the `Event` and `Summary` protobuf messages (declared with
//! prost's derive, the field numbers of TensorFlow's `event.proto`, `summary.proto`
//! and `tensor.proto`) in TFRecord framing — a little-endian u64 length, its masked
//! CRC32C, the bytes, their masked CRC32C.
//!
//! Each record is written with one `write` and flushed, so a killed process leaves a
//! file whose records are whole but perhaps the last (which readers skip). A resumed
//! run reopens its file and cuts it after the last record at or before its checkpoint's
//! step ([`EventFile::resume`]), so the steps it computes again are not there twice.

use prost::Message;
use std::{
    fs::{File, OpenOptions},
    io::{Read, Write},
    path::{Path, PathBuf},
};

/// `tensorflow.Event`.
#[derive(Clone, PartialEq, Message)]
pub struct Event {
    #[prost(double, tag = "1")]
    pub wall_time: f64,
    #[prost(int64, tag = "2")]
    pub step: i64,
    #[prost(oneof = "EventWhat", tags = "3, 5")]
    pub what: Option<EventWhat>,
}

#[derive(Clone, PartialEq, prost::Oneof)]
pub enum EventWhat {
    #[prost(string, tag = "3")]
    FileVersion(String),
    #[prost(message, tag = "5")]
    Summary(Summary),
}

/// `tensorflow.Summary`.
#[derive(Clone, PartialEq, Message)]
pub struct Summary {
    #[prost(message, repeated, tag = "1")]
    pub value: Vec<SummaryValue>,
}

/// `tensorflow.Summary.Value`: a scalar (`simple_value`) or a tensor with the plugin
/// that reads it (text).
#[derive(Clone, PartialEq, Message)]
pub struct SummaryValue {
    #[prost(string, tag = "1")]
    pub tag: String,
    #[prost(float, optional, tag = "2")]
    pub simple_value: Option<f32>,
    #[prost(message, optional, tag = "8")]
    pub tensor: Option<TensorProto>,
    #[prost(message, optional, tag = "9")]
    pub metadata: Option<SummaryMetadata>,
}

/// `tensorflow.SummaryMetadata`.
#[derive(Clone, PartialEq, Message)]
pub struct SummaryMetadata {
    #[prost(message, optional, tag = "1")]
    pub plugin_data: Option<PluginData>,
}

/// `tensorflow.SummaryMetadata.PluginData`.
#[derive(Clone, PartialEq, Message)]
pub struct PluginData {
    #[prost(string, tag = "1")]
    pub plugin_name: String,
    #[prost(bytes = "vec", tag = "2")]
    pub content: Vec<u8>,
}

/// `tensorflow.TensorProto`, as far as a string tensor needs it.
#[derive(Clone, PartialEq, Message)]
pub struct TensorProto {
    /// `DT_STRING` = 7.
    #[prost(int32, tag = "1")]
    pub dtype: i32,
    #[prost(message, optional, tag = "2")]
    pub tensor_shape: Option<TensorShape>,
    #[prost(bytes = "vec", repeated, tag = "8")]
    pub string_val: Vec<Vec<u8>>,
}

/// `tensorflow.TensorShapeProto`.
#[derive(Clone, PartialEq, Message)]
pub struct TensorShape {
    #[prost(message, repeated, tag = "2")]
    pub dim: Vec<TensorDim>,
}

#[derive(Clone, PartialEq, Message)]
pub struct TensorDim {
    #[prost(int64, tag = "1")]
    pub size: i64,
}

const DT_STRING: i32 = 7;

/// TFRecord's checksum: CRC32C, rotated right by 15 and offset.
fn masked_crc(bytes: &[u8]) -> u32 {
    let crc = crc32c::crc32c(bytes);
    crc.rotate_right(15).wrapping_add(0xa282_ead8)
}

/// One record's bytes: length, its checksum, the data, its checksum.
fn record(data: &[u8]) -> Vec<u8> {
    let len = (data.len() as u64).to_le_bytes();
    let mut out = Vec::with_capacity(data.len() + 16);
    out.extend_from_slice(&len);
    out.extend_from_slice(&masked_crc(&len).to_le_bytes());
    out.extend_from_slice(data);
    out.extend_from_slice(&masked_crc(data).to_le_bytes());
    out
}

/// The whole records of an event file's bytes, each as (its end offset, the event), in
/// order; reading stops at the first record that is cut short or fails its checksums.
pub fn read_records(bytes: &[u8]) -> Vec<(usize, Event)> {
    let mut out = Vec::new();
    let mut at = 0;
    while at + 12 <= bytes.len() {
        let len_bytes = &bytes[at..at + 8];
        let len = u64::from_le_bytes(len_bytes.try_into().expect("8 bytes")) as usize;
        let len_crc = u32::from_le_bytes(bytes[at + 8..at + 12].try_into().expect("4 bytes"));
        if len_crc != masked_crc(len_bytes) || at + 12 + len + 4 > bytes.len() {
            break;
        }
        let data = &bytes[at + 12..at + 12 + len];
        let crc = u32::from_le_bytes(
            bytes[at + 12 + len..at + 16 + len]
                .try_into()
                .expect("4 bytes"),
        );
        let Ok(event) = Event::decode(data).map_err(|_| ()).and_then(|e| {
            if crc == masked_crc(data) {
                Ok(e)
            } else {
                Err(())
            }
        }) else {
            break;
        };
        at += 16 + len;
        out.push((at, event));
    }
    out
}

/// An event file being appended to.
pub struct EventFile {
    path: PathBuf,
    file: File,
}

fn now() -> f64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0.0, |d| d.as_secs_f64())
}

impl EventFile {
    /// A new event file in `dir`, named as TensorBoard looks for them
    /// (`events.out.tfevents.<seconds>.<host>`), starting with its version record.
    pub fn create(dir: &Path) -> std::io::Result<EventFile> {
        std::fs::create_dir_all(dir)?;
        let host = std::fs::read_to_string("/proc/sys/kernel/hostname")
            .map(|h| h.trim().to_string())
            .unwrap_or_else(|_| "localhost".into());
        let secs = now() as u64;
        let mut path = dir.join(format!("events.out.tfevents.{secs}.{host}"));
        let mut n = 1;
        while path.exists() {
            path = dir.join(format!("events.out.tfevents.{secs}.{host}.{n}"));
            n += 1;
        }
        let file = OpenOptions::new()
            .create_new(true)
            .append(true)
            .open(&path)?;
        let mut f = EventFile { path, file };
        f.write(&Event {
            wall_time: now(),
            step: 0,
            what: Some(EventWhat::FileVersion("brain.Event:2".into())),
        })?;
        Ok(f)
    }

    /// Reopens the event file at `path` for a run resumed at `step`: the records of
    /// later steps (written after the checkpoint, and computed again now) are cut off,
    /// as is a record a kill left half-written. The cut file replaces the old one whole.
    pub fn resume(path: &Path, step: u64) -> std::io::Result<EventFile> {
        let mut bytes = Vec::new();
        File::open(path)?.read_to_end(&mut bytes)?;
        let keep = read_records(&bytes)
            .into_iter()
            .take_while(|(_, e)| e.step <= step as i64)
            .last()
            .map_or(0, |(end, _)| end);
        if keep != bytes.len() {
            crate::output::write_atomic(path, &bytes[..keep])?;
        }
        let file = OpenOptions::new().append(true).open(path)?;
        Ok(EventFile {
            path: path.to_path_buf(),
            file,
        })
    }

    pub fn path(&self) -> &Path {
        &self.path
    }

    fn write(&mut self, event: &Event) -> std::io::Result<u64> {
        let bytes = record(&event.encode_to_vec());
        self.file.write_all(&bytes)?;
        self.file.flush()?;
        Ok(bytes.len() as u64)
    }

    /// The scalars `(tag, value)` of `step` as one event; returns the bytes written.
    pub fn scalars(&mut self, step: u64, values: &[(String, f64)]) -> std::io::Result<u64> {
        let value = values
            .iter()
            .map(|(tag, v)| SummaryValue {
                tag: tag.clone(),
                simple_value: Some(*v as f32),
                ..Default::default()
            })
            .collect();
        self.write(&Event {
            wall_time: now(),
            step: step as i64,
            what: Some(EventWhat::Summary(Summary { value })),
        })
    }

    /// A text summary (TensorBoard's text plugin renders it as markdown) at `step`.
    pub fn text(&mut self, step: u64, tag: &str, markdown: &str) -> std::io::Result<u64> {
        let value = SummaryValue {
            tag: tag.to_string(),
            tensor: Some(TensorProto {
                dtype: DT_STRING,
                tensor_shape: Some(TensorShape { dim: vec![] }),
                string_val: vec![markdown.as_bytes().to_vec()],
            }),
            metadata: Some(SummaryMetadata {
                plugin_data: Some(PluginData {
                    plugin_name: "text".into(),
                    content: vec![],
                }),
            }),
            ..Default::default()
        };
        self.write(&Event {
            wall_time: now(),
            step: step as i64,
            what: Some(EventWhat::Summary(Summary { value: vec![value] })),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// TFRecord's masked CRC32C of known bytes: CRC32C("123456789") = 0xE3069283
    /// (the standard check value), rotated right by 15 = 0x2507_C60D, plus 0xA282EAD8.
    #[test]
    fn the_checksum_is_crc32c_masked_as_tfrecord_does() {
        assert_eq!(crc32c::crc32c(b"123456789"), 0xE306_9283);
        assert_eq!(
            masked_crc(b"123456789"),
            0x2507_C60D_u32.wrapping_add(0xA282_EAD8)
        );
    }

    #[test]
    fn a_cut_record_ends_the_reading_and_a_resume_cuts_later_steps() {
        let dir = tempfile::tempdir().unwrap();
        let mut f = EventFile::create(dir.path()).unwrap();
        for step in 1..=4 {
            f.scalars(step, &[("a/b".into(), step as f64 * 0.5)])
                .unwrap();
        }
        let path = f.path().to_path_buf();
        drop(f);
        let mut bytes = std::fs::read(&path).unwrap();
        let events = read_records(&bytes);
        assert_eq!(
            events.iter().map(|(_, e)| e.step).collect::<Vec<_>>(),
            [0, 1, 2, 3, 4]
        );
        // Half of the last record, as a kill may leave it.
        bytes.truncate(bytes.len() - 7);
        std::fs::write(&path, &bytes).unwrap();
        assert_eq!(read_records(&bytes).len(), 4);

        let mut f = EventFile::resume(&path, 2).unwrap();
        f.scalars(3, &[("a/b".into(), 9.0)]).unwrap();
        let events = read_records(&std::fs::read(&path).unwrap());
        let steps: Vec<i64> = events.iter().map(|(_, e)| e.step).collect();
        assert_eq!(steps, [0, 1, 2, 3]);
        let Some(EventWhat::Summary(s)) = &events[3].1.what else {
            panic!("a summary")
        };
        assert_eq!(s.value[0].simple_value, Some(9.0));
    }
}
