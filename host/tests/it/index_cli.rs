//! `drmas index build|serve|query|bench`: an index built by the binary, served over
//! loopback, answers the remote client exactly as the index answers in-process; build
//! errors name the file and line; the server refuses bad requests and stops on Ctrl-C.

use crate::common::process::{Group, HANG};
use drmas_search::{
    Retriever,
    index::LocalIndex,
    remote::{RemoteConfig, RemoteRetriever},
};
use std::{
    io::{BufRead, BufReader, Read, Write},
    net::TcpStream,
    path::{Path, PathBuf},
    process::{Command, Output, Stdio},
};

const CORPUS: &[(&str, &str, &str)] = &[
    (
        "paris",
        "Paris",
        "Paris is the capital and most populous city of France.",
    ),
    (
        "photo",
        "Photosynthesis",
        "Photosynthesis is how green plants make sugar from sunlight, water and carbon dioxide.",
    ),
    (
        "everest",
        "Mount Everest",
        "Mount Everest is Earth's highest mountain above sea level, in the Himalayas.",
    ),
    (
        "hamlet",
        "Hamlet",
        "Hamlet is a tragedy written by William Shakespeare about a prince of Denmark.",
    ),
    (
        "python",
        "Python (programming language)",
        "Python is a programming language created by Guido van Rossum.",
    ),
    (
        "amazon",
        "Amazon River",
        "The Amazon River in South America is the largest river by discharge of water.",
    ),
    (
        "apollo",
        "Apollo 11",
        "Apollo 11 first landed humans on the Moon in July 1969.",
    ),
    (
        "dna",
        "DNA",
        "DNA is a polymer of two strands in a double helix that carries genetic instructions.",
    ),
    (
        "tokyo",
        "Tokyo",
        "Tokyo is the capital of Japan and its most populous city.",
    ),
    (
        "chess",
        "Chess",
        "Chess is a board game for two players, each with a king and a queen.",
    ),
    (
        "lyon",
        "Lyon",
        "Lyon is a city of France, on the Rhone and the Saone; it is not the capital.",
    ),
];

fn drmas(args: &[&std::ffi::OsStr]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_drmas"))
        .arg("index")
        .args(args)
        .env_remove("DRMAS_PLUGIN_PATH")
        .output()
        .unwrap()
}

fn text(bytes: &[u8]) -> String {
    String::from_utf8_lossy(bytes).into_owned()
}

fn write_corpus(dir: &Path) -> PathBuf {
    let path = dir.join("corpus.jsonl");
    let lines: Vec<String> = CORPUS
        .iter()
        .map(|(id, title, body)| {
            serde_json::json!({"id": id, "title": title, "text": body}).to_string()
        })
        .collect();
    std::fs::write(&path, lines.join("\n") + "\n").unwrap();
    path
}

/// Builds the test corpus's index with the binary into `DIR/index`.
pub(super) fn built(dir: &Path) -> PathBuf {
    let corpus = write_corpus(dir);
    let out = dir.join("index");
    let o = drmas(&["build".as_ref(), corpus.as_os_str(), out.as_os_str()]);
    assert!(o.status.success(), "{}", text(&o.stderr));
    let stdout = text(&o.stdout);
    assert!(
        stdout.starts_with(&format!("built {}: 11 passages in ", out.display())),
        "{stdout}"
    );
    assert!(stdout.trim_end().ends_with("MiB on disk"), "{stdout}");
    out
}

/// A running `drmas index serve` in a process group of its own, killed whole (SIGKILL)
/// if a test fails before it stops it.
pub(super) struct Server {
    child: Group,
    pub(super) url: String,
    /// What it printed before its address (the index, the limits).
    pub(super) printed: Vec<String>,
}

impl Server {
    fn start(index: &Path) -> Server {
        Self::start_with(index, &[])
    }

