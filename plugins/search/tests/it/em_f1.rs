//! SQuAD normalization, exact match and token F1 on hand-computed cases: the pure
//! functions of `answer`, then `search/em` and `search/f1` through an `EpisodeRecord`,
//! made as the host makes them (from the plugin's spec).

use drmas_plugin_api::{ComponentFactory, ComponentKind, EpisodeRecord, PluginError, Reward, Task};
use drmas_search::answer::{
    best_token_f1, exact_match, exact_match_any, extract_answer, is_punctuation, normalize_answer,
    token_f1,
};
use drmas_search::reward::gold_aliases;
use serde_json::{Value, json};

fn try_reward(name: &str, config: &str) -> Result<Box<dyn Reward>, PluginError> {
    let spec = drmas_search::plugin();
    let entry = spec
        .entries
        .into_iter()
        .find(|e| e.factory.kind() == ComponentKind::Reward && e.name == name)
        .unwrap_or_else(|| panic!("search has no reward {name}"));
    match entry.factory {
        ComponentFactory::Reward(make) => make(config),
        _ => unreachable!(),
    }
}

fn task(answer: &str, answers: Option<Value>) -> Task {
    let mut task = Task {
        id: "q7".into(),
        source: "nq".into(),
        question: "Where is the Eiffel Tower?".into(),
        answer: answer.into(),
        ..Task::default()
    };
    if let Some(answers) = answers {
        task.meta.insert("answers".into(), answers);
    }
    task
}

fn episode(task: Task, final_answer: Option<&str>) -> EpisodeRecord {
    EpisodeRecord {
        task,
        final_answer: final_answer.map(Into::into),
        ..EpisodeRecord::default()
    }
}

/// (em, f1) of `final_answer` against `task`.
fn scores(task: &Task, final_answer: Option<&str>) -> (f32, f32) {
    let e = episode(task.clone(), final_answer);
    let em = try_reward("em", "").unwrap().score(&e).unwrap();
    let f1 = try_reward("f1", "").unwrap().score(&e).unwrap();
    (em, f1)
}

#[test]
fn normalization_follows_the_squad_script() {
    let cases = [
        // Articles as whole words, case.
        ("The Eiffel Tower", "eiffel tower"),
        ("An apple a day", "apple day"),
        ("a, the, an", ""),
        ("Theatre", "theatre"),
        ("Théâtre", "théâtre"),
        // ASCII punctuation is deleted, not replaced by a space.
        ("  Paris,   France. ", "paris france"),
        ("don't", "dont"),
        ("U.S.A.", "usa"),
        ("the-end", "theend"),
        ("the_end", "theend"),
        // Numbers.
        ("1,000,000", "1000000"),
        ("3.14", "314"),
        // Whitespace of any kind collapses.
        ("Tab\tand\nnewline\u{a0}too", "tab and newline too"),
        // Unicode: lower-cased like Python's str.lower, accents kept.
        ("ÉCOLE Polytechnique", "école polytechnique"),
        ("ΟΔΟΣ", "οδος"),
        // Unicode punctuation goes too (the official script would keep it).
        ("“Paris”", "paris"),
        ("«Les Misérables»", "les misérables"),
        ("¿Qué?", "qué"),
        ("Jean–Luc — Picard…", "jeanluc picard"),
        ("東京。", "東京"),
        // Unicode symbols stay.
        ("100 °C", "100 °c"),
        ("€5", "€5"),
    ];
    for (text, want) in cases {
        assert_eq!(normalize_answer(text), want, "normalize({text:?})");
    }
}

#[test]
fn punctuation_is_ascii_punctuation_plus_the_unicode_p_categories() {
    for c in "!\"#$%&'()*+,-./:;<=>?@[\\]^_`{|}~‘’“”«»–—…¡¿§¶·、。「」（）".chars()
    {
        assert!(is_punctuation(c), "{c:?} is punctuation");
    }
    for c in "aZ09 éßΣ€°©×\u{301}\u{10ffff}".chars() {
        assert!(!is_punctuation(c), "{c:?} is not punctuation");
    }
}

