//! `search/env`: its config, its observations, and what it counts per episode, with a
//! scripted retriever (passages or failures on demand) and with a real local index.

use drmas_plugin_api::{
    Environment, EpisodeEnd, EpisodeStart, Task, ToolCall, ToolContext, serde_json::json,
};
use drmas_search::{
    Passage, RetrieveError, Retriever, env::EnvConfig, env::SearchEnv, index::build_index,
};
use std::sync::{Arc, Mutex};

/// Answers every query with `passages`, or fails with `fail`; records the queries.
struct Scripted {
    passages: Vec<Passage>,
    fail: bool,
    queries: Arc<Mutex<Vec<String>>>,
}

impl Retriever for Scripted {
    fn search_batch(
        &self,
        queries: &[String],
        k: usize,
    ) -> Result<Vec<Vec<Passage>>, RetrieveError> {
        self.queries.lock().unwrap().extend(queries.iter().cloned());
        if self.fail {
            return Err(RetrieveError::Remote {
                url: "http://127.0.0.1:9/retrieve".into(),
                message: "connection refused (3 attempts)".into(),
            });
        }
        Ok(queries
            .iter()
            .map(|_| self.passages.iter().take(k).cloned().collect())
            .collect())
    }
}

fn passage(id: &str, title: &str, text: &str) -> Passage {
    Passage {
        id: id.into(),
        title: title.into(),
        text: text.into(),
        score: 1.0,
    }
}

fn env(passages: Vec<Passage>, fail: bool) -> (SearchEnv, Arc<Mutex<Vec<String>>>) {
    let queries = Arc::new(Mutex::new(Vec::new()));
    let retriever = Scripted {
        passages,
        fail,
        queries: queries.clone(),
    };
    let env = SearchEnv::with_retriever(
        Box::new(retriever),
        "scripted".into(),
        2,
        40,
        "search".into(),
    );
    (env, queries)
}

fn task() -> Task {
    Task {
        id: "q1".into(),
        source: "nq".into(),
        question: "Who wrote Hamlet?".into(),
        answer: "Shakespeare".into(),
        meta: json!({"answers": ["William Shakespeare", "Shakespeare"]})
            .as_object()
            .unwrap()
            .clone(),
    }
}

fn search(env: &SearchEnv, episode: u64, query: &str) -> String {
    let context = ToolContext {
        episode,
        task: task(),
        agent: "searcher".into(),
        ..ToolContext::default()
    };
    let call = ToolCall {
        name: "search".into(),
        input: query.into(),
    };
    env.call_tool(&context, &call).unwrap().output
}

fn start(env: &SearchEnv, episode: u64) {
    env.start_episode(&EpisodeStart {
        episode,
        task: task(),
        traj: 0,
    })
    .unwrap();
}

#[test]
fn passages_come_back_as_information_and_the_episode_counts_its_searches_and_hits() {
    let (env, queries) = env(
        vec![
            passage(
                "a",
                "Hamlet",
                "Hamlet is a tragedy written by William Shakespeare around 1600.",
            ),
            passage("b", "Elsinore", "Kronborg castle at Helsingor."),
        ],
        false,
    );
    start(&env, 1);
    let out = search(&env, 1, "hamlet\u{0}\tauthor");
    assert_eq!(
        out,
        "<information>\nDoc 1(Title: Hamlet) Hamlet is a tragedy written by William S…\n\
         Doc 2(Title: Elsinore) Kronborg castle at Helsingor.\n</information>"
    );
    // Control characters reach the retriever as spaces.
    assert_eq!(queries.lock().unwrap()[0], "hamlet  author");
    search(&env, 1, "more");
    let m = env.episode_metrics(1).unwrap();
    assert_eq!(m["searches"], 2.0);
    assert_eq!(m["retrieval_failures"], 0.0);
    // The passage text holds "William Shakespeare": both searches hit.
    assert_eq!(m["answer_recall"], 1.0);
    assert!(m["retrieval_ms"] >= 0.0);
    env.end_episode(&EpisodeEnd {
        episode: 1,
        ..EpisodeEnd::default()
    })
    .unwrap();
    // The episode's counts are gone with it.
    assert_eq!(env.episode_metrics(1).unwrap()["searches"], 0.0);
}

#[test]
fn a_gold_alias_counts_only_on_word_boundaries() {
    let (env, _) = env(
        vec![passage(
            "a",
            "Shakespeareana",
            "Shakespeareans study plays.",
        )],
        false,
    );
    start(&env, 2);
    search(&env, 2, "x");
    assert_eq!(env.episode_metrics(2).unwrap()["answer_recall"], 0.0);
}

