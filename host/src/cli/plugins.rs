//! `drmas plugins list` and `drmas plugins inspect NAME`.

use super::PluginDirs;
use drmas::{
    config::{ConfigErrors, check_pins, load_experiment},
    plugin::Registry,
};
use std::{path::PathBuf, process::ExitCode};

#[derive(clap::Subcommand)]
pub enum Command {
    /// Every component of every plugin found.
    List(ListArgs),
    /// One plugin (`norms`) or component (`norms/drmas`) in detail.
    Inspect(InspectArgs),
}

#[derive(clap::Args)]
pub struct ListArgs {
    #[command(flatten)]
    plugin_dirs: PluginDirs,
    /// Also scan the plugin folders named in this experiment file.
    #[arg(long)]
    config: Option<PathBuf>,
}

#[derive(clap::Args)]
pub struct InspectArgs {
    name: String,
    #[command(flatten)]
    plugin_dirs: PluginDirs,
    #[arg(long)]
    config: Option<PathBuf>,
}

/// The registry, and the experiment's sha256 pins that name no file found.
fn registry(
    dirs: &PluginDirs,
    config: &Option<PathBuf>,
) -> anyhow::Result<(Registry, Option<ConfigErrors>)> {
    let exp = match config {
        Some(path) => Some(load_experiment(path).map_err(|e| anyhow::anyhow!("{e}"))?),
        None => None,
    };
    let plugins = exp
        .as_ref()
        .map(|e| e.file.plugins.clone())
        .unwrap_or_default();
    let registry = dirs.discover(&plugins)?;
    let pins = exp
        .map(|e| check_pins(&e, &registry))
        .filter(|errors| !errors.is_empty())
        .map(ConfigErrors);
    Ok((registry, pins))
}

/// Bad pins are printed after the listing (which shows the file names to pin).
fn finish(pins: Option<ConfigErrors>) -> ExitCode {
    match pins {
        Some(errors) => {
            eprintln!("{errors}");
            ExitCode::FAILURE
        }
        None => ExitCode::SUCCESS,
    }
}

pub fn run(cmd: Command) -> anyhow::Result<ExitCode> {
    match cmd {
        Command::List(args) => list(args),
        Command::Inspect(args) => inspect(args),
    }
}

fn list(args: ListArgs) -> anyhow::Result<ExitCode> {
    let (registry, pins) = registry(&args.plugin_dirs, &args.config)?;
    let rows: Vec<[String; 6]> = registry
        .plugins()
        .iter()
        .flat_map(|p| {
            p.components.iter().map(move |c| {
                [
                    c.kind.to_string(),
                    format!("{}/{}", p.name, c.name),
                    p.name.clone(),
                    p.version.to_string(),
                    p.source.to_string(),
                    c.summary.to_string(),
                ]
            })
        })
        .collect();
    print_table(
        &["KIND", "NAME", "PLUGIN", "VERSION", "SOURCE", "SUMMARY"],
        &rows,
    );
    for (name, sources) in registry.duplicates() {
        println!(
            "warning: plugin `{name}` is provided by {}",
            sources.join(" and ")
        );
    }
    for f in registry.failures() {
        println!("skipped: {f}");
    }
    Ok(finish(pins))
}

fn inspect(args: InspectArgs) -> anyhow::Result<ExitCode> {
    let (registry, pins) = registry(&args.plugin_dirs, &args.config)?;
    super::report_skipped(&registry);
    let (plugin_name, component) = match args.name.split_once('/') {
        Some((p, c)) => (p, Some(c)),
        None => (args.name.as_str(), None),
    };
    let matches: Vec<_> = registry
        .plugins()
        .iter()
        .filter(|p| p.name == plugin_name)
        .collect();
    if matches.is_empty() {
        let known: Vec<&str> = registry.plugins().iter().map(|p| p.name.as_str()).collect();
        anyhow::bail!(
            "no plugin `{plugin_name}` is loaded (loaded: {})",
            known.join(", ")
        );
    }
    for p in matches {
        println!("plugin {} {}", p.name, p.version);
        println!("  source: {}", p.source);
        let shown: Vec<_> = p
            .components
            .iter()
            .filter(|c| component.is_none_or(|n| c.name.as_str() == n))
            .collect();
        if shown.is_empty() {
            anyhow::bail!(
                "plugin `{plugin_name}` has no component `{}`",
                component.unwrap_or_default()
            );
        }
        for c in shown {
            println!("  {} {}/{}: {}", c.kind, p.name, c.name, c.summary);
        }
    }
    Ok(finish(pins))
}

fn print_table(header: &[&str; 6], rows: &[[String; 6]]) {
    let mut widths = header.map(str::len);
    for row in rows {
        for (w, cell) in widths.iter_mut().zip(row) {
            *w = (*w).max(cell.chars().count());
        }
    }
    let line = |cells: Vec<&str>| {
        let parts: Vec<String> = cells
            .iter()
            .zip(widths)
            .map(|(c, w)| format!("{c:<w$}"))
            .collect();
        println!("{}", parts.join("  ").trim_end());
    };
    line(header.to_vec());
    for row in rows {
        line(row.iter().map(String::as_str).collect());
    }
}
