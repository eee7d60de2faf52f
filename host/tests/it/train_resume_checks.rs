//! A resume trusts nothing it did not check, and a stop keeps what was trained: an
//! edited experiment is refused with every change listed (or accepted and recorded), a
//! checkpoint's parts are checked against its manifest and against each other, the
//! metrics log must hold each step once, a run stopped by its failure budget keeps its
//! steps in a checkpoint, and a kill while an old checkpoint is pruned leaves only
//! complete `step-*` folders. Each bad input is made the way a user would make it.

use crate::common;

use common::train::{Setup, metrics, quiet, temp_run};
use drmas::plugin::{ComponentId, RewardHandle};
use drmas::train::TrainOptions;
use drmas_plugin_api::{ComponentKind, EpisodeRecord, PluginResult, Reward};
use std::{
    os::unix::process::ExitStatusExt,
    path::{Path, PathBuf},
    process::Command,
    sync::{
        Arc,
        atomic::{AtomicUsize, Ordering},
    },
};

/// Two steps of 2 tasks × 4 episodes out of 4 tasks, a checkpoint every step.
fn setup() -> Setup {
    let mut s = Setup::new("norms/drmas");
    s.questions.truncate(4);
    s.trainer.steps = 2;
    s.trainer.prompts_per_step = 2;
    s.trainer.group_size = 4;
    s.trainer.save_every = 1;
    s.models = vec![("lm", 0.01)];
    // A reward that always varies: every step moves the weights and the moments.
    s.graded = true;
    s
}

fn resume() -> TrainOptions {
    TrainOptions {
        resume: true,
        ..quiet()
    }
}

/// A run folder with a finished two-step run of `s`.
fn trained(s: &Setup) -> (tempfile::TempDir, PathBuf) {
    let (dir, run) = temp_run();
    let mut t = s.trainer(&run, quiet()).unwrap();
    t.run().unwrap();
    (dir, run)
}

fn resume_error(s: &Setup, run: &Path) -> String {
    s.trainer(run, resume())
        .err()
        .expect("the resume is refused")
        .to_string()
}

/// The way back a refused newest checkpoint offers (step 1's is the one before).
const BACK: &str = "to resume from the checkpoint before it (step-000001), move this one out of the checkpoints folder";

fn ckpt(run: &Path, step: u32) -> PathBuf {
    run.join(format!("checkpoints/step-{step:06}"))
}

fn changed(run: &Path, changes: &str) -> String {
    format!(
        "{}: the experiment differs from the one this run was trained with: {changes}; resume with --accept-changes to go on with it (the changes are recorded in {}), or undo them",
        ckpt(run, 2).display(),
        run.join("changes.jsonl").display()
    )
}

#[test]
fn an_edited_experiment_is_refused_on_resume_with_every_change_listed() {
    let s = setup();
    let (_dir, run) = trained(&s);
    let mut edited = setup();
    edited.models = vec![("lm", 0.03)];
    assert_eq!(
        resume_error(&edited, &run),
        changed(&run, "models[lm].lr: 0.01 → 0.03")
    );
    let mut edited = setup();
    edited.trainer.group_size = 2;
    edited.trainer.prompts_per_step = 4;
    assert_eq!(
        resume_error(&edited, &run),
        changed(
            &run,
            "trainer.group_size: 4 → 2; trainer.prompts_per_step: 2 → 4"
        )
    );
    let mut edited = setup();
    edited.normalizer = "norms/grpo";
    assert_eq!(
        resume_error(&edited, &run),
        changed(
            &run,
            "normalizer.component: \"norms/drmas\" → \"norms/grpo\""
        )
    );
    // A shrunk train set: the data file's hash and size.
    let tasks = run.with_extension("tasks.jsonl");
    let size = |p: &Path| std::fs::metadata(p).unwrap().len();
    let four = size(&tasks);
    let mut edited = setup();
    edited.questions.truncate(3);
    let err = resume_error(&edited, &run);
    let three = size(&tasks);
    assert!(three < four, "{three} {four}");
    assert!(err.contains(": data.train: sha256 "), "{err}");
    assert!(err.contains(&format!(" {four} bytes → sha256 ")), "{err}");
    assert!(
        err.contains(&format!(" {three} bytes; resume with --accept-changes")),
        "{err}"
    );
    // Nothing was touched by the refusals: the run resumes as it was, and more steps,
    // a new cadence of checkpoints and other stop limits are no change.
    let mut more = setup();
    more.trainer.steps = 3;
    more.trainer.save_every = 2;
    more.trainer.keep_checkpoints = std::num::NonZeroU32::new(3).unwrap();
    more.trainer.max_consecutive_skips = std::num::NonZeroU32::new(5).unwrap();
    let mut t = more.trainer(&run, resume()).unwrap();
    assert_eq!(t.run().unwrap().steps_done, 3);
    drop(t);
    assert!(!run.join("changes.jsonl").exists());
    // With a decaying learning rate, the steps are the schedule's length: a change.
    let mut cosine = setup();
    cosine.trainer.lr_schedule = drmas::config::ScheduleKind::Cosine;
    let (_dir, run) = trained(&cosine);
    cosine.trainer.steps = 3;
    assert_eq!(
        resume_error(&cosine, &run),
        changed(&run, "trainer.steps: 2 → 3")
    );
}

