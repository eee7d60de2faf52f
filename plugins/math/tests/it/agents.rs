//! The solver and verifier agents: exact prompts and exact parses.

use crate::common;

use common::{agent, finish, handoff, task, turn, view};
use drmas_math::{solver, verifier};
use drmas_plugin_api::{Action, Message, Parsed};

const QUESTION: &str = "What is 5 + 3?";

/// The PEERS configuration for SmolLM2-135M: a calculator system prompt and one example.
const SMOL_SOLVER: &str = r#"
system_prompt = "You are a careful calculator. Reply with only the result in the form \\boxed{N}."
examples = [{ question = "What is 3 + 4?", answer = "\\boxed{7}" }]
"#;

fn fresh() -> drmas_plugin_api::EpisodeView {
    view(task(QUESTION, "8"), "solver", vec![])
}

/// solver answers 9, verifier rejects: the solver's second turn.
fn after_rejection() -> drmas_plugin_api::EpisodeView {
    view(
        task(QUESTION, "8"),
        "solver",
        vec![
            turn(0, "solver", "5 + 3 = 9, so \\boxed{9}", handoff("verifier")),
            turn(1, "verifier", "<verify>reject</verify>", handoff("solver")),
        ],
    )
}

#[test]
fn solver_default_prompt() {
    let messages = agent("solver", "").render(&fresh()).unwrap();
    assert_eq!(
        messages,
        vec![
            Message::system(
                "Solve the math problem step by step. Put your final answer in \\boxed{}."
            ),
            Message::user("What is 5 + 3?"),
        ]
    );
}

#[test]
fn solver_renders_system_then_examples_then_question() {
    let messages = agent("solver", SMOL_SOLVER).render(&fresh()).unwrap();
    assert_eq!(
        messages,
        vec![
            Message::system(
                "You are a careful calculator. Reply with only the result in the form \\boxed{N}."
            ),
            Message::user("What is 3 + 4?"),
            Message::assistant("\\boxed{7}"),
            Message::user("What is 5 + 3?"),
        ]
    );
}

#[test]
fn solver_examples_go_through_the_user_template() {
    let config = r#"
system_prompt = ""
user_template = "Q: {question}\nPut the result in \\boxed{}."
examples = [
    { question = "1 + 1", answer = "\\boxed{2}" },
    { question = "2 + 2", answer = "\\boxed{4}" },
]
"#;
    let messages = agent("solver", config).render(&fresh()).unwrap();
    assert_eq!(
        messages,
        vec![
            Message::user("Q: 1 + 1\nPut the result in \\boxed{}."),
            Message::assistant("\\boxed{2}"),
            Message::user("Q: 2 + 2\nPut the result in \\boxed{}."),
            Message::assistant("\\boxed{4}"),
            Message::user("Q: What is 5 + 3?\nPut the result in \\boxed{}."),
        ]
    );
}

#[test]
fn solver_retries_after_the_verifier_rejects() {
    let messages = agent("solver", "").render(&after_rejection()).unwrap();
    assert_eq!(messages.len(), 2);
    assert_eq!(
        messages[1],
        Message::user(
            "What is 5 + 3?\n\n\
             Your previous solution was judged wrong:\n\n\
             5 + 3 = 9, so \\boxed{9}\n\n\
             Find the mistake and solve the problem again. Put your final answer in \\boxed{}."
        )
    );
    assert_eq!(solver::DEFAULT_RETRY_TEMPLATE, {
        let c = drmas_math::SolverConfig::default();
        c.retry_template
    });
}

#[test]
fn solver_retry_template_is_configurable_and_keeps_the_examples() {
    let config = format!("{SMOL_SOLVER}retry_template = \"{{question}} (not {{previous}})\"\n");
    let messages = agent("solver", &config).render(&after_rejection()).unwrap();
    assert_eq!(messages.len(), 4);
    assert_eq!(messages[1], Message::user("What is 3 + 4?"));
    assert_eq!(
        messages[3],
        Message::user("What is 5 + 3? (not 5 + 3 = 9, so \\boxed{9})")
    );
}

