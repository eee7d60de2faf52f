//! Subcommands of `drmas`. Each file is one command.

mod bench;
mod bench_offload;
mod bench_step;
mod bench_tracking;
mod bench_train;
mod check;
mod data;
mod dist;
mod eval;
mod generate;
mod index;
mod index_serve;
mod info;
mod model_import;
mod model_logits;
mod model_merge;
mod plot;
mod plugins;
mod replace;
mod score;
mod sweep;
mod train;
mod values;

use clap::{Parser, Subcommand};
use replace::{Ours, check_replaceable};
use std::{io::IsTerminal, path::PathBuf, process::ExitCode};

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

/// Plugin folders given on the command line, added to `DRMAS_PLUGIN_PATH`, and the
/// opt-in to plugins that fail the trust checks.
#[derive(clap::Args, Clone, Default)]
pub struct PluginDirs {
    /// A folder to scan for `*.so` plugins (repeatable).
    #[arg(long = "plugin-dir", value_name = "DIR")]
    pub dirs: Vec<PathBuf>,
    /// Load plugins even from folders or files that every user can write or that
    /// another user owns (also DRMAS_ALLOW_UNTRUSTED_PLUGINS=1, or `allow_untrusted =
    /// true` in the experiment's [plugins]). sha256 pins are still checked.
    #[arg(long = "allow-untrusted-plugins")]
    pub allow_untrusted: bool,
}

impl PluginDirs {
    /// `DRMAS_PLUGIN_PATH` (colon-separated) first, then the command line, then `extra`
    /// (an experiment's `[plugins] dirs`, which the config layer has checked). A folder
    /// from the environment or the command line that does not exist is an error naming
    /// where it came from.
    pub fn all(&self, extra: &[PathBuf]) -> anyhow::Result<Vec<PathBuf>> {
        let from_env: Vec<PathBuf> = std::env::var_os("DRMAS_PLUGIN_PATH")
            .map(|v| {
                std::env::split_paths(&v)
                    .filter(|p| !p.as_os_str().is_empty())
                    .collect()
            })
            .unwrap_or_default();
        let named = [
            (from_env.as_slice(), "DRMAS_PLUGIN_PATH"),
            (self.dirs.as_slice(), "--plugin-dir"),
        ];
        for (dirs, origin) in named {
            for dir in dirs {
                drmas::plugin::plugin_folder_problem(dir, Some(origin))
                    .map_err(anyhow::Error::msg)?;
            }
        }
        let mut dirs = from_env;
        dirs.extend(self.dirs.iter().cloned());
        dirs.extend(extra.iter().cloned());
        // One folder named twice (`./p` and `p`, flag and config) is scanned and listed once.
        Ok(drmas::plugin::distinct_folders(dirs))
    }

    /// The trust policy: the opt-in from the command line, the environment or the
    /// experiment, and the experiment's sha256 pins.
    pub fn trust(
        &self,
        plugins: &drmas::config::PluginsSection,
    ) -> anyhow::Result<drmas::plugin::TrustPolicy> {
        use drmas::plugin::ALLOW_UNTRUSTED_ENV;
        let from_env = match std::env::var(ALLOW_UNTRUSTED_ENV) {
            Err(_) => false,
            Ok(v) => match v.to_ascii_lowercase().as_str() {
                "1" | "true" | "yes" => true,
                "" | "0" | "false" | "no" => false,
                _ => anyhow::bail!("{ALLOW_UNTRUSTED_ENV} must be 1 or 0, not `{v}`"),
            },
        };
        Ok(drmas::plugin::TrustPolicy {
            allow_untrusted: self.allow_untrusted || from_env || plugins.allow_untrusted,
            sha256: plugins
                .sha256
                .iter()
                .map(|(name, hash)| (name.clone(), hash.to_ascii_lowercase()))
                .collect(),
        })
    }

    /// The registry of built-ins and the plugins in every folder (those of `plugins`
    /// too) under the trust policy. Skipped files are not reported here: see
    /// [`report_skipped`].
    pub fn discover(
        &self,
        plugins: &drmas::config::PluginsSection,
    ) -> anyhow::Result<drmas::plugin::Registry> {
        let dirs = self.all(&plugins.dirs)?;
        Ok(drmas::plugin::Registry::discover(
            &dirs,
            &self.trust(plugins)?,
        ))
    }
}

/// `--set KEY=VALUE` overrides of the experiment file.
#[derive(clap::Args, Clone, Default)]
pub struct Overrides {
    /// Set a key of the experiment, typed and checked like the file (repeatable):
    /// `--set trainer.steps=30 --set agents.verifier.sampling.temperature=0.5`. An array
    /// element is chosen by index or by its name, id or component.
    #[arg(long = "set", value_name = "KEY=VALUE", value_parser = parse_override)]
    pub set: Vec<drmas::config::Override>,
}

fn parse_override(arg: &str) -> Result<drmas::config::Override, String> {
    drmas::config::Override::parse_arg(arg)
}

/// Warns once about each plugin file (or folder) the registry skipped. Errors about
/// plugins that are not loaded refer to these warnings instead of repeating them.
pub fn report_skipped(registry: &drmas::plugin::Registry) {
    for failure in registry.failures() {
        tracing::warn!("skipped: {failure}");
    }
}

