//! The step record: docs/training-metrics.md lists exactly its keys, lines written by
//! earlier drmas versions (host/tests/data/metrics/) read — the current layout back to
//! the same line —, and a run resumes over an older run's lines, keeping them as they
//! were.

use crate::common;

use common::train::{Setup, quiet, temp_run};
use drmas::record::{
    AgentRecord, AgentUpdate, DistRecord, DynamicSamplingRecord, EvalRecord, EvalScores,
    FailureCount, LemmaRecord, ModelRecord, PoolRecord, ShadowRecord, SourceRecord, StepRecord,
    StepTimes, TrackingRecord, UpdatePhases, WorkerRecord, parse_records, read_records,
};
use drmas::train::TrainOptions;
use serde_json::Value;
use std::{
    collections::BTreeSet,
    path::{Path, PathBuf},
};

fn data(name: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("tests/data/metrics")
        .join(name)
}

fn one<K: Into<String>, V>(key: K, value: V) -> std::collections::BTreeMap<String, V> {
    [(key.into(), value)].into()
}

/// A record with every key there, each map holding one entry named by its placeholder
/// in the docs' table. A struct literal without `..`: a key added to the type does not
/// compile here until it is added (and then the table must name it).
fn every_key() -> StepRecord {
    let x = Some(1.0);
    StepRecord {
        step: 1,
        epoch: 0,
        episodes: 1,
        failed_episodes: 0,
        failures: one(
            "<component>",
            FailureCount {
                episodes: 1,
                first_task: "t".into(),
                first_error: "e".into(),
            },
        ),
        reward_mean: x,
        success_rate: x,
        turns_mean: x,
        tool_calls_mean: x,
        truncated_ratio: x,
        tokens_generated: 1,
        tokens_per_s: x,
        time: StepTimes {
            rollout: 1.0,
            advantages: 1.0,
            update: 1.0,
            eval: 1.0,
            save: 1.0,
            total: 1.0,
        },
        models: one(
            "<id>",
            ModelRecord {
                lr: 1.0,
                grad_norm: x,
                shadow_grad_norm: x,
                grad_spike: false,
                grad_clip_bound: x,
                grad_clip_bound_run: x,
                spikes: 0,
                skipped: false,
                skipped_in_a_row: 0,
                stale_samples: 0,
                stale_refused: 0,
                staleness_max: 0,
                optimizer_steps: 1,
                pg_loss: x,
                kl_loss: x,
                entropy: x,
                approx_kl: x,
                clip_frac_upper: x,
                clip_frac_lower: x,
                clip_frac_dual: x,
                mismatch_mean_abs: x,
                mismatch_max_ratio: x,
                tis_weight_mean: x,
                tokens: 1,
                update_seconds: x,
                engine_sync_seconds: x,
                update_gflops: x,
                update_phases: Some(UpdatePhases {
                    forward: x,
                    loss: x,
                    backward: x,
                    optimizer: x,
                }),
            },
        ),
        agents: one(
            "<name>",
            AgentRecord {
                model: "m".into(),
                samples: 1,
                adv_mean: x,
                adv_std: x,
                adv_min: x,
                adv_max: x,
                score_mean: x,
                response_len_mean: x,
                response_len_max: x,
                valid_ratio: x,
                finish: one("<reason>", 1),
                groups: Some(1),
                groups_with_signal: Some(1),
                zero_variance_fraction: x,
                shadow: Some(ShadowRecord {
                    adv_sq_mean: x,
                    shadow_adv_sq_mean: x,
                    correlation: x,
                }),
                lemma: Some(LemmaRecord {
                    inflation_global: x,
                    inflation_run: x,
                    mean_gap: x,
                    std_ratio: x,
                    std_p5: x,
                    std_below_1e_3: x,
                    std_below_1e_2: x,
                    std_below_1e_1: x,
                    adv_abs_p99: x,
                    adv_abs_max: x,
                    tasks: 1,
                    flat_tasks: 0,
                }),
                update: Some(AgentUpdate {
                    grad_norm: x,
                    shadow_grad_norm: x,
                    pg_loss: x,
                    entropy: x,
                    approx_kl: x,
                    clip_frac_upper: x,
                    clip_frac_lower: x,
                    clip_frac_dual: x,
                }),
            },
        ),
        sources: one(
            "<source>",
            SourceRecord {
                episodes: 1,
                reward_mean: x,
                rewards: one("<reward>", x),
                metrics: one("<metric>", x),
            },
        ),
        metrics: one("<metric>", x),
        eval: Some(EvalRecord {
            k: 1,
            avg_at_k: 1.0,
            pass_at_k: 1.0,
            sources: one(
                "<source>",
                EvalScores {
                    avg_at_k: 1.0,
                    pass_at_k: 1.0,
                },
            ),
            failed_episodes: 0,
            seconds: 1.0,
        }),
        pool: Some(PoolRecord {
            offload: "none".into(),
            workers: one(
                "<worker>",
                WorkerRecord {
                    device: "cpu".into(),
                    on_device_bytes: 1,
                    on_host_bytes: 1,
                    device_used_bytes: Some(1),
                    move_seconds: 1.0,
                    moved_bytes: 1,
                },
            ),
        }),
        dist: Some(DistRecord { world_size: 1 }),
        tracking: Some(TrackingRecord {
            seconds: 1.0,
            tensorboard_bytes: 1,
        }),
        dynamic_sampling: Some(DynamicSamplingRecord::default()),
    }
}

