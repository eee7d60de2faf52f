//! Outputs are whole or absent, and never clobber what they should not: the report,
//! the sample dump, an imported model and the trainer's checkpoints and metrics, each
//! with the process killed (SIGKILL, through `DRMAS_FAULT_POINT`) at every step of its
//! write; the output lock; output paths checked before any work.

use crate::common;
use crate::common::process::Group;

use std::{
    os::unix::process::ExitStatusExt,
    path::{Path, PathBuf},
    process::{Command, Output},
};

fn drmas() -> Command {
    let mut c = Command::new(env!("CARGO_BIN_EXE_drmas"));
    c.env_remove("DRMAS_PLUGIN_PATH")
        .env_remove("DRMAS_FAULT_POINT");
    c
}

fn killed(out: &Output) -> bool {
    out.status.signal() == Some(libc::SIGKILL)
}

fn stderr(out: &Output) -> String {
    String::from_utf8_lossy(&out.stderr).trim_end().to_string()
}

/// Names in `dir` that a finished writer should not have left (temporaries, old
/// folders waiting for removal).
fn leftovers(dir: &Path) -> Vec<String> {
    std::fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .filter(|n| n.contains(".tmp-") || n.contains(".old-"))
        .collect()
}

/// A solver-only math experiment on the tiny chat model over 3 tasks.
struct Eval {
    dir: tempfile::TempDir,
    config: PathBuf,
}

fn eval_experiment() -> Eval {
    let model = common::tiny_models().join("tiny-chat");
    let dir = tempfile::tempdir().unwrap();
    let data = dir.path().join("tasks.jsonl");
    let rows: String = (0..3)
        .map(|i| {
            format!(
                "{{\"id\": \"t{i}\", \"question\": \"What is {i} + 1?\", \"answer\": \"{}\"}}\n",
                i + 1
            )
        })
        .collect();
    std::fs::write(&data, rows).unwrap();
    let config = dir.path().join("exp.toml");
    std::fs::write(
        &config,
        format!(
            r#"
[experiment]
name = "outputs"
output_dir = {out:?}
[[models]]
id = "lm"
path = {model:?}
[[agents]]
name = "solver"
component = "math/solver"
model = "lm"
sampling = {{ max_new_tokens = 6 }}
[agents.config]
verifier = ""
[workflow]
entry = "solver"
[[rewards]]
component = "math/boxed"
[normalizer]
component = "norms/grpo"
[data]
val = [{{ path = {data:?} }}]
[pool]
devices = ["cpu"]
"#,
            out = dir.path().join("run").display().to_string(),
            model = model.display().to_string(),
            data = data.display().to_string(),
        ),
    )
    .unwrap();
    Eval { dir, config }
}

fn eval(e: &Eval, extra: &[&std::ffi::OsStr], fault: Option<&str>) -> Output {
    let mut c = drmas();
    c.arg("eval").arg(&e.config).args(extra);
    if !extra.iter().any(|a| *a == "--k") {
        c.args(["--k", "2"]);
    }
    if let Some(point) = fault {
        c.env("DRMAS_FAULT_POINT", point);
    }
    c.output().unwrap()
}