/// An experiment that parsed, validated, and whose components all resolved and took
/// their configs, with the registry they came from.
pub struct CheckedExperiment {
    pub exp: drmas::config::Experiment,
    pub registry: drmas::plugin::Registry,
    pub components: Vec<drmas::config::CheckedComponent>,
}

/// Loads and checks `config`; prints every error, and each skipped plugin file once,
/// and returns `None` when there are errors.
pub fn load_checked(
    config: &std::path::Path,
    overrides: &Overrides,
    plugin_dirs: &PluginDirs,
) -> Option<CheckedExperiment> {
    check_parsed(load_parsed(config, overrides)?, plugin_dirs)
}

/// The first half of [`load_checked`]: `config` parsed and validated with its
/// overrides (no disk touched beyond the file, nothing loaded), for a command that
/// takes its outputs before the slower checks; prints the errors.
pub fn load_parsed(
    config: &std::path::Path,
    overrides: &Overrides,
) -> Option<drmas::config::Experiment> {
    drmas::config::load_experiment_with(config, &overrides.set)
        .map_err(|errors| errln!("{errors}"))
        .ok()
}

/// The second half of [`load_checked`]: plugins discovered, components and paths
/// checked; prints every error, and each skipped plugin file once.
pub fn check_parsed(
    exp: drmas::config::Experiment,
    plugin_dirs: &PluginDirs,
) -> Option<CheckedExperiment> {
    let registry = plugin_dirs
        .discover(&exp.file.plugins)
        .map_err(|e| errln!("error: {}", error_text(&e)))
        .ok()?;
    report_skipped(&registry);
    for w in drmas::config::warnings(&exp) {
        errln!("warning: {w}");
    }
    // Both kinds of problem are reported at once: a user fixes them in one pass.
    let components = drmas::config::check_components(&exp, &registry);
    let paths = drmas::config::check_paths(&exp);
    let components = match (components, paths) {
        (Ok(components), Ok(())) => components,
        (components, paths) => {
            let mut errors = components.err().map(|e| e.0).unwrap_or_default();
            errors.extend(paths.err().map(|e| e.0).unwrap_or_default());
            errors.sort_by_key(|e| (e.line, e.col));
            errln!("{}", drmas::config::ConfigErrors(errors));
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
    /// Arms × seeds of one experiment, each trained and evaluated, then a report with
    /// intervals over seeds and paired differences against a baseline arm.
    Sweep(sweep::Args),
    /// Generate completions from a checkpoint, through its chat template.
    Generate(generate::Args),
    /// Score completions with a reward component, no model (audit a reward).
    Score(score::Args),
    /// Plot training metrics of one or more runs (PNG and SVG).
    Plot(plot::Args),
    /// Import GGUF files; dump logits.
    #[command(subcommand)]
    Model(ModelCommand),
    /// Benchmarks beside the Python peers (see scripts/bench-*.sh).
    #[command(subcommand)]
    Bench(bench::Command),
    /// The search plugin's BM25 passage index: build, serve (Search-R1's protocol), query, bench.
    #[command(subcommand)]
    Index(index::Command),
}

#[derive(Subcommand)]
enum ModelCommand {
    /// Dequantize a GGUF file into an HF checkpoint folder (config, safetensors, tokenizer).
    Import(model_import::Args),
    /// Logits of given token ids (safetensors in, safetensors out).
    Logits(model_logits::Args),
    /// Merge a LoRA adapter (PEFT layout) into its base: a full HF checkpoint.
    Merge(model_merge::Args),
}

pub fn run() -> ExitCode {
    tracing_subscriber::fmt()
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_env("DRMAS_LOG")
                .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("warn")),
        )
        // Never panics on a failed write (output::console).
        .with_writer(|| drmas::output::console::StderrWriter)
        .with_ansi(std::io::stderr().is_terminal())
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
        Command::Sweep(args) => sweep::run(args),
        Command::Plot(args) => plot::run(args),
        Command::Score(args) => score::run(args),
        Command::Data(cmd) => data::run(cmd),
        Command::Model(ModelCommand::Import(args)) => model_import::run(args),
        Command::Model(ModelCommand::Logits(args)) => model_logits::run(args),
        Command::Model(ModelCommand::Merge(args)) => model_merge::run(args),
        Command::Bench(cmd) => bench::run(cmd),
        Command::Index(cmd) => index::run(cmd),
    };
    let code = match result {
        Ok(code) => code,
        Err(e) => {
            errln!("error: {}", error_text(&e));
            ExitCode::FAILURE
        }
    };
    output_status(code)
}

/// `code`, unless standard output or error could not be written: then each failure is
/// said on standard error (if that still works: standard output is left to the data) and
/// the command ends with `EXIT_OUTPUT_FAILED` (74) — or with `code` when it failed anyway.
fn output_status(code: ExitCode) -> ExitCode {
    use drmas::output::console::{self, EXIT_OUTPUT_FAILED};
    let failures = console::failures();
    if failures.is_empty() {
        return code;
    }
    for f in &failures {
        errln!("error: {f}");
    }
    if code == ExitCode::SUCCESS {
        ExitCode::from(EXIT_OUTPUT_FAILED)
    } else {
        code
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
