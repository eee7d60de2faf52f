//! The local BM25 index: built from a small corpus of distinct topics, it finds the
//! passage a query is about, answers any text at all, and names what is wrong with a
//! corpus or a folder.

use drmas_search::{
    Passage, Retriever, format_information,
    index::{IndexError, LocalIndex, MAX_QUERY_TERMS, build_index, is_index},
};
use std::path::Path;

const CORPUS: &[(&str, &str, &str)] = &[
    (
        "p-paris",
        "Paris",
        "Paris is the capital and most populous city of France, on the Seine.",
    ),
    (
        "p-photo",
        "Photosynthesis",
        "Photosynthesis is the process by which green plants use sunlight to make sugar from carbon dioxide and water.",
    ),
    (
        "p-everest",
        "Mount Everest",
        "Mount Everest is Earth's highest mountain above sea level, in the Himalayas on the border of Nepal and China.",
    ),
    (
        "p-shakes",
        "William Shakespeare",
        "William Shakespeare was an English playwright who wrote Hamlet, Macbeth and Romeo and Juliet.",
    ),
    (
        "p-python",
        "Python (programming language)",
        "Python is a high-level programming language created by Guido van Rossum, first released in 1991.",
    ),
    (
        "p-amazon",
        "Amazon River",
        "The Amazon River in South America is the largest river by discharge volume of water in the world.",
    ),
    (
        "p-moon",
        "Apollo 11",
        "Apollo 11 was the spaceflight that first landed humans on the Moon, Neil Armstrong and Buzz Aldrin, in July 1969.",
    ),
    (
        "p-dna",
        "DNA",
        "Deoxyribonucleic acid is a polymer of two strands coiled around each other in a double helix, carrying genetic instructions.",
    ),
    (
        "p-beyonce",
        "Beyoncé",
        "Beyoncé Knowles is an American singer who rose to fame as a member of Destiny's Child.",
    ),
    (
        "p-tokyo",
        "Tokyo",
        "Tokyo, 東京, is the capital of Japan and the seat of its government and the Imperial Palace.",
    ),
    (
        "p-chess",
        "Chess",
        "Chess is a board game for two players; each starts with sixteen pieces, among them a king and a queen.",
    ),
    (
        "p-penicillin",
        "Penicillin",
        "Penicillin, discovered by Alexander Fleming in 1928, was one of the first antibiotics.",
    ),
];

fn write_corpus(dir: &Path) -> std::path::PathBuf {
    let path = dir.join("corpus.jsonl");
    let mut text = String::new();
    for (id, title, body) in CORPUS {
        text.push_str(&serde_json::json!({"id": id, "title": title, "text": body}).to_string());
        text.push('\n');
    }
    std::fs::write(&path, text).unwrap();
    path
}

fn built() -> (tempfile::TempDir, LocalIndex) {
    let dir = tempfile::tempdir().unwrap();
    let corpus = write_corpus(dir.path());
    let out = dir.path().join("index");
    std::fs::create_dir(&out).unwrap();
    let mut seen = Vec::new();
    let stats = build_index(&corpus, &out, &mut |n| seen.push(n)).unwrap();
    assert_eq!(stats.passages, CORPUS.len() as u64);
    assert!(stats.bytes_on_disk > 0);
    // The last report is the total.
    assert_eq!(seen.last(), Some(&CORPUS.len()));
    assert!(is_index(&out));
    let index = LocalIndex::open(&out).unwrap();
    assert_eq!(index.passages(), CORPUS.len() as u64);
    (dir, index)
}

fn first_id(index: &LocalIndex, query: &str) -> String {
    let hits = index.search(query, 3).unwrap();
    assert!(!hits.is_empty(), "no hit for {query:?}");
    hits[0].id.clone()
}

#[test]
fn known_queries_find_their_passage_first() {
    let (_dir, index) = built();
    let cases = [
        ("What is the capital of France?", "p-paris"),
        ("how do plants make sugar from sunlight", "p-photo"),
        ("highest mountain on earth", "p-everest"),
        ("who wrote Hamlet", "p-shakes"),
        ("who created the Python programming language", "p-python"),
        ("largest river by discharge", "p-amazon"),
        ("first humans landed on the moon", "p-moon"),
        ("double helix genetic", "p-dna"),
        // Accents folded both ways.
        ("beyonce destiny's child", "p-beyonce"),
        ("Beyoncé", "p-beyonce"),
        // Stemming: "antibiotic" finds "antibiotics", "discovering" finds "discovered".
        ("antibiotic discovering", "p-penicillin"),
        ("東京", "p-tokyo"),
        ("board game king queen", "p-chess"),
    ];
    for (query, id) in cases {
        assert_eq!(first_id(&index, query), id, "query {query:?}");
    }
    // The passage comes back whole, with its score.
    let hit = &index.search("capital of France", 1).unwrap()[0];
    assert_eq!(hit.title, "Paris");
    assert_eq!(hit.text, CORPUS[0].2);
    assert!(hit.score > 0.0);
    // Best first, k respected, a batch is per query and in order.
    let hits = index.search("capital", 5).unwrap();
    assert_eq!(hits.len(), 2, "{hits:?}"); // Paris and Tokyo
    assert!(hits[0].score >= hits[1].score);
    let batch = index
        .search_batch(&["who wrote Hamlet".into(), "double helix".into()], 1)
        .unwrap();
    assert_eq!(batch.len(), 2);
    assert_eq!(batch[0][0].id, "p-shakes");
    assert_eq!(batch[1][0].id, "p-dna");
    // A title match counts more than a text match.
    assert_eq!(first_id(&index, "Tokyo"), "p-tokyo");
}

