//! What an experiment names on disk, checked before anything is loaded: model folders,
//! data files (their format, first row, and the columns `fields` maps), the output
//! folder. Parsing ([`super::load_experiment`]) does not touch the disk beyond the
//! experiment file; commands that use the experiment (`check`,
//! `eval`, `train`) run these checks too, so a wrong path fails in seconds with its
//! position instead of after a model has loaded.

use super::{
    error::{ConfigError, ConfigErrors},
    experiment::Experiment,
    schema::DataSource,
    source::KeyPath,
};
use crate::data::{
    DataError, load_tasks,
    loader::{FIELDS, first_row, has_column},
};
use crate::model::ModelConfig;
use std::path::Path;

/// Every path problem of the experiment, each at the key that names the path.
pub fn check_paths(exp: &Experiment) -> Result<(), ConfigErrors> {
    let f = &exp.file;
    let root = KeyPath::root();
    let mut errors = Vec::new();
    let mut err = |path: KeyPath, msg: String| errors.push(exp.error_at(&path, msg));

    for (i, m) in f.models.iter().enumerate() {
        let key = if m.base.is_some() { "base" } else { "path" };
        let here = root.key("models").index(i).key(key);
        let Some(config) = model_config(m.weights_dir())
            .map_err(|msg| err(here.clone(), msg))
            .ok()
        else {
            continue;
        };
        // Every agent on this model must fit its longest reply in the model's context.
        for (j, a) in f.agents.iter().enumerate() {
            let context = config.max_position_embeddings;
            if a.model == m.id && i64::from(a.sampling.max_new_tokens.get()) >= context {
                err(
                    root.key("agents")
                        .index(j)
                        .key("sampling")
                        .key("max_new_tokens"),
                    format!(
                        "{} new tokens do not fit model `{}`'s context of {context} positions (max_position_embeddings in {})",
                        a.sampling.max_new_tokens,
                        m.id,
                        m.weights_dir().join("config.json").display()
                    ),
                );
            }
        }
    }

    for (here, source) in exp.data_sources() {
        errors.extend(data_source_errors(exp, &here, source));
    }
    if let Some(w) = &f.trainer.warm_start {
        let here = root.key("trainer").key("warm_start").key("checkpoint");
        for msg in warm_start_problems(exp, w) {
            errors.push(exp.error_at(&here, msg));
        }
    }
    let mut err = |path: KeyPath, msg: String| errors.push(exp.error_at(&path, msg));

    let out = exp.output_dir();
    let out_key = match &f.experiment.output_dir {
        Some(_) => root.key("experiment").key("output_dir"),
        None => root.key("experiment").key("name"),
    };
    if out.as_os_str().is_empty() {
        // Validation refuses it at the key; nothing more to say about the folder.
    } else if let Err(e) = crate::output::probe_dir_target(&out) {
        // A file in the way, or a folder that cannot take files (a read-only mount):
        // `train` would refuse it a second later, after loading the models.
        err(out_key.clone(), run_folder_problem(&e));
    } else {
        let inputs = exp.inputs();
        let inputs: Vec<crate::output::Input> = inputs
            .iter()
            .map(|(what, path)| crate::output::Input::new(what, path))
            .collect();
        if let Err(e) = crate::output::check_not_an_input(&out, &inputs) {
            err(out_key, run_folder_problem(&e));
        }
    }

    if errors.is_empty() {
        Ok(())
    } else {
        errors.sort_by_key(|e| (e.line, e.col));
        Err(ConfigErrors(errors))
    }
}

/// What a warm start's checkpoint lacks: a folder for each model (`DIR/<id>`, or `DIR`
/// itself for a one-model experiment) whose architecture is the model's, and with
/// `optimizer = true` the optimizer state beside the weights.
fn warm_start_problems(exp: &Experiment, w: &super::schema::WarmStart) -> Vec<String> {
    let dir = &w.checkpoint;
    if !dir.is_dir() {
        return vec![format!(
            "{} is not a folder (a checkpoint: runs/<name>/checkpoints/step-NNNNNN)",
            dir.display()
        )];
    }
    let models = &exp.file.models;
    let mut problems = Vec::new();
    for m in models {
        let folder = if dir.join(&m.id).is_dir() {
            dir.join(&m.id)
        } else if models.len() == 1 {
            dir.clone()
        } else {
            problems.push(format!(
                "{} has no folder for model `{}`",
                dir.display(),
                m.id
            ));
            continue;
        };
        if m.lora.is_none() {
            match (model_config(&folder), model_config(m.weights_dir())) {
                (Err(e), _) => problems.push(format!("model `{}`: {e}", m.id)),
                (Ok(a), Ok(b)) => {
                    if let Some((field, here, theirs)) = a.first_difference(&b) {
                        problems.push(format!(
                            "model `{}`: {} has {field} {here}, but {} has {theirs}: not the same model",
                            m.id,
                            folder.display(),
                            m.weights_dir().display()
                        ));
                    }
                }
                _ => {}
            }
        } else if !folder.join("adapter_config.json").is_file() {
            problems.push(format!(
                "model `{}`: {} has no adapter_config.json (a LoRA model warm-starts from its adapter folder)",
                m.id,
                folder.display()
            ));
        }
        if w.optimizer {
            for file in ["optimizer.safetensors", "worker.json"] {
                if !folder.join(file).is_file() {
                    problems.push(format!(
                        "model `{}`: {} has no {file}: optimizer = true needs the optimizer state a checkpoint saves (or set optimizer = false)",
                        m.id,
                        folder.display()
                    ));
                }
            }
        }
    }
    problems
}

