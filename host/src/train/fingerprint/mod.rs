//! What a run trains on, kept in every checkpoint so that `--resume` can say what
//! changed since: the resolved settings (defaults filled in, so a reformatted or
//! reordered experiment file is no change) and the contents of the train data and of
//! the model folders (sha256 and size, so a moved file is no change and a replaced one
//! is). A fingerprint is a flat map `key → value`, keys and values as the experiment
//! file spells them (`trainer.group_size`, `models[lm].lr`, `plugins.override`,
//! `"llama-cpp"`): the settings are [`crate::config::flatten`]'s. Checkpoints of
//! format 2 hold them in Rust's spelling; [`rust_spelling`] reads those.

pub mod rust_spelling;

use crate::{config::Experiment, pool::ModelHandle};
use sha2::{Digest, Sha256};
use std::{
    collections::BTreeMap,
    fmt,
    io::Read,
    path::{Path, PathBuf},
};

pub type Fingerprint = BTreeMap<String, String>;

/// Keys that may differ on resume: how long to train, how often to save and evaluate
/// and on what, where the models run, how an update is cut into memory-sized pieces,
/// where plugins are found, and the limits at which a run stops. None of them changes
/// what a step computes. A key matches an entry equal to it or below it; `[*]` stands
/// for any list element.
pub const MAY_CHANGE: &[&str] = &[
    "experiment.output_dir",
    "plugins.dirs",
    "plugins.allow_untrusted",
    "plugins.sha256",
    "trainer.steps",
    "trainer.save_every",
    "trainer.keep_checkpoints",
    "trainer.eval_every",
    "trainer.eval_k",
    "trainer.eval_limit",
    "data.val",
    "trainer.micro_batch_tokens",
    "trainer.logits_budget_mb",
    "trainer.share_prompts",
    "trainer.max_consecutive_skips",
    "trainer.max_staleness",
    "workflow.max_failed_episodes",
    "trainer.shadow_normalizer",
    "trainer.shadow_gradients",
    "pool",
    "models[*].device",
    // Where the optimizer state lives: a checkpoint holds it whole in every mode.
    "models[*].shard",
    "tracking",
];

/// Keys of the experiment file that stand for something recorded by content instead:
/// paths (the files' hashes are recorded) and the optional dtype (the resolved one is).
const BY_CONTENT: &[&str] = &[
    "models[*].path",
    "models[*].base",
    "models[*].dtype",
    "data.train.path",
];

fn generic(key: &str) -> String {
    let mut out = String::with_capacity(key.len());
    let mut depth = 0;
    for c in key.chars() {
        match c {
            '[' => {
                if depth == 0 {
                    out.push_str("[*");
                }
                depth += 1;
            }
            ']' => {
                depth -= 1;
                if depth == 0 {
                    out.push(']');
                }
            }
            _ if depth > 0 => {}
            _ => out.push(c),
        }
    }
    out
}

/// Whether `key` is one of `list`'s keys or below one (`[*]` stands for any list element).
pub fn listed(list: &[&str], key: &str) -> bool {
    let key = generic(key);
    list.iter().any(|p| {
        key == *p
            || key
                .strip_prefix(p)
                .is_some_and(|rest| rest.starts_with('.') || rest.starts_with('['))
    })
}

/// Whether `key` may change on resume without `--accept-changes`.
pub fn may_change(key: &str) -> bool {
    listed(MAY_CHANGE, key)
}

/// One difference between a checkpoint's fingerprint and the run's.
#[derive(Debug, Clone, PartialEq, serde::Serialize)]
pub struct Change {
    pub key: String,
    pub old: Option<String>,
    pub new: Option<String>,
}

/// A value for people: as the experiment file spells it, a hash cut to 12 digits, and a
/// key one side lacks (an option not set) said as such.
fn shown(v: &Option<String>) -> String {
    let Some(v) = v else {
        return "(absent)".into();
    };
    if let Some(rest) = v.strip_prefix("sha256:")
        && rest.len() > 64
    {
        return format!("sha256 {}…{}", &rest[..12], &rest[64..]);
    }
    v.clone()
}

impl fmt::Display for Change {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "{}: {} → {}",
            self.key,
            shown(&self.old),
            shown(&self.new)
        )
    }
}

/// `trainer.steps` is also the length of a decaying learning-rate schedule: it may
/// change only while both sides' schedule is constant.
fn steps_may_change(old: &Fingerprint, new: &Fingerprint) -> bool {
    [old, new].iter().all(|f| {
        f.get("trainer.lr_schedule")
            .is_none_or(|s| s == "\"constant\"")
    })
}

/// The keys whose values differ (or that one side lacks), except those that may change.
/// An option a newer drmas added, left unset, is absent on both sides: no change.
pub fn changes(old: &Fingerprint, new: &Fingerprint) -> Vec<Change> {
    let mut keys: Vec<&String> = old.keys().chain(new.keys()).collect();
    keys.sort();
    keys.dedup();
    keys.into_iter()
        .filter(|k| match k.as_str() {
            "trainer.steps" => !steps_may_change(old, new),
            _ => !may_change(k),
        })
        .filter(|k| old.get(*k) != new.get(*k))
        .map(|k| Change {
            key: k.clone(),
            old: old.get(k).cloned(),
            new: new.get(k).cloned(),
        })
        .collect()
}