#[test]
fn accepted_changes_are_recorded_and_become_the_runs_settings() {
    let s = setup();
    let (_dir, run) = trained(&s);
    let mut edited = setup();
    edited.models = vec![("lm", 0.03)];
    edited.trainer.steps = 3;
    let mut t = edited
        .trainer(
            &run,
            TrainOptions {
                accept_changes: true,
                ..resume()
            },
        )
        .unwrap();
    assert_eq!(t.run().unwrap().steps_done, 3);
    drop(t);
    let record = std::fs::read_to_string(run.join("changes.jsonl")).unwrap();
    let lines: Vec<serde_json::Value> = record
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    assert_eq!(lines.len(), 1, "{record}");
    assert_eq!(lines[0]["step"], 2);
    assert_eq!(
        lines[0]["changes"],
        serde_json::json!([{ "key": "models[lm].lr", "old": "0.01", "new": "0.03" }])
    );
    assert_eq!(metrics(&run)[2]["models"]["lm"]["lr"], 0.03);
    // The next checkpoint holds the accepted settings: resuming with them is no change.
    edited.trainer.steps = 4;
    let mut t = edited.trainer(&run, resume()).unwrap();
    assert_eq!(t.run().unwrap().steps_done, 4);
}

/// `step-*` folders and others, sorted.
fn names(dir: &Path) -> Vec<String> {
    let mut names: Vec<String> = std::fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    names.sort();
    names
}

fn flip_a_bit(path: &Path, at: usize) {
    let mut bytes = std::fs::read(path).unwrap();
    bytes[at] ^= 1;
    std::fs::write(path, bytes).unwrap();
}

/// Where a safetensors file's tensor data starts.
fn data_start(path: &Path) -> usize {
    let bytes = std::fs::read(path).unwrap();
    8 + u64::from_le_bytes(bytes[..8].try_into().unwrap()) as usize
}

#[test]
fn a_checkpoint_whose_files_changed_is_refused_naming_the_file() {
    let s = setup();
    // A flipped bit in the optimizer state.
    let (_dir, run) = trained(&s);
    let opt = ckpt(&run, 2).join("lm/optimizer.safetensors");
    flip_a_bit(&opt, data_start(&opt) + 1);
    let err = resume_error(&s, &run);
    let prefix = format!(
        "{}: not a usable checkpoint: {}: sha256 ",
        ckpt(&run, 2).display(),
        opt.display()
    );
    assert!(err.starts_with(&prefix), "{err}");
    assert!(
        err.ends_with(&format!(
            "the file changed after the checkpoint was written; {BACK}"
        )),
        "{err}"
    );
    // The optimizer state of another checkpoint copied in.
    let (_dir, run) = trained(&s);
    let opt = ckpt(&run, 2).join("lm/optimizer.safetensors");
    std::fs::copy(ckpt(&run, 1).join("lm/optimizer.safetensors"), &opt).unwrap();
    assert!(resume_error(&s, &run).starts_with(&format!(
        "{}: not a usable checkpoint: {}: sha256 ",
        ckpt(&run, 2).display(),
        opt.display()
    )));
    // A file of the checkpoint deleted, and one added.
    let (_dir, run) = trained(&s);
    let worker = ckpt(&run, 2).join("lm/worker.json");
    std::fs::remove_file(&worker).unwrap();
    assert_eq!(
        resume_error(&s, &run),
        format!(
            "{}: not a usable checkpoint: {}: listed in MANIFEST.sha256 but missing; {BACK}",
            ckpt(&run, 2).display(),
            worker.display()
        )
    );
    let (_dir, run) = trained(&s);
    let extra = ckpt(&run, 2).join("lm/model-copy.safetensors");
    std::fs::copy(ckpt(&run, 2).join("lm/model.safetensors"), &extra).unwrap();
    assert_eq!(
        resume_error(&s, &run),
        format!(
            "{}: not a usable checkpoint: {}: not listed in MANIFEST.sha256: the file was added after the checkpoint was written; {BACK}",
            ckpt(&run, 2).display(),
            extra.display()
        )
    );
    // The manifest itself deleted.
    let (_dir, run) = trained(&s);
    std::fs::remove_file(ckpt(&run, 2).join("MANIFEST.sha256")).unwrap();
    assert_eq!(
        resume_error(&s, &run),
        format!(
            "{}: not a usable checkpoint: MANIFEST.sha256 is missing (a checkpoint of format 3 has one); {BACK}",
            ckpt(&run, 2).display()
        )
    );
}