#[test]
fn any_text_is_a_query() {
    let (_dir, index) = built();
    let long = "capital of France ".repeat(300); // 5,400 characters
    assert!(long.chars().count() >= 5000);
    let many_words: String = (0..5000).map(|i| format!("w{i} ")).collect();
    let hostile = [
        "",
        "   \t  ",
        long.as_str(),
        many_words.as_str(),
        "\"capital of France\"",
        "\"unbalanced quote capital",
        "title:Paris",
        "title:",
        ":",
        "text:\"Paris\" AND title:(France",
        "[capital] (France) {city} <tag>",
        "(((((",
        "]]]]",
        "capital AND France OR Paris NOT Japan",
        "+capital -Japan ~France ^2 * ?",
        "AND OR NOT",
        "*",
        "Paris~2 capit* Fr?nce",
        "capital^10",
        "Ça, c'est la capitale: Zürich, São Paulo, naïve",
        "東京 日本の首都",
        "🙂🚀🇫🇷 capital",
        "🙂",
        "\0",
        "capital\0France",
        "\x1b[31mcapital\x1b[0m",
        "capital\nof\r\nFrance\t",
        "\\",
        "'; DROP TABLE passages; --",
        "{\"queries\": [\"x\"]}",
        "the of and a",
    ];
    for query in hostile {
        let passages = index
            .search(query, 3)
            .unwrap_or_else(|e| panic!("query {query:?}: {e}"));
        assert!(passages.len() <= 3);
        // The observation is text either way.
        let observation = format_information(&passages, 200);
        assert!(observation.starts_with("<information>"), "{observation}");
    }
    // Syntax is not syntax: the field prefix and the operators are only words.
    assert_eq!(first_id(&index, "title:Paris"), "p-paris");
    assert_eq!(first_id(&index, "+capital -France"), "p-paris");
    // Nothing searchable finds nothing.
    for query in ["", "   ", "🙂", "\0", "the of and a", ":"] {
        assert_eq!(
            index.search(query, 3).unwrap(),
            Vec::<Passage>::new(),
            "{query:?}"
        );
    }
    // Terms no passage holds are not searched; repeated terms count once.
    assert!(index.query_terms(&many_words).is_empty());
    assert_eq!(index.query_terms(&long), vec!["capit", "franc"]);
    // A long query keeps at most the cap, and the rare words that find the passage
    // among words that find nothing.
    let every_word: String = CORPUS.iter().map(|(_, t, x)| format!("{t} {x} ")).collect();
    // (The corpus has more than 64 distinct words, all far within the postings budget.)
    assert_eq!(index.query_terms(&every_word).len(), MAX_QUERY_TERMS);
    let filler: String = (0..1000).map(|i| format!("x{i} ")).collect();
    let needle = format!("{filler} Fleming antibiotics {filler}");
    assert_eq!(index.query_terms(&needle), vec!["fleme", "antibiot"]);
    assert_eq!(first_id(&index, &needle), "p-penicillin");
    // What a query holds past its first 4096 words is not read.
    let past_the_end = format!("{many_words} Fleming antibiotics");
    assert!(index.query_terms(&past_the_end).is_empty());
    // k = 0 and a k beyond the corpus.
    assert!(index.search("capital", 0).unwrap().is_empty());
    assert_eq!(index.search("capital", usize::MAX).unwrap().len(), 2);
}

#[test]
fn searches_from_many_threads_at_once_agree() {
    let (_dir, index) = built();
    let alone = index.search("who wrote Hamlet", 3).unwrap();
    std::thread::scope(|s| {
        let handles: Vec<_> = (0..8)
            .map(|_| {
                s.spawn(|| {
                    (0..20)
                        .map(|_| index.search("who wrote Hamlet", 3).unwrap())
                        .collect::<Vec<_>>()
                })
            })
            .collect();
        for h in handles {
            for hits in h.join().unwrap() {
                assert_eq!(hits, alone);
            }
        }
    });
}

#[test]
fn observation_of_two_passages_and_a_cut_text() {
    let (_dir, index) = built();
    let hits = index.search("capital", 2).unwrap();
    assert_eq!(
        format_information(&hits, 1000),
        "<information>\n\
         Doc 1(Title: Paris) Paris is the capital and most populous city of France, on the Seine.\n\
         Doc 2(Title: Tokyo) Tokyo, 東京, is the capital of Japan and the seat of its government and the Imperial Palace.\n\
         </information>"
    );
    assert_eq!(
        format_information(&hits, 10),
        "<information>\nDoc 1(Title: Paris) Paris is t…\nDoc 2(Title: Tokyo) Tokyo, 東京,…\n</information>"
    );
}