#[test]
fn solver_uses_its_latest_completion_on_a_second_retry() {
    let mut v = after_rejection();
    v.transcript
        .push(turn(2, "solver", "\\boxed{7}", handoff("verifier")));
    v.transcript.push(turn(
        3,
        "verifier",
        "<verify>reject</verify>",
        handoff("solver"),
    ));
    let config = "retry_template = \"{question} | {previous}\"";
    let messages = agent("solver", config).render(&v).unwrap();
    assert_eq!(messages[1], Message::user("What is 5 + 3? | \\boxed{7}"));
}

#[test]
fn solver_without_a_rejection_gets_the_plain_question() {
    // The last turn is the verifier's, but it approved (a Finish) — no retry prompt.
    let v = view(
        task(QUESTION, "8"),
        "solver",
        vec![
            turn(0, "solver", "\\boxed{8}", handoff("verifier")),
            turn(1, "verifier", "<verify>approve</verify>", finish("8")),
        ],
    );
    let messages = agent("solver", "").render(&v).unwrap();
    assert_eq!(messages[1], Message::user("What is 5 + 3?"));
    // With no verifier configured there is never a retry.
    let messages = agent("solver", "verifier = \"\"")
        .render(&after_rejection())
        .unwrap();
    assert_eq!(messages[1], Message::user("What is 5 + 3?"));
}

#[test]
fn templates_are_filled_in_one_pass() {
    let v = view(task("Is {previous} a {question}?", "no"), "solver", vec![]);
    let messages = agent(
        "solver",
        "user_template = \"[{question}] {{answer}} \\\\boxed{}\"",
    )
    .render(&v)
    .unwrap();
    assert_eq!(
        messages[1],
        Message::user("[Is {previous} a {question}?] {answer} \\boxed{}")
    );
}

#[test]
fn solver_parse() {
    let solver = agent("solver", "");
    let v = fresh();
    assert_eq!(
        solver.parse(&v, "5 + 3 = 8, so \\boxed{8}.").unwrap(),
        Parsed::valid(handoff("verifier"))
    );
    assert_eq!(
        solver.parse(&v, "The answer is 8.").unwrap(),
        Parsed::invalid(handoff("verifier"), "no \\boxed{} answer")
    );
    assert_eq!(
        solver.parse(&v, "\\boxed{}").unwrap(),
        Parsed::invalid(handoff("verifier"), "empty \\boxed{} answer")
    );
    assert_eq!(
        solver.parse(&v, "\\boxed{8").unwrap(),
        Parsed::invalid(handoff("verifier"), "no \\boxed{} answer")
    );
    let named = agent("solver", "verifier = \"checker\"");
    assert_eq!(
        named.parse(&v, "\\boxed{\\frac{1}{2}}").unwrap(),
        Parsed::valid(handoff("checker"))
    );
}

#[test]
fn solver_without_verifier_finishes() {
    let solver = agent("solver", "verifier = \"\"");
    let v = fresh();
    assert_eq!(
        solver
            .parse(&v, "first \\boxed{7}, no: \\boxed{ 8 }")
            .unwrap(),
        Parsed::valid(finish("8"))
    );
    assert_eq!(
        solver.parse(&v, "8").unwrap(),
        Parsed::invalid(
            Action::Invalid {
                reason: "no \\boxed{} answer".into()
            },
            "no \\boxed{} answer"
        )
    );
}

fn to_verify() -> drmas_plugin_api::EpisodeView {
    view(
        task(QUESTION, "8"),
        "verifier",
        vec![
            turn(0, "solver", "5 + 3 = 9, so \\boxed{9}", handoff("verifier")),
            turn(1, "verifier", "<verify>reject</verify>", handoff("solver")),
            turn(2, "solver", "5 + 3 = 8: \\boxed{8}", handoff("verifier")),
        ],
    )
}