#[test]
fn a_checkpoint_whose_parts_disagree_is_refused() {
    let s = setup();
    // A checkpoint renamed: its state says another step than its folder.
    let (_dir, run) = trained(&s);
    std::fs::rename(ckpt(&run, 2), ckpt(&run, 3)).unwrap();
    assert_eq!(
        resume_error(&s, &run),
        format!(
            "{}: not a usable checkpoint: `step` is 2, but the folder is step-000003: the state belongs to another checkpoint; {BACK}",
            ckpt(&run, 3).join("trainer_state.json").display()
        )
    );
    // Checkpoints of an older drmas have no manifest: their parts are still checked
    // against each other. A config edited after the save, against its weights.
    let (_dir, run) = trained(&s);
    as_format_1(&ckpt(&run, 2));
    let config = ckpt(&run, 2).join("lm/config.json");
    edit_json(&config, "num_hidden_layers", serde_json::json!(7));
    let err = resume_error(&s, &run);
    assert!(err.contains(&config.display().to_string()), "{err}");
    assert!(err.contains("num_hidden_layers"), "{err}");
    // ... and against the model it resumes (a size the weights do not show).
    let (_dir, run) = trained(&s);
    as_format_1(&ckpt(&run, 2));
    let config = ckpt(&run, 2).join("lm/config.json");
    edit_json(&config, "rms_norm_eps", serde_json::json!(0.001));
    let err = resume_error(&s, &run);
    assert!(
        err.ends_with(&format!(
            "{}: `rms_norm_eps`: 0.001 here, but the model it is loaded into has 1e-5",
            config.display()
        )),
        "{err}"
    );
    // An optimizer state whose second moments went negative (a flipped sign bit).
    let (_dir, run) = trained(&s);
    as_format_1(&ckpt(&run, 2));
    negate_first_value(
        &ckpt(&run, 2).join("lm/optimizer.safetensors"),
        "exp_avg_sq.",
    );
    let err = resume_error(&s, &run);
    assert!(
        err.contains("holds negative values, which a second moment (a mean of squares) cannot: the file is damaged"),
        "{err}"
    );
    // An untouched format-1 checkpoint resumes (with a note).
    let (_dir, run) = trained(&s);
    as_format_1(&ckpt(&run, 2));
    let mut more = setup();
    more.trainer.steps = 3;
    let mut t = more.trainer(&run, resume()).unwrap();
    assert_eq!(t.run().unwrap().steps_done, 3);
    let state = read_json(&ckpt(&run, 3).join("trainer_state.json"));
    assert_eq!(state["format"], 3);
    assert!(state["fingerprint"]["models[lm].lr"].is_string(), "{state}");
}

fn read_json(path: &Path) -> serde_json::Value {
    serde_json::from_str(&std::fs::read_to_string(path).unwrap()).unwrap()
}

fn edit_json(path: &Path, key: &str, value: serde_json::Value) {
    let mut v = read_json(path);
    v[key] = value;
    std::fs::write(path, serde_json::to_string_pretty(&v).unwrap()).unwrap();
}

