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
