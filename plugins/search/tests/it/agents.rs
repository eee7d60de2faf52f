//! The verifier, searcher and answerer of the search team: scripted completions through
//! `parse` with real episode views, exact rendered prompts, the format rules, config
//! errors, and the keys each agent describes.

use drmas_plugin_api::{
    Action, Agent, ComponentFactory, ComponentInfo, ComponentKind, ConfigKey, EpisodeView, Message,
    Parsed, PluginError, Task, TurnRecord, parse_config,
};
use drmas_search::agents::{AnswererConfig, SearcherConfig, VerifierConfig};

const QUESTION: &str = "In which city is the Eiffel Tower?";
const INFO_1: &str = "<information>Doc 1(Title: Eiffel Tower) The Eiffel Tower is a tower \
on the Champ de Mars.</information>";
const INFO_2: &str = "<information>Doc 1(Title: Champ de Mars) The Champ de Mars is a park \
in Paris.</information>";

fn try_agent(name: &str, config: &str) -> Result<Box<dyn Agent>, PluginError> {
    let spec = drmas_search::plugin();
    let entry = spec
        .entries
        .into_iter()
        .find(|e| e.factory.kind() == ComponentKind::Agent && e.name == name)
        .unwrap_or_else(|| panic!("search has no agent {name}"));
    match entry.factory {
        ComponentFactory::Agent(make) => make(config),
        _ => unreachable!(),
    }
}

fn agent(name: &str, config: &str) -> Box<dyn Agent> {
    try_agent(name, config).expect("config accepted")
}

fn config_error(name: &str, config: &str) -> String {
    match try_agent(name, config) {
        Ok(_) => panic!("search/{name} accepted {config:?}"),
        Err(e) => e.message,
    }
}

fn turn(agent: &str, completion: &str, action: Action, tool_output: Option<&str>) -> TurnRecord {
    TurnRecord {
        agent: agent.into(),
        completion: completion.into(),
        action,
        valid: true,
        tool_output: tool_output.map(Into::into),
        ..TurnRecord::default()
    }
}

/// The episode after `turns`, with `agent` about to act.
fn view(agent: &str, turns: Vec<TurnRecord>) -> EpisodeView {
    let transcript: Vec<TurnRecord> = turns
        .into_iter()
        .enumerate()
        .map(|(i, t)| TurnRecord {
            turn: i as u32,
            ..t
        })
        .collect();
    EpisodeView {
        episode: 3,
        task: Task {
            id: "q1".into(),
            source: "nq".into(),
            question: QUESTION.into(),
            answer: "Paris".into(),
            ..Task::default()
        },
        agent: agent.into(),
        turn: transcript.len() as u32,
        transcript,
        ..EpisodeView::default()
    }
}

/// Two rounds of no → search: the verifier is about to act for the third time.
fn after_two_searches(next: &str) -> EpisodeView {
    view(
        next,
        vec![
            turn(
                "verifier",
                "<verify>no</verify>",
                Action::handoff("searcher"),
                None,
            ),
            turn(
                "searcher",
                "<search>Eiffel Tower location</search>",
                Action::tool("search", "Eiffel Tower location"),
                Some(INFO_1),
            ),
            turn(
                "verifier",
                "<verify>no</verify>",
                Action::handoff("searcher"),
                None,
            ),
            // An invalid turn whose fallback query was still searched.
            turn(
                "searcher",
                "Champ de Mars city",
                Action::tool("search", "Champ de Mars city"),
                Some(&format!("{INFO_2}\n")),
            ),
        ],
    )
}

fn parse(agent_name: &str, config: &str, completion: &str) -> Parsed {
    agent(agent_name, config)
        .parse(&after_two_searches(agent_name), completion)
        .unwrap()
}

// ---------------------------------------------------------------- verifier