#[test]
fn exact_match_compares_normalized_texts() {
    let cases = [
        ("the Eiffel tower!", "Eiffel Tower", true),
        ("Eiffel", "Eiffel Tower", false),
        ("1,000", "1000", true),
        ("1 000", "1000", false),
        ("É", "é", true),
        ("école", "ecole", false),
        ("  Neil\n Armstrong ", "Neil Armstrong", true),
        ("", "", true),
        // An answer of only articles and punctuation normalizes to nothing.
        ("", "The.", true),
        ("", "Paris", false),
    ];
    for (prediction, gold, want) in cases {
        assert_eq!(
            exact_match(prediction, gold),
            want,
            "em({prediction:?}, {gold:?})"
        );
    }
}

#[test]
fn token_f1_counts_common_tokens_with_multiplicity() {
    let cases = [
        ("Eiffel Tower", "the Eiffel Tower", 1.0),
        // 1 common; precision 1/1, recall 1/2.
        ("Eiffel", "Eiffel Tower", 2.0 / 3.0),
        // [tall eiffel tower] vs [eiffel tower paris]: 2 common of 3 and 3.
        ("the tall Eiffel Tower", "Eiffel Tower, Paris", 2.0 / 3.0),
        // 1 common of 2 and 3: 2·(1/2)(1/3) / (1/2 + 1/3) = 0.4.
        ("New York", "York City centre", 0.4),
        // Counter intersection: paris ×3 against paris ×1 is 1 common, of 3 and 2.
        ("paris paris paris", "Paris, France", 0.4),
        ("New York New York", "New York", 2.0 / 3.0),
        ("Obama", "Barack Hussein Obama", 0.5),
        ("Eiffel Tower", "the Eiffel Tower in Paris", 2.0 / 3.0),
        ("Eiffel Tower", "Eiffel Tower Paris", 0.8),
        ("1,000 people", "1000 people", 1.0),
        ("1999", "in 1999", 2.0 / 3.0),
        ("Lyon", "Paris", 0.0),
        // Empty against empty is 1, empty against anything else 0.
        ("", "", 1.0),
        ("The", "an", 1.0),
        ("", "Paris", 0.0),
        ("the", "Paris", 0.0),
        ("Paris", "", 0.0),
    ];
    for (prediction, gold, want) in cases {
        let got = token_f1(prediction, gold);
        assert!(
            (got - want).abs() < 1e-12,
            "f1({prediction:?}, {gold:?}) = {got}, want {want}"
        );
    }
}

#[test]
fn aliases_take_the_best_match() {
    let aliases = ["Barack Obama", "Obama", "Barack Hussein Obama"];
    assert!(exact_match_any("barack hussein obama.", &aliases));
    assert!(!exact_match_any("Hussein", &aliases));
    // Hussein: 0, 0 and 1 common of 1 and 3 (0.5).
    assert!((best_token_f1("Hussein", &aliases) - 0.5).abs() < 1e-12);
    // President Obama: 0.5, 2/3 and 0.4.
    assert!((best_token_f1("President Obama", &aliases) - 2.0 / 3.0).abs() < 1e-12);
    let none: [&str; 0] = [];
    assert!(!exact_match_any("", &none));
    assert_eq!(best_token_f1("", &none), 0.0);
}

#[test]
fn the_answer_is_the_last_answer_block() {
    let cases = [
        ("<answer>Paris</answer>", "Paris"),
        (
            "<answer>Lyon</answer> no, <answer> Paris </answer>",
            "Paris",
        ),
        ("<ANSWER>Paris</ Answer >", "Paris"),
        ("<think>Lyon?</think><answer>Paris</answer>", "Paris"),
        ("Paris", "Paris"),
        // An unclosed block is no block: the text is the answer.
        ("<answer>Paris", "<answer>Paris"),
        ("<answer></answer>", ""),
    ];
    for (text, want) in cases {
        assert_eq!(extract_answer(text), want, "extract({text:?})");
    }
}

