//! `drmas plot`: reading metrics.jsonl (resumed steps, cut-off and broken lines) and the
//! figure written from two fake runs.

use drmas::plot::{HEIGHT, PlotError, WIDTH, plot_runs, read_metrics};
use drmas::record::{
    AgentRecord, AgentUpdate, EvalRecord, ModelRecord, RecordError, StepRecord, StepTimes,
};
use serde_json::json;
use std::{
    fs,
    path::{Path, PathBuf},
    process::Command,
};

/// One metrics line of a two-agent run; `shift` moves every value.
fn line(step: u64, shift: f64, eval: bool) -> String {
    let s = step as f64;
    let model = ModelRecord {
        lr: 1e-6,
        grad_norm: Some(0.8),
        ..ModelRecord::default()
    };
    let agent = |grad_norm: f64, entropy: f64| AgentRecord {
        model: "policy".into(),
        update: Some(AgentUpdate {
            grad_norm: Some(grad_norm),
            entropy: Some(entropy),
            pg_loss: Some(0.01),
            ..AgentUpdate::default()
        }),
        ..AgentRecord::default()
    };
    let record = StepRecord {
        step: step as u32,
        reward_mean: Some(0.1 * s + shift),
        success_rate: Some(0.05 * s + shift),
        turns_mean: Some(2.0),
        tokens_generated: 5120,
        tokens_per_s: Some(85.2),
        time: StepTimes {
            rollout: 40.1,
            advantages: 0.01,
            update: 20.3,
            eval: 0.0,
            save: 0.0,
            total: 60.5,
        },
        models: [("policy".to_string(), model)].into(),
        agents: [
            ("solver".to_string(), agent(1.0 / s + shift, 1.5 - 0.1 * s)),
            (
                "verifier".to_string(),
                agent(2.0 / s + shift, 0.9 - 0.05 * s),
            ),
        ]
        .into(),
        eval: eval.then(|| EvalRecord {
            avg_at_k: 0.2 + 0.02 * s + shift,
            pass_at_k: 0.5,
            ..EvalRecord::default()
        }),
        ..StepRecord::default()
    };
    let mut v = record.to_value();
    v["some_future_key"] = json!([1, 2, 3]);
    v.to_string()
}

fn write(dir: &Path, text: &str) -> PathBuf {
    fs::create_dir_all(dir).unwrap();
    let path = dir.join("metrics.jsonl");
    fs::write(&path, text).unwrap();
    path
}

/// "grpo": steps 1..5 with a resume at step 3 (steps 3 and 4 written twice; the
/// second pass has a different reward). "drmas": steps 1..5 and a cut-off sixth line.
fn fake_runs(root: &Path) -> (PathBuf, PathBuf) {
    let grpo = root.join("runs/grpo");
    let mut lines: Vec<String> = (1..=4).map(|s| line(s, 0.0, s == 2)).collect();
    lines.extend((3..=5).map(|s| line(s, 0.5, s == 4)));
    write(&grpo, &(lines.join("\n") + "\n"));
    let drmas = root.join("runs/drmas");
    let mut text: String = (1..=5).map(|s| line(s, 0.1, s == 5) + "\n").collect();
    let cut = line(6, 0.1, false);
    text.push_str(&cut[..cut.len() / 2]);
    write(&drmas, &text);
    (grpo, drmas)
}

/// The contents of the SVG's `<text>` elements, trimmed.
fn svg_texts(svg: &str) -> Vec<String> {
    svg.split("<text")
        .skip(1)
        .filter_map(|t| {
            let body = &t[t.find('>')? + 1..];
            Some(body[..body.find("</text>")?].trim().to_string())
        })
        .collect()
}