#[test]
fn a_failed_retrieval_is_an_observation_and_a_counted_failure_not_an_error() {
    let (env, _) = env(Vec::new(), true);
    start(&env, 3);
    let out = search(&env, 3, "hamlet");
    assert_eq!(
        out,
        "<information>The search failed (retriever http://127.0.0.1:9/retrieve: connection \
         refused (3 attempts)); no passages this time. Search again or answer with what you \
         know.</information>"
    );
    let m = env.episode_metrics(3).unwrap();
    assert_eq!((m["searches"], m["retrieval_failures"]), (1.0, 1.0));
    // No search returned passages: no recall to report.
    assert!(!m.contains_key("answer_recall"));
}

#[test]
fn an_empty_query_is_answered_without_asking_the_retriever() {
    let (env, queries) = env(vec![passage("a", "A", "text")], false);
    start(&env, 4);
    let out = search(&env, 4, " \n\u{7} ");
    assert!(out.starts_with("<information>The query was empty"), "{out}");
    assert!(queries.lock().unwrap().is_empty());
}

#[test]
fn another_tool_is_an_error_naming_the_one_it_has() {
    let (env, _) = env(Vec::new(), false);
    let err = env
        .call_tool(
            &ToolContext::default(),
            &ToolCall {
                name: "calculator".into(),
                input: "1+1".into(),
            },
        )
        .unwrap_err();
    assert_eq!(
        err.message,
        "search/env has one tool, `search` (asked for `calculator`)"
    );
    let tools = env.tools();
    assert_eq!(tools.len(), 1);
    assert_eq!(tools[0].name, "search");
}

fn config_error(text: &str) -> String {
    match SearchEnv::from_config(text) {
        Ok(_) => panic!("accepted: {text}"),
        Err(e) => e.message,
    }
}

#[test]
fn config_errors_name_the_key_and_what_to_do() {
    assert_eq!(
        config_error("retriever = {}"),
        "retriever: give `index = \"data/wiki/index\"` (a local index) or `url = \"http://HOST:PORT\"` (a Search-R1 server)"
    );
    assert_eq!(
        config_error("retriever = { index = \"x\", url = \"http://h:1\" }"),
        "retriever: give either `index` (a local index folder) or `url` (a Search-R1 server), not both"
    );
    assert_eq!(
        config_error("retriever = { index = \"x\", retries = 3 }"),
        "retriever.retries applies to a remote retriever (`url`), not to a local `index`"
    );
    assert_eq!(
        config_error("retriever = { url = \"http://h:1\", timeout_ms = 0 }"),
        "retriever.timeout_ms = 0: must be at least 1"
    );
    assert_eq!(
        config_error("retriever = { url = \"http://h:1\" }\ntopk = 0"),
        "topk = 0: must be between 1 and 50 (each passage is appended to every later prompt)"
    );
    let missing = config_error("retriever = { index = \"/nonexistent/index\" }");
    assert!(
        missing.starts_with("retriever.index: ") && missing.contains("drmas data prepare"),
        "{missing}"
    );
    assert!(config_error("retrievr = { index = \"x\" }").contains("retrievr"));
}

#[test]
fn a_real_index_answers_through_the_environment() {
    let dir = tempfile::tempdir().unwrap();
    let corpus = dir.path().join("corpus.jsonl");
    std::fs::write(
        &corpus,
        [
            json!({"id": "1", "title": "Hamlet", "text": "Hamlet is a tragedy by William Shakespeare."}),
            json!({"id": "2", "title": "Canberra", "text": "Canberra is the capital of Australia."}),
        ]
        .iter()
        .map(|r| format!("{r}\n"))
        .collect::<String>(),
    )
    .unwrap();
    let index = dir.path().join("index");
    std::fs::create_dir_all(&index).unwrap();
    build_index(&corpus, &index, &mut |_| {}).unwrap();
    let config = format!(
        "retriever = {{ index = {:?} }}\ntopk = 1",
        index.display().to_string()
    );
    let env = SearchEnv::from_config(&config).unwrap();
    start(&env, 5);
    let out = search(&env, 5, "who wrote the tragedy Hamlet?");
    assert_eq!(
        out,
        "<information>\nDoc 1(Title: Hamlet) Hamlet is a tragedy by William Shakespeare.\n</information>"
    );
    assert_eq!(env.episode_metrics(5).unwrap()["answer_recall"], 1.0);
}