#[test]
fn report_and_samples_are_old_or_new_whatever_the_moment_of_a_kill() {
    let e = eval_experiment();
    let report = e.dir.path().join("out/report.json");
    let samples = e.dir.path().join("out/samples.jsonl");
    let args = [
        "--out".as_ref(),
        report.as_os_str(),
        "--dump-samples".as_ref(),
        samples.as_os_str(),
    ];
    // A first run shows what new outputs look like.
    let first = eval(&e, &args, None);
    assert!(first.status.success(), "{}", stderr(&first));
    let sample_lines = std::fs::read_to_string(&samples).unwrap().lines().count();
    assert_eq!(sample_lines, 6);
    let is_new_report = |bytes: &[u8]| {
        serde_json::from_slice::<serde_json::Value>(bytes).is_ok_and(|v| v["episodes"] == 6)
    };
    let is_new_samples = |bytes: &[u8]| {
        let text = String::from_utf8_lossy(bytes);
        text.ends_with('\n')
            && text.lines().count() == sample_lines
            && text
                .lines()
                .all(|l| serde_json::from_str::<serde_json::Value>(l).is_ok())
    };
    const OLD_REPORT: &[u8] = b"{\"old\": true}";
    const OLD_SAMPLES: &[u8] = b"{\"old\": true}\n";

    // Samples are written first, then the report; each write has three fault points.
    for point in ["file-partial", "file-written", "file-renamed"] {
        for nth in 1..=2 {
            std::fs::write(&report, OLD_REPORT).unwrap();
            std::fs::write(&samples, OLD_SAMPLES).unwrap();
            let fault = format!("{point}#{nth}");
            let out = eval(&e, &args, Some(&fault));
            assert!(killed(&out), "{fault}: not killed: {}", stderr(&out));
            // The earlier outputs were set aside as NAME.stale when the run started, so
            // under its own name a file is new or absent, and the old one is whole.
            let stale = |p: &Path| std::fs::read(drmas::eval::stale_path(p)).ok();
            let r = std::fs::read(&report).ok();
            let s = std::fs::read(&samples).ok();
            match &r {
                Some(r) => assert!(
                    is_new_report(r),
                    "{fault}: the report under its name is not the new one: {}",
                    String::from_utf8_lossy(r)
                ),
                None => assert_eq!(stale(&report).as_deref(), Some(OLD_REPORT), "{fault}"),
            }
            match &s {
                Some(s) => assert!(
                    is_new_samples(s),
                    "{fault}: the samples are not the new ones"
                ),
                None => assert_eq!(stale(&samples).as_deref(), Some(OLD_SAMPLES), "{fault}"),
            }
            // A new report never stands beside old samples.
            if r.is_some() {
                assert!(s.is_some(), "{fault}");
            }
        }
    }
    // The next run cleans what the killed ones left.
    let again = eval(&e, &args, None);
    assert!(again.status.success(), "{}", stderr(&again));
    assert_eq!(leftovers(&e.dir.path().join("out")), Vec::<String>::new());
    assert!(is_new_report(&std::fs::read(&report).unwrap()));
}

#[test]
fn eval_outputs_are_checked_before_any_work() {
    let e = eval_experiment();
    let d = e.dir.path();
    let a_file = d.join("a-file");
    std::fs::write(&a_file, "").unwrap();
    let cases: Vec<(Vec<std::ffi::OsString>, String)> = vec![
        (
            vec!["--out".into(), a_file.join("r.json").into()],
            format!(
                "error: output {}: its folder {}: is a file, not a folder",
                a_file.join("r.json").display(),
                a_file.display(),
            ),
        ),
        (
            vec!["--out".into(), d.into()],
            format!(
                "error: output {}: is a folder; give a file name",
                d.display()
            ),
        ),
        (
            vec![
                "--out".into(),
                d.join("x/r.json").into(),
                "--dump-samples".into(),
                d.join("x/../x/r.json").into(),
            ],
            format!(
                "error: --dump-samples and the report are the same file ({}); give them different paths",
                d.join("x/../x/r.json").display()
            ),
        ),
    ];
    for (args, want) in cases {
        let out = eval(
            &e,
            &args.iter().map(|a| a.as_os_str()).collect::<Vec<_>>(),
            None,
        );
        assert!(!out.status.success());
        assert_eq!(stderr(&out), want);
    }
    // Values refused while parsing, with the option's name.
    for (args, want) in [
        (
            ["--limit", "0"],
            "invalid value '0' for '--limit <LIMIT>': 0 is not in 1..18446744073709551615",
        ),
        (
            ["--k", "0"],
            "invalid value '0' for '--k <K>': 0 is not in 1..18446744073709551615",
        ),
        (
            ["--temperature", "nan"],
            "invalid value 'nan' for '--temperature <TEMPERATURE>': must be a finite number, got nan",
        ),
        (
            ["--top-p", "1.5"],
            "invalid value '1.5' for '--top-p <TOP_P>': must be in (0, 1], got 1.5",
        ),
    ] {
        let out = eval(&e, &args.map(std::ffi::OsStr::new), None);
        assert!(!out.status.success());
        assert!(
            stderr(&out).starts_with(&format!("error: {want}")),
            "{args:?}: {}",
            stderr(&out)
        );
    }
    // --dump-samples makes its folder like --out does.
    let samples = d.join("new/deeper/samples.jsonl");
    let out = eval(&e, &["--dump-samples".as_ref(), samples.as_os_str()], None);
    assert!(out.status.success(), "{}", stderr(&out));
    assert!(samples.is_file());
}

#[test]
fn a_second_writer_of_a_report_is_refused_with_the_holders_pid() {
    let e = eval_experiment();
    let report = e.dir.path().join("run/eval.json");
    let _held = drmas::output::OutputLock::file(&report).unwrap();
    let out = eval(&e, &[], None);
    assert!(!out.status.success());
    assert_eq!(
        stderr(&out),
        format!(
            "error: output {} is in use by another drmas process (pid {})",
            report.display(),
            std::process::id()
        )
    );
    assert!(!report.exists());
}

