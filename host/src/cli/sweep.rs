//! `drmas sweep SWEEP.toml`: every arm × seed of a base experiment trained and its final
//! checkpoint evaluated, each run a `drmas train` and a `drmas eval` process of this
//! same binary (one run's memory is given back when it ends, and a run can be resumed
//! alone), then the report. A killed sweep continues where it stopped: evaluated runs
//! are kept, trained ones are evaluated, an interrupted one resumes from its newest
//! checkpoint.

use super::PluginDirs;
use drmas::sweep::{self, RunPlan, RunState, Sweep, child_log::ChildLog};
use std::{
    io::PipeReader,
    os::unix::process::CommandExt,
    path::{Path, PathBuf},
    process::{Child, Command, ExitCode, Stdio},
    time::{Duration, Instant},
};

#[derive(clap::Args)]
pub struct Args {
    /// The sweep file (docs/sweeps.md).
    sweep: PathBuf,
    /// Say which runs are done, under way or left, and run nothing.
    #[arg(long, conflicts_with_all = ["report", "jobs"])]
    status: bool,
    /// Write the report of the runs done so far (a partial one says so) and run nothing.
    #[arg(long, conflicts_with = "jobs")]
    report: bool,
    /// Runs at once, instead of the file's `[sweep] jobs`.
    #[arg(long, value_parser = clap::value_parser!(u32).range(1..))]
    jobs: Option<u32>,
    #[command(flatten)]
    plugin_dirs: PluginDirs,
}

pub fn run(args: Args) -> anyhow::Result<ExitCode> {
    let sweep = match sweep::load_sweep(&args.sweep) {
        Ok(s) => s,
        Err(errors) => {
            errln!("{errors}");
            return Ok(ExitCode::FAILURE);
        }
    };
    let runs = match sweep::plan(&sweep) {
        Ok(r) => r,
        Err(errors) => {
            errln!("{errors}");
            return Ok(ExitCode::FAILURE);
        }
    };
    let dir = sweep.output_dir();
    let tasks = sweep::plan::eval_tasks_by_arm(&runs);
    let changes = |r: &RunPlan| r.changes(&sweep, tasks.get(&r.arm).and_then(|t| t.as_ref().ok()));
    if args.status {
        print_status(&sweep, &runs, &changes);
        return Ok(ExitCode::SUCCESS);
    }
    if !check_components(&runs, &args.plugin_dirs) {
        return Ok(ExitCode::FAILURE);
    }
    if let Err(errors) = sweep::plan::check_verdicts(&sweep, &runs, &tasks) {
        errln!("{errors}");
        return Ok(ExitCode::FAILURE);
    }
    // A run made with other settings than the file asks now is neither reported nor
    // run over: the user says which.
    let changed: Vec<(&RunPlan, Vec<String>)> = runs
        .iter()
        .map(|r| (r, changes(r)))
        .filter(|(_, c)| !c.is_empty())
        .collect();
    if let Some(message) = sweep::plan::changed_message(&sweep, &changed) {
        errln!("error: {message}");
        return Ok(ExitCode::FAILURE);
    }
    if args.report {
        std::fs::create_dir_all(&dir)?;
        return report(&sweep, &runs, &dir);
    }
    let _lock = drmas::output::OutputLock::folder(&dir, "sweep folder")?;
    // The sweep as it ran, beside its runs.
    drmas::output::write_atomic(&dir.join("sweep.toml"), sweep.text.as_bytes())?;
    let jobs = args.jobs.unwrap_or(sweep.file.sweep.jobs).max(1) as usize;
    let outcome = Scheduler::new(&sweep, &runs, &dir, jobs, &args.plugin_dirs)?.run()?;
    match outcome {
        Outcome::Stopped => {
            errln!(
                "sweep stopped; run the same command again to continue ({} of {} runs done)",
                runs.iter()
                    .filter(|r| r.state() == RunState::Evaluated)
                    .count(),
                runs.len()
            );
            Ok(ExitCode::from(130))
        }
        Outcome::Failed(failed) => {
            for f in &failed {
                errln!("failed: {f}");
            }
            errln!(
                "{} run(s) failed; fix the cause and run the same command again (finished runs are kept)",
                failed.len()
            );
            Ok(ExitCode::FAILURE)
        }
        Outcome::Done => report(&sweep, &runs, &dir),
    }
}

