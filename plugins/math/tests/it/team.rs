//! The paper's team on the plugin's side: the solver's last attempt finishes, the
//! verdict reward judges each verifier turn, `math/boxed`'s fallback, and the
//! environment's approve rates, all on hand-built transcripts.

use crate::common;

use common::{
    agent, episode, finish, handoff, reward, task, try_environment, try_reward, turn, view,
};
use drmas_plugin_api::Parsed;

/// Right answer 7, three verifier turns: approve a wrong 5, reject a right 7, reject a
/// wrong 6 — and an unreadable verdict on 7.
fn judged_episode() -> drmas_plugin_api::EpisodeRecord {
    episode(
        task("What is 3 + 4?", "7"),
        Some("7"),
        vec![
            turn(0, "solver", "\\boxed{5}", handoff("verifier")),
            turn(1, "verifier", "<verify>approve</verify>", handoff("solver")),
            turn(2, "solver", "so \\boxed{7}", handoff("verifier")),
            turn(3, "verifier", "<verify>reject</verify>", handoff("solver")),
            turn(4, "solver", "\\boxed{6}", handoff("verifier")),
            turn(
                5,
                "verifier",
                "<verify> Reject </verify>",
                handoff("solver"),
            ),
            turn(6, "solver", "\\boxed{7}", handoff("verifier")),
            turn(7, "verifier", "looks right", finish("7")),
        ],
    )
}

#[test]
fn the_solver_finishes_on_its_last_attempt_and_hands_off_before() {
    let solver = agent("solver", "");
    let t = task("What is 3 + 4?", "7");
    let first = view(t.clone(), "solver", vec![]);
    assert_eq!(
        solver.parse(&first, "\\boxed{5}").unwrap(),
        Parsed::valid(handoff("verifier"))
    );
    let rejected = vec![
        turn(0, "solver", "\\boxed{5}", handoff("verifier")),
        turn(1, "verifier", "<verify>reject</verify>", handoff("solver")),
    ];
    let second = view(t.clone(), "solver", rejected.clone());
    assert_eq!(
        solver.parse(&second, "then \\boxed{7}").unwrap(),
        Parsed::valid(finish("7"))
    );
    // No box on the last attempt: the episode still ends, with an empty answer.
    assert_eq!(
        solver.parse(&second, "seven").unwrap(),
        Parsed::invalid(finish(""), "no \\boxed{} answer")
    );
    // Three attempts: the second still goes to the verifier.
    let three = agent("solver", "max_attempts = 3");
    assert_eq!(
        three.parse(&second, "\\boxed{7}").unwrap(),
        Parsed::valid(handoff("verifier"))
    );
    // No limit: never finishes while there is a verifier.
    let unlimited = agent("solver", "max_attempts = 0");
    let many: Vec<_> = (0..10)
        .flat_map(|i| {
            rejected.iter().cloned().map(move |mut t| {
                t.turn += 2 * i;
                t
            })
        })
        .collect();
    assert_eq!(
        unlimited
            .parse(&view(t, "solver", many), "\\boxed{7}")
            .unwrap(),
        Parsed::valid(handoff("verifier"))
    );
}

#[test]
fn a_plain_resample_retry_shows_only_the_question() {
    let solver = agent(
        "solver",
        "system_prompt = \"\"\nretry_template = \"{question}\"",
    );
    let rejected = vec![
        turn(0, "solver", "\\boxed{5}", handoff("verifier")),
        turn(1, "verifier", "<verify>reject</verify>", handoff("solver")),
    ];
    let messages = solver
        .render(&view(task("What is 3 + 4?", "7"), "solver", rejected))
        .unwrap();
    assert_eq!(
        messages,
        [drmas_plugin_api::Message::user("What is 3 + 4?")]
    );
}

#[test]
fn the_verdict_reward_scores_each_verifier_turn_by_the_judged_answer() {
    let e = judged_episode();
    let r = reward("verdict");
    // approve wrong → 0, reject right → 0, reject wrong → 1, unreadable → 0.
    assert_eq!(
        r.turn_scores(&e).unwrap(),
        Some(vec![0.0, 0.0, 0.0, 0.0, 0.0, 1.0, 0.0, 0.0])
    );
    assert_eq!(r.score(&e).unwrap(), 0.25);
    // No verifier turn: 0, and every turn 0.
    let alone = episode(
        task("What is 3 + 4?", "7"),
        Some("7"),
        vec![turn(0, "solver", "\\boxed{7}", finish("7"))],
    );
    assert_eq!(r.score(&alone).unwrap(), 0.0);
    assert_eq!(r.turn_scores(&alone).unwrap(), Some(vec![0.0]));
    // Other role names.
    let renamed = try_reward("verdict", "verifier = \"solver\"\nsolver = \"verifier\"").unwrap();
    assert_eq!(
        renamed.score(&e).unwrap(),
        0.0,
        "the 'solutions' are verdicts now"
    );
    // The team rewards judge the episode as a whole.
    assert_eq!(reward("boxed").turn_scores(&e).unwrap(), None);
}

#[test]
fn boxed_scores_the_latest_answer_and_falls_back_only_when_asked() {
    let t = task("What is 3 + 4?", "7");
    let transcript = vec![
        turn(0, "solver", "\\boxed{7}", handoff("verifier")),
        turn(1, "verifier", "<verify>reject</verify>", handoff("solver")),
        turn(2, "solver", "I am not sure", finish("")),
    ];
    let e = episode(t.clone(), Some(""), transcript.clone());
    assert_eq!(reward("boxed").score(&e).unwrap(), 0.0);
    let fallback = try_reward("boxed", "fallback_to_earlier = true").unwrap();
    assert_eq!(fallback.score(&e).unwrap(), 1.0);
    // A non-empty final answer is scored as it is, fallback or not.
    let wrong = episode(t, Some("8"), transcript);
    assert_eq!(fallback.score(&wrong).unwrap(), 0.0);
    let err = try_reward("boxed", "fallback = true").err().unwrap();
    assert_eq!(
        err.message(),
        "unknown field `fallback`, expected `fallback_to_earlier` (at `fallback`)"
    );
}

#[test]
fn the_environment_reports_approve_rates_given_correctness() {
    let env = try_environment("").unwrap();
    let m = env.record_metrics(&judged_episode()).unwrap();
    let got: Vec<(&str, f64)> = m.iter().map(|(k, v)| (k.as_str(), *v)).collect();
    // Verdicts: approve on wrong 5, reject on right 7, reject on wrong 6, unreadable on 7.
    assert_eq!(
        got,
        [
            ("approve_given_correct", 0.0),
            ("approve_given_wrong", 0.5),
            ("approve_rate", 0.25),
            ("first_attempt_correct", 0.0),
            ("last_attempt_correct", 1.0),
            ("solver_attempts", 4.0),
            ("verdict_accuracy", 1.0 / 3.0),
            ("verdict_invalid", 0.25),
        ]
    );
    // An episode without a verifier turn has only the solver's numbers; one without
    // any turn has none.
    let alone = episode(
        task("What is 3 + 4?", "7"),
        Some("7"),
        vec![turn(0, "solver", "\\boxed{7}", finish("7"))],
    );
    let m = env.record_metrics(&alone).unwrap();
    assert_eq!(
        m.keys().map(String::as_str).collect::<Vec<_>>(),
        [
            "first_attempt_correct",
            "last_attempt_correct",
            "solver_attempts"
        ]
    );
    let empty = episode(task("What is 3 + 4?", "7"), None, vec![]);
    assert!(env.record_metrics(&empty).unwrap().is_empty());
}
