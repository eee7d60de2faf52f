//! Fingerprints as checkpoints of format 2 hold them: flattened from Rust's debug text
//! of the settings, so with Rust's names and values (`plugins.overrides`, `LlamaCpp`,
//! `TokenMean`, `1e-6`, `None`, a list's items one key each: `pool.devices[0]`). An
//! older run must resume as it did: [`upgrade`] respells such a fingerprint as the
//! experiment file spells it ([`crate::config::flatten`]), so that an unchanged
//! experiment compares equal and a changed one is listed in the file's words.

use super::Fingerprint;
use std::collections::{BTreeMap, BTreeSet};

/// The fields whose Rust name is not the file's (serde renames).
const RENAMED: &[(&str, &str)] = &[("plugins.overrides", "plugins.override")];

/// Settings whose Rust value `None` is a variant (`Offload::None`), not an option left
/// unset.
const NONE_VARIANT: &[&str] = &["pool.offload"];

/// A value of the old spelling, read.
enum Leaf {
    /// A setting, as TOML holds it.
    Value(toml::Value),
    /// What was recorded verbatim in both spellings: the hashes of files, the resolved
    /// dtype, the drmas version; and anything this reader does not know.
    Verbatim(String),
}

/// `old` in the experiment file's spelling. Keys and values the file spells the same
/// way are kept; an option that was `None` is left out (the file leaves it out).
pub fn upgrade(old: &Fingerprint) -> Fingerprint {
    let mut leaves: BTreeMap<String, Leaf> = BTreeMap::new();
    for (key, value) in old {
        let key = renamed(key);
        if let Some(leaf) = read_leaf(&key, value) {
            leaves.insert(key, leaf);
        }
    }
    let leaves = relabel(leaves);
    let leaves = gather_lists(leaves);
    leaves
        .into_iter()
        .map(|(k, leaf)| {
            let text = match leaf {
                Leaf::Value(v) => crate::config::spelled(&v),
                Leaf::Verbatim(t) => t,
            };
            (k, text)
        })
        .filter(|(k, text)| !NOW_UNSET.contains(&(k.as_str(), text.as_str())))
        .collect()
}

/// Batch sizes that format 2 always wrote with their defaults of then, and that are
/// now unset unless the file sets them (sized per device, `pool::sizing`): those values
/// read as unset. They may change on resume either way (`MAY_CHANGE`).
const NOW_UNSET: &[(&str, &str)] = &[
    ("pool.max_batch_rows", "64"),
    ("trainer.micro_batch_tokens", "4096"),
    ("trainer.logits_budget_mb", "256"),
];

fn renamed(key: &str) -> String {
    for (rust, file) in RENAMED {
        if let Some(rest) = key.strip_prefix(rust)
            && (rest.is_empty() || rest.starts_with(['.', '[']))
        {
            return format!("{file}{rest}");
        }
    }
    key.to_string()
}

/// One old value as a TOML leaf; `None` for an option that was not set.
fn read_leaf(key: &str, value: &str) -> Option<Leaf> {
    let verbatim = value.starts_with("sha256:")
        || super::listed(&["models[*].dtype", super::VERSION_KEY], key)
        || key.contains(".files[");
    if verbatim {
        return Some(Leaf::Verbatim(value.to_string()));
    }
    if value == "None" {
        return NONE_VARIANT
            .contains(&key)
            .then(|| Leaf::Value(toml::Value::String("none".into())));
    }
    Some(match read_value(value) {
        Some(v) => Leaf::Value(v),
        None => Leaf::Verbatim(value.to_string()),
    })
}

/// A Rust debug value as the TOML value it stands for: a string literal, a number, a
/// boolean, an empty list or map, or a unit variant (`SeqMeanTokenSum` is the file's
/// `"seq-mean-token-sum"`: every settings enum is spelled in kebab, snake or lower
/// case, which agree on the variants there are).
fn read_value(text: &str) -> Option<toml::Value> {
    if text.starts_with('"') {
        return unescape(text).map(toml::Value::String);
    }
    match text {
        "true" => return Some(toml::Value::Boolean(true)),
        "false" => return Some(toml::Value::Boolean(false)),
        "[]" => return Some(toml::Value::Array(Vec::new())),
        "{}" => return Some(toml::Value::Table(toml::Table::new())),
        _ => {}
    }
    let digits = text.strip_prefix('-').unwrap_or(text);
    if !digits.is_empty() && digits.chars().all(|c| c.is_ascii_digit()) {
        return text.parse().ok().map(toml::Value::Integer);
    }
    if let Ok(x) = text.parse::<f64>() {
        return Some(toml::Value::Float(x));
    }
    if text.starts_with(|c: char| c.is_ascii_uppercase())
        && text.chars().all(|c| c.is_ascii_alphanumeric())
    {
        return Some(toml::Value::String(kebab(text)));
    }
    None
}