#[test]
fn reader_keeps_the_last_line_of_a_step_and_ignores_a_cut_off_last_line() {
    let tmp = tempfile::tempdir().unwrap();
    let (grpo, drmas) = fake_runs(tmp.path());

    let g = read_metrics(&grpo.join("metrics.jsonl")).unwrap();
    assert_eq!(g.steps, vec![1, 2, 3, 4, 5]);
    let rewards: Vec<f64> = g.reward_mean.iter().map(|p| p.1).collect();
    let expected = [0.1, 0.2, 0.8, 0.9, 1.0];
    for (got, want) in rewards.iter().zip(expected) {
        assert!((got - want).abs() < 1e-12, "{rewards:?}");
    }
    // Step 2's eval stays; step 4's is the resumed line's.
    assert_eq!(g.eval_avg_at_k.len(), 2);
    assert_eq!(g.eval_avg_at_k[0].0, 2);
    assert!((g.eval_avg_at_k[1].1 - (0.28 + 0.5)).abs() < 1e-12);
    assert_eq!(g.agents.keys().collect::<Vec<_>>(), ["solver", "verifier"]);
    assert_eq!(g.agents["verifier"].grad_norm[4], (5, 2.0 / 5.0 + 0.5));
    assert_eq!(g.agents["solver"].entropy.len(), 5);
    assert_eq!(g.ignored_last_line, None);
    // Steps 3 and 4 are on record as written twice, with their lines.
    assert_eq!(
        g.duplicate_steps.into_iter().collect::<Vec<_>>(),
        [(3, vec![3, 5]), (4, vec![4, 6])]
    );

    let d = read_metrics(&drmas.join("metrics.jsonl")).unwrap();
    assert_eq!(d.steps, vec![1, 2, 3, 4, 5]);
    assert_eq!(d.ignored_last_line, Some(6));
    assert_eq!(d.eval_avg_at_k, vec![(5, 0.2 + 0.02 * 5.0 + 0.1)]);
}

#[test]
fn a_broken_middle_line_is_an_error_with_its_line_number() {
    let tmp = tempfile::tempdir().unwrap();
    let text = [line(1, 0.0, false), line(2, 0.0, false)].join("\n")
        + "\n{\"step\": 3, \"reward_mean\": \n"
        + &line(4, 0.0, false)
        + "\n";
    let path = write(&tmp.path().join("run"), &text);
    let err = read_metrics(&path).unwrap_err();
    assert!(
        matches!(err, PlotError::Record(RecordError::Line { line: 3, .. })),
        "{err:?}"
    );
    let message = err.to_string();
    assert!(
        message.contains("metrics.jsonl:3: invalid JSON"),
        "{message}"
    );

    // The same line last is a killed run's cut-off line, and is ignored.
    let text = [line(1, 0.0, false), line(2, 0.0, false)].join("\n")
        + "\n{\"step\": 3, \"reward_mean\": \n";
    let path = write(&tmp.path().join("run"), &text);
    assert_eq!(read_metrics(&path).unwrap().ignored_last_line, Some(3));
}

#[test]
fn missing_and_empty_metrics_are_errors_naming_the_path() {
    let tmp = tempfile::tempdir().unwrap();
    let missing = tmp.path().join("nothing/metrics.jsonl");
    let err = read_metrics(&missing).unwrap_err();
    assert!(matches!(err, PlotError::NoMetrics { .. }), "{err:?}");
    assert_eq!(
        err.to_string(),
        format!(
            "{}: no such file (a run folder holds the trainer's metrics.jsonl)",
            missing.display()
        )
    );

    // A run folder without metrics.jsonl, and one with only blank lines.
    let empty_dir = tmp.path().join("fresh");
    fs::create_dir_all(&empty_dir).unwrap();
    let err = plot_runs(std::slice::from_ref(&empty_dir), tmp.path()).unwrap_err();
    assert!(
        err.to_string()
            .contains(&empty_dir.join("metrics.jsonl").display().to_string()),
        "{err}"
    );
    let blank = write(&tmp.path().join("blank"), "\n\n");
    let err = plot_runs(&[tmp.path().join("blank")], tmp.path()).unwrap_err();
    assert_eq!(
        err.to_string(),
        format!("{}: no complete metrics line", blank.display())
    );
    assert!(!tmp.path().join("training.png").exists());
}