/// Makes a checkpoint look like one of an older drmas: no manifest, format 1, no
/// fingerprint.
fn as_format_1(dir: &Path) {
    std::fs::remove_file(dir.join("MANIFEST.sha256")).unwrap();
    let path = dir.join("trainer_state.json");
    let mut v = read_json(&path);
    v["format"] = 1.into();
    v.as_object_mut().unwrap().remove("fingerprint");
    std::fs::write(&path, serde_json::to_string_pretty(&v).unwrap()).unwrap();
}

/// Flips the sign bit of the first f32 of the first tensor whose name starts with
/// `prefix` in a safetensors file.
fn negate_first_value(path: &Path, prefix: &str) {
    let bytes = std::fs::read(path).unwrap();
    let n = u64::from_le_bytes(bytes[..8].try_into().unwrap()) as usize;
    let header: serde_json::Value = serde_json::from_slice(&bytes[8..8 + n]).unwrap();
    let (_, info) = header
        .as_object()
        .unwrap()
        .iter()
        .find(|(k, _)| k.starts_with(prefix))
        .unwrap();
    let offset = info["data_offsets"][0].as_u64().unwrap() as usize;
    let mut bytes = bytes;
    // Little-endian: the sign is the top bit of the fourth byte. A zero would stay
    // zero-ish (-0.0), so write -1.0 outright.
    bytes[8 + n + offset..8 + n + offset + 4].copy_from_slice(&(-1.0f32).to_le_bytes());
    std::fs::write(path, bytes).unwrap();
}

#[test]
fn a_metrics_log_with_a_lost_or_repeated_line_is_refused_naming_the_line() {
    let s = setup();
    let (_dir, run) = trained(&s);
    let log = run.join("metrics.jsonl");
    let text = std::fs::read_to_string(&log).unwrap();
    let lines: Vec<&str> = text.lines().collect();
    let refused = |body: String, message: &str| {
        std::fs::write(&log, body).unwrap();
        assert_eq!(
            resume_error(&s, &run),
            format!(
                "{}: {message}; resuming from {} needs one line for each of steps 1 to 2",
                log.display(),
                ckpt(&run, 2).display()
            )
        );
    };
    refused(
        format!("{}\n", lines[1]),
        "line 1 is step 2, but step 1 has no line before it (a line was lost)",
    );
    refused(
        format!("{}\n{}\n{}\n", lines[0], lines[0], lines[1]),
        "line 2 is step 1 again (its first line is line 1): one of them must go",
    );
    refused(
        format!("{}\n", lines[0]),
        "its last line is step 1 (line 1): the lines of steps 2 to 2 were lost",
    );
    // Put back, it resumes.
    std::fs::write(&log, &text).unwrap();
    let mut more = setup();
    more.trainer.steps = 3;
    assert_eq!(
        more.trainer(&run, resume())
            .unwrap()
            .run()
            .unwrap()
            .steps_done,
        3
    );
    assert_eq!(metrics(&run).len(), 3);
}

#[test]
fn a_run_folder_is_judged_under_its_lock_and_its_files_must_be_files() {
    let s = setup();
    let (_dir, run) = trained(&s);
    // Another process training the folder: a fresh run is told so, not "holds a run".
    let held = drmas::output::OutputLock::run_folder(&run).unwrap();
    let err = s.trainer(&run, quiet()).err().expect("refused").to_string();
    assert_eq!(
        err,
        format!(
            "run folder {} is in use by another drmas process (pid {})",
            run.display(),
            std::process::id()
        )
    );
    drop(held);
    // metrics.jsonl as a folder: said as such, fresh or resumed.
    let (_dir, run) = temp_run();
    std::fs::create_dir_all(run.join("metrics.jsonl")).unwrap();
    let want = format!(
        "{}: is a folder, not the run's metrics log (a file drmas writes one line per step to): move it out of the way",
        run.join("metrics.jsonl").display()
    );
    assert_eq!(s.trainer(&run, quiet()).err().unwrap().to_string(), want);
    assert_eq!(s.trainer(&run, resume()).err().unwrap().to_string(), want);
    let (_dir, run) = temp_run();
    std::fs::create_dir_all(&run).unwrap();
    std::fs::write(run.join("checkpoints"), "").unwrap();
    assert_eq!(
        s.trainer(&run, resume()).err().unwrap().to_string(),
        format!(
            "{}: is a file, not the run's folder of checkpoints: move it out of the way",
            run.join("checkpoints").display()
        )
    );
}

