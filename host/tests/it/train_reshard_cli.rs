//! Checkpoints of sharded runs resume with another world size and another `shard` mode
//! through the real binary on the tiny math team: 2 steps under one layout, the third
//! under another, end where one process's 3 uninterrupted steps end (to the summation
//! order of f32), and each resumed rank reads only its shard's slices of the whole state.

use crate::train_data_parallel::trainer::{assert_close, worst};
use crate::train_dist_cli::{experiment, lines, text};
use crate::train_full_cli::{logged, one_process, ranks, with_mode};
use std::path::Path;

const MODELS: [&str; 2] = ["solver-lm", "verifier-lm"];

/// Replaces the `shard` of every `[[models]]` table with `mode`.
fn change_mode(config: &Path, mode: &str) {
    let text = std::fs::read_to_string(config).unwrap();
    let kept: Vec<&str> = text
        .lines()
        .filter(|l| !l.starts_with("shard = "))
        .collect();
    let entropy = "entropy_coef = 0.01";
    let text = kept.join("\n").replace(&format!("{entropy}\n"), "") + "\n";
    std::fs::write(config, text).unwrap();
    with_mode(config, mode);
}

/// 2 steps with `from` = (mode, ranks), then a resume to step 3 with `to`.
fn resumed(dir: &Path, from: (&str, usize), to: (&str, usize)) -> std::process::Output {
    let config = experiment(dir, 3, 60);
    with_mode(&config, from.0);
    let run = |(mode, n): (&str, usize), extra: &[&str]| match n {
        1 => {
            assert_eq!(mode, "none");
            one_process(&config, extra)
        }
        n => ranks(&config, n, extra).swap_remove(0),
    };
    run(from, &["--steps", "2"]);
    change_mode(&config, to.0);
    run(to, &["--resume"])
}

#[test]
fn sharded_checkpoints_resume_with_another_world_size_and_mode() {
    let one = tempfile::tempdir().unwrap();
    let c1 = experiment(one.path(), 3, 60);
    with_mode(&c1, "none");
    one_process(&c1, &[]);
    let run1 = one.path().join("run");
    let a = lines(&run1);

    for (from, to) in [
        (("full", 2), ("full", 3)),
        (("full", 3), ("optimizer", 2)),
        (("full", 2), ("none", 1)),
    ] {
        let what = format!("{} on {} ranks → {} on {}", from.0, from.1, to.0, to.1);
        let dir = tempfile::tempdir().unwrap();
        let o = resumed(dir.path(), from, to);
        let run = dir.path().join("run");
        let b = lines(&run);
        let steps: Vec<u64> = b.iter().map(|l| l["step"].as_u64().unwrap()).collect();
        assert_eq!(steps, [1, 2, 3], "{what}: {}", text(&o));
        assert_eq!(
            b[2]["dist"]["world_size"].as_u64().unwrap_or(1),
            to.1 as u64
        );
        for (i, (x, y)) in a.iter().zip(&b).enumerate() {
            assert_close(x, y, 1e-3, &format!("{what}, step {}", i + 1));
        }
        // The third step started from the moments the first layout saved: without them
        // (a fresh AdamW) step 3 would move each weight by up to lr, not this little.
        for model in MODELS {
            let d = worst(&run1, &run, model);
            eprintln!("{what}, {model}: {d:e} from one process");
            assert!(f64::from(d) <= 1e-4, "{what}, {model}: {d}");
        }
        if to.1 > 1 {
            // Rank 0 of the resumed job holds its shard of the new layout only.
            for model in MODELS {
                let held = logged(&o, "optimizer state sharded", model, 0, "state_bytes");
                let params = crate::train_full_cli::tiny_chat_params();
                let layout = drmas::update::FlatLayout::new(&params, to.1).unwrap();
                let shard: u64 = layout.units.iter().map(|u| u.shard_numel() as u64).sum();
                assert_eq!(held, 2 * 4 * shard, "{what}, {model}");
            }
        }
    }
}