fn report(sweep: &Sweep, runs: &[RunPlan], dir: &Path) -> anyhow::Result<ExitCode> {
    let (report, written) = sweep::write_report(sweep, runs, dir).map_err(anyhow::Error::msg)?;
    if !report.complete {
        errln!(
            "PARTIAL report: {} of {} runs are done",
            report.runs_done,
            report.runs_total
        );
    }
    for v in &report.verdicts {
        outln!("{}", v.line);
    }
    for path in written {
        errln!("wrote {}", path.display());
    }
    Ok(ExitCode::SUCCESS)
}

fn print_status(sweep: &Sweep, runs: &[RunPlan], changes: &dyn Fn(&RunPlan) -> Vec<String>) {
    outln!(
        "sweep {} ({}): {} runs",
        sweep.file.sweep.name,
        sweep.output_dir().display(),
        runs.len()
    );
    let mut done = 0;
    for r in runs {
        let state = r.state();
        done += usize::from(state == RunState::Evaluated);
        let changed = changes(r);
        let mut describe = state.describe(r.steps);
        if !changed.is_empty() {
            describe.push_str(&format!(
                " (CHANGED since: {}; see `drmas sweep` without --status)",
                changed.join("; ")
            ));
        }
        outln!("  {:<24} {:<52} {}", r.label(), describe, r.dir.display());
    }
    outln!("{done} of {} done", runs.len());
}

/// Every arm's components and paths resolve (the seed changes neither): checked once per
/// arm before anything runs.
fn check_components(runs: &[RunPlan], plugin_dirs: &PluginDirs) -> bool {
    let mut ok = true;
    let mut seen = std::collections::BTreeSet::new();
    for r in runs {
        if !seen.insert(r.arm.clone()) {
            continue;
        }
        let exp = &r.experiment;
        let registry = match plugin_dirs.discover(&exp.file.plugins) {
            Ok(reg) => reg,
            Err(e) => {
                errln!("error: {e}");
                return false;
            }
        };
        if let Err(e) = drmas::config::check_components(exp, &registry) {
            errln!("arm `{}`:\n{e}", r.arm);
            ok = false;
        }
        if let Err(e) = drmas::config::check_paths(exp) {
            errln!("arm `{}`:\n{e}", r.arm);
            ok = false;
        }
    }
    ok
}

enum Outcome {
    Done,
    Stopped,
    Failed(Vec<String>),
}

#[derive(Clone, Copy, PartialEq, Eq)]
enum Phase {
    Train,
    Eval,
}

struct Running<'a> {
    run: &'a RunPlan,
    phase: Phase,
    child: Child,
    /// The child's output on its way to the log, and its first error line.
    log: ChildLog,
    started: Instant,
    last_step: u64,
}

struct Scheduler<'a> {
    sweep: &'a Sweep,
    queue: std::collections::VecDeque<&'a RunPlan>,
    total: usize,
    logs: PathBuf,
    jobs: usize,
    plugin_dirs: &'a PluginDirs,
    exe: PathBuf,
}

impl<'a> Scheduler<'a> {
    fn new(
        sweep: &'a Sweep,
        runs: &'a [RunPlan],
        dir: &Path,
        jobs: usize,
        plugin_dirs: &'a PluginDirs,
    ) -> anyhow::Result<Self> {
        let logs = dir.join("logs");
        std::fs::create_dir_all(&logs)?;
        let queue = runs
            .iter()
            .filter(|r| r.state() != RunState::Evaluated)
            .collect();
        Ok(Self {
            sweep,
            queue,
            total: runs.len(),
            logs,
            jobs,
            plugin_dirs,
            exe: std::env::current_exe()?,
        })
    }

