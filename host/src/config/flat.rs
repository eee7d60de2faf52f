//! The experiment as one flat map `key → value`, in the experiment file's own spelling:
//! the keys as the file names them (`plugins.override`, `trainer.clip.low`), list items
//! of tables by their `id` or `name` (`models[lm].lr`, `agents[solver].model`) or else by
//! their index (`rewards[0].weight`), and the values as TOML writes them (`"llama-cpp"`,
//! `0.000001`, `["cpu"]`). Every setting is there with its default filled in, so a
//! reformatted file, or one that spells a default out, flattens the same; an option left
//! unset is absent, as TOML has no null. What a resume compares, what MLflow records
//! and what a sweep compares are all read from this one map (ARCHITECTURE.md, `config`).

use super::schema::ExperimentFile;
use std::collections::BTreeMap;

/// Every setting of an experiment by its key, in key order. The values are TOML leaves:
/// strings, numbers, booleans, arrays of them, and empty tables or lists of tables.
pub type Flat = BTreeMap<String, toml::Value>;

/// The settings of `file`, flattened.
pub fn flatten(file: &ExperimentFile) -> Flat {
    // The schema holds only what TOML holds (it was read from TOML, or built in code
    // with TOML's types), and an unset option is left out rather than refused.
    let value = toml::Value::try_from(file).expect("an experiment serializes as TOML");
    let mut out = Flat::new();
    walk("", &value, &mut out);
    out
}

/// The settings of `file`, each value as the file spells it ([`spelled`]): what a
/// resume and a sweep compare.
pub fn flatten_spelled(file: &ExperimentFile) -> BTreeMap<String, String> {
    flatten(file)
        .iter()
        .map(|(k, v)| (k.clone(), spelled(v)))
        .collect()
}

/// A value as the experiment file spells it (`"norms/grpo"`, `0.2`, `["cpu"]`).
pub fn spelled(value: &toml::Value) -> String {
    value.to_string()
}

/// The labels of a list's items: each item's `id`, else its `name` (strings), else its
/// index; all of them by index when two would share a label, so no two items collide.
pub fn list_labels<'a>(items: impl IntoIterator<Item = Option<&'a str>>) -> Vec<String> {
    let named: Vec<Option<&str>> = items.into_iter().collect();
    let mut seen = std::collections::BTreeSet::new();
    let unique = named.iter().flatten().all(|n| seen.insert(*n));
    named
        .iter()
        .enumerate()
        .map(|(i, n)| match n {
            Some(n) if unique => n.to_string(),
            _ => i.to_string(),
        })
        .collect()
}

/// What labels a table in a list: its `id` or `name`, when a string.
fn label_of(item: &toml::Value) -> Option<&str> {
    let table = item.as_table()?;
    ["id", "name"]
        .iter()
        .find_map(|k| table.get(*k).and_then(toml::Value::as_str))
}

fn walk(path: &str, value: &toml::Value, out: &mut Flat) {
    match value {
        toml::Value::Table(t) if !t.is_empty() => {
            for (k, v) in t {
                let p = if path.is_empty() {
                    k.clone()
                } else {
                    format!("{path}.{k}")
                };
                walk(&p, v, out);
            }
        }
        toml::Value::Array(items) if items.iter().any(toml::Value::is_table) => {
            let labels = list_labels(items.iter().map(label_of));
            for (label, v) in labels.iter().zip(items) {
                walk(&format!("{path}[{label}]"), v, out);
            }
        }
        leaf => {
            out.insert(path.to_string(), leaf.clone());
        }
    }
}

/// The key under which MLflow records a setting: MLflow allows letters, digits, `_`,
/// `-`, `.`, ` `, `:` and `/` in a param's name, so a list item's label becomes a
/// segment (`models[lm].lr` is `models.lm.lr`, the spelling `--set` takes) and any other
/// character `_`.
pub fn mlflow_key(key: &str) -> String {
    let dotted = key.replace("].", ".").replace('[', ".").replace(']', "");
    dotted
        .chars()
        .map(|c| {
            if c.is_alphanumeric() || "_-. :/".contains(c) {
                c
            } else {
                '_'
            }
        })
        .collect()
}