#[test]
fn the_environment_describes_the_table_it_parses() {
    use drmas_plugin_api::{ComponentKind, ConfigKey, kit::ConfigTable};
    let keys = EnvConfig::config_keys();
    let described = drmas_search::plugin()
        .manifest()
        .components
        .into_iter()
        .find(|c| c.kind == ComponentKind::Environment)
        .and_then(|c| c.config);
    assert_eq!(described.as_ref(), Some(&keys));
    let retriever_doc = "{ index = \"DIR\" } for a local BM25 index, or { url = \
                         \"http://HOST:PORT\", timeout_ms = 5000, retries = 2, backoff_ms, \
                         batch_window_ms, max_batch } for a Search-R1 server";
    assert_eq!(
        keys,
        [
            ConfigKey::required("retriever", "table", retriever_doc),
            ConfigKey::optional(
                "topk",
                "integer",
                "3",
                "passages returned per query (1 to 50)"
            ),
            ConfigKey::optional(
                "max_chars",
                "integer",
                "400",
                "characters of each passage's text shown; longer ones are cut"
            ),
            ConfigKey::optional(
                "tool",
                "string",
                "\"search\"",
                "the tool's name, as the searcher's `tool` names it"
            ),
        ]
    );
    // The one required key: without it the parser says what it is.
    let err = SearchEnv::from_config("topk = 2").err().unwrap();
    assert_eq!(
        err.message(),
        format!("missing required key `retriever` (table: {retriever_doc})")
    );
}

/// A one-shot HTTP stub on loopback: each connection gets `answer` after `delay`.
fn stub(answer: &'static str, delay: std::time::Duration) -> String {
    use std::io::{Read, Write};
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let url = format!("http://{}", listener.local_addr().unwrap());
    std::thread::spawn(move || {
        for stream in listener.incoming() {
            let Ok(mut stream) = stream else { return };
            let mut buf = [0u8; 65536];
            let _ = stream.read(&mut buf);
            std::thread::sleep(delay);
            let reply = format!(
                "HTTP/1.1 200 OK\r\ncontent-type: application/json\r\ncontent-length: {}\r\nconnection: close\r\n\r\n{answer}",
                answer.len()
            );
            let _ = stream.write_all(reply.as_bytes());
        }
    });
    url
}

/// The observation and the episode's metrics of one search through a remote retriever.
fn remote_search(url: &str) -> (String, drmas_plugin_api::Metrics) {
    let config =
        format!("retriever = {{ url = {url:?}, timeout_ms = 300, retries = 1, backoff_ms = 10 }}");
    let env = SearchEnv::from_config(&config).unwrap();
    start(&env, 9);
    let started = std::time::Instant::now();
    let out = search(&env, 9, "hamlet");
    // Two attempts of at most 300 ms and one back-off. The slow stub answers after
    // 10 minutes, so a client that ignored its timeout would take 20: the bound tells the
    // two apart by far, and a loaded machine's seconds do not reach it.
    assert!(started.elapsed() < std::time::Duration::from_secs(120));
    (out, env.episode_metrics(9).unwrap())
}

#[test]
fn a_retriever_that_is_down_slow_or_malformed_gives_an_observation_and_a_failure() {
    // Down: a port nothing listens on.
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let down = format!("http://127.0.0.1:{port}");
    let slow = stub(r#"{"result": [[]]}"#, std::time::Duration::from_secs(600));
    let malformed = stub(r#"{"result": "#, std::time::Duration::ZERO);
    for (case, url) in [("down", down), ("slow", slow), ("malformed", malformed)] {
        let (out, m) = remote_search(&url);
        assert!(
            out.starts_with("<information>The search failed (retriever ")
                && out.contains(&url)
                && out.ends_with("</information>"),
            "{case}: {out}"
        );
        assert_eq!(m["retrieval_failures"], 1.0, "{case}");
        assert_eq!(m["searches"], 1.0, "{case}");
    }
}

#[test]
fn a_retriever_that_answers_gives_its_passages() {
    let url = stub(
        r#"{"result": [[{"id": "7", "contents": "\"Hamlet\"\nHamlet is a play by William Shakespeare."}]]}"#,
        std::time::Duration::ZERO,
    );
    let (out, m) = remote_search(&url);
    assert_eq!(
        out,
        "<information>\nDoc 1(Title: Hamlet) Hamlet is a play by William Shakespeare.\n</information>"
    );
    assert_eq!((m["retrieval_failures"], m["answer_recall"]), (0.0, 1.0));
}