    /// The child's command, its output (standard output and error, in order) going to
    /// the pipe whose read end comes back.
    fn command(&self, run: &RunPlan, phase: Phase) -> anyhow::Result<(Command, PipeReader)> {
        let mut c = Command::new(&self.exe);
        let base = &self.sweep.base;
        let eval = &self.sweep.file.eval;
        match phase {
            Phase::Train => {
                c.arg("train").arg(base);
                for o in &run.overrides {
                    c.arg("--set").arg(sweep::plan::as_arg(o));
                }
                // A fresh folder starts at step 0; a killed run continues.
                c.arg("--resume");
            }
            Phase::Eval => {
                c.arg("eval").arg(base);
                for o in run.overrides.iter().chain(&run.eval_overrides) {
                    c.arg("--set").arg(sweep::plan::as_arg(o));
                }
                c.arg("--checkpoint")
                    .arg(run.final_checkpoint())
                    .arg("--k")
                    .arg(eval.k.to_string())
                    .arg("--temperature")
                    .arg(eval.temperature.to_string())
                    .arg("--top-p")
                    .arg(eval.top_p.to_string())
                    .arg("--success-threshold")
                    .arg(eval.success_threshold.to_string())
                    .arg("--out")
                    .arg(run.eval_file());
            }
        }
        for d in &self.plugin_dirs.dirs {
            c.arg("--plugin-dir").arg(d);
        }
        if self.plugin_dirs.allow_untrusted {
            c.arg("--allow-untrusted-plugins");
        }
        // Runs side by side share the cores.
        if self.jobs > 1 && std::env::var_os("OMP_NUM_THREADS").is_none() {
            let cores = std::thread::available_parallelism().map_or(1, |n| n.get());
            c.env("OMP_NUM_THREADS", (cores / self.jobs).max(1).to_string());
        }
        // Through a pipe the sweep copies to the log: the child's writes never fail on a
        // full disk, and its first error line reaches the sweep's summary.
        let (reader, writer) = std::io::pipe()?;
        c.stdin(Stdio::null())
            .stdout(writer.try_clone()?)
            .stderr(writer);
        // SAFETY: prctl is async-signal-safe; it makes the kernel kill the child when
        // this process dies, so a killed sweep leaves no run holding its folder.
        unsafe {
            c.pre_exec(|| {
                libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGKILL);
                Ok(())
            });
        }
        Ok((c, reader))
    }

    fn start(&self, run: &'a RunPlan) -> anyhow::Result<Running<'a>> {
        let phase = match run.state() {
            RunState::Trained => Phase::Eval,
            _ => Phase::Train,
        };
        self.spawn(run, phase)
    }

    fn spawn(&self, run: &'a RunPlan, phase: Phase) -> anyhow::Result<Running<'a>> {
        let log_path = self.logs.join(format!("{}-seed-{}.log", run.arm, run.seed));
        let (mut command, output) = self.command(run, phase)?;
        let child = command.spawn()?;
        // The write ends go with the command: the output ends when the child's does.
        drop(command);
        let log = ChildLog::start(output, &log_path);
        let what = match phase {
            Phase::Train => match run.state() {
                RunState::Training {
                    checkpoint: Some(c),
                    ..
                } => format!("training (resuming after step {c})"),
                _ => "training".into(),
            },
            Phase::Eval => "evaluating".into(),
        };
        errln!(
            "{}: {what}; log {}",
            run.label(),
            self.logs
                .join(format!("{}-seed-{}.log", run.arm, run.seed))
                .display()
        );
        // Progress lines start past the steps a resume keeps (it redoes the rest).
        let last_step = match run.state() {
            RunState::Training {
                checkpoint: Some(c),
                ..
            } => u64::from(c),
            _ => 0,
        };
        Ok(Running {
            run,
            phase,
            child,
            log,
            started: Instant::now(),
            last_step,
        })
    }

    fn run(mut self) -> anyhow::Result<Outcome> {
        drmas::train::signal::install();
        let mut running: Vec<Running<'a>> = Vec::new();
        let mut failed = Vec::new();
        let mut stopping = false;
        let started = Instant::now();
        loop {
            if drmas::train::signal::requested() && !stopping {
                stopping = true;
                errln!("stopping: asking the runs under way to stop at a safe point");
                for r in &running {
                    // SAFETY: kill with a child's pid, which we have not reaped yet.
                    unsafe { libc::kill(r.child.id() as libc::pid_t, libc::SIGTERM) };
                }
            }
            while !stopping && running.len() < self.jobs {
                let Some(run) = self.queue.pop_front() else {
                    break;
                };
                running.push(self.start(run)?);
            }
            if running.is_empty() {
                break;
            }
            std::thread::sleep(Duration::from_millis(500));
            let mut i = 0;
            while i < running.len() {
                let r = &mut running[i];
                if r.phase == Phase::Train {
                    report_progress(r);
                }
                let Some(status) = r.child.try_wait()? else {
                    i += 1;
                    continue;
                };
                let r = running.swap_remove(i);
                let took = fmt_duration(r.started.elapsed());
                let (run, phase) = (r.run, r.phase);
                let log = r.log.path().to_path_buf();
                let said = r.log.finish(Duration::from_secs(5));
                if status.success()
                    && let Some(e) = &said.log_error
                {
                    errln!("warning: {}: {e}", run.label());
                }
                match (status.success(), phase) {
                    (true, Phase::Train) if run.state() == RunState::Trained => {
                        errln!("{}: trained in {took}", run.label());
                        if !stopping {
                            running.push(self.spawn(run, Phase::Eval)?);
                        }
                    }
                    (true, Phase::Eval) if run.state() == RunState::Evaluated => {
                        let done = self.total - self.queue.len() - running.len();
                        errln!(
                            "{}: evaluated in {took} ({done} of {} runs done or under way, {} elapsed)",
                            run.label(),
                            self.total,
                            fmt_duration(started.elapsed())
                        );
                    }
                    _ if stopping || status.code() == Some(130) => {
                        stopping = true;
                        errln!(
                            "{}: stopped ({})",
                            run.label(),
                            run.state().describe(run.steps)
                        );
                    }
                    _ => {
                        failed.push(format!(
                            "{}: {} exited with {status}; {}; see {}",
                            run.label(),
                            match phase {
                                Phase::Train => "drmas train",
                                Phase::Eval => "drmas eval",
                            },
                            said.describe(),
                            log.display()
                        ));
                        errln!("{}", failed.last().expect("just pushed"));
                    }
                }
            }
        }
        Ok(if !failed.is_empty() {
            Outcome::Failed(failed)
        } else if stopping {
            Outcome::Stopped
        } else {
            Outcome::Done
        })
    }
}

/// A line when a training run's metrics gain a step.
fn report_progress(r: &mut Running<'_>) {
    let Ok(rows) = drmas::sweep::collect::read_steps(&r.run.metrics_file()) else {
        return;
    };
    let Some(last) = rows.last() else { return };
    if u64::from(last.step) > r.last_step {
        r.last_step = u64::from(last.step);
        errln!(
            "{}: step {}/{} (reward {:.3}, {} so far)",
            r.run.label(),
            last.step,
            r.run.steps,
            last.reward_mean.unwrap_or(f64::NAN),
            fmt_duration(r.started.elapsed())
        );
    }
}

fn fmt_duration(d: Duration) -> String {
    let s = d.as_secs();
    if s >= 3600 {
        format!("{}h {:02}m", s / 3600, (s % 3600) / 60)
    } else if s >= 60 {
        format!("{}m {:02}s", s / 60, s % 60)
    } else {
        format!("{:.1}s", d.as_secs_f64())
    }
}