/// An output problem of the run folder, as the message at its key.
fn run_folder_problem(e: &crate::output::OutputError) -> String {
    match e {
        crate::output::OutputError::Target { path, message } => {
            format!("output folder {}: {message}", path.display())
        }
        other => other.to_string(),
    }
}

/// The model folder's config, or why `path` is not a model folder drmas can read.
fn model_config(path: &Path) -> Result<ModelConfig, String> {
    if !path.exists() {
        return Err(format!(
            "model folder {} does not exist (see `drmas model import` and docs/models.md)",
            path.display()
        ));
    }
    if !path.is_dir() {
        return Err(format!(
            "{} is a file; a model is a folder with config.json, safetensors and tokenizer files",
            path.display()
        ));
    }
    let config = path.join("config.json");
    if !config.is_file() {
        return Err(format!(
            "{} has no config.json: not an HF model folder",
            path.display()
        ));
    }
    // The config against the weights' headers (no tensor is read): a config that
    // promises more layers or a larger vocabulary than the files hold fails here.
    crate::model::checked_config(path).map_err(|e| e.to_string())
}

/// What the loader would refuse in one `[data]` source, found by reading its first row
/// with the loader's own code: a missing file, an unknown format, a `fields` key that
/// is not one of ours (at that key), a mapping to a column the file does not have (at
/// its value, with the columns the file has), a file without rows, and a first row the
/// loader cannot make a task of.
fn data_source_errors(exp: &Experiment, here: &KeyPath, source: &DataSource) -> Vec<ConfigError> {
    let path = &source.path;
    if let Err(msg) = data_file(path) {
        return vec![exp.error_at(&here.key("path"), msg)];
    }
    let fields = here.key("fields");
    let unknown: Vec<ConfigError> = source
        .fields
        .keys()
        .filter(|k| !FIELDS.contains(&k.as_str()))
        .map(|k| {
            exp.error_at_key(
                &fields.key(k),
                DataError::UnknownMapping { key: k.clone() }.to_string(),
            )
        })
        .collect();
    if !unknown.is_empty() {
        return unknown;
    }
    let row = match first_row(path) {
        Ok(Some(row)) => row,
        Ok(None) => {
            let e = DataError::Empty { path: path.clone() };
            return vec![exp.error_at(&here.key("path"), e.to_string())];
        }
        Err(e) => return vec![exp.error_at(&here.key("path"), e.to_string())],
    };
    let columns: Vec<&str> = row.keys().map(String::as_str).collect();
    let bad_mappings: Vec<ConfigError> = source
        .fields
        .iter()
        .filter(|(_, column)| !has_column(&row, column))
        .map(|(field, column)| {
            exp.error_at(
                &fields.key(field),
                format!(
                    "{field} is mapped to column `{column}`, which {} does not have (its first row has: {})",
                    path.display(),
                    columns.join(", ")
                ),
            )
        })
        .collect();
    if !bad_mappings.is_empty() {
        return bad_mappings;
    }
    // The first row through the whole loader: missing fields, wrong types.
    let one = DataSource {
        limit: Some(1),
        ..source.clone()
    };
    match load_tasks(&one) {
        Ok(_) => Vec::new(),
        Err(e) => vec![exp.error_at(&here.key("path"), e.to_string())],
    }
}

/// Why `path` is not a data file, if it is not.
fn data_file(path: &Path) -> Result<(), String> {
    if !path.exists() {
        Err(format!(
            "data file {} does not exist (`drmas data prepare` writes the standard sets)",
            path.display()
        ))
    } else if !path.is_file() {
        Err(format!(
            "{} is a folder; give a .jsonl, .json, .parquet or .gz file",
            path.display()
        ))
    } else {
        Ok(())
    }
}
