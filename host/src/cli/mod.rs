//! Subcommands of `drmas`. Each file is one command.

mod bench;
mod bench_train;
mod check;
mod data;
mod eval;
mod generate;
mod info;
mod model_import;
mod model_logits;
mod plot;
mod plugins;
mod train;
mod values;

use clap::{Parser, Subcommand};
use std::{path::PathBuf, process::ExitCode};

#[derive(Parser)]
#[command(
    name = "drmas",
    version,
    about = "Per-agent normalized GRPO for multi-agent LLM teams"
)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

/// Plugin folders given on the command line, added to `DRMAS_PLUGIN_PATH`.
#[derive(clap::Args, Clone, Default)]
pub struct PluginDirs {
    /// A folder to scan for `*.so` plugins (repeatable).
    #[arg(long = "plugin-dir", value_name = "DIR")]
    pub dirs: Vec<PathBuf>,
}

impl PluginDirs {
    /// `DRMAS_PLUGIN_PATH` (colon-separated) first, then the command line, then `extra`.
    pub fn all(&self, extra: &[PathBuf]) -> Vec<PathBuf> {
        let mut dirs: Vec<PathBuf> = std::env::var_os("DRMAS_PLUGIN_PATH")
            .map(|v| {
                std::env::split_paths(&v)
                    .filter(|p| !p.as_os_str().is_empty())
                    .collect()
            })
            .unwrap_or_default();
        dirs.extend(self.dirs.iter().cloned());
        dirs.extend(extra.iter().cloned());
        let mut seen = std::collections::HashSet::new();
        dirs.retain(|d| seen.insert(d.clone()));
        dirs
    }
}

/// An experiment that parsed, validated, and whose components all resolved and took
/// their configs, with the registry they came from.
pub struct CheckedExperiment {
    pub exp: drmas::config::Experiment,
    pub registry: drmas::plugin::Registry,
    pub components: Vec<drmas::config::CheckedComponent>,
}

/// Loads and checks `config`; prints every error and returns `None` when there are any.
pub fn load_checked(
    config: &std::path::Path,
    plugin_dirs: &PluginDirs,
) -> Option<CheckedExperiment> {
    let exp = drmas::config::load_experiment(config)
        .map_err(|errors| eprintln!("{errors}"))
        .ok()?;
    let registry = drmas::plugin::Registry::discover(&plugin_dirs.all(&exp.file.plugins.dirs));
    // Both kinds of problem are reported at once: a user fixes them in one pass.
    let components = drmas::config::check_components(&exp, &registry);
    let paths = drmas::config::check_paths(&exp);
    let components = match (components, paths) {
        (Ok(components), Ok(())) => components,
        (components, paths) => {
            let mut errors = components.err().map(|e| e.0).unwrap_or_default();
            errors.extend(paths.err().map(|e| e.0).unwrap_or_default());
            errors.sort_by_key(|e| (e.line, e.col));
            eprintln!("{}", drmas::config::ConfigErrors(errors));
            return None;
        }
    };
    Some(CheckedExperiment {
        exp,
        registry,
        components,
    })
}

#[derive(Subcommand)]
enum Command {
    /// Versions, devices, threads, and the plugins found.
    Info(info::Args),
    /// Validate an experiment file without loading models.
    Check(check::Args),
    /// List or inspect plugins and their components.
    #[command(subcommand)]
    Plugins(plugins::Command),
    /// Prepare data sets (GSM8K, MATH-500, MATH train, synthetic arithmetic).
    #[command(subcommand)]
    Data(data::Command),
    /// avg@k and pass@k of the experiment's team on its validation sets.
    Eval(eval::Args),
    /// Train the experiment's team (per-agent normalized GRPO or another normalizer).
    Train(train::Args),
    /// Generate completions from a checkpoint, through its chat template.
    Generate(generate::Args),
    /// Plot training metrics of one or more runs (PNG and SVG).
    Plot(plot::Args),
    /// Import GGUF files; dump logits.
    #[command(subcommand)]
    Model(ModelCommand),
    /// Benchmarks beside the Python peers (see scripts/bench-*.sh).
    #[command(subcommand)]
    Bench(bench::Command),
}

#[derive(Subcommand)]
enum ModelCommand {
    /// Dequantize a GGUF file into an HF checkpoint folder (config, safetensors, tokenizer).
    Import(model_import::Args),
    /// Logits of given token ids (safetensors in, safetensors out).
    Logits(model_logits::Args),
}

pub fn run() -> ExitCode {
    tracing_subscriber::fmt()
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_env("DRMAS_LOG")
                .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("warn")),
        )
        .with_writer(std::io::stderr)
        .with_target(false)
        .without_time()
        .init();
    let cli = Cli::parse();
    let result = match cli.command {
        Command::Info(args) => info::run(args),
        Command::Check(args) => check::run(args),
        Command::Plugins(cmd) => plugins::run(cmd),
        Command::Generate(args) => generate::run(args),
        Command::Eval(args) => eval::run(args),
        Command::Train(args) => train::run(args),
        Command::Plot(args) => plot::run(args),
        Command::Data(cmd) => data::run(cmd),
        Command::Model(ModelCommand::Import(args)) => model_import::run(args),
        Command::Model(ModelCommand::Logits(args)) => model_logits::run(args),
        Command::Bench(cmd) => bench::run(cmd),
    };
    match result {
        Ok(code) => code,
        Err(e) => {
            eprintln!("error: {}", error_text(&e));
            ExitCode::FAILURE
        }
    }
}

/// The error and its sources on one line. Our errors often say their source in their
/// own text already; a source is added only when the text does not contain it yet.
fn error_text(e: &anyhow::Error) -> String {
    let mut text = e.to_string();
    for source in e.chain().skip(1) {
        let s = source.to_string();
        if !text.contains(&s) {
            text.push_str(": ");
            text.push_str(&s);
        }
    }
    text
}