/// Scores like the setup's reward until `ok` episodes are scored, then NaN: a reward
/// plugin that breaks in the middle of a run. Named as the setup's reward, so a resume
/// with the working one is the same experiment.
struct BreaksAfter {
    inner: common::train::Targets,
    scored: Arc<AtomicUsize>,
    ok: usize,
}

impl Reward for BreaksAfter {
    fn score(&self, episode: &EpisodeRecord) -> PluginResult<f32> {
        if self.scored.fetch_add(1, Ordering::SeqCst) >= self.ok {
            return Ok(f32::NAN);
        }
        self.inner.score(episode)
    }
}

#[test]
fn a_run_stopped_by_its_failure_budget_keeps_its_steps_in_a_checkpoint() {
    let mut s = setup();
    s.trainer.steps = 3;
    s.trainer.save_every = 0;
    let (_dir, run) = temp_run();
    let mut team = s.team();
    team.rewards = vec![drmas::rollout::RewardSlot::team(
        RewardHandle::new(
            ComponentId {
                kind: ComponentKind::Reward,
                name: "test/targets".into(),
                version: "0".into(),
                source: "test".into(),
            },
            Box::new(BreaksAfter {
                inner: common::train::Targets {
                    targets: s
                        .agents
                        .iter()
                        .map(|(a, _, t)| (a.to_string(), t.clone()))
                        .collect(),
                    scale: 1.0,
                    scaled_question: None,
                    graded: false,
                },
                scored: Arc::new(AtomicUsize::new(0)),
                // The episodes of one step.
                ok: 8,
            }),
        ),
        1.0,
    )];
    let err = s
        .trainer_with(&run, team, quiet())
        .unwrap()
        .run()
        .unwrap_err()
        .to_string();
    assert!(err.starts_with("step 2: training stopped: "), "{err}");
    assert!(
        err.ends_with(&format!(
            "; step 1 is kept in {} (fix the cause, then continue with --resume)",
            ckpt(&run, 1).display()
        )),
        "{err}"
    );
    // The checkpoint and the log agree: one step, and the resume goes on from it.
    assert_eq!(metrics(&run).len(), 1);
    assert_eq!(
        read_json(&ckpt(&run, 1).join("trainer_state.json"))["step"],
        1
    );
    let mut t = s.trainer(&run, resume()).unwrap();
    assert_eq!(t.steps_done(), 1);
    assert_eq!(t.run().unwrap().steps_done, 3);
    let steps: Vec<u64> = metrics(&run)
        .iter()
        .map(|l| l["step"].as_u64().unwrap())
        .collect();
    assert_eq!(steps, [1, 2, 3]);
}

// ---- through the command line: the experiment file, its data and model files ----

struct Run {
    _dir: tempfile::TempDir,
    dir: PathBuf,
    config: PathBuf,
    run: PathBuf,
}

const TASKS: usize = 4;

fn tasks(n: usize, plus: usize) -> String {
    (0..n)
        .map(|i| {
            format!(
                "{{\"id\": \"t{i}\", \"question\": \"What is {i} + {plus}?\", \"answer\": \"{}\"}}\n",
                i + plus
            )
        })
        .collect()
}

/// One solver on the tiny chat model; `extra` goes at the end of `[trainer]`.
fn experiment_text(dir: &Path, model: &Path, extra: &str) -> String {
    format!(
        r#"[experiment]
name = "resume-checks"
seed = 5
output_dir = {run:?}

[[models]]
id = "lm"
path = {model:?}
lr = 1e-3

[[agents]]
name = "solver"
component = "math/solver"
model = "lm"
sampling = {{ max_new_tokens = 4 }}
[agents.config]
verifier = ""

[workflow]
entry = "solver"

[[rewards]]
component = "math/boxed"

[normalizer]
component = "norms/grpo"

[data]
train = {{ path = {data:?} }}
val = [{{ path = {data:?}, limit = 1 }}]

[trainer]
steps = 3
prompts_per_step = 1
group_size = 2
save_every = 1
keep_checkpoints = 1
{extra}
[pool]
devices = ["cpu"]
"#,
        run = dir.join("run").display().to_string(),
        model = model.display().to_string(),
        data = dir.join("tasks.jsonl").display().to_string(),
    )
}