#[test]
fn verifier_yes_hands_off_to_the_answerer_and_no_to_the_searcher() {
    for completion in [
        "<verify>yes</verify>",
        "<verify> Yes </verify>",
        "<VERIFY>YES</VERIFY>",
        "< verify >\nyes\n</ verify>",
    ] {
        assert_eq!(
            parse("verifier", "", completion),
            Parsed::valid(Action::handoff("answerer")),
            "{completion:?}"
        );
    }
    for completion in [
        "<verify>no</verify>",
        "The park is in a city. <verify> NO </verify>",
    ] {
        assert_eq!(
            parse("verifier", "", completion),
            Parsed::valid(Action::handoff("searcher")),
            "{completion:?}"
        );
    }
}

#[test]
fn an_unreadable_verdict_counts_as_yes_and_is_invalid() {
    let cases = [
        (
            "Yes, it is enough.",
            "no <verify>yes</verify> or <verify>no</verify> in the completion; counted as yes",
        ),
        (
            "<verify>yes",
            "no <verify>yes</verify> or <verify>no</verify> in the completion; counted as yes",
        ),
        (
            "<verify>maybe</verify>",
            "verdict `maybe` is neither yes nor no; counted as yes",
        ),
        (
            "<verify>yes.</verify>",
            "verdict `yes.` is neither yes nor no; counted as yes",
        ),
    ];
    for (completion, note) in cases {
        assert_eq!(
            parse("verifier", "", completion),
            Parsed::invalid(Action::handoff("answerer"), note),
            "{completion:?}"
        );
    }
}

#[test]
fn the_last_verify_tag_decides_but_two_are_invalid() {
    assert_eq!(
        parse(
            "verifier",
            "",
            "<verify>yes</verify> Wait. <verify>no</verify>"
        ),
        Parsed::invalid(
            Action::handoff("searcher"),
            "2 <verify> blocks; exactly one is allowed (the last one was used)"
        )
    );
    assert_eq!(
        parse("verifier", "", "<verify>no</verify></verify>"),
        Parsed::invalid(
            Action::handoff("searcher"),
            "a <verify> or </verify> without its partner"
        )
    );
}

#[test]
fn verifier_renders_the_question_and_every_information_block() {
    let messages = agent("verifier", "")
        .render(&after_two_searches("verifier"))
        .unwrap();
    let want_user = format!(
        "Question: In which city is the Eiffel Tower?\n\n\
         Information:\n{INFO_1}\n{INFO_2}\n\n\
         Is this information enough to answer the question? Reply <verify>yes</verify> or \
         <verify>no</verify>."
    );
    assert_eq!(
        messages,
        [
            Message::system(
                "You check whether the information found so far answers the question. \
                 Reply <verify>yes</verify> if it does, or <verify>no</verify> if more \
                 searching is needed."
            ),
            Message::user(want_user),
        ]
    );
}

#[test]
fn verifier_first_turn_says_nothing_was_retrieved() {
    let messages = agent("verifier", "system_prompt = \"\"")
        .render(&view("verifier", vec![]))
        .unwrap();
    assert_eq!(
        messages,
        [Message::user(
            "Question: In which city is the Eiffel Tower?\n\n\
             Information:\n(nothing retrieved yet)\n\n\
             Is this information enough to answer the question? Reply <verify>yes</verify> \
             or <verify>no</verify>."
        )]
    );
}

#[test]
fn verifier_examples_go_through_the_user_template() {
    let config = r#"
system_prompt = "Judge."
user_template = "Q: {question}\nI: {information}"
examples = [
    { question = "Who wrote Hamlet?", reply = "<verify>no</verify>" },
    { question = "Who wrote Hamlet?", information = "<information>Shakespeare wrote Hamlet.</information>", reply = "<verify>yes</verify>" },
]
"#;
    let messages = agent("verifier", config)
        .render(&view("verifier", vec![]))
        .unwrap();
    assert_eq!(
        messages,
        [
            Message::system("Judge."),
            Message::user("Q: Who wrote Hamlet?\nI: (nothing retrieved yet)"),
            Message::assistant("<verify>no</verify>"),
            Message::user(
                "Q: Who wrote Hamlet?\nI: <information>Shakespeare wrote Hamlet.</information>"
            ),
            Message::assistant("<verify>yes</verify>"),
            Message::user("Q: In which city is the Eiffel Tower?\nI: (nothing retrieved yet)"),
        ]
    );
}

