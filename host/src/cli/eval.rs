//! `drmas eval CONFIG`: avg@k and pass@k of the experiment's team on its validation sets.

use super::PluginDirs;
use drmas::eval::{EvalOptions, dump_lines, run_eval, set_aside};
use drmas::output::{Input, OutputLock, check_file_target, check_not_an_input, write_atomic};
use std::{
    path::{Path, PathBuf},
    process::ExitCode,
};

#[derive(clap::Args)]
pub struct Args {
    /// The experiment file.
    config: PathBuf,
    /// Evaluate these model folders instead (DIR/<model id>, or DIR for every model).
    #[arg(long)]
    checkpoint: Option<PathBuf>,
    /// Samples per task.
    #[arg(long, default_value_t = drmas::eval::DEFAULT_K as u64, value_parser = clap::value_parser!(u64).range(1..))]
    k: u64,
    /// At most N tasks from each validation set.
    #[arg(long, value_parser = clap::value_parser!(u64).range(1..))]
    limit: Option<u64>,
    /// Sampling temperature of every agent (0 = greedy).
    #[arg(long, default_value_t = 0.6, value_parser = super::values::temperature, allow_negative_numbers = true)]
    temperature: f64,
    /// Nucleus mass of every agent, in (0, 1].
    #[arg(long, default_value_t = 0.95, value_parser = super::values::top_p, allow_negative_numbers = true)]
    top_p: f64,
    /// Sample with each agent's own [agents] sampling, as training does, instead of
    /// --temperature and --top-p for every agent.
    #[arg(long, conflicts_with_all = ["temperature", "top_p"])]
    agent_sampling: bool,
    /// Evaluate on the experiment's train set instead of its val sets: the gate before
    /// training (docs/math.md), best with --agent-sampling and a --limit.
    #[arg(long)]
    train: bool,
    /// An episode succeeds when its team reward is at least this.
    #[arg(long, default_value_t = 1.0, value_parser = super::values::finite, allow_negative_numbers = true)]
    success_threshold: f64,
    /// Write every sample as a JSON line here: its ids, prompt text, completion, parsed
    /// action, tool call, final answer, rewards and score; failed episodes as one line
    /// each with the component blamed and the error.
    #[arg(long)]
    dump_samples: Option<PathBuf>,
    /// With --dump-samples: add each sample's prompt and response token ids and the
    /// sampling log-probs.
    #[arg(long, requires = "dump_samples")]
    dump_ids: bool,
    /// Where to write the JSON report (default: <output_dir>/eval.json).
    #[arg(long)]
    out: Option<PathBuf>,
    #[command(flatten)]
    overrides: super::Overrides,
    #[command(flatten)]
    plugin_dirs: PluginDirs,
}