/// `SeqMeanTokenSumNorm` → `seq-mean-token-sum-norm`, `LlamaCpp` → `llama-cpp`,
/// `Bf16` → `bf16`.
fn kebab(variant: &str) -> String {
    let mut out = String::new();
    let mut prev_lower = false;
    for c in variant.chars() {
        if c.is_ascii_uppercase() && prev_lower {
            out.push('-');
        }
        prev_lower = c.is_ascii_lowercase() || c.is_ascii_digit();
        out.push(c.to_ascii_lowercase());
    }
    out
}

/// The text of a Rust debug string literal (`"a\"b"` → `a"b`).
fn unescape(literal: &str) -> Option<String> {
    let inner = literal.strip_prefix('"')?.strip_suffix('"')?;
    let mut out = String::new();
    let mut chars = inner.chars();
    while let Some(c) = chars.next() {
        if c != '\\' {
            out.push(c);
            continue;
        }
        match chars.next()? {
            'n' => out.push('\n'),
            'r' => out.push('\r'),
            't' => out.push('\t'),
            '0' => out.push('\0'),
            'u' => {
                let rest: String = chars.by_ref().take_while(|&c| c != '}').collect();
                let hex = rest.strip_prefix('{')?;
                out.push(char::from_u32(u32::from_str_radix(hex, 16).ok()?)?);
            }
            other => out.push(other),
        }
    }
    Some(out)
}

/// A key's last list index: `a.b[3]` → (`a.b`, 3); `None` when it ends otherwise.
fn last_index(key: &str) -> Option<(&str, usize)> {
    let open = key.strip_suffix(']')?.rfind('[')?;
    let index = key[open + 1..key.len() - 1].parse().ok()?;
    Some((&key[..open], index))
}

/// Lists of tables whose items the debug text numbered (a plugin's config: its
/// `toml::Value`s were not read for an `id`) take the labels the flattening gives
/// them: an item's `id` or `name` ([`crate::config::list_labels`]). Inner lists first,
/// so an outer item's new label carries the inner ones along.
fn relabel(mut leaves: BTreeMap<String, Leaf>) -> BTreeMap<String, Leaf> {
    // Every `prefix[N].` in a key, with N a number: a list of tables and its item.
    let mut lists: BTreeSet<(usize, String)> = BTreeSet::new();
    for key in leaves.keys() {
        for (at, _) in key.match_indices("].") {
            if let Some((prefix, _)) = last_index(&key[..=at]) {
                lists.insert((prefix.matches('[').count(), prefix.to_string()));
            }
        }
    }
    for (_, prefix) in lists.into_iter().rev() {
        let item = |i: usize| format!("{prefix}[{i}]");
        let count = (0..)
            .take_while(|&i| {
                let p = format!("{}.", item(i));
                leaves.keys().any(|k| k.starts_with(&p))
            })
            .count();
        let name = |i: usize, field: &str| match leaves.get(&format!("{}.{field}", item(i))) {
            Some(Leaf::Value(toml::Value::String(s))) => Some(s.clone()),
            _ => None,
        };
        let names: Vec<Option<String>> = (0..count)
            .map(|i| name(i, "id").or_else(|| name(i, "name")))
            .collect();
        let labels = crate::config::list_labels(names.iter().map(Option::as_deref));
        for (i, label) in labels.iter().enumerate() {
            if *label == i.to_string() {
                continue;
            }
            let from = format!("{}.", item(i));
            let to = format!("{prefix}[{label}].");
            let moved: Vec<String> = leaves
                .keys()
                .filter(|k| k.starts_with(&from))
                .cloned()
                .collect();
            for k in moved {
                let leaf = leaves.remove(&k).expect("listed");
                leaves.insert(format!("{to}{}", &k[from.len()..]), leaf);
            }
        }
    }
    leaves
}