#[test]
fn verifier_default_prompt_shows_the_latest_solution() {
    let messages = agent("verifier", "").render(&to_verify()).unwrap();
    assert_eq!(
        messages,
        vec![
            Message::system(
                "You check solutions to math problems. Read the problem and the proposed \
                 solution carefully. If the final answer is correct, reply \
                 <verify>approve</verify>; if it is wrong, reply <verify>reject</verify>."
            ),
            Message::user(
                "Problem:\nWhat is 5 + 3?\n\n\
                 Proposed solution:\n5 + 3 = 8: \\boxed{8}\n\n\
                 Is the final answer correct? Reply <verify>approve</verify> or \
                 <verify>reject</verify>."
            ),
        ]
    );
    assert_eq!(
        messages[0].content.as_str(),
        verifier::DEFAULT_SYSTEM_PROMPT
    );
}

#[test]
fn verifier_custom_prompt_and_solver_name() {
    let config = r#"
system_prompt = ""
user_template = "{question} => {solution}"
solver = "alice"
"#;
    let v = view(
        task(QUESTION, "8"),
        "verifier",
        vec![
            turn(0, "alice", "\\boxed{8}", handoff("verifier")),
            turn(1, "bob", "\\boxed{9}", handoff("verifier")),
        ],
    );
    let verifier = agent("verifier", config);
    assert_eq!(
        verifier.render(&v).unwrap(),
        vec![Message::user("What is 5 + 3? => \\boxed{8}")]
    );
    assert_eq!(
        verifier.parse(&v, "<verify>reject</verify>").unwrap(),
        Parsed::valid(handoff("alice"))
    );
    assert_eq!(
        verifier.parse(&v, "<verify>approve</verify>").unwrap(),
        Parsed::valid(finish("8"))
    );
}

#[test]
fn verifier_parse() {
    let verifier = agent("verifier", "");
    let v = to_verify();
    let approve = Parsed::valid(finish("8"));
    let reject = Parsed::valid(handoff("solver"));
    let cases: Vec<(&str, Parsed)> = vec![
        (
            "The steps are right. <verify>approve</verify>",
            approve.clone(),
        ),
        ("<verify>reject</verify>", reject.clone()),
        ("< VERIFY > Approve </Verify>", approve.clone()),
        ("<verify>\n  reject \n</verify >", reject.clone()),
        (
            "<verify>approve</verify> wait, no: <verify>reject</verify>",
            reject.clone(),
        ),
        (
            "<verify>reject</verify> on reflection <verify>approve</verify>",
            approve.clone(),
        ),
        ("<verify>reject</verify> then <verify>appro", reject.clone()),
        (
            "<verify>maybe</verify>",
            Parsed::invalid(
                finish("8"),
                "verdict `maybe` is neither approve nor reject; counted as approve",
            ),
        ),
        (
            "<verify>approved</verify>",
            Parsed::invalid(
                finish("8"),
                "verdict `approved` is neither approve nor reject; counted as approve",
            ),
        ),
        (
            "Looks correct to me.",
            Parsed::invalid(
                finish("8"),
                "no <verify>approve</verify> or <verify>reject</verify>; counted as approve",
            ),
        ),
        (
            "<verify>reject",
            Parsed::invalid(
                finish("8"),
                "no <verify>approve</verify> or <verify>reject</verify>; counted as approve",
            ),
        ),
        (
            "",
            Parsed::invalid(
                finish("8"),
                "no <verify>approve</verify> or <verify>reject</verify>; counted as approve",
            ),
        ),
    ];
    for (completion, want) in cases {
        assert_eq!(
            verifier.parse(&v, completion).unwrap(),
            want,
            "{completion:?}"
        );
    }
}