fn build_error(corpus_text: &str) -> String {
    let dir = tempfile::tempdir().unwrap();
    let corpus = dir.path().join("c.jsonl");
    std::fs::write(&corpus, corpus_text).unwrap();
    let out = dir.path().join("index");
    std::fs::create_dir(&out).unwrap();
    let err = build_index(&corpus, &out, &mut |_| {}).unwrap_err();
    err.to_string()
        .replace(&corpus.display().to_string(), "FILE")
}

#[test]
fn bad_corpus_lines_are_named_by_file_line_and_field() {
    let good = r#"{"id": "a", "title": "A", "text": "alpha"}"#;
    assert_eq!(
        build_error(&format!(
            "{good}\n\n{{\"id\": \"b\", \"title\": 5, \"text\": \"x\"}}\n"
        )),
        "FILE:3: field `title`: invalid type: integer `5`, expected a string (column 22)"
    );
    assert_eq!(
        build_error(&format!("{good}\n{{\"id\": \"b\", \"text\": \"x\"}}\n")),
        "FILE:2: missing field `title`"
    );
    assert_eq!(
        build_error(&format!("{good}\n{{\"title\": \"B\", \"text\": \"x\"}}\n")),
        "FILE:2: missing field `id`"
    );
    assert_eq!(
        build_error(&format!("{good}\n{{\"id\": \"b\", \"title\": \"B\"}}\n")),
        "FILE:2: missing field `text`"
    );
    assert_eq!(
        build_error(&format!(
            "{good}\n{{\"id\": [1], \"title\": \"B\", \"text\": \"x\"}}\n"
        )),
        "FILE:2: field `id`: invalid type: sequence, expected a string or an integer (column 8)"
    );
    assert_eq!(
        build_error(&format!(
            "{good}\n{{\"id\": \"b\", \"title\": \"B\", \"text\": \"x\"\n"
        )),
        "FILE:2: not valid JSON: EOF while parsing an object (column 37)"
    );
    assert_eq!(
        build_error("[1, 2]\n"),
        "FILE:1: not a JSON object {\"id\", \"title\", \"text\"}: [1, 2]"
    );
    assert_eq!(
        build_error(&format!("{good}\n{good}\n")),
        "FILE:2: duplicate id `a` (first at line 1); ids must be unique"
    );
    assert_eq!(
        build_error("\n\n"),
        "FILE: no passages (one JSON object a line: {\"id\", \"title\", \"text\"})"
    );
    let dir = tempfile::tempdir().unwrap();
    let missing = dir.path().join("none.jsonl");
    let err = build_index(&missing, dir.path(), &mut |_| {}).unwrap_err();
    assert_eq!(
        err.to_string(),
        format!(
            "{}: No such file or directory (os error 2)",
            missing.display()
        )
    );
}

#[test]
fn search_r1_corpus_rows_and_numeric_ids_are_read() {
    let dir = tempfile::tempdir().unwrap();
    let corpus = dir.path().join("wiki.jsonl");
    std::fs::write(
        &corpus,
        "{\"id\": \"0\", \"contents\": \"\\\"Aaron\\\"\\nAaron is a prophet, a brother of Moses.\"}\n\
         {\"id\": 1, \"title\": \"Zebra\", \"text\": \"Zebras are striped horses of Africa.\"}\n",
    )
    .unwrap();
    let out = dir.path().join("index");
    std::fs::create_dir(&out).unwrap();
    build_index(&corpus, &out, &mut |_| {}).unwrap();
    let index = LocalIndex::open(&out).unwrap();
    let aaron = &index.search("prophet brother of moses", 1).unwrap()[0];
    assert_eq!(
        (aaron.id.as_str(), aaron.title.as_str(), aaron.text.as_str()),
        ("0", "Aaron", "Aaron is a prophet, a brother of Moses.")
    );
    assert_eq!(index.search("striped", 1).unwrap()[0].id, "1");
}

#[test]
fn a_folder_that_is_not_an_index_says_how_to_make_one() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join("notes.txt"), "mine").unwrap();
    let err = LocalIndex::open(dir.path()).err().unwrap();
    assert!(matches!(err, IndexError::NotAnIndex { .. }));
    assert_eq!(
        err.to_string(),
        format!(
            "{} is not a drmas search index (build one with `drmas index build CORPUS OUT`)",
            dir.path().display()
        )
    );
    assert!(!is_index(dir.path()));
    let missing = dir.path().join("nope");
    assert_eq!(
        LocalIndex::open(&missing).err().unwrap().to_string(),
        format!(
            "{} does not exist (build an index with `drmas index build CORPUS OUT`)",
            missing.display()
        )
    );
}