/// The items of a list of plain values, one key each in the debug text
/// (`pool.devices[0]`), as the one array the file writes (`pool.devices = ["cpu"]`);
/// a list of lists is gathered inside out.
fn gather_lists(mut leaves: BTreeMap<String, Leaf>) -> BTreeMap<String, Leaf> {
    loop {
        let mut lists: BTreeMap<String, BTreeMap<usize, String>> = BTreeMap::new();
        for key in leaves.keys() {
            if let Some((prefix, i)) = last_index(key)
                && matches!(leaves.get(key), Some(Leaf::Value(_)))
            {
                lists
                    .entry(prefix.to_string())
                    .or_default()
                    .insert(i, key.clone());
            }
        }
        // A list is gathered once it is whole (items 0 to n−1) and nothing else sits
        // below it (an inner list not yet gathered).
        lists.retain(|prefix, items| {
            let whole = items.keys().copied().eq(0..items.len());
            let below = format!("{prefix}[");
            whole
                && leaves
                    .keys()
                    .filter(|k| k.starts_with(&below))
                    .all(|k| items.values().any(|i| i == k))
        });
        if lists.is_empty() {
            return leaves;
        }
        for (prefix, items) in lists {
            let values = items
                .values()
                .map(|k| match leaves.remove(k) {
                    Some(Leaf::Value(v)) => v,
                    _ => unreachable!("only values are gathered"),
                })
                .collect();
            leaves.insert(prefix, Leaf::Value(toml::Value::Array(values)));
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn fp(pairs: &[(&str, &str)]) -> Fingerprint {
        pairs
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect()
    }

    #[test]
    fn rust_names_and_values_become_the_files() {
        let hash = format!("sha256:{} 9 bytes", "ab".repeat(32));
        let old = fp(&[
            ("experiment.name", "\"a \\\"b\\\"\""),
            ("experiment.output_dir", "None"),
            ("plugins.overrides[0]", "\"math\""),
            ("plugins.overrides[1]", "\"norms\""),
            ("plugins.dirs", "[]"),
            ("plugins.require", "{}"),
            ("models[lm].lr", "1e-6"),
            ("models[lm].weight_decay", "0.01"),
            ("models[lm].engine.kind", "LlamaCpp"),
            ("models[lm].engine.export", "F32"),
            ("models[lm].engine.parallel", "8"),
            ("models[lm].engine.timeout_s", "600.0"),
            ("models[lm].engine.command[0]", "\"llama-server\""),
            ("models[lm].engine.command[1]", "\"{port}\""),
            ("models[lm].dtype", "f32"),
            ("models[lm].files[model.safetensors]", hash.as_str()),
            ("data.train", hash.as_str()),
            ("trainer.loss_agg", "SeqMeanTokenSumNorm"),
            ("trainer.kl.estimator", "K3"),
            ("trainer.tis_cap", "None"),
            ("trainer.gspo", "false"),
            ("pool.offload", "None"),
            ("pool.batching", "Deterministic"),
            ("rewards[0].agents[0]", "\"solver\""),
            ("agents[solver].config.examples[0].question", "\"q\""),
            ("agents[solver].config.examples[1].question", "\"r\""),
            ("agents[solver].config.tools[0].name", "\"calc\""),
            ("agents[solver].config.tools[0].args[0]", "1"),
            ("agents[solver].config.tools[1].name", "\"search\""),
            ("agents[solver].config.grid[0][0]", "1"),
            ("agents[solver].config.grid[0][1]", "2"),
            ("agents[solver].config.grid[1]", "[]"),
        ]);
        let want = fp(&[
            ("experiment.name", "'a \"b\"'"),
            ("plugins.override", "[\"math\", \"norms\"]"),
            ("plugins.dirs", "[]"),
            ("plugins.require", "{}"),
            ("models[lm].lr", "0.000001"),
            ("models[lm].weight_decay", "0.01"),
            ("models[lm].engine.kind", "\"llama-cpp\""),
            ("models[lm].engine.export", "\"f32\""),
            ("models[lm].engine.parallel", "8"),
            ("models[lm].engine.timeout_s", "600.0"),
            (
                "models[lm].engine.command",
                "[\"llama-server\", \"{port}\"]",
            ),
            ("models[lm].dtype", "f32"),
            ("models[lm].files[model.safetensors]", hash.as_str()),
            ("data.train", hash.as_str()),
            ("trainer.loss_agg", "\"seq-mean-token-sum-norm\""),
            ("trainer.kl.estimator", "\"k3\""),
            ("trainer.gspo", "false"),
            ("pool.offload", "\"none\""),
            ("pool.batching", "\"deterministic\""),
            ("rewards[0].agents", "[\"solver\"]"),
            ("agents[solver].config.examples[0].question", "\"q\""),
            ("agents[solver].config.examples[1].question", "\"r\""),
            ("agents[solver].config.tools[calc].name", "\"calc\""),
            ("agents[solver].config.tools[calc].args", "[1]"),
            ("agents[solver].config.tools[search].name", "\"search\""),
            ("agents[solver].config.grid", "[[1, 2], []]"),
        ]);
        assert_eq!(upgrade(&old), want);
    }

    #[test]
    fn a_fingerprint_in_the_files_spelling_reads_as_itself() {
        let new = fp(&[
            ("plugins.override", "[\"math\"]"),
            ("models[lm].lr", "0.000001"),
            ("models[lm].engine.kind", "\"llama-cpp\""),
            ("trainer.steps", "100"),
            ("pool.devices", "[\"cpu\"]"),
        ]);
        assert_eq!(upgrade(&new), new);
    }
}