#[test]
fn verifier_approving_an_unboxed_solution_finishes_with_an_empty_answer() {
    let v = view(
        task(QUESTION, "8"),
        "verifier",
        vec![turn(0, "solver", "It is 8.", handoff("verifier"))],
    );
    assert_eq!(
        agent("verifier", "")
            .parse(&v, "<verify>approve</verify>")
            .unwrap(),
        Parsed::valid(finish(""))
    );
}

#[test]
fn long_garbled_verdicts_are_shortened_in_the_note() {
    let v = to_verify();
    let completion = format!("<verify>{}</verify>", "é".repeat(100));
    let parsed = agent("verifier", "").parse(&v, &completion).unwrap();
    assert!(!parsed.valid);
    assert_eq!(parsed.action, finish("8"));
    assert_eq!(
        parsed.note.as_str(),
        format!(
            "verdict `{}…` is neither approve nor reject; counted as approve",
            "é".repeat(40)
        )
    );
}

#[test]
fn verifier_examples_come_before_the_real_question() {
    use drmas_plugin_api::{EpisodeView, Message};
    let spec = drmas_math::plugin();
    let make = spec
        .entries
        .iter()
        .find(|e| e.name == "verifier")
        .map(|e| match &e.factory {
            drmas_plugin_api::ComponentFactory::Agent(f) => f,
            _ => unreachable!(),
        })
        .unwrap();
    let config = "system_prompt = \"\"\nuser_template = \"Q: {question} A: {solution}\"\n\
                  examples = [{ question = \"1 + 1\", solution = \"\\\\boxed{2}\", reply = \"<verify>approve</verify>\" }]";
    let verifier = make(config).unwrap();
    let view = EpisodeView {
        task: drmas_plugin_api::Task {
            question: "2 + 2".into(),
            ..Default::default()
        },
        agent: "verifier".into(),
        turn: 1,
        ..EpisodeView::default()
    };
    let messages = verifier.render(&view).unwrap();
    assert_eq!(
        messages,
        vec![
            Message::user("Q: 1 + 1 A: \\boxed{2}"),
            Message::assistant("<verify>approve</verify>"),
            Message::user("Q: 2 + 2 A: "),
        ]
    );
}

/// The four-agent team's refiner: `math/solver` with `draft` and `critic`, whose user
/// turn shows the solver's draft and the critic's critique, and which hands its answer
/// to the verifier; the verifier judges the refiner's answer.
#[test]
fn a_refiner_shows_the_draft_and_the_critique_and_the_verifier_judges_it() {
    let refiner = agent(
        "solver",
        r#"
user_template = "{question}\nDraft: {draft}\nCritique: {critique}"
draft = "solver"
critic = "critic"
verifier = "verifier"
"#,
    );
    let transcript = vec![
        turn(0, "solver", "\\boxed{9}", handoff("critic")),
        turn(1, "critic", "5 + 3 is not 9.", handoff("refiner")),
    ];
    let v = view(task(QUESTION, "8"), "refiner", transcript.clone());
    let messages = refiner.render(&v).unwrap();
    assert_eq!(
        messages.last().unwrap(),
        &Message::user(format!(
            "{QUESTION}\nDraft: \\boxed{{9}}\nCritique: 5 + 3 is not 9."
        ))
    );
    assert_eq!(
        refiner.parse(&v, "\\boxed{8}").unwrap(),
        Parsed::valid(handoff("verifier"))
    );
    assert_eq!(refiner.linked_agents(), ["verifier", "solver", "critic"]);
    let judge = agent("verifier", "solver = \"refiner\"");
    let mut after = transcript;
    after.push(turn(2, "refiner", "\\boxed{8}", handoff("verifier")));
    let v = view(task(QUESTION, "8"), "verifier", after);
    assert_eq!(
        judge.parse(&v, "<verify>approve</verify>").unwrap(),
        Parsed::valid(finish("8"))
    );
}