#[test]
fn gold_aliases_are_meta_answers_then_the_answer_deduplicated_never_split() {
    let t = task(
        "Washington, D.C.",
        Some(json!(["Washington, D.C.", "DC", 1800, "DC", " "])),
    );
    assert_eq!(
        gold_aliases(&t).unwrap(),
        ["Washington, D.C.", "DC", "1800"]
    );
    assert_eq!(
        gold_aliases(&task("Paris, France", None)).unwrap(),
        ["Paris, France"]
    );
    let one = task("Paris", Some(json!("Paris, France")));
    assert_eq!(gold_aliases(&one).unwrap(), ["Paris, France", "Paris"]);
    let err = gold_aliases(&task("Paris", Some(json!(["Paris", true])))).unwrap_err();
    assert_eq!(
        err.message(),
        "task `q7` (nq): answers[1] is true; the gold answers must be strings"
    );
    let err = gold_aliases(&task("Paris", Some(json!({"a": 1})))).unwrap_err();
    assert_eq!(
        err.message(),
        "task `q7` (nq): answers is {\"a\":1}; expected an array of strings"
    );
}

#[test]
fn rewards_score_the_episode_answer_against_every_alias() {
    let third = 2.0f64 / 3.0;
    let eiffel = task("Eiffel Tower", None);
    let obama = task(
        "Barack Obama",
        Some(json!(["Barack Obama", "Obama", "Barack Hussein Obama"])),
    );
    let comma = task("Paris, France", None);
    let dc = task("DC", Some(json!(["Washington, D.C."])));
    let year = task("", Some(json!([1969])));
    let accent = task("Étienne", None);
    let cases: [(&Task, Option<&str>, (f32, f32)); 17] = [
        (
            &eiffel,
            Some("<answer>the Eiffel Tower.</answer>"),
            (1.0, 1.0),
        ),
        (&eiffel, Some("Eiffel"), (0.0, third as f32)),
        (&eiffel, Some("  the\n eiffel   TOWER "), (1.0, 1.0)),
        // Several answer blocks: the last one counts.
        (
            &eiffel,
            Some("<answer>Louvre</answer><answer>Eiffel Tower</answer>"),
            (1.0, 1.0),
        ),
        (
            &eiffel,
            Some("<answer>Eiffel Tower</answer><answer>Louvre</answer>"),
            (0.0, 0.0),
        ),
        // No answer, an empty one, an empty block.
        (&eiffel, None, (0.0, 0.0)),
        (&eiffel, Some(""), (0.0, 0.0)),
        (&eiffel, Some("<answer></answer>"), (0.0, 0.0)),
        // Matching the third alias.
        (&obama, Some("Barack Hussein Obama"), (1.0, 1.0)),
        (&obama, Some("Hussein"), (0.0, 0.5)),
        // A gold answer with a comma is one alias.
        (&comma, Some("Paris"), (0.0, third as f32)),
        (&comma, Some("paris france"), (1.0, 1.0)),
        (&dc, Some("Washington"), (0.0, third as f32)),
        (&dc, Some("Washington DC"), (1.0, 1.0)),
        // A numeric gold alias.
        (&year, Some("1969"), (1.0, 1.0)),
        (&accent, Some("étienne"), (1.0, 1.0)),
        (&accent, Some("Etienne"), (0.0, 0.0)),
    ];
    for (task, final_answer, want) in cases {
        assert_eq!(
            scores(task, final_answer),
            want,
            "(em, f1) of {final_answer:?} against {:?}",
            gold_aliases(task).unwrap()
        );
    }
}

#[test]
fn a_malformed_gold_list_is_an_error_naming_the_task() {
    let t = task("Paris", Some(json!(["Paris", null])));
    for name in ["em", "f1"] {
        let err = try_reward(name, "")
            .unwrap()
            .score(&episode(t.clone(), Some("Paris")))
            .unwrap_err();
        assert_eq!(
            err.message(),
            "task `q7` (nq): answers[1] is null; the gold answers must be strings",
            "search/{name}"
        );
    }
}

#[test]
fn the_rewards_take_no_keys() {
    let manifest = drmas_search::plugin().manifest();
    for name in ["em", "f1"] {
        let info = manifest
            .components
            .iter()
            .find(|c| c.kind == ComponentKind::Reward && c.name == name)
            .unwrap();
        assert_eq!(info.config, Some(vec![]), "search/{name}");
        let err = try_reward(name, "normalize = false")
            .err()
            .expect("refused");
        assert!(
            err.message().starts_with("unknown field `normalize`"),
            "search/{name}: {err}"
        );
    }
}