fn cli_experiment() -> Run {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().to_path_buf();
    std::fs::write(path.join("tasks.jsonl"), tasks(TASKS, 1)).unwrap();
    let config = path.join("exp.toml");
    let model = common::tiny_models().join("tiny-chat");
    std::fs::write(&config, experiment_text(&path, &model, "")).unwrap();
    Run {
        run: path.join("run"),
        config,
        dir: path,
        _dir: dir,
    }
}

fn drmas(args: &[&std::ffi::OsStr]) -> std::process::Output {
    Command::new(env!("CARGO_BIN_EXE_drmas"))
        .env_remove("DRMAS_PLUGIN_PATH")
        .env_remove("DRMAS_FAULT_POINT")
        .args(args)
        .output()
        .unwrap()
}

fn train(r: &Run, extra: &[&str]) -> std::process::Output {
    let mut args: Vec<&std::ffi::OsStr> = vec!["train".as_ref(), r.config.as_os_str()];
    args.extend(extra.iter().map(std::ffi::OsStr::new));
    args.push("--quiet".as_ref());
    drmas(&args)
}

fn stderr(out: &std::process::Output) -> String {
    String::from_utf8_lossy(&out.stderr).into_owned()
}

fn steps_logged(run: &Path) -> usize {
    std::fs::read_to_string(run.join("metrics.jsonl"))
        .unwrap_or_default()
        .lines()
        .count()
}

#[test]
fn a_kill_while_pruning_leaves_only_complete_checkpoints_and_a_known_leftover() {
    for point in ["prune-renamed", "prune-partial"] {
        let r = cli_experiment();
        // Step 2's checkpoint retires step 1's (keep_checkpoints = 1): die doing so.
        let out = Command::new(env!("CARGO_BIN_EXE_drmas"))
            .env_remove("DRMAS_PLUGIN_PATH")
            .env("DRMAS_FAULT_POINT", point)
            .args(["train".as_ref(), r.config.as_os_str(), "--quiet".as_ref()])
            .output()
            .unwrap();
        assert_eq!(
            out.status.signal(),
            Some(libc::SIGKILL),
            "{point}: {}",
            stderr(&out)
        );
        let dir = r.run.join("checkpoints");
        assert_eq!(
            names(&dir),
            [".step-000001.retired", "step-000002"],
            "{point}"
        );
        // Every `step-*` folder is a checkpoint an evaluation loads.
        let report = r.dir.join("eval.json");
        let out = drmas(&[
            "eval".as_ref(),
            r.config.as_os_str(),
            "--checkpoint".as_ref(),
            dir.join("step-000002").as_os_str(),
            "--k".as_ref(),
            "1".as_ref(),
            "--limit".as_ref(),
            "1".as_ref(),
            "--out".as_ref(),
            report.as_os_str(),
        ]);
        assert!(out.status.success(), "{point}: {}", stderr(&out));
        // The next writer removes the leftover.
        let out = train(&r, &["--resume"]);
        assert!(out.status.success(), "{point}: {}", stderr(&out));
        assert_eq!(names(&dir), ["step-000003"], "{point}");
        assert_eq!(steps_logged(&r.run), 3, "{point}");
    }
}

/// The `WARN` lines of a command's log (tracing's format: ` WARN message`).
fn warnings(out: &std::process::Output) -> Vec<String> {
    stderr(out)
        .lines()
        .filter_map(|l| l.trim_start().strip_prefix("WARN "))
        .map(str::to_string)
        .collect()
}