    /// Starts it with more flags (the limits).
    pub(super) fn start_with(index: &Path, flags: &[&str]) -> Server {
        let mut child = Group::spawn(
            Command::new(env!("CARGO_BIN_EXE_drmas"))
                .args(["index", "serve"])
                .arg(index)
                .args(["--addr", "127.0.0.1:0"])
                .args(flags)
                .stdout(Stdio::piped())
                .stderr(Stdio::piped()),
        );
        let mut lines = BufReader::new(child.child_mut().stdout.take().unwrap()).lines();
        let mut printed = Vec::new();
        let url = loop {
            let line = lines
                .next()
                .expect("the server printed its address")
                .unwrap();
            if let Some(url) = line.strip_prefix("listening on ") {
                break url.to_string();
            }
            printed.push(line);
        };
        assert!(url.starts_with("http://127.0.0.1:"), "{url}");
        assert!(!url.ends_with(":0/retrieve"), "the real port: {url}");
        Server {
            child,
            url,
            printed,
        }
    }

    /// The sockets the server process holds open (its listener included).
    pub(super) fn open_sockets(&self) -> usize {
        std::fs::read_dir(format!("/proc/{}/fd", self.child.id()))
            .unwrap()
            .filter(|fd| {
                std::fs::read_link(fd.as_ref().unwrap().path())
                    .is_ok_and(|target| target.to_string_lossy().starts_with("socket:"))
            })
            .count()
    }

    /// Sends Ctrl-C (SIGINT) and waits for the exit status.
    pub(super) fn interrupt(mut self) -> std::process::ExitStatus {
        self.child.signal(libc::SIGINT);
        self.child.wait()
    }
}

/// Everything the server sent until it closed. A reset after the answer (the server
/// closed with our unread bytes in its buffer) ends the read, not the test: Linux keeps
/// what arrived before the reset readable.
pub(super) fn read_answer(conn: &mut TcpStream) -> String {
    let mut answer = Vec::new();
    let mut buf = [0u8; 8192];
    loop {
        match conn.read(&mut buf) {
            Ok(0) => break,
            Ok(n) => answer.extend_from_slice(&buf[..n]),
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => continue,
            Err(e) if e.kind() == std::io::ErrorKind::ConnectionReset && !answer.is_empty() => {
                break;
            }
            Err(e) => panic!(
                "reading the answer: {e} after {:?}",
                String::from_utf8_lossy(&answer)
            ),
        }
    }
    String::from_utf8(answer).unwrap()
}

/// One raw HTTP/1.1 request; the status and body of the answer.
pub(super) fn http(url: &str, method: &str, body: &str) -> (u16, String) {
    let rest = url.strip_prefix("http://").unwrap();
    let (host, path) = rest.split_once('/').unwrap();
    let mut conn = TcpStream::connect(host).unwrap();
    conn.set_read_timeout(Some(HANG)).unwrap();
    // One write of the whole request, whose failure is not the test's verdict: a server
    // that refuses a body by its length answers and closes without reading it, and the
    // write may then meet the closed socket. The answer decides.
    let request = format!(
        "{method} /{path} HTTP/1.1\r\nhost: {host}\r\ncontent-type: application/json\r\ncontent-length: {}\r\nconnection: close\r\n\r\n{body}",
        body.len()
    );
    let _ = conn.write_all(request.as_bytes());
    let answer = read_answer(&mut conn);
    let status = answer[9..12].parse().unwrap();
    let body = answer.split_once("\r\n\r\n").unwrap().1.to_string();
    (status, body)
}

