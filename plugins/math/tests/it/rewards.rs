//! `math/boxed` and `math/gsm8k` on finished episodes.

use crate::common;

use common::{episode, finish, handoff, reward, task, turn};

const GSM8K_GOLD: &str = "Janet sells 16 - 3 - 4 = <<16-3-4=9>>9 duck eggs a day.\n\
She makes 9 * 2 = $<<9*2=18>>18 every day at the farmer’s market.\n#### 18";

fn score(name: &str, e: &drmas_plugin_api::EpisodeRecord) -> f32 {
    reward(name).score(e).unwrap()
}

#[test]
fn boxed_scores_the_final_answer() {
    let t = task("What is half of one?", "\\frac{1}{2}");
    let solved = vec![
        turn(0, "solver", "\\boxed{0.5}", handoff("verifier")),
        turn(1, "verifier", "<verify>approve</verify>", finish("0.5")),
    ];
    assert_eq!(
        score("boxed", &episode(t.clone(), Some("0.5"), solved.clone())),
        1.0
    );
    assert_eq!(
        score("boxed", &episode(t.clone(), Some("\\dfrac12"), vec![])),
        1.0
    );
    assert_eq!(
        score("boxed", &episode(t.clone(), Some("\\boxed{.5}"), vec![])),
        1.0
    );
    assert_eq!(
        score("boxed", &episode(t.clone(), Some("0.25"), solved.clone())),
        0.0
    );
    // The final answer wins over boxes in the transcript, even when it is empty.
    assert_eq!(score("boxed", &episode(t, Some(""), solved)), 0.0);
}

#[test]
fn boxed_extracts_a_boxed_gold_solution() {
    let t = task(
        "Simplify.",
        "We have $\\frac{6}{12} = \\boxed{\\frac{1}{2}}$, since 6 divides 12.",
    );
    assert_eq!(
        score("boxed", &episode(t.clone(), Some("1/2"), vec![])),
        1.0
    );
    assert_eq!(score("boxed", &episode(t, Some("6"), vec![])), 0.0);
}

#[test]
fn boxed_falls_back_to_the_last_box_in_the_transcript() {
    let t = task("What is 5 + 3?", "8");
    let truncated = vec![
        turn(0, "solver", "\\boxed{9}", handoff("verifier")),
        turn(1, "verifier", "<verify>reject</verify>", handoff("solver")),
        turn(2, "solver", "Oops: \\boxed{8}", handoff("verifier")),
        turn(3, "verifier", "<verify>reject</verify>", handoff("solver")),
    ];
    assert_eq!(
        score("boxed", &episode(t.clone(), None, truncated.clone())),
        1.0
    );
    assert_eq!(
        score("boxed", &episode(t.clone(), None, truncated[..2].to_vec())),
        0.0
    );
    let unboxed = vec![turn(0, "solver", "It is 8.", handoff("verifier"))];
    assert_eq!(score("boxed", &episode(t.clone(), None, unboxed)), 0.0);
    assert_eq!(score("boxed", &episode(t, None, vec![])), 0.0);
}

#[test]
fn boxed_grades_sets_and_text() {
    let t = task("Solve x^2 = 1.", "\\{-1, 1\\}");
    assert_eq!(
        score("boxed", &episode(t.clone(), Some("1, -1"), vec![])),
        1.0
    );
    assert_eq!(score("boxed", &episode(t, Some("1"), vec![])), 0.0);
    let t = task("Is 7 prime?", "\\text{Yes}");
    assert_eq!(score("boxed", &episode(t, Some("yes"), vec![])), 1.0);
}

#[test]
fn gsm8k_reads_the_gold_after_hashes() {
    let t = task("How much does Janet make?", GSM8K_GOLD);
    let cases: &[(Option<&str>, f32)] = &[
        (Some("18"), 1.0),
        (Some("18.00"), 1.0),
        (Some("\\$18"), 1.0),
        (Some("\\boxed{18}"), 1.0),
        (Some("She makes 18 dollars a day."), 1.0),
        (Some("9 eggs, 18"), 1.0),
        (Some("18 eggs, then 9"), 0.0),
        (Some("19"), 0.0),
        (Some(""), 0.0),
    ];
    for (final_answer, want) in cases {
        let e = episode(t.clone(), *final_answer, vec![]);
        assert_eq!(score("gsm8k", &e), *want, "final answer {final_answer:?}");
    }
}

#[test]
fn gsm8k_numbers_ignore_commas() {
    let t = task("How many?", "Total: 1,000 + 234 = 1234\n#### 1,234");
    assert_eq!(
        score("gsm8k", &episode(t.clone(), Some("1234"), vec![])),
        1.0
    );
    assert_eq!(
        score("gsm8k", &episode(t.clone(), Some("\\boxed{1,234}"), vec![])),
        1.0
    );
    assert_eq!(score("gsm8k", &episode(t, Some("1,235"), vec![])), 0.0);
}

#[test]
fn gsm8k_without_a_final_answer_reads_the_transcript() {
    let t = task("How much does Janet make?", GSM8K_GOLD);
    // The last box anywhere in the transcript.
    let boxed = vec![
        turn(0, "solver", "so \\boxed{18}", handoff("verifier")),
        turn(
            1,
            "verifier",
            "<verify>reject</verify> 5",
            handoff("solver"),
        ),
    ];
    assert_eq!(score("gsm8k", &episode(t.clone(), None, boxed)), 1.0);
    // No box: the last number of the last completion.
    let unboxed = vec![turn(
        0,
        "solver",
        "16 - 7 = 9 eggs, 9 * 2 = 18",
        handoff("verifier"),
    )];
    assert_eq!(score("gsm8k", &episode(t.clone(), None, unboxed)), 1.0);
    let wrong = vec![turn(
        0,
        "solver",
        "she makes 18, minus 2 = 16",
        handoff("verifier"),
    )];
    assert_eq!(score("gsm8k", &episode(t.clone(), None, wrong)), 0.0);
    assert_eq!(score("gsm8k", &episode(t, None, vec![])), 0.0);
}

#[test]
fn gsm8k_gold_without_hashes_is_the_answer_itself() {
    let t = task("What is 6 * 7?", "42");
    assert_eq!(score("gsm8k", &episode(t.clone(), Some("42"), vec![])), 1.0);
    assert_eq!(score("gsm8k", &episode(t, Some("-42"), vec![])), 0.0);
    let t = task("What is 6 * 7?", "\\boxed{42}");
    assert_eq!(score("gsm8k", &episode(t, Some("42.0"), vec![])), 1.0);
    // A gold without a number falls back to the general grader.
    let t = task("Is 7 prime?", "Yes");
    assert_eq!(
        score("gsm8k", &episode(t.clone(), Some("yes"), vec![])),
        1.0
    );
    assert_eq!(score("gsm8k", &episode(t, Some("no"), vec![])), 0.0);
}