/// A `step-*` folder its manifest does not vouch for — its trainer state deleted by a
/// kill while it was being deleted (by an older drmas, or by hand), or a part of it
/// gone — is not a checkpoint: the next checkpoint writer removes it and says so, and
/// the checkpoints it keeps are whole.
#[test]
fn the_next_writer_removes_a_half_deleted_checkpoint_and_says_so() {
    let r = cli_experiment();
    let keep = ["--set", "trainer.keep_checkpoints=3"];
    let out = train(&r, &[&["--steps", "2"][..], &keep[..]].concat());
    assert!(out.status.success(), "{}", stderr(&out));
    let dir = r.run.join("checkpoints");
    assert_eq!(names(&dir), ["step-000001", "step-000002"]);
    // Step 1 half deleted: its trainer state went first.
    std::fs::remove_file(ckpt(&r.run, 1).join("trainer_state.json")).unwrap();
    let out = train(&r, &[&["--resume"][..], &keep[..]].concat());
    assert!(out.status.success(), "{}", stderr(&out));
    assert_eq!(
        warnings(&out),
        [format!(
            "removing {}: not a complete checkpoint (MANIFEST.sha256 lists trainer_state.json, which is missing); a deletion that did not finish left it",
            ckpt(&r.run, 1).display()
        )]
    );
    assert_eq!(names(&dir), ["step-000002", "step-000003"]);
    // Step 2 loses a model's weights (its state is still there): removed by step 4's
    // writer, while the newest checkpoint resumes as always.
    std::fs::remove_file(ckpt(&r.run, 2).join("lm/model.safetensors")).unwrap();
    let out = train(&r, &[&["--resume", "--steps", "4"][..], &keep[..]].concat());
    assert!(out.status.success(), "{}", stderr(&out));
    assert_eq!(
        warnings(&out),
        [format!(
            "removing {}: not a complete checkpoint (MANIFEST.sha256 lists lm/model.safetensors, which is missing); a deletion that did not finish left it",
            ckpt(&r.run, 2).display()
        )]
    );
    assert_eq!(names(&dir), ["step-000003", "step-000004"]);
    // A folder with neither a trainer state nor a manifest (a deletion that got further).
    let stray = ckpt(&r.run, 1);
    std::fs::create_dir_all(stray.join("lm")).unwrap();
    std::fs::write(stray.join("lm/config.json"), "{}").unwrap();
    let out = train(&r, &[&["--resume", "--steps", "5"][..], &keep[..]].concat());
    assert!(out.status.success(), "{}", stderr(&out));
    assert_eq!(
        warnings(&out),
        [format!(
            "removing {}: not a complete checkpoint (no trainer_state.json and no MANIFEST.sha256); a deletion that did not finish left it",
            stray.display()
        )]
    );
    assert_eq!(names(&dir), ["step-000003", "step-000004", "step-000005"]);
    assert_eq!(steps_logged(&r.run), 5);
}

fn edit(r: &Run, from: &str, to: &str) {
    let text = std::fs::read_to_string(&r.config).unwrap();
    assert!(text.contains(from), "{from}");
    std::fs::write(&r.config, text.replacen(from, to, 1)).unwrap();
}

/// The refusal of a resume after an edit: names the key, old → new.
fn refused_with(r: &Run, words: &[&str]) {
    let out = train(r, &["--resume"]);
    let text = stderr(&out);
    assert!(!out.status.success(), "{text}");
    assert!(
        text.contains("the experiment differs from the one this run was trained with: "),
        "{text}"
    );
    for w in words {
        assert!(text.contains(w), "{w}: {text}");
    }
    assert!(text.contains("resume with --accept-changes"), "{text}");
}