#[test]
fn the_served_index_answers_the_client_as_the_index_does() {
    let dir = tempfile::tempdir().unwrap();
    let index_dir = built(dir.path());
    let server = Server::start(&index_dir);
    let local = LocalIndex::open(&index_dir).unwrap();
    let remote = RemoteRetriever::new(RemoteConfig {
        url: server.url.clone(),
        ..RemoteConfig::default()
    })
    .unwrap();
    let queries: Vec<String> = [
        "What is the capital of France?",
        "who wrote hamlet",
        "highest mountain",
        "capital city",
        "title:\"unbalanced (query AND",
        "",
        "东京 🙂",
        "river discharge water",
    ]
    .iter()
    .map(|s| s.to_string())
    .collect();
    for k in [1, 3, 20] {
        let here = local.search_batch(&queries, k).unwrap();
        let there = remote.search_batch(&queries, k).unwrap();
        // Same passages in the same order, scores included (f32 survives JSON).
        assert_eq!(there, here, "k {k}");
    }
    let ids = |q: &str| -> Vec<String> {
        remote.search_batch(&[q.to_string()], 3).unwrap()[0]
            .iter()
            .map(|p| p.id.clone())
            .collect()
    };
    assert_eq!(ids("What is the capital of France?")[0], "paris");
    assert_eq!(ids("capital city").len(), 3);
    assert!(ids("").is_empty());

    // Many clients at once, each with its own answers.
    std::thread::scope(|s| {
        for (i, q) in queries.iter().enumerate() {
            let (remote, local) = (&remote, &local);
            s.spawn(move || {
                for _ in 0..5 {
                    let got = remote.search_batch(std::slice::from_ref(q), 3).unwrap();
                    assert_eq!(
                        got,
                        local.search_batch(std::slice::from_ref(q), 3).unwrap(),
                        "query {i}"
                    );
                }
            });
        }
    });

    // Bad requests are refused with a message, and the server goes on.
    let (status, body) = http(&server.url, "POST", "{not json");
    assert_eq!(status, 400, "{body}");
    assert!(
        body.starts_with("{\"detail\":\"key must be a string"),
        "{body}"
    );
    let (status, body) = http(&server.url, "POST", r#"{"query": ["x"]}"#);
    assert_eq!(status, 422, "{body}");
    assert!(body.contains("missing field `queries`"), "{body}");
    let (status, body) = http(&server.url, "POST", r#"{"queries": ["x"], "topk": 100000}"#);
    assert_eq!(status, 422, "{body}");
    assert_eq!(
        body,
        r#"{"detail":"topk 100000 is above this server's --max-topk of 1000"}"#
    );
    // Search-R1's own request: no topk means the server's default (3).
    let (status, body) = http(&server.url, "POST", r#"{"queries": ["capital city"]}"#);
    assert_eq!(status, 200, "{body}");
    let response: serde_json::Value = serde_json::from_str(&body).unwrap();
    let hits = response["result"][0].as_array().unwrap();
    assert_eq!(hits.len(), 3);
    let best = &local.search("capital city", 1).unwrap()[0];
    assert_eq!(hits[0]["id"], best.id.as_str());
    assert_eq!(
        hits[0]["contents"],
        format!("\"{}\"\n{}", best.title, best.text)
    );

    // `drmas index query` over the server prints the same observation as on the folder.
    let on_folder = drmas(&[
        "query".as_ref(),
        index_dir.as_os_str(),
        "capital of France".as_ref(),
        "--k".as_ref(),
        "2".as_ref(),
        "--max-chars".as_ref(),
        "20".as_ref(),
    ]);
    assert!(on_folder.status.success(), "{}", text(&on_folder.stderr));
    assert_eq!(
        text(&on_folder.stdout),
        "<information>\nDoc 1(Title: Paris) Paris is the capital…\nDoc 2(Title: Lyon) Lyon is a city of Fr…\n</information>\n"
    );
    let over_http = drmas(&[
        "query".as_ref(),
        server.url.as_ref(),
        "capital of France".as_ref(),
        "--k".as_ref(),
        "2".as_ref(),
        "--max-chars".as_ref(),
        "20".as_ref(),
    ]);
    assert!(over_http.status.success(), "{}", text(&over_http.stderr));
    assert_eq!(text(&over_http.stdout), text(&on_folder.stdout));

    // `drmas index bench`, both ways.
    let questions = dir.path().join("questions.jsonl");
    std::fs::write(
        &questions,
        "{\"question\": \"capital of France\", \"meta\": {\"answers\": [\"Paris\"]}}\n\
         {\"question\": \"who wrote hamlet\", \"meta\": {\"answers\": [\"Cervantes\"]}}\n\
         {\"question\": \"zzz\"}\n",
    )
    .unwrap();
    for target in [
        ["--index".as_ref(), index_dir.as_os_str()],
        ["--url".as_ref(), server.url.as_ref()],
    ] {
        let o = drmas(
            &[
                &["bench".as_ref()],
                &target[..],
                &["--queries".as_ref(), questions.as_os_str()],
            ]
            .concat(),
        );
        assert!(o.status.success(), "{}", text(&o.stderr));
        let out = text(&o.stdout);
        assert!(
            out.contains(": 3 queries one at a time, k 3: p50 "),
            "{out}"
        );
        assert!(
            out.contains(" ms, p99 ") && out.contains(" ms, mean "),
            "{out}"
        );
        assert!(out.contains("(1 without results)\n"), "{out}");
        // The two queries with gold answers: Paris is retrieved, Cervantes is not.
        assert!(
            out.trim_end().ends_with(
                "answer recall@3: 0.500 (1 of 2 queries have a gold alias in their passages)"
            ),
            "{out}"
        );
    }

    // Ctrl-C stops it cleanly.
    let status = server.interrupt();
    assert!(status.success(), "{status:?}");
}

#[test]
fn build_errors_name_the_file_and_line() {
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("index");

    let missing = dir.path().join("nope.jsonl");
    let o = drmas(&["build".as_ref(), missing.as_os_str(), out.as_os_str()]);
    assert!(!o.status.success());
    assert_eq!(
        text(&o.stderr),
        format!(
            "error: {}: no such corpus file (JSONL, one {{\"id\", \"title\", \"text\"}} a line)\n",
            missing.display()
        )
    );

    let bad = dir.path().join("bad.jsonl");
    std::fs::write(
        &bad,
        "{\"id\": \"a\", \"title\": \"A\", \"text\": \"alpha\"}\n{\"id\": \"b\", \"text\": \"beta\"}\n",
    )
    .unwrap();
    let o = drmas(&["build".as_ref(), bad.as_os_str(), out.as_os_str()]);
    assert!(!o.status.success());
    assert_eq!(
        text(&o.stderr),
        format!("error: {}:2: missing field `title`\n", bad.display())
    );
    // Nothing is left behind: no index, no staging folder.
    assert_eq!(
        std::fs::read_dir(dir.path()).unwrap().count(),
        1,
        "only bad.jsonl: {:?}",
        std::fs::read_dir(dir.path()).unwrap().collect::<Vec<_>>()
    );
}

#[test]
fn only_an_index_is_replaced_and_only_when_forced() {
    let dir = tempfile::tempdir().unwrap();
    let corpus = write_corpus(dir.path());
    // Someone's folder is never replaced.
    let theirs = dir.path().join("theirs");
    std::fs::create_dir(&theirs).unwrap();
    std::fs::write(theirs.join("notes.txt"), "mine").unwrap();
    for force in [false, true] {
        let mut args = vec!["build".as_ref(), corpus.as_os_str(), theirs.as_os_str()];
        if force {
            args.push("--force".as_ref());
        }
        let o = drmas(&args);
        assert!(!o.status.success());
        assert_eq!(
            text(&o.stderr),
            format!(
                "error: {} exists and is not an index drmas built (no drmas-index.json); refusing to replace it, even with --force (give a new folder or empty it yourself)\n",
                theirs.display()
            )
        );
    }
    assert_eq!(
        std::fs::read_to_string(theirs.join("notes.txt")).unwrap(),
        "mine"
    );

    // An index is replaced with --force only.
    let out = built(dir.path());
    let o = drmas(&["build".as_ref(), corpus.as_os_str(), out.as_os_str()]);
    assert!(!o.status.success());
    assert_eq!(
        text(&o.stderr),
        format!(
            "error: {} exists (an index drmas built); pass --force to replace it\n",
            out.display()
        )
    );
    std::fs::write(
        &corpus,
        "{\"id\": \"z\", \"title\": \"Zebra\", \"text\": \"striped\"}\n",
    )
    .unwrap();
    let o = drmas(&[
        "build".as_ref(),
        corpus.as_os_str(),
        out.as_os_str(),
        "--force".as_ref(),
    ]);
    assert!(o.status.success(), "{}", text(&o.stderr));
    assert_eq!(LocalIndex::open(&out).unwrap().passages(), 1);

    // Serving a folder that is not an index says how to make one.
    let o = drmas(&[
        "serve".as_ref(),
        theirs.as_os_str(),
        "--addr".as_ref(),
        "127.0.0.1:0".as_ref(),
    ]);
    assert!(!o.status.success());
    assert_eq!(
        text(&o.stderr),
        format!(
            "error: {} is not a drmas search index (build one with `drmas index build CORPUS OUT`)\n",
            theirs.display()
        )
    );
}

#[test]
fn the_limits_are_flags_checked_before_the_index_opens_and_printed() {
    let dir = tempfile::tempdir().unwrap();
    let index = built(dir.path());
    for (flag, value, why) in [
        (
            "--max-connections",
            "0",
            "'--max-connections <N>': must be at least 1",
        ),
        ("--max-hits", "0", "'--max-hits <N>': must be at least 1"),
        ("--max-topk", "0", "'--max-topk <N>': must be at least 1"),
        (
            "--max-request-bytes",
            "0",
            "'--max-request-bytes <BYTES>': must be at least 1 byte",
        ),
        (
            "--max-response-bytes",
            "12MB",
            "'--max-response-bytes <BYTES>': `12MB` is not a size (bytes, or a whole number with KiB, MiB or GiB)",
        ),
        (
            "--header-timeout",
            "0",
            "'--header-timeout <SECS>': must be more than 0 seconds, got 0",
        ),
        (
            "--body-timeout",
            "-1",
            "'--body-timeout <SECS>': must be more than 0 seconds, got -1",
        ),
        (
            "--idle-timeout",
            "nan",
            "'--idle-timeout <SECS>': must be more than 0 seconds, got nan",
        ),
    ] {
        // `--flag=value`, so that `-1` is read as a value.
        let given = format!("{flag}={value}");
        let o = drmas(&["serve".as_ref(), index.as_os_str(), given.as_ref()]);
        assert_eq!(o.status.code(), Some(2), "{flag} {value}");
        let err = text(&o.stderr);
        assert!(
            err.starts_with(&format!("error: invalid value '{value}' for {why}\n")),
            "{flag} {value}: {err}"
        );
    }
    let o = drmas(&[
        "serve".as_ref(),
        index.as_os_str(),
        "--topk".as_ref(),
        "50".as_ref(),
        "--max-topk".as_ref(),
        "20".as_ref(),
    ]);
    assert!(!o.status.success());
    assert_eq!(
        text(&o.stderr),
        "error: --topk 50 is above --max-topk 20: the default would refuse every request that gives none\n"
    );

    let server = Server::start_with(
        &index,
        &["--max-connections", "7", "--header-timeout", "0.5"],
    );
    assert_eq!(
        server.printed,
        [
            format!("serving {} (11 passages)", index.display()),
            "limits: 65536 passages (queries × topk), topk 1000, a 64 MiB request, a 64 MiB answer per request; \
             7 connections; header timeout 0.5 s, body timeout 30 s, idle timeout 60 s"
                .to_string(),
        ]
    );
    assert!(server.interrupt().success());
}

/// `drmas index query` against a server that accepts and never answers: the message
/// says the per-attempt limit, how many attempts timed out and the time in all (it said
/// "no answer in 5000 ms" after 16 s of three attempts).
#[test]
fn a_query_to_a_server_that_never_answers_says_its_attempts_and_time() {
    let silent = crate::common::http_stub::Silent::start();
    let addr = silent.addr;
    let url = format!("http://{addr}/retrieve");
    let o = std::process::Command::new(env!("CARGO_BIN_EXE_drmas"))
        .args(["index", "query", &url, "capital city"])
        .output()
        .unwrap();
    let held = silent.close();
    let err = String::from_utf8_lossy(&o.stderr);
    assert_eq!(o.status.code(), Some(1), "{err}");
    assert_eq!(held, 3, "three attempts");
    assert!(
        err.contains(&format!(
            "error: retriever {url}: no answer within 5000 ms per attempt; 3 of 3 attempts timed out, "
        )) && err.trim_end().ends_with(" s in all"),
        "{err}"
    );
}