#[test]
fn verifier_links_name_its_searcher_and_answerer() {
    assert_eq!(
        agent("verifier", "").linked_agents(),
        ["searcher", "answerer"]
    );
    let renamed = agent("verifier", "searcher = \"finder\"\nanswerer = \"writer\"");
    assert_eq!(renamed.linked_agents(), ["finder", "writer"]);
    assert!(renamed.tools_used().is_empty());
    let parsed = renamed
        .parse(&view("verifier", vec![]), "<verify>no</verify>")
        .unwrap();
    assert_eq!(parsed, Parsed::valid(Action::handoff("finder")));
    let parsed = renamed.parse(&view("verifier", vec![]), "?").unwrap();
    assert_eq!(parsed.action, Action::handoff("writer"));
}

// ---------------------------------------------------------------- searcher

#[test]
fn a_search_tag_is_a_call_of_the_search_tool() {
    assert_eq!(
        parse("searcher", "", "<search> Champ de Mars  location </search>"),
        Parsed::valid(Action::tool("search", "Champ de Mars  location"))
    );
    assert_eq!(
        parse(
            "searcher",
            "",
            "<think>Need the city.</think>\n<SEARCH>Champ de Mars</SEARCH>"
        ),
        Parsed::valid(Action::tool("search", "Champ de Mars"))
    );
    assert_eq!(
        parse(
            "searcher",
            "tool = \"wiki\"",
            "<search>Champ de Mars</search>"
        ),
        Parsed::valid(Action::tool("wiki", "Champ de Mars"))
    );
}

#[test]
fn two_search_tags_are_invalid_and_the_last_is_searched() {
    assert_eq!(
        parse(
            "searcher",
            "",
            "<search>Eiffel</search><search>Champ de Mars city</search>"
        ),
        Parsed::invalid(
            Action::tool("search", "Champ de Mars city"),
            "2 <search> blocks; exactly one is allowed (the last one was used)"
        )
    );
}

#[test]
fn without_a_search_tag_the_stripped_completion_is_searched() {
    let cases = [
        (
            "<think>The park?</think> Champ de Mars\n\n<b>city</b> ",
            Action::tool("search", "Champ de Mars city"),
            "no <search>…</search> in the completion; the completion without tags was \
             searched instead",
        ),
        (
            "<search>  </search> Champ de Mars",
            Action::tool("search", "Champ de Mars"),
            "empty <search></search>; the completion without tags was searched instead",
        ),
        (
            "<search>Champ de Mars",
            Action::tool("search", "Champ de Mars"),
            "no <search>…</search> in the completion; the completion without tags was \
             searched instead",
        ),
        // Nothing left: the question is searched, so the episode still goes on.
        (
            "<think>hmm</think>",
            Action::tool("search", QUESTION),
            "no <search>…</search> in the completion; the question was searched instead",
        ),
        (
            "",
            Action::tool("search", QUESTION),
            "no <search>…</search> in the completion; the question was searched instead",
        ),
    ];
    for (completion, action, note) in cases {
        assert_eq!(
            parse("searcher", "", completion),
            Parsed::invalid(action, note),
            "{completion:?}"
        );
    }
}

#[test]
fn searcher_renders_the_information_and_the_queries_already_made() {
    let messages = agent("searcher", "")
        .render(&after_two_searches("searcher"))
        .unwrap();
    let want_user = format!(
        "Question: In which city is the Eiffel Tower?\n\n\
         Information:\n{INFO_1}\n{INFO_2}\n\n\
         Queries already made:\n1. Eiffel Tower location\n2. Champ de Mars city\n\n\
         Write a new query that finds the missing information, as <search>query</search>."
    );
    assert_eq!(
        messages,
        [
            Message::system(
                "You write queries for a search engine. Reply with one short query inside \
                 <search> and </search>, for example <search>capital of France</search>."
            ),
            Message::user(want_user),
        ]
    );
}