#[test]
fn edits_to_the_experiment_file_its_data_and_its_model_are_listed_on_resume() {
    let r = cli_experiment();
    let out = train(&r, &["--steps", "1"]);
    assert!(out.status.success(), "{}", stderr(&out));
    let original = std::fs::read_to_string(&r.config).unwrap();
    // A reformatted file with a default spelled out is the same experiment, and so is
    // one that only says where the model runs, how often to evaluate and how to cut
    // the update into pieces.
    let reformatted = original
        .replace("lr = 1e-3", "weight_decay = 0.01 # the default\nlr = 0.001")
        .replace(
            "[workflow]\n",
            "# the workflow\n[workflow]\nmax_turns = 4\n",
        )
        .replace(
            "keep_checkpoints = 1\n",
            "keep_checkpoints = 1\neval_every = 2\neval_k = 1\nmicro_batch_tokens = 2048\n",
        )
        .replace("id = \"lm\"\n", "id = \"lm\"\ndevice = \"cpu\"\n")
        .replace(
            "devices = [\"cpu\"]",
            "devices = [\"cpu\"]\nmemory_limit_gib = 64",
        );
    assert_eq!(reformatted.matches("memory_limit_gib").count(), 1);
    assert_eq!(reformatted.matches("eval_every").count(), 1);
    assert_eq!(reformatted.matches("device = \"cpu\"").count(), 1);
    std::fs::write(&r.config, &reformatted).unwrap();
    let out = train(&r, &["--resume", "--steps", "2"]);
    assert!(out.status.success(), "{}", stderr(&out));
    assert!(!r.run.join("changes.jsonl").exists());
    std::fs::write(&r.config, &original).unwrap();

    edit(&r, "lr = 1e-3", "lr = 2e-3");
    refused_with(&r, &["models[lm].lr: 0.001 → 0.002"]);
    std::fs::write(&r.config, &original).unwrap();
    edit(
        &r,
        "component = \"math/boxed\"",
        "component = \"math/gsm8k\"",
    );
    refused_with(
        &r,
        &["rewards[0].component: \"math/boxed\" → \"math/gsm8k\""],
    );
    std::fs::write(&r.config, &original).unwrap();
    // dtype: float32 → bfloat16 on the CPU.
    edit(&r, "lr = 1e-3", "lr = 1e-3\ndtype = \"bf16\"");
    refused_with(&r, &["models[lm].dtype: f32 → bf16"]);
    std::fs::write(&r.config, &original).unwrap();

    // The data: shrunk, then replaced by as many rows of other tasks.
    let data = r.dir.join("tasks.jsonl");
    let rows = std::fs::read_to_string(&data).unwrap();
    std::fs::write(&data, tasks(TASKS - 1, 1)).unwrap();
    refused_with(&r, &["data.train: sha256 "]);
    std::fs::write(&data, tasks(TASKS, 2)).unwrap();
    refused_with(&r, &["data.train: sha256 "]);
    std::fs::write(&data, &rows).unwrap();

    // The model path pointing at other weights of the same shapes.
    let other = r.dir.join("other-model");
    std::fs::create_dir(&other).unwrap();
    for entry in std::fs::read_dir(common::tiny_models().join("tiny-chat")).unwrap() {
        let p = entry.unwrap().path();
        if p.is_file() {
            std::fs::copy(&p, other.join(p.file_name().unwrap())).unwrap();
        }
    }
    let weights = other.join("model.safetensors");
    flip_a_bit(&weights, data_start(&weights));
    let model = common::tiny_models()
        .join("tiny-chat")
        .display()
        .to_string();
    edit(
        &r,
        &format!("path = {model:?}"),
        &format!("path = {:?}", other.display().to_string()),
    );
    refused_with(&r, &["models[lm].files[model.safetensors]: sha256 "]);
    // Accepted: recorded in the run folder, and the run goes on.
    let out = train(&r, &["--resume", "--accept-changes"]);
    assert!(out.status.success(), "{}", stderr(&out));
    let record = std::fs::read_to_string(r.run.join("changes.jsonl")).unwrap();
    assert_eq!(record.lines().count(), 1, "{record}");
    assert!(
        record.contains("models[lm].files[model.safetensors]"),
        "{record}"
    );
    assert_eq!(steps_logged(&r.run), 3);
}

#[test]
fn a_bf16_run_resumes_and_its_masters_tell_an_optimizer_state_of_other_weights() {
    let r = cli_experiment();
    // bfloat16 weights with float32 masters; an entropy bonus moves them every step.
    edit(&r, "lr = 1e-3", "lr = 1e-3\ndtype = \"bf16\"");
    edit(
        &r,
        "keep_checkpoints = 1",
        "keep_checkpoints = 2\nentropy_coef = 0.01",
    );
    let out = train(&r, &["--steps", "2"]);
    assert!(out.status.success(), "{}", stderr(&out));
    // Step 1's optimizer state in step 2's checkpoint, in one without a manifest (an
    // older drmas): its master weights do not round to step 2's weights.
    let dir = r.run.join("checkpoints");
    let step2 = dir.join("step-000002");
    as_format_1(&step2);
    let opt = step2.join("lm/optimizer.safetensors");
    let saved = std::fs::read(&opt).unwrap();
    std::fs::copy(dir.join("step-000001/lm/optimizer.safetensors"), &opt).unwrap();
    let out = train(&r, &["--resume", "--steps", "3"]);
    let text = stderr(&out);
    assert!(!out.status.success(), "{text}");
    assert!(
        text.contains("optimizer state `master.")
            && text.contains(
                "does not round to the parameter's weights: it was saved with other weights"
            ),
        "{text}"
    );
    // Its own state resumes.
    std::fs::write(&opt, saved).unwrap();
    let out = train(&r, &["--resume", "--steps", "3"]);
    assert!(out.status.success(), "{}", stderr(&out));
    assert_eq!(steps_logged(&r.run), 3);
}