/// Every leaf's dotted path.
fn paths(value: &Value, at: &str, out: &mut BTreeSet<String>) {
    match value {
        Value::Object(map) => {
            for (k, v) in map {
                let here = if at.is_empty() {
                    k.clone()
                } else {
                    format!("{at}.{k}")
                };
                paths(v, &here, out);
            }
        }
        _ => {
            out.insert(at.to_string());
        }
    }
}

/// The first column of the `### Every key` table.
fn documented() -> BTreeSet<String> {
    let path = Path::new(env!("CARGO_MANIFEST_DIR")).join("../docs/training-metrics.md");
    let text = std::fs::read_to_string(&path).unwrap();
    let table = text
        .split("\n### Every key\n")
        .nth(1)
        .expect("docs/training-metrics.md has an `### Every key` section");
    table
        .lines()
        .skip_while(|l| !l.starts_with('|'))
        .take_while(|l| l.starts_with('|'))
        .skip(2)
        .map(|l| {
            let cell = l.split('|').nth(1).unwrap().trim();
            cell.trim_matches('`').to_string()
        })
        .collect()
}

#[test]
fn the_docs_list_exactly_the_records_keys() {
    let mut keys = BTreeSet::new();
    paths(&every_key().to_value(), "", &mut keys);
    let docs = documented();
    let undocumented: Vec<&String> = keys.difference(&docs).collect();
    let not_keys: Vec<&String> = docs.difference(&keys).collect();
    assert!(
        undocumented.is_empty() && not_keys.is_empty(),
        "keys missing from docs/training-metrics.md: {undocumented:?}; listed there but not keys: {not_keys:?}"
    );
}