/// The fingerprint of an experiment as `drmas train` runs it: every resolved setting
/// of the file, the resolved dtype of each model, and the contents of the train data
/// and of each model folder's weights and JSON files.
pub fn of_experiment(
    exp: &Experiment,
    models: &[(String, ModelHandle)],
) -> Result<Fingerprint, (PathBuf, std::io::Error)> {
    let mut out = of_files(exp)?;
    add_dtypes(&mut out, models);
    Ok(out)
}

/// [`of_files`]' fingerprint, taken before the models were loaded, completed with
/// their resolved dtypes: [`of_experiment`] without hashing the files again.
pub fn with_dtypes(mut files: Fingerprint, models: &[(String, ModelHandle)]) -> Fingerprint {
    add_dtypes(&mut files, models);
    files
}

/// [`of_experiment`] before any model is loaded: everything but the resolved dtypes.
/// What the ranks of a data-parallel job compare when they join.
pub fn of_files(exp: &Experiment) -> Result<Fingerprint, (PathBuf, std::io::Error)> {
    let f = &exp.file;
    let mut out: Fingerprint = crate::config::flatten_spelled(f);
    out.retain(|k, _| !listed(BY_CONTENT, k));
    if let Some(train) = &f.data.train {
        out.insert("data.train".into(), file_hash(&train.path)?);
    }
    for m in &f.models {
        for file in model_files(m.weights_dir()) {
            let name = file.file_name().unwrap_or_default().to_string_lossy();
            out.insert(format!("models[{}].files[{name}]", m.id), file_hash(&file)?);
        }
    }
    Ok(out)
}

/// Keys the ranks of a data-parallel job may hold differently: where each finds its
/// plugins, the machine's devices and pool settings, where each model runs, and the
/// tracking only rank 0 does. Everything else decides what the job computes.
pub const PER_RANK: &[&str] = &[
    "plugins.dirs",
    "plugins.allow_untrusted",
    "pool",
    "models[*].device",
    // Where the optimizer state lives: a checkpoint holds it whole in every mode.
    "models[*].shard",
    "tracking",
];

/// The key of the drmas version in what the ranks compare.
pub const VERSION_KEY: &str = "drmas.version";

/// The first difference between rank 0's fingerprint and another rank's, as
/// `key: rank 0 has A, rank R has B` (the drmas version first, then the keys in order),
/// leaving out the [`PER_RANK`] keys. `None`: the ranks agree.
pub fn rank_difference(ranks: &[Fingerprint]) -> Option<String> {
    let (first, rest) = ranks.split_first()?;
    for (i, other) in rest.iter().enumerate() {
        let rank = i + 1;
        let mut keys: Vec<&String> = first.keys().chain(other.keys()).collect();
        keys.sort_by_key(|k| (k.as_str() != VERSION_KEY, k.as_str()));
        keys.dedup();
        if let Some(key) = keys
            .into_iter()
            .filter(|k| !listed(PER_RANK, k))
            .find(|k| first.get(*k) != other.get(*k))
        {
            let name = if key == VERSION_KEY {
                "drmas version"
            } else {
                key.as_str()
            };
            return Some(format!(
                "{name}: rank 0 has {}, rank {rank} has {}",
                shown(&first.get(key).cloned()),
                shown(&other.get(key).cloned())
            ));
        }
    }
    None
}

/// The dtype each model runs in, as the experiment file spells it (`dtype` may be left
/// out, and then depends on the device).
fn add_dtypes(out: &mut Fingerprint, models: &[(String, ModelHandle)]) {
    for (id, handle) in models {
        let kind = handle.call("dtype", |b, _| {
            Ok(b.model_backend().map(|m| m.model.kind()))
        });
        let name = match kind {
            Ok(Some(tch::Kind::Float)) => "f32".to_string(),
            Ok(Some(tch::Kind::BFloat16)) => "bf16".into(),
            Ok(Some(tch::Kind::Half)) => "f16".into(),
            Ok(Some(other)) => format!("{other:?}"),
            // A backend without a decoder (a test's scripted one): nothing to record.
            Ok(None) | Err(_) => continue,
        };
        out.insert(format!("models[{id}].dtype"), name);
    }
}

/// What of a model folder decides what the model computes: its weights and its JSON
/// files (config, tokenizer, generation config, shard index), in name order.
fn model_files(dir: &Path) -> Vec<PathBuf> {
    let Ok(entries) = std::fs::read_dir(dir) else {
        return Vec::new();
    };
    let mut files: Vec<PathBuf> = entries
        .flatten()
        .map(|e| e.path())
        .filter(|p| {
            p.is_file()
                && p.extension()
                    .is_some_and(|e| e == "safetensors" || e == "json")
        })
        .collect();
    files.sort();
    files
}

pub fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