/// The settings as MLflow's params: each key as [`mlflow_key`] spells it and each
/// value as TOML writes it, a string without its quotes (MLflow shows the text).
pub fn mlflow_params(flat: &Flat) -> Vec<(String, String)> {
    flat.iter()
        .map(|(k, v)| {
            let text = match v {
                toml::Value::String(s) => s.clone(),
                other => spelled(other),
            };
            (mlflow_key(k), text)
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn file(text: &str) -> ExperimentFile {
        toml::from_str(text).unwrap()
    }

    const TEXT: &str = r#"
[experiment]
name = "x"
seed = 7

[plugins]
override = ["math"]
require = { math = "^0.1" }

[[models]]
id = "lm"
path = "models/a"
lr = 1e-5
engine = { kind = "llama-cpp", command = ["llama-server", "-m", "{model}"] }

[[agents]]
name = "solver"
component = "math/solver"
model = "lm"
config = { examples = [{ question = "q", answer = "a" }] }

[workflow]
entry = "solver"

[[rewards]]
component = "math/boxed"

[normalizer]
component = "norms/drmas"

[trainer]
loss_agg = "seq-mean-token-sum-norm"
clip = { high = 0.28 }
"#;

    fn value(flat: &Flat, key: &str) -> String {
        spelled(flat.get(key).unwrap_or_else(|| panic!("{key}: {flat:#?}")))
    }

    #[test]
    fn settings_flatten_in_the_files_spelling_with_defaults_filled_in() {
        let flat = flatten(&file(TEXT));
        let want = [
            ("experiment.name", "\"x\""),
            ("experiment.seed", "7"),
            ("plugins.override", "[\"math\"]"),
            ("plugins.require.math", "\"^0.1\""),
            ("plugins.dirs", "[]"),
            ("plugins.sha256", "{}"),
            ("models[lm].lr", "0.00001"),
            ("models[lm].weight_decay", "0.01"),
            ("models[lm].device", "\"auto\""),
            ("models[lm].engine.kind", "\"llama-cpp\""),
            ("models[lm].engine.export", "\"f32\""),
            (
                "models[lm].engine.command",
                "[\"llama-server\", \"-m\", \"{model}\"]",
            ),
            ("agents[solver].model", "\"lm\""),
            ("agents[solver].sampling.top_p", "1.0"),
            ("agents[solver].config.examples[0].question", "\"q\""),
            ("rewards[0].component", "\"math/boxed\""),
            ("rewards[0].weight", "1.0"),
            ("trainer.loss_agg", "\"seq-mean-token-sum-norm\""),
            ("trainer.lr_schedule", "\"constant\""),
            ("trainer.clip.low", "0.2"),
            ("trainer.clip.high", "0.28"),
            ("trainer.kl", "(absent)"),
            ("data.val", "[]"),
            ("pool.offload", "\"none\""),
            ("pool.batching", "\"deterministic\""),
            ("pool.devices", "[\"auto\"]"),
            ("tracking.tensorboard", "true"),
        ];
        for (key, spelling) in want {
            let got = flat.get(key).map_or("(absent)".to_string(), spelled);
            assert_eq!(got, spelling, "{key}");
        }
        // An option not set is left out, as in the file.
        assert!(
            !flat.keys().any(|k| k.starts_with("trainer.kl")),
            "{flat:#?}"
        );
        assert!(!flat.contains_key("rewards[0].agents"));
        assert!(!flat.contains_key("experiment.output_dir"));
    }

    #[test]
    fn a_reformatted_file_with_defaults_spelled_out_flattens_the_same() {
        let spelled_out = TEXT
            .replace("seed = 7", "seed = 7\n# a comment\n")
            .replace(
                "lr = 1e-5",
                "lr = 0.00001\nweight_decay = 0.01\ndevice = \"auto\"",
            )
            .replace("[trainer]", "[trainer]\nsteps = 100");
        assert_eq!(flatten(&file(&spelled_out)), flatten(&file(TEXT)));
        let changed = TEXT.replace("lr = 1e-5", "lr = 2e-5");
        assert_eq!(value(&flatten(&file(&changed)), "models[lm].lr"), "0.00002");
    }

    #[test]
    fn the_serialized_experiment_loads_as_the_same_experiment() {
        let f = file(TEXT);
        let text = toml::to_string(&f).unwrap();
        assert_eq!(flatten(&file(&text)), flatten(&f), "{text}");
    }

    #[test]
    fn items_are_labelled_by_id_or_name_unless_two_share_one() {
        let l = |names: &[Option<&str>]| list_labels(names.iter().copied());
        assert_eq!(l(&[Some("a"), Some("b")]), ["a", "b"]);
        assert_eq!(l(&[Some("a"), None]), ["a", "1"]);
        assert_eq!(l(&[Some("a"), Some("a")]), ["0", "1"]);
    }

    #[test]
    fn mlflow_keys_use_only_the_characters_mlflow_takes() {
        assert_eq!(mlflow_key("models[lm].lr"), "models.lm.lr");
        assert_eq!(mlflow_key("rewards[0].weight"), "rewards.0.weight");
        assert_eq!(mlflow_key("data.val[0].fields.q"), "data.val.0.fields.q");
        assert_eq!(
            mlflow_key("agents[solver].config.examples[0].question"),
            "agents.solver.config.examples.0.question"
        );
        assert_eq!(
            mlflow_key("plugins.sha256.lib+x.so"),
            "plugins.sha256.lib_x.so"
        );
        let flat = flatten(&file(TEXT));
        let params: BTreeMap<String, String> = mlflow_params(&flat).into_iter().collect();
        assert_eq!(params["experiment.name"], "x");
        assert_eq!(params["models.lm.lr"], "0.00001");
        assert_eq!(params["models.lm.engine.kind"], "llama-cpp");
        assert_eq!(params["pool.devices"], "[\"auto\"]");
        assert_eq!(params.len(), flat.len());
    }
}
