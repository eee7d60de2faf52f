//! The fingerprints of `host/tests/data/rust-spelled-fingerprints/`: experiments and
//! the fingerprints a drmas of checkpoint format 2 took of them, in Rust's spelling, and
//! the way to make a checkpoint of today hold one as that drmas would have written it.
#![allow(dead_code)]

use drmas::train::fingerprint::{Fingerprint, sha256_file};
use std::path::{Path, PathBuf};

pub fn dir() -> PathBuf {
    super::root().join("host/tests/data/rust-spelled-fingerprints")
}

/// The fixture experiment `name` (`train`, `engine`) written to `to/<name>.toml`, with
/// the paths it stands in for put in: `"tiny-chat"` is the tiny chat checkpoint and
/// `"tasks.jsonl"` the fixture's tasks. Both are recorded by their contents, not their
/// paths, so the fingerprint does not depend on where they are.
pub fn experiment(name: &str, to: &Path) -> PathBuf {
    let model = super::tiny_models().join("tiny-chat").display().to_string();
    let tasks = dir().join("tasks.jsonl").display().to_string();
    let text = std::fs::read_to_string(dir().join(format!("{name}.toml")))
        .unwrap()
        .replace("\"tiny-chat\"", &format!("{model:?}"))
        .replace("\"tasks.jsonl\"", &format!("{tasks:?}"));
    let path = to.join(format!("{name}.toml"));
    std::fs::write(&path, text).unwrap();
    path
}

/// The fingerprint the drmas of format 2 took of the fixture experiment `name`, with
/// the model folder's file hashes of `today` (the tiny checkpoints are made on each
/// machine, so their hashes are not the fixture's; everything else is).
pub fn old(name: &str, today: &Fingerprint) -> Fingerprint {
    let path = dir().join(format!("{name}.fingerprint.json"));
    let mut old: Fingerprint =
        serde_json::from_str(&std::fs::read_to_string(path).unwrap()).unwrap();
    old.retain(|k, _| !k.contains(".files["));
    old.extend(
        today
            .iter()
            .filter(|(k, _)| k.contains(".files["))
            .map(|(k, v)| (k.clone(), v.clone())),
    );
    old
}

/// Makes the checkpoint in `dir` one of format 2 holding `fingerprint`, its manifest
/// updated as that drmas wrote it.
pub fn as_format_2(dir: &Path, fingerprint: &Fingerprint) {
    let state = dir.join("trainer_state.json");
    let mut v: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(&state).unwrap()).unwrap();
    v["format"] = 2.into();
    v["fingerprint"] = serde_json::to_value(fingerprint).unwrap();
    std::fs::write(&state, serde_json::to_string_pretty(&v).unwrap()).unwrap();
    let manifest = dir.join("MANIFEST.sha256");
    let (hash, _) = sha256_file(&state).unwrap();
    let text: String = std::fs::read_to_string(&manifest)
        .unwrap()
        .lines()
        .map(|l| match l.split_once("  ") {
            Some((_, "trainer_state.json")) => format!("{hash}  trainer_state.json\n"),
            _ => format!("{l}\n"),
        })
        .collect();
    std::fs::write(&manifest, text).unwrap();
}

/// The fingerprint a checkpoint holds.
pub fn of_checkpoint(dir: &Path) -> Fingerprint {
    let v: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(dir.join("trainer_state.json")).unwrap())
            .unwrap();
    serde_json::from_value(v["fingerprint"].clone()).unwrap()
}