/// Waits until `child` has stopped itself (SIGSTOP, at a `:stop` fault point): the
/// state in `/proc/PID/stat` is `T`. A process that ends instead fails the test with
/// its status.
fn wait_until_stopped(child: &mut Group) {
    let stat = format!("/proc/{}/stat", child.id());
    common::process::wait_until(
        "the fault point",
        std::time::Duration::from_millis(20),
        || {
            if let Some(status) = child.try_wait() {
                panic!("pid {} ended ({status}) before its fault point", child.id());
            }
            let state = std::fs::read_to_string(&stat).unwrap_or_default();
            // `PID (COMM) STATE …`: the state follows the last `)`.
            state
                .rsplit_once(')')
                .is_some_and(|(_, rest)| rest.trim_start().starts_with('T'))
        },
    );
}

/// Two `drmas eval --out r.json` at once: the first holds the report from its start
/// (stopped right after taking its locks, before any model loads), the second is
/// refused naming the first's pid and writes nothing; the first, continued, writes its
/// report.
#[test]
fn a_second_eval_of_the_same_report_is_refused_while_the_first_runs() {
    let e = eval_experiment();
    let report = e.dir.path().join("r.json");
    let mut first = Group::spawn(
        drmas()
            .arg("eval")
            .arg(&e.config)
            .args(["--k", "1", "--out"])
            .arg(&report)
            .env("DRMAS_FAULT_POINT", "outputs-locked:stop")
            .stdout(std::process::Stdio::null())
            .stderr(std::process::Stdio::piped()),
    );
    wait_until_stopped(&mut first);
    let out = eval(&e, &["--out".as_ref(), report.as_os_str()], None);
    assert!(!out.status.success());
    assert_eq!(
        stderr(&out),
        format!(
            "error: output {} is in use by another drmas process (pid {})",
            report.display(),
            first.id()
        )
    );
    assert!(!report.exists());
    first.signal(libc::SIGCONT);
    let out = first.wait_with_output();
    assert!(out.status.success(), "{}", stderr(&out));
    assert!(report.is_file());
}

/// The outputs are taken before the experiment's components and files are checked; a
/// refusal there takes back what the taking made (folders, lock files).
#[test]
fn an_eval_refused_by_its_checks_leaves_nothing_behind() {
    let e = eval_experiment();
    let text = std::fs::read_to_string(&e.config).unwrap();
    let model = common::tiny_models()
        .join("tiny-chat")
        .display()
        .to_string();
    std::fs::write(
        &e.config,
        text.replace(
            &format!("path = {model:?}"),
            "path = \"/nonexistent/model\"",
        ),
    )
    .unwrap();
    let new = e.dir.path().join("new");
    let report = new.join("deeper/r.json");
    let samples = new.join("s.jsonl");
    let out = eval(
        &e,
        &[
            "--out".as_ref(),
            report.as_os_str(),
            "--dump-samples".as_ref(),
            samples.as_os_str(),
        ],
        None,
    );
    assert!(!out.status.success());
    assert!(
        stderr(&out).ends_with(
            "models[0].path: model folder /nonexistent/model does not exist (see `drmas model import` and docs/models.md)"
        ),
        "{}",
        stderr(&out)
    );
    assert!(!new.exists());
    // In a folder that was there: no lock file stays.
    let out = eval(
        &e,
        &["--out".as_ref(), e.dir.path().join("r.json").as_os_str()],
        None,
    );
    assert!(!out.status.success());
    assert!(!e.dir.path().join(".r.json.lock").exists());
}

