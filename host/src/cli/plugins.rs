//! `drmas plugins list` and `drmas plugins inspect NAME` (summaries, config keys, tools).

use super::PluginDirs;
use drmas::{
    config::{ConfigErrors, check_pins, load_experiment},
    plugin::{PluginRecord, Registry, ResolvePolicy, Source},
};
use drmas_plugin_api::{ComponentKind, ConfigKey};
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
            errln!("{errors}");
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
        "",
        &["KIND", "NAME", "PLUGIN", "VERSION", "SOURCE", "SUMMARY"],
        &rows,
    );
    for (name, sources) in registry.duplicates() {
        outln!(
            "warning: plugin `{name}` is provided by {}",
            sources.join(" and ")
        );
    }
    for f in registry.failures() {
        outln!("skipped: {f}");
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
        outln!("plugin {} {}", p.name, p.version);
        outln!("  source: {}", p.source);
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
            outln!("  {} {}/{}: {}", c.kind, p.name, c.name, c.summary);
            print_config_keys(c.config.as_deref());
            if c.kind == ComponentKind::Environment {
                print_tools(&registry, p, &c.name);
            }
        }
    }
    Ok(finish(pins))
}

/// The longest default shown in full; longer ones (prompts) are cut with `...`.
const DEFAULT_WIDTH: usize = 40;

/// The component's config keys as an aligned table, or a line saying it describes none.
fn print_config_keys(keys: Option<&[ConfigKey]>) {
    let Some(keys) = keys else {
        outln!("    config: no keys described (the component checks its own table)");
        return;
    };
    if keys.is_empty() {
        outln!("    config: none (the component takes no keys)");
        return;
    }
    outln!("    config:");
    let rows: Vec<[String; 4]> = keys
        .iter()
        .map(|k| {
            let default = match &k.default {
                None => "required".to_string(),
                Some(d) if d.chars().count() > DEFAULT_WIDTH => {
                    let cut: String = d.chars().take(DEFAULT_WIDTH - 3).collect();
                    format!("{cut}...")
                }
                Some(d) => d.clone(),
            };
            [k.name.clone(), k.ty.clone(), default, k.doc.clone()]
        })
        .collect();
    print_table("      ", &["KEY", "TYPE", "DEFAULT", "DOC"], &rows);
}

/// The tools an environment offers, asked of one created with an empty config.
fn print_tools(registry: &Registry, plugin: &PluginRecord, component: &str) {
    // The record shown, also when a file overrides a built-in of the same name.
    let policy = ResolvePolicy {
        overrides: match plugin.source {
            Source::Builtin => Default::default(),
            Source::File(_) => [plugin.name.clone()].into(),
        },
        ..ResolvePolicy::default()
    };
    let full = format!("{}/{component}", plugin.name);
    let tools = registry
        .create_environment(&full, "", &policy)
        .map_err(|e| e.to_string())
        .and_then(|env| env.tools().map_err(|e| e.to_string()));
    match tools {
        Err(e) => outln!("    tools: unknown, it cannot be created with an empty config: {e}"),
        Ok(tools) if tools.is_empty() => outln!("    tools: none"),
        Ok(tools) => {
            outln!("    tools:");
            let rows: Vec<[String; 3]> = tools
                .into_iter()
                .map(|t| [t.name, t.description, t.input_format.unwrap_or_default()])
                .collect();
            print_table("      ", &["TOOL", "DESCRIPTION", "INPUT"], &rows);
        }
    }
}

/// Left-aligned columns two spaces apart, each line after `indent`; plain text (no
/// colour codes), so it reads the same in a pipe or a file.
fn print_table<const N: usize>(indent: &str, header: &[&str; N], rows: &[[String; N]]) {
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
        outln!("{indent}{}", parts.join("  ").trim_end());
    };
    line(header.to_vec());
    for row in rows {
        line(row.iter().map(String::as_str).collect());
    }
}