#[test]
fn searcher_first_turn_and_examples() {
    let config = r#"
system_prompt = ""
user_template = "{question}|{information}|{queries}"
examples = [{ question = "Who wrote Hamlet?", queries = ["Hamlet"], information = "<information>A play.</information>", reply = "<search>Hamlet author</search>" }]
"#;
    let messages = agent("searcher", config)
        .render(&view(
            "searcher",
            vec![turn(
                "verifier",
                "<verify>no</verify>",
                Action::handoff("searcher"),
                None,
            )],
        ))
        .unwrap();
    assert_eq!(
        messages,
        [
            Message::user("Who wrote Hamlet?|<information>A play.</information>|1. Hamlet"),
            Message::assistant("<search>Hamlet author</search>"),
            Message::user(format!(
                "{QUESTION}|(nothing retrieved yet)|(no searches yet)"
            )),
        ]
    );
}

#[test]
fn searcher_queries_are_the_calls_of_its_own_tool() {
    let mut v = after_two_searches("searcher");
    v.transcript[1].action = Action::tool("calculator", "1 + 1");
    let messages = agent(
        "searcher",
        "user_template = \"{question}{information}{queries}\"",
    )
    .render(&v)
    .unwrap();
    let user = &messages.last().unwrap().content;
    assert!(
        user.ends_with("</information>1. Champ de Mars city"),
        "{user}"
    );
}

#[test]
fn searcher_uses_its_tool_and_links_no_agent() {
    assert_eq!(agent("searcher", "").tools_used(), ["search"]);
    assert_eq!(agent("searcher", "tool = \"wiki\"").tools_used(), ["wiki"]);
    assert!(agent("searcher", "").linked_agents().is_empty());
}

// ---------------------------------------------------------------- answerer

#[test]
fn an_answer_tag_finishes_with_its_trimmed_content() {
    assert_eq!(
        parse("answerer", "", "<answer> Paris </answer>"),
        Parsed::valid(Action::finish("Paris"))
    );
    assert_eq!(
        parse(
            "answerer",
            "",
            "The park is in Paris.\n<Answer>Paris, France</Answer>"
        ),
        Parsed::valid(Action::finish("Paris, France"))
    );
    assert_eq!(
        parse(
            "answerer",
            "",
            "<answer>Lyon</answer> No: <answer>Paris</answer>"
        ),
        Parsed::invalid(
            Action::finish("Paris"),
            "2 <answer> blocks; exactly one is allowed (the last one was used)"
        )
    );
    assert_eq!(
        parse("answerer", "", "<answer></answer>"),
        Parsed::invalid(Action::finish(""), "empty <answer></answer>")
    );
}

#[test]
fn without_an_answer_tag_the_episode_ends_without_an_answer() {
    for completion in ["Paris", "<answer>Paris", ""] {
        assert_eq!(
            parse("answerer", "", completion),
            Parsed::invalid(
                Action::invalid("no <answer>…</answer> in the completion"),
                "no <answer>…</answer> in the completion"
            ),
            "{completion:?}"
        );
    }
}

#[test]
fn answerer_renders_at_any_turn() {
    let messages = agent("answerer", "")
        .render(&after_two_searches("answerer"))
        .unwrap();
    let want_user = format!(
        "Question: In which city is the Eiffel Tower?\n\n\
         Information:\n{INFO_1}\n{INFO_2}\n\n\
         Answer the question in a few words, as <answer>answer</answer>."
    );
    assert_eq!(
        messages,
        [
            Message::system(
                "You answer questions in a few words, using the information given. Reply \
                 with only the answer inside <answer> and </answer>, for example \
                 <answer>Paris</answer>."
            ),
            Message::user(want_user),
        ]
    );
    // Forced on the first turn: nothing retrieved yet.
    let first = agent("answerer", "")
        .render(&view("answerer", vec![]))
        .unwrap();
    assert!(
        first[1]
            .content
            .contains("Information:\n(nothing retrieved yet)\n\n"),
        "{}",
        first[1].content
    );
    let answerer = agent("answerer", "");
    assert!(answerer.linked_agents().is_empty() && answerer.tools_used().is_empty());
}

// ---------------------------------------------------------------- think rules

