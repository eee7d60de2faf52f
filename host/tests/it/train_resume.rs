//! Resume is exact: a run stopped after k steps (as a kill right after its checkpoint)
//! and resumed equals an uninterrupted run with the same seed — weights, optimizer
//! moments and metric lines bit for bit on the CPU — also when the stop falls exactly on
//! an epoch boundary of the training data, and after a save that was killed half-way.

use crate::common;

use common::train::{Setup, metrics, moments, quiet, temp_run, weights};
use drmas::train::{TrainOptions, Trainer, metrics::without_timing};
use std::path::Path;

/// Six steps of 2 tasks out of 4 (an epoch every 2 steps), a checkpoint every step.
fn setup() -> Setup {
    let mut s = Setup::new("norms/drmas");
    s.questions.truncate(4);
    s.trainer.steps = 6;
    s.trainer.prompts_per_step = 2;
    s.trainer.group_size = 4;
    s.trainer.save_every = 1;
    s.models = vec![("lm", 0.01)];
    s
}

struct Final {
    weights: Vec<(String, Vec<f32>)>,
    moments: (Vec<(String, Vec<f32>)>, i64),
    lines: Vec<serde_json::Value>,
}

fn finish(trainer: Trainer, run: &Path) -> Final {
    let handle = trainer.team().models["lm"].handle.clone();
    let out = Final {
        weights: weights(&handle),
        moments: moments(&handle),
        lines: metrics(run).iter().map(without_timing).collect(),
    };
    drop(trainer);
    out
}

fn uninterrupted(s: &Setup) -> Final {
    let (_dir, run) = temp_run();
    let mut t = s.trainer(&run, quiet()).unwrap();
    t.run().unwrap();
    finish(t, &run)
}

fn stopped_then_resumed(s: &Setup, stop_after: u32, between: impl FnOnce(&Path)) -> Final {
    let (_dir, run) = temp_run();
    let mut t = s
        .trainer(
            &run,
            TrainOptions {
                halt_after: Some(stop_after),
                ..quiet()
            },
        )
        .unwrap();
    let summary = t.run().unwrap();
    assert!(summary.stopped_early);
    assert_eq!(summary.steps_done, stop_after);
    drop(t);
    between(&run);
    let mut t = s
        .trainer(
            &run,
            TrainOptions {
                resume: true,
                ..quiet()
            },
        )
        .unwrap();
    assert_eq!(t.steps_done(), stop_after);
    let summary = t.run().unwrap();
    assert_eq!(summary.steps_done, 6);
    assert!(!summary.stopped_early);
    finish(t, &run)
}

fn assert_same(a: &Final, b: &Final) {
    assert_eq!(a.lines.len(), 6);
    assert_eq!(a.lines, b.lines);
    assert_eq!(a.moments.1, b.moments.1);
    assert_eq!(a.moments.0, b.moments.0);
    assert_eq!(a.weights, b.weights);
}

#[test]
fn a_resumed_run_equals_an_uninterrupted_one() {
    let s = setup();
    let whole = uninterrupted(&s);
    // The run really trained: six optimizer steps, the weights moved.
    assert_eq!(whole.moments.1, 6);
    let epochs: Vec<u64> = whole
        .lines
        .iter()
        .map(|l| l["epoch"].as_u64().unwrap())
        .collect();
    assert_eq!(epochs, [0, 0, 1, 1, 2, 2]);
    let resumed = stopped_then_resumed(&s, 3, |_| {});
    assert_same(&whole, &resumed);
    // Stopped exactly at an epoch boundary: the resumed run goes on into the next epoch.
    let at_boundary = stopped_then_resumed(&s, 2, |_| {});
    assert_same(&whole, &at_boundary);
}

#[test]
fn a_killed_save_leaves_the_previous_checkpoint_usable() {
    let s = setup();
    let whole = uninterrupted(&s);
    let resumed = stopped_then_resumed(&s, 3, |run| {
        // The process died while writing step 4's checkpoint: its metrics line was
        // written (and a fifth, cut off), its folder is a temporary one, half full.
        let metrics = run.join("metrics.jsonl");
        let mut text = std::fs::read_to_string(&metrics).unwrap();
        let third = text
            .lines()
            .nth(2)
            .unwrap()
            .replace("\"step\":3", "\"step\":4");
        text.push_str(&third);
        text.push_str("\n{\"agents\":{\"so");
        std::fs::write(&metrics, text).unwrap();
        let tmp = run.join("checkpoints/.step-000004.tmp-99999/lm");
        std::fs::create_dir_all(&tmp).unwrap();
        std::fs::write(tmp.join("model.safetensors"), b"cut off").unwrap();
    });
    assert_same(&whole, &resumed);
}

#[test]
fn checkpoints_are_complete_and_only_the_newest_are_kept() {
    let mut s = setup();
    s.trainer.keep_checkpoints = std::num::NonZeroU32::new(2).unwrap();
    let (_dir, run) = temp_run();
    let mut t = s.trainer(&run, quiet()).unwrap();
    let summary = t.run().unwrap();
    let dir = run.join("checkpoints");
    let mut names: Vec<String> = std::fs::read_dir(&dir)
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    names.sort();
    assert_eq!(names, ["step-000005", "step-000006"]);
    assert_eq!(summary.last_checkpoint, Some(dir.join("step-000006")));
    let ckpt = dir.join("step-000006");
    for file in [
        "trainer_state.json",
        "lm/config.json",
        "lm/model.safetensors",
        "lm/optimizer.safetensors",
        "lm/worker.json",
    ] {
        assert!(ckpt.join(file).is_file(), "{file}");
    }
    let state: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(ckpt.join("trainer_state.json")).unwrap())
            .unwrap();
    assert_eq!(state["step"], 6);
    assert_eq!(state["cursor"]["epoch"], 2);
    // The checkpoint's weights load as an ordinary HF folder and equal the worker's.
    let loaded = common::load_dir(&ckpt.join("lm"));
    assert_eq!(
        common::train::decoder_weights(&loaded),
        weights(&t.team().models["lm"].handle)
    );
}

#[test]
fn a_used_run_folder_is_refused_without_resume_and_while_in_use() {
    let mut s = setup();
    s.trainer.steps = 1;
    let (_dir, run) = temp_run();
    let mut t = s.trainer(&run, quiet()).unwrap();
    // A second writer on the same folder, while the first holds it.
    let second = s.trainer(
        &run,
        TrainOptions {
            resume: true,
            ..quiet()
        },
    );
    let err = second
        .err()
        .expect("a second trainer is refused")
        .to_string();
    assert_eq!(
        err,
        format!(
            "run folder {} is in use by another drmas process (pid {})",
            run.display(),
            std::process::id()
        )
    );
    t.run().unwrap();
    drop(t);
    let err = s.trainer(&run, quiet()).err().expect("refused").to_string();
    assert_eq!(
        err,
        format!(
            "{}: this run folder already holds a run: continue it with --resume, or set another [experiment] output_dir",
            run.display()
        )
    );
    // Resuming a finished run trains nothing more.
    let mut t = s
        .trainer(
            &run,
            TrainOptions {
                resume: true,
                ..quiet()
            },
        )
        .unwrap();
    let summary = t.run().unwrap();
    assert_eq!((summary.steps_done, summary.stopped_early), (1, false));
    assert_eq!(metrics(&run).len(), 1);
}