/// `sha256:<hex> <size> bytes` of a file, read in pieces.
pub fn file_hash(path: &Path) -> Result<String, (PathBuf, std::io::Error)> {
    let (digest, size) = sha256_file(path).map_err(|e| (path.to_path_buf(), e))?;
    Ok(format!("sha256:{digest} {size} bytes"))
}

/// The sha256 (hex) and size of a file.
pub fn sha256_file(path: &Path) -> std::io::Result<(String, u64)> {
    let mut file = std::fs::File::open(path)?;
    let mut hasher = Sha256::new();
    let mut buf = vec![0u8; 1 << 20];
    let mut size = 0u64;
    loop {
        let n = file.read(&mut buf)?;
        if n == 0 {
            break;
        }
        hasher.update(&buf[..n]);
        size += n as u64;
    }
    Ok((hex(&hasher.finalize()), size))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ranks_are_compared_version_first_then_key_by_key() {
        let rank = |pairs: &[(&str, &str)]| -> Fingerprint {
            pairs
                .iter()
                .map(|(k, v)| (k.to_string(), v.to_string()))
                .collect()
        };
        let zero = rank(&[
            (VERSION_KEY, "0.9.0"),
            ("experiment.seed", "7"),
            ("trainer.lr_schedule", "\"constant\""),
            ("pool.devices", "[\"cpu\"]"),
            ("models[lm].device", "\"auto\""),
        ]);
        assert_eq!(rank_difference(std::slice::from_ref(&zero)), None);
        // What may differ per rank (devices, plugin folders, tracking) is no difference.
        let mut one = zero.clone();
        one.insert("pool.devices".into(), "[\"cuda:1\"]".into());
        one.insert("models[lm].device".into(), "\"cuda:1\"".into());
        one.insert("tracking.mlflow.uri".into(), "\"http://a\"".into());
        assert_eq!(rank_difference(&[zero.clone(), one.clone()]), None);
        // The first key in order on the first rank that differs.
        let mut two = zero.clone();
        two.insert("experiment.seed".into(), "8".into());
        two.insert("trainer.lr_schedule".into(), "\"cosine\"".into());
        assert_eq!(
            rank_difference(&[zero.clone(), one.clone(), two.clone()]).as_deref(),
            Some("experiment.seed: rank 0 has 7, rank 2 has 8")
        );
        // A key one rank lacks; the version before everything.
        let mut three = zero.clone();
        three.remove("trainer.lr_schedule");
        assert_eq!(
            rank_difference(&[zero.clone(), three.clone()]).as_deref(),
            Some("trainer.lr_schedule: rank 0 has \"constant\", rank 1 has (absent)")
        );
        three.insert(VERSION_KEY.into(), "0.9.1".into());
        assert_eq!(
            rank_difference(&[zero, three]).as_deref(),
            Some("drmas version: rank 0 has 0.9.0, rank 1 has 0.9.1")
        );
    }

    #[test]
    fn keys_that_may_change_are_not_changes() {
        assert!(may_change("trainer.steps"));
        assert!(may_change("models[lm].device"));
        assert!(may_change("pool.devices[0]"));
        assert!(may_change("data.val[0].path"));
        assert!(!may_change("trainer.steps_x"));
        assert!(!may_change("models[lm].lr"));
        let old: Fingerprint = [("trainer.steps", "4"), ("models[lm].lr", "0.1")]
            .into_iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect();
        let mut new = old.clone();
        new.insert("trainer.steps".into(), "8".into());
        assert!(changes(&old, &new).is_empty());
        // ... unless the steps are the length of a decaying schedule.
        let decaying = |f: &Fingerprint| {
            let mut f = f.clone();
            f.insert("trainer.lr_schedule".into(), "\"cosine\"".into());
            f
        };
        assert_eq!(
            changes(&decaying(&old), &decaying(&new))
                .iter()
                .map(|c| c.to_string())
                .collect::<Vec<_>>(),
            ["trainer.steps: 4 → 8"]
        );
        // An option a newer drmas added, not set, is absent on both sides; set, it is a
        // change.
        new.insert("rewards[0].agents".into(), "[\"solver\"]".into());
        new.insert("models[lm].lr".into(), "0.2".into());
        new.insert(
            "data.train".into(),
            format!("sha256:{} 9 bytes", "ab".repeat(32)),
        );
        let c: Vec<String> = changes(&old, &new).iter().map(|c| c.to_string()).collect();
        assert_eq!(
            c,
            [
                "data.train: (absent) → sha256 abababababab… 9 bytes",
                "models[lm].lr: 0.1 → 0.2",
                "rewards[0].agents: (absent) → [\"solver\"]",
            ]
        );
        // Values as the file spells them.
        let change = |old: &str, new: &str| {
            Change {
                key: "k".into(),
                old: Some(old.into()),
                new: Some(new.into()),
            }
            .to_string()
        };
        assert_eq!(
            change("\"token-mean\"", "\"seq-mean-token-sum-norm\""),
            "k: \"token-mean\" → \"seq-mean-token-sum-norm\""
        );
        assert_eq!(change("\"Auto\"", "true"), "k: \"Auto\" → true");
    }
}