/// `score FILE --out FILE` and every other command that reads and writes: an output
/// that is (by any name), holds or lies inside an input is refused before any work,
/// and the input is untouched.
#[test]
fn an_output_is_never_one_of_the_commands_inputs() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    let completions = d.join("in.jsonl");
    let text = "{\"id\": 1, \"completion\": \"\\\\boxed{2}\", \"answer\": \"2\"}\n";
    std::fs::write(&completions, text).unwrap();
    std::fs::hard_link(&completions, d.join("hard.jsonl")).unwrap();
    std::os::unix::fs::symlink(&completions, d.join("link.jsonl")).unwrap();
    let model = d.join("m");
    copy_dir(&common::tiny_models().join("tiny-chat"), &model);
    // A model folder drmas wrote, so `--force` may replace it: only the input rule stops it.
    std::fs::write(model.join(".drmas-model"), "").unwrap();
    let weights = std::fs::read(model.join("model.safetensors")).unwrap();
    let s = |p: &Path| p.display().to_string();
    let cases: Vec<(Vec<String>, String)> = vec![
        (
            vec![
                "score".into(),
                "math/boxed".into(),
                s(&completions),
                "--out".into(),
                s(&completions),
            ],
            format!(
                "error: output {}: is the completions {}, which this command reads; write somewhere else",
                s(&completions),
                s(&completions)
            ),
        ),
        (
            vec![
                "score".into(),
                "math/boxed".into(),
                s(&completions),
                "--out".into(),
                s(&d.join("hard.jsonl")),
            ],
            format!(
                "error: output {}: is the completions {}, which this command reads; write somewhere else",
                s(&d.join("hard.jsonl")),
                s(&completions)
            ),
        ),
        (
            vec![
                "score".into(),
                "math/boxed".into(),
                s(&d.join("link.jsonl")),
                "--out".into(),
                s(&d.join("sub/../in.jsonl")),
            ],
            format!(
                "error: output {}: is the completions {}, which this command reads; write somewhere else",
                s(&d.join("sub/../in.jsonl")),
                s(&d.join("link.jsonl"))
            ),
        ),
        (
            vec![
                "model".into(),
                "merge".into(),
                "--base".into(),
                s(&model),
                "--adapter".into(),
                s(&model),
                "--out".into(),
                s(&model),
                "--force".into(),
            ],
            format!(
                "error: output {}: is the base {}, which this command reads; write somewhere else",
                s(&model),
                s(&model)
            ),
        ),
        (
            vec![
                "model".into(),
                "merge".into(),
                "--base".into(),
                s(&model),
                "--adapter".into(),
                s(&d.join("nope")),
                "--out".into(),
                s(&model.join("merged")),
            ],
            format!(
                "error: output {}: is inside the base {}, which this command reads; write somewhere else",
                s(&model.join("merged")),
                s(&model)
            ),
        ),
        (
            vec![
                "model".into(),
                "import".into(),
                s(&model.join("model.safetensors")),
                s(&model),
                "--force".into(),
            ],
            format!(
                "error: output {}: holds the GGUF file {}, which this command reads; write somewhere else",
                s(&model),
                s(&model.join("model.safetensors"))
            ),
        ),
    ];
    for (args, want) in cases {
        let out = drmas().args(&args).output().unwrap();
        assert!(!out.status.success(), "{args:?}");
        assert_eq!(stderr(&out), want, "{args:?}");
    }
    assert_eq!(std::fs::read_to_string(&completions).unwrap(), text);
    assert_eq!(
        std::fs::read(model.join("model.safetensors")).unwrap(),
        weights
    );

    // The eval report may not go inside a model folder it reads, nor over its data.
    let e = eval_experiment();
    let data = e.dir.path().join("tasks.jsonl");
    let tiny = common::tiny_models().join("tiny-chat");
    for (out_path, how, what, input) in [
        (
            data.clone(),
            "is",
            "the data file data.val[0]".to_string(),
            data.clone(),
        ),
        (
            tiny.join("eval.json"),
            "is inside",
            "model `lm`'s folder (models[0].path)".to_string(),
            tiny.clone(),
        ),
    ] {
        let out = eval(&e, &["--out".as_ref(), out_path.as_os_str()], None);
        assert_eq!(
            stderr(&out),
            format!(
                "error: output {}: {how} {what} {}, which this command reads; write somewhere else",
                s(&out_path),
                s(&input)
            )
        );
    }
    assert!(!tiny.join("eval.json").exists());
}

fn copy_dir(from: &Path, to: &Path) {
    std::fs::create_dir_all(to).unwrap();
    for entry in std::fs::read_dir(from).unwrap() {
        let entry = entry.unwrap();
        std::fs::copy(entry.path(), to.join(entry.file_name())).unwrap();
    }
}

/// The run folder's lock is the folder itself: deleting `RUN/.lock` during a run does
/// not let a second trainer in (it used to, and two trainers wrote one run).
#[test]
fn a_deleted_lock_file_does_not_let_a_second_writer_in() {
    let dir = tempfile::tempdir().unwrap();
    let run = dir.path().join("run");
    let held = drmas::output::OutputLock::run_folder(&run).unwrap();
    std::fs::remove_file(run.join(".lock")).unwrap();
    // Another process: the CLI's own lock of the same folder, through `data prepare`
    // (the quickest command that locks a folder), refused with this process's pid.
    let out = drmas()
        .args([
            "data",
            "prepare",
            "--no-math",
            "--no-qa",
            "--arith-levels",
            "1",
            "--no-download",
            "--out",
        ])
        .arg(&run)
        .output()
        .unwrap();
    assert_eq!(
        stderr(&out),
        format!(
            "error: data folder {} is in use by another drmas process (pid {})",
            run.display(),
            std::process::id()
        )
    );
    drop(held);
}
