//! A training step and an evaluation run their episodes one way
//! (`rollout::run_episode_set`): the same failing set of episodes, run the training way
//! and the evaluation way, fails with the same error and the same counts, and a job of
//! one rank reports what one process reports.

use crate::common;

use common::process::HANG;
use common::train::{Setup, metrics, quiet, temp_run};
use drmas::data::DataSource;
use drmas::eval::{EvalError, EvalOptions, Evaluation, evaluate};
use drmas::plugin::{ComponentId, RewardHandle};
use drmas::pool::DistJob;
use drmas::rollout::{EpisodeFailure, EpisodeRuntime, EpisodeSetError, RewardSlot};
use drmas::train::RunError;
use drmas::train::TrainOptions;
use drmas_dist::{Group, Store};
use drmas_plugin_api::{ComponentKind, EpisodeRecord, PluginResult, Reward, Task};
use std::{path::Path, sync::Arc};

/// NaN on question `q1` (`Some("q1")`) or on every question (`None`), 0 elsewhere.
struct NanOn(Option<&'static str>);

impl Reward for NanOn {
    fn score(&self, episode: &EpisodeRecord) -> PluginResult<f32> {
        Ok(if self.0.is_none_or(|q| episode.task.question == q) {
            f32::NAN
        } else {
            0.0
        })
    }
}

/// The set: the 8 tasks × 2 episodes, one training step of them.
const EPISODES: usize = 16;

/// One step of all 8 tasks, 2 episodes each, as one process or a rank of `dist`.
fn setup(dist: Option<Arc<DistJob>>) -> Setup {
    let mut s = Setup::new("norms/grpo");
    s.trainer.steps = 1;
    s.trainer.prompts_per_step = 8;
    s.trainer.group_size = 2;
    s.questions = (0..8).map(|i| format!("q{i}")).collect();
    s.dist = dist;
    s
}

/// The setup's team with the reward [`NanOn`] `nan_on` and the failure limit
/// `max_failed`.
fn team(s: &Setup, nan_on: Option<&'static str>, max_failed: f64) -> drmas::rollout::Team {
    let mut team = s.team();
    team.rewards = vec![RewardSlot::team(
        RewardHandle::new(
            ComponentId {
                kind: ComponentKind::Reward,
                name: "test/nan".into(),
                version: "0".into(),
                source: "test".into(),
            },
            Box::new(NanOn(nan_on)),
        ),
        1.0,
    )];
    team.options.max_failed_episodes = max_failed;
    team
}

fn tasks() -> Vec<Task> {
    (0..8)
        .map(|i| Task {
            id: format!("t{i}"),
            question: format!("q{i}"),
            source: "tiny".into(),
            ..Task::default()
        })
        .collect()
}

/// The training way: one step of the set in `run`; its metrics line, or the error.
fn train(
    run: &Path,
    nan_on: Option<&'static str>,
    max_failed: f64,
    dist: Option<Arc<DistJob>>,
) -> Result<serde_json::Value, RunError> {
    let s = setup(dist.clone());
    let team = team(&s, nan_on, max_failed);
    let opts = TrainOptions { dist, ..quiet() };
    s.trainer_with(run, team, opts)?.run()?;
    Ok(metrics(run).pop().unwrap())
}

/// The evaluation way: the set as an evaluation (k = 2 of each task), on `group`'s
/// ranks where given.
fn eval(
    nan_on: Option<&'static str>,
    max_failed: f64,
    group: Option<&mut Group>,
) -> Result<Evaluation, EvalError> {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("tasks.jsonl");
    let rows: String = tasks()
        .iter()
        .map(|t| {
            serde_json::json!({"id": t.id, "source": t.source, "question": t.question, "answer": "1"})
                .to_string()
                + "\n"
        })
        .collect();
    std::fs::write(&path, rows).unwrap();
    let source: DataSource = serde_json::from_value(serde_json::json!({ "path": path })).unwrap();
    let s = setup(None);
    let team = Arc::new(team(&s, nan_on, max_failed));
    let opts = EvalOptions {
        k: 2,
        progress: false,
        ..EvalOptions::default()
    };
    let runtime = EpisodeRuntime::new().unwrap();
    evaluate(&team, "tiny", &[source], &opts, &runtime, group)
}

/// The set's error under a training run's (what was kept is said around it).
fn of_training(e: RunError) -> EpisodeSetError {
    match e {
        RunError::Stopped { error, .. } => of_training(*error),
        RunError::Episodes { step, source } => {
            assert_eq!(step, 1);
            source
        }
        other => panic!("not the set's error: {other}"),
    }
}

fn of_eval(e: EvalError) -> EpisodeSetError {
    match e {
        EvalError::Episodes(source) => source,
        other => panic!("not the set's error: {other}"),
    }
}

/// The parts of an every-episode-failed error that do not depend on the run: the count,
/// the first's task, whether it ran here and what it is blamed on.
fn all_failed(e: &EpisodeSetError) -> (usize, String, String) {
    let EpisodeSetError::AllFailed {
        episodes,
        task,
        first,
    } = e
    else {
        panic!("not every episode failed: {e}");
    };
    let EpisodeFailure::Here(error) = first else {
        panic!("a job of one rank ran every episode here: {e}");
    };
    assert!(
        error
            .to_string()
            .starts_with("reward `test/nan` (test 0, test) returned NaN as the score of episode "),
        "{error}"
    );
    // The task without the training uid's `step:pos:` (the order differs: training
    // takes the tasks in the data order, an evaluation in the file's).
    let task = task.rsplit(':').next().unwrap().to_string();
    assert!(task.starts_with("tiny/t"), "{task}");
    (*episodes, error.blame().unwrap().to_string(), e.to_string())
}

/// Rank 0 of a job of one rank: its store and the job.
fn job_of_one() -> Arc<DistJob> {
    let port = drmas::engine::free_port().unwrap();
    let store = Store::connect("127.0.0.1", port, 1, true, HANG).unwrap();
    Arc::new(DistJob {
        store: Arc::new(store),
        rank: 0,
        world_size: 1,
        local_rank: 0,
        timeout: HANG,
        prefix: String::new(),
    })
}

#[test]
fn the_training_way_and_the_evaluation_way_fail_alike() {
    // Within the limit: q1's 2 episodes fail, counted alike.
    let (_dir, run) = temp_run();
    let line = train(&run, Some("q1"), 0.5, None).unwrap();
    let report = eval(Some("q1"), 0.5, None).unwrap().report;
    assert_eq!(line["failed_episodes"], 2, "{line}");
    assert_eq!(report.failed_episodes, 2);
    assert_eq!(line["failures"]["reward test/nan"]["episodes"], 2, "{line}");
    let counts: Vec<(&String, usize)> = report
        .failures
        .by_component
        .iter()
        .map(|(who, c)| (who, c.episodes))
        .collect();
    assert_eq!(counts, [(&"reward test/nan".to_string(), 2)]);
    assert_eq!(line["episodes"], EPISODES - 2, "{line}");
    assert_eq!(report.episodes, EPISODES);

    // Past the limit: the same error, the limit named with the set's size.
    let (_dir, run) = temp_run();
    let trained = of_training(train(&run, Some("q1"), 0.05, None).unwrap_err());
    let evaluated = of_eval(eval(Some("q1"), 0.05, None).unwrap_err());
    for e in [&trained, &evaluated] {
        let EpisodeSetError::TooManyFailures {
            episodes,
            limit,
            tally,
        } = e
        else {
            panic!("not past the limit: {e}");
        };
        assert_eq!((*episodes, *limit), (EPISODES, 0.05));
        // Past 0.05 of 16 at the first failure (its group's other episode may end with it).
        assert!((1..=2).contains(&tally.total()), "{e}");
        assert_eq!(
            tally.by_component.keys().collect::<Vec<_>>(),
            ["reward test/nan"]
        );
        assert!(
            e.to_string().contains(
                " of 16 episodes failed, more than [workflow] max_failed_episodes = 0.05 allows; reward test/nan: "
            ),
            "{e}"
        );
    }

    // Every episode failed, within the limit: the same error, with the first one's.
    let (_dir, run) = temp_run();
    let trained = of_training(train(&run, None, 1.0, None).unwrap_err());
    let evaluated = of_eval(eval(None, 1.0, None).unwrap_err());
    let (t, e) = (all_failed(&trained), all_failed(&evaluated));
    assert_eq!((t.0, &t.1), (EPISODES, &"reward test/nan".to_string()));
    assert_eq!((e.0, &e.1), (t.0, &t.1));
    for text in [&t.2, &e.2] {
        assert!(
            text.starts_with(
                "all 16 episodes failed, so there is nothing to report; the first, task "
            ),
            "{text}"
        );
        assert!(
            text.ends_with("; a score must be finite, so the episode failed"),
            "{text}"
        );
    }
}

#[test]
fn a_job_of_one_rank_reports_what_one_process_reports() {
    // An evaluation: the same episodes, in the same order, with the same failures.
    let job = job_of_one();
    let mut group = job.group("test-eval", tch::Device::Cpu).unwrap();
    let alone = eval(Some("q1"), 0.5, None).unwrap();
    let ranked = eval(Some("q1"), 0.5, Some(&mut group)).unwrap();
    let view = |e: &Evaluation| {
        let episodes: Vec<_> = e
            .outcomes
            .iter()
            .map(|o| {
                let ids: Vec<_> = o.samples.iter().map(|s| s.response_ids.clone()).collect();
                (o.uid.clone(), o.traj, ids)
            })
            .collect();
        let failed: Vec<_> = e
            .failed
            .iter()
            .map(|f| (f.uid.clone(), f.traj, f.blame.to_string()))
            .collect();
        (
            episodes,
            failed,
            e.report.failed_episodes,
            e.report.episodes,
        )
    };
    assert_eq!(view(&alone), view(&ranked));
    assert_eq!(ranked.failed.len(), 2);

    // Every episode failed: the same typed error, the first episode's error itself.
    let alone = of_eval(eval(None, 1.0, None).unwrap_err());
    let ranked = of_eval(eval(None, 1.0, Some(&mut group)).unwrap_err());
    let (a, r) = (all_failed(&alone), all_failed(&ranked));
    assert_eq!((a.0, a.1), (r.0, r.1));
    drop(group);

    // A training step, through the job's exchange: the same error.
    let (_dir, run) = temp_run();
    let alone = of_training(train(&run, None, 1.0, None).unwrap_err());
    let (_dir, run) = temp_run();
    let ranked = of_training(train(&run, None, 1.0, Some(job)).unwrap_err());
    let (a, r) = (all_failed(&alone), all_failed(&ranked));
    assert_eq!((a.0, a.1), (r.0, r.1));
}