#[test]
fn two_runs_make_a_png_and_an_svg() {
    let tmp = tempfile::tempdir().unwrap();
    let (grpo, drmas) = fake_runs(tmp.path());
    let out = tmp.path().join("figures");
    let report = plot_runs(&[grpo, drmas], &out).unwrap();
    assert_eq!(report.png, out.join("training.png"));
    assert_eq!(report.svg, out.join("training.svg"));
    let labels: Vec<&str> = report.runs.iter().map(|r| r.label.as_str()).collect();
    assert_eq!(labels, ["grpo", "drmas"]);

    let png = fs::read(&report.png).unwrap();
    assert!(png.len() > 20_000, "{} bytes", png.len());
    assert_eq!(&png[..8], b"\x89PNG\r\n\x1a\n");
    assert_eq!(&png[12..16], b"IHDR");
    let width = u32::from_be_bytes(png[16..20].try_into().unwrap());
    let height = u32::from_be_bytes(png[20..24].try_into().unwrap());
    assert_eq!((width, height), (WIDTH, HEIGHT));
    // It decodes whole, and it is not blank: some pixels are neither white nor gray.
    let mut reader = png::Decoder::new(std::io::Cursor::new(&png))
        .read_info()
        .unwrap();
    let mut pixels = vec![0; reader.output_buffer_size().unwrap()];
    reader.next_frame(&mut pixels).unwrap();
    let colored = pixels
        .chunks(3)
        .filter(|p| p[0].abs_diff(p[1]) > 40 || p[1].abs_diff(p[2]) > 40)
        .count();
    assert!(colored > 2_000, "{colored} coloured pixels");

    let svg = fs::read_to_string(&report.svg).unwrap();
    assert!(
        svg.len() > 10_000 && svg.starts_with("<svg"),
        "{}",
        &svg[..100]
    );
    assert!(svg.trim_end().ends_with("</svg>"));
    let texts = svg_texts(&svg);
    for text in [
        "grpo",
        "drmas",
        "agent solver",
        "agent verifier",
        "eval avg@k",
        "(a) reward",
        "(c) gradient norm per agent",
        "step",
    ] {
        assert!(texts.iter().any(|t| t == text), "no text {text}: {texts:?}");
    }
    // No temporary file is left beside them.
    let mut names: Vec<String> = fs::read_dir(&out)
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    names.sort();
    assert_eq!(names, ["training.png", "training.svg"]);
}

#[test]
fn the_same_folder_name_twice_gets_parent_folders_in_its_label() {
    let tmp = tempfile::tempdir().unwrap();
    let a = tmp.path().join("a/run");
    let b = tmp.path().join("b/run");
    write(&a, &line(1, 0.0, false));
    write(&b, &line(1, 0.0, false));
    let report = plot_runs(&[a, b], tmp.path()).unwrap();
    let labels: Vec<&str> = report.runs.iter().map(|r| r.label.as_str()).collect();
    assert_eq!(labels, ["a/run", "b/run"]);
    let texts = svg_texts(&fs::read_to_string(&report.svg).unwrap());
    assert!(texts.iter().any(|t| t == "a/run") && texts.iter().any(|t| t == "b/run"));
}

#[test]
fn cli_names_a_missing_run_folder() {
    let tmp = tempfile::tempdir().unwrap();
    let missing = tmp.path().join("no-such-run");
    let out = Command::new(env!("CARGO_BIN_EXE_drmas"))
        .arg("plot")
        .arg(&missing)
        .output()
        .unwrap();
    assert!(!out.status.success());
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(
        stderr.trim_end(),
        format!("error: {}: no such run folder", missing.display())
    );
}

#[test]
fn cli_plots_into_the_first_run_folder() {
    let tmp = tempfile::tempdir().unwrap();
    let (grpo, drmas) = fake_runs(tmp.path());
    let out = Command::new(env!("CARGO_BIN_EXE_drmas"))
        .arg("plot")
        .arg(&grpo)
        .arg(&drmas)
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "{stdout}{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(
        stdout.contains("grpo: 5 steps (1..5), agents solver, verifier"),
        "{stdout}"
    );
    assert!(
        stdout.contains("ignored the cut-off last line 6"),
        "{stdout}"
    );
    // The resumed run's steps written twice are said, with the values drawn.
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        stderr.contains(&format!(
            "warning: {}: steps are written more than once (a resumed run redoes the steps after its checkpoint): step 3 (lines 3, 5), step 4 (lines 4, 6); each is drawn with its last line's values",
            grpo.join("metrics.jsonl").display()
        )),
        "{stderr}"
    );
    assert!(!stderr.contains(&drmas.display().to_string()), "{stderr}");
    assert!(grpo.join("training.png").exists() && grpo.join("training.svg").exists());
}