/// Lines an older drmas wrote: each parses, and a line in today's layout writes back to
/// the same keys, nesting, nulls and number kinds (compared as JSON values: serde_json's
/// default float parsing may move a long decimal's last digit, the same on both sides).
#[test]
fn lines_of_earlier_runs_read_and_todays_write_back_the_same() {
    let current = data("current.jsonl");
    let records = read_records(&current).unwrap();
    let text = std::fs::read_to_string(&current).unwrap();
    assert_eq!(records.lines.len(), text.lines().count());
    assert!(records.lines.len() >= 3, "{}", current.display());
    for ((n, record), line) in records.lines.iter().zip(text.lines()) {
        let written: Value = serde_json::from_str(line).unwrap();
        assert_eq!(
            record.to_value(),
            written,
            "line {n} of {}",
            current.display()
        );
        // Keys in the same order, whatever the digits.
        let keys = |text: &str| -> Vec<String> {
            text.split('"')
                .skip(1)
                .step_by(2)
                .map(str::to_string)
                .collect()
        };
        assert_eq!(keys(&record.to_line()), keys(line), "line {n}");
    }
    // They exercise the keys that are not always there.
    let any = |f: &dyn Fn(&StepRecord) -> bool| records.lines.iter().any(|(_, r)| f(r));
    assert!(any(&|r| r.eval.is_some()));
    assert!(any(&|r| r.tracking.is_some()));
    assert!(any(&|r| r.agents.values().any(|a| a.shadow.is_some())));
    assert!(any(&|r| r.agents.values().any(|a| a.update.is_some())));

    // The first layout (no failures, sources, metrics, pool, staleness, clip shares,
    // update phases or group counts), with a resumed step and a cut-off last line.
    let oldest = data("first-layout.jsonl");
    let records = read_records(&oldest).unwrap();
    let steps: Vec<u32> = records.latest().iter().map(|r| r.step).collect();
    assert_eq!(steps, [1, 2, 3]);
    assert_eq!(records.repeated().into_keys().collect::<Vec<_>>(), [2]);
    assert_eq!(records.cut_off, Some(5));
    let first = &records.lines[0].1;
    assert_eq!(first.reward_mean, Some(0.25));
    assert!(first.pool.is_none() && first.sources.is_empty());
    let model = &first.models["lm"];
    assert_eq!((model.stale_samples, model.grad_clip_bound), (0, None));
    assert_eq!(model.update_phases, None);
    let agent = &first.agents["solver"];
    assert_eq!(agent.groups, None);
    assert_eq!(agent.update.and_then(|u| u.grad_norm), Some(0.5));
    assert_eq!(first.eval.as_ref().map(|e| e.failed_episodes), Some(0));
}

#[test]
fn a_run_resumes_over_an_older_runs_lines_and_keeps_them() {
    let mut s = Setup::new("norms/drmas");
    s.questions.truncate(4);
    s.trainer.steps = 2;
    s.trainer.prompts_per_step = 2;
    s.trainer.group_size = 2;
    s.trainer.save_every = 1;
    s.models = vec![("lm", 0.01)];
    let (_dir, run) = temp_run();
    s.trainer(&run, quiet()).unwrap().run().unwrap();
    // The run's two lines become two of the first layout's lines, and a third that is
    // past the checkpoint (redone).
    let old = std::fs::read_to_string(data("first-layout.jsonl")).unwrap();
    let old: Vec<&str> = old.lines().collect();
    let metrics = run.join("metrics.jsonl");
    s.trainer.steps = 3;
    let resume = || TrainOptions {
        resume: true,
        ..quiet()
    };
    // A broken line that is not the last, or a key of the wrong type: refused, named.
    let refused = |text: String| {
        std::fs::write(&metrics, text).unwrap();
        s.trainer(&run, resume())
            .err()
            .expect("refused")
            .to_string()
    };
    let cut = &old[0][..old[0].len() / 2];
    assert_eq!(
        refused(format!("{cut}\n{}\n", old[2])),
        format!(
            "{}:1: invalid JSON: EOF while parsing a string (column {})",
            metrics.display(),
            cut.len()
        )
    );
    let typed = old[2].replacen("\"epoch\":0", "\"epoch\":\"zero\"", 1);
    let e = refused(format!("{}\n{typed}\n", old[0]));
    assert!(
        e.starts_with(&format!(
            "{}:2: epoch: invalid type: string \"zero\", expected u64 (column ",
            metrics.display()
        )),
        "{e}"
    );
    std::fs::write(&metrics, format!("{}\n{}\n{}\n", old[0], old[2], old[3])).unwrap();
    let summary = s.trainer(&run, resume()).unwrap().run().unwrap();
    assert_eq!(summary.steps_done, 3);
    assert_eq!(summary.last_record.as_ref().map(|r| r.step), Some(3));
    let text = std::fs::read_to_string(&metrics).unwrap();
    let lines: Vec<&str> = text.lines().collect();
    assert_eq!(lines.len(), 3, "{text}");
    assert_eq!(&lines[..2], &[old[0], old[2]]);
    // The new step's line is its record, written.
    assert_eq!(lines[2], summary.last_record.unwrap().to_line());
    let records = parse_records(&metrics, text.as_bytes()).unwrap();
    assert_eq!(records.lines.len(), 3);
}