#[test]
fn think_rules() {
    let think = "<think>The park is in Paris.</think>";
    let answer = "<answer>Paris</answer>";
    let cases: [(&str, String, Option<&str>); 12] = [
        ("optional", answer.to_string(), None),
        ("optional", format!("{think}\n{answer}"), None),
        (
            "optional",
            format!("{think}{think}{answer}"),
            Some("2 <think> blocks; at most one is allowed (think = \"optional\")"),
        ),
        (
            "optional",
            format!("{answer}{think}"),
            Some("the <think> block must come before the <answer> block"),
        ),
        (
            "optional",
            format!("<think>Paris{answer}"),
            Some("a <think> or </think> without its partner"),
        ),
        (
            "required",
            answer.to_string(),
            Some("no <think>…</think> block, but think = \"required\""),
        ),
        ("required", format!("{think}{answer}"), None),
        (
            "required",
            format!("{think}{think}{answer}"),
            Some("2 <think> blocks; exactly one is required (think = \"required\")"),
        ),
        (
            "required",
            format!("<think>maybe {answer}</think>"),
            Some("the <think> block must come before the <answer> block"),
        ),
        ("forbidden", answer.to_string(), None),
        (
            "forbidden",
            format!("{think}{answer}"),
            Some("a <think> block, but think = \"forbidden\""),
        ),
        (
            "forbidden",
            format!("</think>{answer}"),
            Some("a <think> block, but think = \"forbidden\""),
        ),
    ];
    for (rule, completion, note) in cases {
        let config = format!("think = \"{rule}\"");
        let want = match note {
            None => Parsed::valid(Action::finish("Paris")),
            Some(note) => Parsed::invalid(Action::finish("Paris"), note),
        };
        assert_eq!(
            parse("answerer", &config, &completion),
            want,
            "think = {rule}: {completion:?}"
        );
    }
}

#[test]
fn think_rules_apply_to_every_agent_and_notes_add_up() {
    assert_eq!(
        parse("verifier", "think = \"required\"", "<verify>maybe</verify>"),
        Parsed::invalid(
            Action::handoff("answerer"),
            "verdict `maybe` is neither yes nor no; counted as yes; \
             no <think>…</think> block, but think = \"required\""
        )
    );
    assert_eq!(
        parse(
            "searcher",
            "think = \"forbidden\"",
            "<think>x</think><search>Paris</search>"
        ),
        Parsed::invalid(
            Action::tool("search", "Paris"),
            "a <think> block, but think = \"forbidden\""
        )
    );
    assert_eq!(
        parse("answerer", "think = \"required\"", "Paris"),
        Parsed::invalid(
            Action::invalid("no <answer>…</answer> in the completion"),
            "no <answer>…</answer> in the completion; \
             no <think>…</think> block, but think = \"required\""
        )
    );
}

// ---------------------------------------------------------------- config

#[test]
fn config_errors_name_the_key() {
    let err = config_error("verifier", "temperature = 0.5");
    assert!(
        err.starts_with(
            "unknown field `temperature`, expected one of `system_prompt`, `user_template`, \
             `think`, `examples`, `searcher`, `answerer`"
        ),
        "{err}"
    );
    assert_eq!(
        config_error(
            "verifier",
            "user_template = \"{question} {information} {context}\""
        ),
        "`user_template` has the unknown placeholder {context}; it may use {question}, \
         {information}"
    );
    assert_eq!(
        config_error(
            "answerer",
            "user_template = \"{question} {queries} {information}\""
        ),
        "`user_template` has the unknown placeholder {queries}; it may use {question}, \
         {information}"
    );
    assert_eq!(
        config_error(
            "searcher",
            "user_template = \"{question} {information} {history}\""
        ),
        "`user_template` has the unknown placeholder {history}; it may use {question}, \
         {information}, {queries}"
    );
    assert_eq!(
        config_error("searcher", "user_template = \"Q: {question}\""),
        "`user_template` must contain the placeholder {information} (got \"Q: {question}\")"
    );
    for name in ["verifier", "searcher", "answerer"] {
        assert_eq!(
            config_error(name, "think = \"sometimes\""),
            "`think` must be \"optional\", \"required\" or \"forbidden\" (got \"sometimes\") \
             (at `\"sometimes\"`)",
            "search/{name}"
        );
        let err = config_error(name, "think = true");
        assert!(err.contains("expected a string"), "search/{name}: {err}");
    }
    assert_eq!(
        config_error("verifier", "searcher = \"\""),
        "`searcher` must not be empty: it names the agent to use"
    );
    assert_eq!(
        config_error("searcher", "tool = \" \""),
        "`tool` must not be empty: it names the tool to use"
    );
    assert_eq!(
        config_error("searcher", "examples = [{ question = \"q\" }]"),
        "missing required key `reply` (string: the assistant's reply, e.g. \
         `<search>capital of France</search>`) (at `{ question = \"q\" }`)"
    );
}