pub fn run(args: Args) -> anyhow::Result<ExitCode> {
    // Parsed only: the outputs are taken before plugins are discovered and the
    // experiment's components and files are checked (the slower half of loading).
    let Some(exp) = super::load_parsed(&args.config, &args.overrides) else {
        return Ok(ExitCode::FAILURE);
    };
    // Before the outputs are touched: nothing will be written.
    if args.train && exp.file.data.train.is_none() {
        anyhow::bail!(
            "{}: the experiment has no [data] train set to evaluate on (--train)",
            args.config.display()
        );
    }
    if !args.train && exp.file.data.val.is_empty() {
        anyhow::bail!(
            "{}: the experiment has no [data] val sets to evaluate on",
            args.config.display()
        );
    }
    let out = args
        .out
        .clone()
        .unwrap_or_else(|| exp.output_dir().join("eval.json"));
    // Outputs are checked and locked at the start, before plugins are discovered or
    // any model is loaded: a bad path or a second writer fails now, not after the
    // evaluation, and a second `drmas eval` of the same report started while this one
    // runs is refused naming this process.
    let outputs: Vec<&Path> = std::iter::once(out.as_path())
        .chain(args.dump_samples.as_deref())
        .collect();
    // What the checks and locks add (lock files, the folders they make), taken back if
    // the experiment is refused below: a refusal leaves nothing behind.
    let footprint = drmas::output::Footprint::of_files(&outputs);
    let read = exp.inputs();
    let mut inputs: Vec<Input> = read.iter().map(|(w, p)| Input::new(w, p)).collect();
    if let Some(c) = &args.checkpoint {
        inputs.push(Input::new("--checkpoint", c));
    }
    for path in std::iter::once(&out).chain(args.dump_samples.as_ref()) {
        check_file_target(path)?;
        check_not_an_input(path, &inputs)?;
    }
    // In a data-parallel job rank 0 alone writes; every rank evaluates its share. The
    // writer holds its outputs from here to its end, before it joins a job.
    let root = drmas_dist::World::from_env()?.is_none_or(|w| w.rank == 0);
    let mut locks = Vec::new();
    if root {
        locks.push(OutputLock::file(&out)?);
        if let Some(dump) = &args.dump_samples {
            check_file_target(dump)?;
            if same_file(dump, &out) {
                anyhow::bail!(
                    "--dump-samples and the report are the same file ({}); give them different paths",
                    dump.display()
                );
            }
            locks.push(OutputLock::file(dump)?);
        }
        drmas::output::fault_point(drmas::output::FAULT_OUTPUTS_LOCKED);
    }
    let Some(super::CheckedExperiment { exp, registry, .. }) =
        super::check_parsed(exp, &args.plugin_dirs)
    else {
        footprint.take_back();
        drop(locks);
        return Ok(ExitCode::FAILURE);
    };
    let mut stale = None;
    if root {
        // An earlier run's report and dump must not stay where this run's would be: this
        // run may stop at its failure limit, fail or be killed, and write none.
        let aside = set_aside(&outputs)?;
        for note in aside.notes() {
            errln!("{note}");
        }
        stale = Some(aside);
    }
    let dist = super::dist::join(
        &exp,
        &[
            ("command", "eval".into()),
            ("--k", args.k.to_string()),
            ("--limit", format!("{:?}", args.limit)),
            ("--temperature", args.temperature.to_string()),
            ("--top-p", args.top_p.to_string()),
            ("--agent-sampling", args.agent_sampling.to_string()),
            ("--train", args.train.to_string()),
            ("--success-threshold", args.success_threshold.to_string()),
            ("--checkpoint", format!("{:?}", args.checkpoint)),
            ("--dump-samples", args.dump_samples.is_some().to_string()),
            ("--dump-ids", args.dump_ids.to_string()),
        ],
    )?
    .map(|j| j.job);
    let options = EvalOptions {
        k: args.k as usize,
        limit: args.limit.map(|l| l as usize),
        temperature: args.temperature,
        top_p: args.top_p,
        checkpoint: args.checkpoint.clone(),
        success_threshold: args.success_threshold,
        keep_prompts: args.dump_samples.is_some(),
        on_train: args.train,
        agent_sampling: args.agent_sampling,
        progress: root,
        ..EvalOptions::default()
    };
    let eval = run_eval(&exp, &registry, &options, dist)?;
    if !root {
        return Ok(ExitCode::SUCCESS);
    }
    let report = &eval.report;
    out!("{}", report.table());

    // The samples first: a report that exists claims its samples were written.
    if let Some(path) = &args.dump_samples {
        let rewards: Vec<String> = exp
            .file
            .rewards
            .iter()
            .map(|r| r.component.clone())
            .collect();
        let mut bytes = Vec::new();
        for line in dump_lines(&eval, &rewards, args.dump_ids) {
            serde_json::to_writer(&mut bytes, &line)?;
            bytes.push(b'\n');
        }
        write_atomic(path, &bytes).map_err(|e| anyhow::anyhow!("{}: {e}", path.display()))?;
        errln!("samples: {}", path.display());
    }
    // Whole or absent: scripts check for a report's existence.
    drmas::eval::write_report(&out, report)?;
    errln!("report: {}", out.display());
    if let Some(stale) = stale {
        stale.discard();
    }
    Ok(ExitCode::SUCCESS)
}

/// Whether two output paths name one file (through `..`, `.` or links in their folders).
fn same_file(a: &Path, b: &Path) -> bool {
    let full = |p: &Path| {
        let dir = drmas::output::parent_of(p)
            .canonicalize()
            .unwrap_or_else(|_| drmas::output::parent_of(p).to_path_buf());
        dir.join(p.file_name().unwrap_or_default())
    };
    full(a) == full(b)
}
