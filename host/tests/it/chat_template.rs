//! Chat templates rendered by drmas (minijinja) against transformers'
//! `apply_chat_template(..., add_generation_prompt=True)`: the Qwen3 tokenizer and the
//! SmolLM2 import, with and without system messages, text and token ids.
//! References: `scripts/py/chat_reference.py` → target/chat-reference.json.

use crate::common;

use drmas::model::TextTokenizer;
use drmas_plugin_api::Message;
use serde_json::Value;

fn reference() -> Value {
    let path = common::root().join("target/chat-reference.json");
    let text = std::fs::read_to_string(&path)
        .unwrap_or_else(|e| panic!("{}: {e}; run scripts/test.sh to make it", path.display()));
    serde_json::from_str(&text).unwrap()
}

fn messages(case: &Value) -> Vec<Message> {
    case["messages"]
        .as_array()
        .unwrap()
        .iter()
        .map(|m| Message::new(m["role"].as_str().unwrap(), m["content"].as_str().unwrap()))
        .collect()
}

fn check(name: &str, dir: &str) {
    let tokenizer = TextTokenizer::from_dir(&common::root().join(dir)).unwrap();
    let cases = reference()[name].as_array().unwrap().clone();
    assert!(cases.len() >= 4);
    for (i, case) in cases.iter().enumerate() {
        let text = tokenizer.chat_prompt(&messages(case), true).unwrap();
        assert_eq!(text, case["text"].as_str().unwrap(), "{name} case {i}");
        let ids: Vec<i64> = case["ids"]
            .as_array()
            .unwrap()
            .iter()
            .map(|v| v.as_i64().unwrap())
            .collect();
        assert_eq!(tokenizer.encode(&text).unwrap(), ids, "{name} case {i} ids");
        assert_eq!(
            tokenizer.chat_ids(&messages(case)).unwrap(),
            ids,
            "{name} case {i} chat_ids"
        );
    }
}

#[test]
fn qwen3_template_renders_like_transformers() {
    check("qwen3", "models/tokenizers/qwen3");
    let tokenizer =
        TextTokenizer::from_dir(&common::root().join("models/tokenizers/qwen3")).unwrap();
    let im_end = tokenizer.encode("<|im_end|>").unwrap();
    assert_eq!(im_end.len(), 1);
    assert!(tokenizer.stop_token_ids().contains(&im_end[0]));
}

#[test]
fn smollm2_import_renders_like_transformers_reading_the_gguf() {
    check("smollm2", "models/smollm2-135m-instruct");
}

#[test]
fn a_folder_without_a_template_says_so() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::copy(
        common::root().join("models/tokenizers/qwen3/tokenizer.json"),
        dir.path().join("tokenizer.json"),
    )
    .unwrap();
    let tokenizer = TextTokenizer::from_dir(dir.path()).unwrap();
    let err = tokenizer
        .chat_prompt(&[Message::user("hi")], true)
        .unwrap_err();
    assert_eq!(
        err.to_string(),
        "chat template: the tokenizer has no chat_template (tokenizer_config.json or chat_template.jinja)"
    );
}

#[test]
fn the_shared_prefix_of_a_chat_is_every_message_but_the_last() {
    let tokenizer =
        TextTokenizer::from_dir(&common::root().join("models/tokenizers/qwen3")).unwrap();
    let system = Message::system("You check answers to arithmetic problems.");
    let example = [
        Message::user("Problem: What is 3 + 4?\nProposed answer: \\boxed{7}"),
        Message::assistant("<verify>approve</verify>"),
    ];
    let chat = |last: &str| {
        let mut m = vec![system.clone()];
        m.extend(example.iter().cloned());
        m.push(Message::user(last));
        m
    };
    let a = chat("Problem: What is 2 + 2?\nProposed answer: \\boxed{4}");
    let b = chat("Problem: What is 5 + 1?\nProposed answer: \\boxed{9}");
    let (ids_a, ids_b) = (
        tokenizer.chat_ids(&a).unwrap(),
        tokenizer.chat_ids(&b).unwrap(),
    );
    let (na, nb) = (
        tokenizer.shared_prefix_len(&a, &ids_a),
        tokenizer.shared_prefix_len(&b, &ids_b),
    );
    // The system prompt, the worked example and the last message's header: the same
    // tokens in both prompts, up to where the last message's text begins.
    let system_only = tokenizer.chat_ids(&a[..1]).unwrap();
    assert!(na > system_only.len(), "{na} of {}", ids_a.len());
    assert_eq!(na, nb);
    assert_eq!(ids_a[..na], ids_b[..nb]);
    assert_ne!(ids_a[na..], ids_b[nb..]);
    let text = tokenizer.decode(&ids_a[na..], false).unwrap();
    assert!(text.starts_with("Problem: What is 2 + 2?"), "{text:?}");
    // One message: nothing to share.
    let one = [Message::user("What is 2 + 2?")];
    assert_eq!(
        tokenizer.shared_prefix_len(&one, &tokenizer.chat_ids(&one).unwrap()),
        0
    );
}