fn component(name: &str) -> ComponentInfo {
    drmas_search::plugin()
        .manifest()
        .components
        .into_iter()
        .find(|c| c.kind == ComponentKind::Agent && c.name == name)
        .unwrap_or_else(|| panic!("search has no agent {name}"))
}

#[test]
fn each_agent_describes_the_table_it_parses() {
    use drmas_plugin_api::kit::{ConfigTable, toml_text};
    assert_eq!(
        component("verifier").config,
        Some(VerifierConfig::config_keys())
    );
    assert_eq!(
        component("searcher").config,
        Some(SearcherConfig::config_keys())
    );
    assert_eq!(
        component("answerer").config,
        Some(AnswererConfig::config_keys())
    );
    let described = |keys: Vec<ConfigKey>| -> Vec<(String, String, String)> {
        keys.into_iter()
            .map(|k| {
                (
                    k.name,
                    k.ty,
                    k.default.expect("every agent key is optional"),
                )
            })
            .collect()
    };
    let s = |a: &str, b: &str, c: &str| (a.to_string(), b.to_string(), c.to_string());
    let text = |t: &str| toml_text(t).unwrap();
    let think = s("think", "string", "\"optional\"");
    use drmas_search::agents::{answerer, searcher, verifier};
    assert_eq!(
        described(VerifierConfig::config_keys()),
        [
            s(
                "system_prompt",
                "string",
                &text(verifier::DEFAULT_SYSTEM_PROMPT)
            ),
            s(
                "user_template",
                "string",
                &text(verifier::DEFAULT_USER_TEMPLATE)
            ),
            think.clone(),
            s(
                "examples",
                "array of tables {question, information, reply}",
                "[]"
            ),
            s("searcher", "string", "\"searcher\""),
            s("answerer", "string", "\"answerer\""),
        ]
    );
    assert_eq!(
        described(SearcherConfig::config_keys()),
        [
            s(
                "system_prompt",
                "string",
                &text(searcher::DEFAULT_SYSTEM_PROMPT)
            ),
            s(
                "user_template",
                "string",
                &text(searcher::DEFAULT_USER_TEMPLATE)
            ),
            think.clone(),
            s(
                "examples",
                "array of tables {question, information, queries, reply}",
                "[]"
            ),
            s("tool", "string", "\"search\""),
        ]
    );
    assert_eq!(
        described(AnswererConfig::config_keys()),
        [
            s(
                "system_prompt",
                "string",
                &text(answerer::DEFAULT_SYSTEM_PROMPT)
            ),
            s(
                "user_template",
                "string",
                &text(answerer::DEFAULT_USER_TEMPLATE)
            ),
            think,
            s(
                "examples",
                "array of tables {question, information, reply}",
                "[]"
            ),
        ]
    );
    assert_eq!(
        VerifierConfig::config_keys()[2].doc,
        "\"optional\" (at most one <think>…</think> block, before the tag), \"required\" \
         (exactly one) or \"forbidden\""
    );
    drmas_plugin_api::check_manifest_config_keys(&drmas_search::plugin().manifest()).unwrap();
    // The `think` default as described is the one the parser uses.
    let think: VerifierConfig = parse_config("think = \"optional\"").unwrap();
    assert_eq!(think, VerifierConfig::default());
}
