//! GGUF import (`drmas::model::gguf`, `drmas model import`).
//!
//! - A tiny random Llama GGUF written by `scripts/py/gguf_fixtures.py` with gguf-py, its
//!   tensors in every implemented type: the imported weights equal gguf-py's
//!   dequantization (Q/K un-permuted), lie within each format's error of the weights
//!   before quantizing, give transformers' logits, and the tokenizer gives transformers'
//!   ids.
//! - The real SmolLM2-135M-Instruct Q4_1 GGUF, when present: weights equal transformers'
//!   own GGUF load, logits agree, tokenizer ids agree, and greedy decoding of the chat
//!   prompt answers Paris.
//! - Refusals (architecture, quant type, unknown tensor, tokenizer, truncation) on small
//!   GGUF files written here, and the CLI's overwrite guard.

use crate::common;
#[path = "../../src/cli/model_import.rs"]
mod model_import;
#[path = "../../src/cli/replace.rs"]
mod replace;
use replace::check_replaceable;

use clap::Parser;
use common::{compare_valid_logits, load_dir, read_reference, root, venv_python};
use drmas::model::{
    GenerationRequest, ModelError, SamplingParams, TextTokenizer, generate, gguf::import_gguf,
    positions_from_mask, prefill_mask,
};
use serde_json::Value;
use std::{
    path::{Path, PathBuf},
    sync::OnceLock,
    time::Instant,
};
use tch::{Kind, Tensor};

const REAL: &str = "models/gguf/SmolLM2-135M-Instruct.Q4_1.gguf";

/// The real GGUF file `scripts/fetch-assets.sh` fetches. A missing one fails the test
/// that needs it, naming the step: a comparison that did not run proves nothing.
fn real_gguf() -> PathBuf {
    let path = root().join(REAL);
    assert!(
        path.exists(),
        "{} is absent: run scripts/fetch-assets.sh (scripts/make-fixtures.sh runs it)",
        path.display()
    );
    path
}

/// target/gguf-fixtures, made by the fixture script if the set-up has not made it.
fn fixtures() -> &'static Path {
    static DIR: OnceLock<PathBuf> = OnceLock::new();
    DIR.get_or_init(|| {
        let dir = root().join("target/gguf-fixtures");
        let real_missing = root().join(REAL).exists() && !dir.join("smollm2.json").exists();
        let tiny_missing = ["tiny", "tiny-qwen2", "tiny-qwen3"]
            .iter()
            .any(|n| !dir.join(format!("{n}.json")).exists());
        if tiny_missing || real_missing {
            let python = venv_python()
                .expect("no .venv python to make the GGUF fixtures: run scripts/setup.sh");
            let status = std::process::Command::new(python)
                .arg(common::script("gguf_fixtures.py"))
                .arg(&dir)
                .status()
                .unwrap();
            assert!(status.success(), "scripts/py/gguf_fixtures.py failed");
        }
        dir
    })
}

fn meta(name: &str) -> Value {
    serde_json::from_str(&std::fs::read_to_string(fixtures().join(name)).unwrap()).unwrap()
}

/// Imports `gguf` into a fresh temporary folder; returns (tempdir, checkpoint folder).
fn import(gguf: &Path) -> (tempfile::TempDir, PathBuf) {
    let tmp = tempfile::tempdir().unwrap();
    let out = tmp.path().join("ckpt");
    let start = Instant::now();
    let mut calls = 0;
    let summary = import_gguf(gguf, &out, |i, n, _| {
        calls += 1;
        assert!(i >= 1 && i <= n);
    })
    .unwrap();
    assert_eq!(calls, summary.tensors);
    eprintln!(
        "imported {} ({} tensors, {:?}) in {:.2}s",
        gguf.file_name().unwrap().to_string_lossy(),
        summary.tensors,
        summary.types,
        start.elapsed().as_secs_f64()
    );
    (tmp, out)
}

fn max_abs(a: &Tensor, b: &Tensor) -> f64 {
    assert_eq!(a.size(), b.size());
    f64::try_from((a - b).abs().max()).unwrap()
}

fn ids_of(v: &Value) -> Vec<u32> {
    v.as_array()
        .unwrap()
        .iter()
        .map(|x| x.as_u64().unwrap() as u32)
        .collect()
}

/// Encodes and decodes every case with the imported tokenizer.json, as transformers did.
fn check_tokenizer(dir: &Path, cases: &Value) {
    let tok = tokenizers::Tokenizer::from_file(dir.join("tokenizer.json")).unwrap();
    let cases = cases.as_array().unwrap();
    for case in cases {
        let text = case["text"].as_str().unwrap();
        let ids = tok.encode(text, true).unwrap().get_ids().to_vec();
        assert_eq!(ids, ids_of(&case["ids"]), "ids of {text:?}");
        let plain = tok.encode(text, false).unwrap().get_ids().to_vec();
        assert_eq!(
            plain,
            ids_of(&case["ids_plain"]),
            "ids without special tokens of {text:?}"
        );
        let decoded = tok.decode(&ids, false).unwrap();
        assert_eq!(
            decoded,
            case["decoded"].as_str().unwrap(),
            "decoding of {text:?}"
        );
    }
    eprintln!("tokenizer: {} texts give transformers' ids", cases.len());
}

/// The quantization error bound of each format, as a fraction of the tensor's max |w|:
/// half a step of the block scale (a full step where the grid clips at one end, as in
/// Q4_0 / Q5_0), plus the f16 rounding of the scales.
fn format_error(kind: &str) -> f64 {
    match kind {
        "F32" => 0.0,
        "F16" => 1e-3,
        "BF16" => 4e-3,
        "Q8_0" => 6e-3,
        "Q5_1" => 0.04,
        "Q5_0" => 0.07,
        "Q4_1" => 0.08,
        "Q4_0" => 0.13,
        other => panic!("no format error for {other}"),
    }
}

#[test]
fn tiny_gguf_dequantizes_every_type_like_gguf_py_within_the_format_error() {
    let (_tmp, out) = import(&fixtures().join("tiny.gguf"));
    let ours = read_reference(&out.join("model.safetensors"));
    let reference = read_reference(&fixtures().join("tiny-reference.safetensors"));
    let meta = meta("tiny.json");
    let types = meta["types"].as_object().unwrap();
    assert_eq!(
        ours.len(),
        types.len(),
        "tensors written: {:?}",
        ours.keys().collect::<Vec<_>>()
    );
    let mut seen = std::collections::BTreeSet::new();
    for (name, kind) in types {
        let kind = kind.as_str().unwrap();
        seen.insert(kind);
        let mine = &ours[name];
        let diff = max_abs(mine, &reference[&format!("weight.{name}")]);
        let mut line = format!("{name:48} {kind:5} |Δ gguf-py| = {diff:.1e}");
        assert!(diff <= 1e-6, "{name} ({kind}): |ours − gguf-py| = {diff}");
        if let Some(original) = reference.get(&format!("original.{name}")) {
            let scale = f64::try_from(original.abs().max()).unwrap();
            let err = max_abs(mine, original);
            line += &format!(", |Δ original| = {err:.1e} = {:.4}·max|w|", err / scale);
            assert!(
                err <= format_error(kind) * scale + 1e-7,
                "{name} ({kind}): {err} from the original, max |w| {scale}"
            );
        }
        eprintln!("{line}");
    }
    let all = [
        "F32", "F16", "BF16", "Q4_0", "Q4_1", "Q5_0", "Q5_1", "Q8_0", "Q2_K", "Q3_K", "Q4_K",
        "Q5_K", "Q6_K",
    ];
    assert_eq!(
        seen,
        all.into_iter().collect(),
        "types covered by the tiny GGUF"
    );
}

#[test]
fn tiny_gguf_import_gives_transformers_logits() {
    let (_tmp, out) = import(&fixtures().join("tiny.gguf"));
    let config: Value =
        serde_json::from_str(&std::fs::read_to_string(out.join("config.json")).unwrap()).unwrap();
    assert_eq!(config["architectures"][0], "LlamaForCausalLM");
    assert_eq!(config["tie_word_embeddings"], false);
    assert_eq!(config["max_position_embeddings"], 128);
    let model = load_dir(&out);
    let reference = read_reference(&fixtures().join("tiny-reference.safetensors"));
    let ids = &reference["input_ids"];
    let mask = ids.ones_like();
    let logits = tch::no_grad(|| {
        model.logits(&model.forward(ids, &positions_from_mask(&mask), &prefill_mask(&mask), None))
    });
    let diff = compare_valid_logits(&logits, &reference["logits"], &mask);
    eprintln!("tiny GGUF: max |Δlogit| vs transformers = {diff:.2e}");
    assert!(diff <= 1e-4, "max |Δlogit| = {diff}");
}

#[test]
fn tiny_qwen2_and_qwen3_ggufs_give_transformers_weights_and_logits() {
    for (name, family, tied) in [
        ("tiny-qwen2", "qwen2", false),
        ("tiny-qwen3", "qwen3", true),
    ] {
        let (_tmp, out) = import(&fixtures().join(format!("{name}.gguf")));
        let config: Value =
            serde_json::from_str(&std::fs::read_to_string(out.join("config.json")).unwrap())
                .unwrap();
        assert_eq!(config["model_type"], family);
        assert_eq!(config["tie_word_embeddings"], tied);
        let ours = read_reference(&out.join("model.safetensors"));
        let reference = read_reference(&fixtures().join(format!("{name}-reference.safetensors")));
        let mut worst = 0f64;
        for (key, theirs) in &reference {
            if let Some(hf) = key.strip_prefix("weight.") {
                worst = worst.max(max_abs(&ours[hf], theirs));
            }
        }
        assert!(worst <= 1e-6, "{name}: max |Δweight| = {worst}");
        let model = load_dir(&out);
        let ids = &reference["input_ids"];
        let mask = ids.ones_like();
        let logits = tch::no_grad(|| {
            model.logits(&model.forward(
                ids,
                &positions_from_mask(&mask),
                &prefill_mask(&mask),
                None,
            ))
        });
        let diff = compare_valid_logits(&logits, &reference["logits"], &mask);
        eprintln!("{name}: max |Δweight| = {worst:.1e}, max |Δlogit| vs transformers = {diff:.2e}");
        assert!(diff <= 1e-4, "{name}: max |Δlogit| = {diff}");
    }
}

#[test]
fn tiny_gguf_tokenizer_matches_transformers() {
    let (_tmp, out) = import(&fixtures().join("tiny.gguf"));
    check_tokenizer(&out, &meta("tiny.json")["tokenizer"]);
    let config: Value =
        serde_json::from_str(&std::fs::read_to_string(out.join("tokenizer_config.json")).unwrap())
            .unwrap();
    assert_eq!(config["add_bos_token"], true);
    assert_eq!(config["bos_token"], "<|endoftext|>");
    assert_eq!(config["eos_token"], "<|im_end|>");
    assert!(
        config["chat_template"]
            .as_str()
            .unwrap()
            .contains("<|im_start|>")
    );
}

#[test]
fn smollm2_import_matches_transformers_weights_logits_tokenizer_and_answers_paris() {
    let gguf = real_gguf();
    let (_tmp, out) = import(&gguf);
    let meta = meta("smollm2.json");
    let reference = read_reference(&fixtures().join("smollm2-reference.safetensors"));

    let config: Value =
        serde_json::from_str(&std::fs::read_to_string(out.join("config.json")).unwrap()).unwrap();
    for (key, want) in [
        ("model_type", Value::from("llama")),
        ("num_hidden_layers", 30.into()),
        ("hidden_size", 576.into()),
        ("num_attention_heads", 9.into()),
        ("num_key_value_heads", 3.into()),
        ("vocab_size", 49152.into()),
        ("rope_theta", 100000.0.into()),
        ("max_position_embeddings", 8192.into()),
        ("tie_word_embeddings", true.into()),
        ("bos_token_id", 1.into()),
        ("eos_token_id", 2.into()),
    ] {
        assert_eq!(config[key], want, "config.json `{key}`");
    }

    // Weights: transformers dequantizes with gguf-py and un-permutes Q/K itself.
    let model = load_dir(&out);
    let vars = model.vs.variables();
    let rows = meta["embed_rows"].as_i64().unwrap();
    let mut worst = 0f64;
    for (key, theirs) in &reference {
        let (name, ours) = if let Some(name) = key.strip_prefix("weight.") {
            (name, vars[name].shallow_clone())
        } else if let Some(name) = key.strip_prefix("rows.") {
            (name, vars[name].narrow(0, 0, rows))
        } else {
            continue;
        };
        let diff = max_abs(&ours, theirs);
        assert!(diff <= 1e-6, "{name}: |ours − transformers| = {diff}");
        worst = worst.max(diff);
    }
    eprintln!("SmolLM2: max |Δweight| vs transformers' GGUF load = {worst:.2e}");

    // Logits on each prompt.
    for i in 0.. {
        let Some(ids) = reference.get(&format!("ids.{i}")) else {
            break;
        };
        let mask = ids.ones_like();
        let logits = tch::no_grad(|| {
            model.logits(&model.forward(
                ids,
                &positions_from_mask(&mask),
                &prefill_mask(&mask),
                None,
            ))
        });
        let diff = compare_valid_logits(&logits, &reference[&format!("logits.{i}")], &mask);
        eprintln!(
            "SmolLM2 prompt {i} ({} tokens): max |Δlogit| vs transformers = {diff:.2e}",
            ids.size()[1]
        );
        assert!(diff <= 1e-4, "prompt {i}: max |Δlogit| = {diff}");
    }

    // Tokenizer: transformers' ids, and drmas' own chat rendering gives its chat prompt.
    check_tokenizer(&out, &meta["tokenizer"]);
    let text_tok = TextTokenizer::from_dir(&out).unwrap();
    let messages = [drmas_plugin_api::Message::new(
        "user",
        "What is the capital of France?",
    )];
    let chat_ids: Vec<i64> = meta["chat_ids"]
        .as_array()
        .unwrap()
        .iter()
        .map(|v| v.as_i64().unwrap())
        .collect();
    assert_eq!(
        text_tok.chat_ids(&messages).unwrap(),
        chat_ids,
        "drmas' chat prompt ids"
    );
    assert_eq!(text_tok.stop_token_ids(), &[2], "stop tokens");

    // Greedy answer.
    let request = GenerationRequest {
        prompt: chat_ids,
        params: SamplingParams {
            temperature: 0.0,
            max_new_tokens: 24,
            stop_token_ids: text_tok.stop_token_ids().to_vec(),
            ..Default::default()
        },
        shared_prefix: 0,
    };
    let generation = generate(&model, &[request], None).unwrap().remove(0);
    let hf_tok = tokenizers::Tokenizer::from_file(out.join("tokenizer.json")).unwrap();
    let ids: Vec<u32> = generation.tokens.iter().map(|&t| t as u32).collect();
    let answer = hf_tok.decode(&ids, true).unwrap();
    let theirs = Vec::<i64>::try_from(&reference["greedy"]).unwrap();
    eprintln!(
        "SmolLM2 greedy answer: {answer:?} (transformers: {:?}, same tokens: {})",
        meta["greedy_text"].as_str().unwrap(),
        generation.tokens == theirs
    );
    assert!(
        answer.contains("Paris"),
        "answer {answer:?} does not mention Paris"
    );
}

// ---------------------------------------------------------------------------------------
// Small GGUF files written here, for the refusals.

enum Kv {
    Str(&'static str),
    U32(u32),
    F32(f32),
    Bool(bool),
    Strs(Vec<&'static str>),
}

struct TensorSpec {
    name: &'static str,
    dims: Vec<u64>,
    type_id: u32,
    data: Vec<u8>,
}

fn gguf_string(out: &mut Vec<u8>, s: &str) {
    out.extend((s.len() as u64).to_le_bytes());
    out.extend(s.as_bytes());
}

fn write_gguf(path: &Path, kvs: &[(&str, Kv)], tensors: &[TensorSpec]) {
    let mut out = b"GGUF".to_vec();
    out.extend(3u32.to_le_bytes());
    out.extend((tensors.len() as u64).to_le_bytes());
    out.extend((kvs.len() as u64).to_le_bytes());
    for (key, value) in kvs {
        gguf_string(&mut out, key);
        match value {
            Kv::Str(s) => {
                out.extend(8u32.to_le_bytes());
                gguf_string(&mut out, s);
            }
            Kv::U32(v) => {
                out.extend(4u32.to_le_bytes());
                out.extend(v.to_le_bytes());
            }
            Kv::F32(v) => {
                out.extend(6u32.to_le_bytes());
                out.extend(v.to_le_bytes());
            }
            Kv::Bool(v) => {
                out.extend(7u32.to_le_bytes());
                out.push(u8::from(*v));
            }
            Kv::Strs(items) => {
                out.extend(9u32.to_le_bytes());
                out.extend(8u32.to_le_bytes());
                out.extend((items.len() as u64).to_le_bytes());
                for s in items {
                    gguf_string(&mut out, s);
                }
            }
        }
    }
    let mut offset = 0u64;
    for t in tensors {
        gguf_string(&mut out, t.name);
        out.extend((t.dims.len() as u32).to_le_bytes());
        for d in &t.dims {
            out.extend(d.to_le_bytes());
        }
        out.extend(t.type_id.to_le_bytes());
        out.extend(offset.to_le_bytes());
        offset += (t.data.len() as u64).div_ceil(32) * 32;
    }
    while !out.len().is_multiple_of(32) {
        out.push(0);
    }
    for t in tensors {
        out.extend(&t.data);
        while !out.len().is_multiple_of(32) {
            out.push(0);
        }
    }
    std::fs::write(path, out).unwrap();
}

fn f32_tensor(name: &'static str, dims: Vec<u64>) -> TensorSpec {
    let n: u64 = dims.iter().product();
    let data = (0..n)
        .flat_map(|i| (i as f32 * 1e-3).to_le_bytes())
        .collect();
    TensorSpec {
        name,
        dims,
        type_id: 0,
        data,
    }
}

/// A one-layer llama with hidden 32, 2 heads, vocab 8, all F32; `edit` changes it.
fn write_mini(path: &Path, edit: impl FnOnce(&mut Vec<(&'static str, Kv)>, &mut Vec<TensorSpec>)) {
    let mut kvs = vec![
        ("general.architecture", Kv::Str("llama")),
        ("llama.block_count", Kv::U32(1)),
        ("llama.context_length", Kv::U32(64)),
        ("llama.embedding_length", Kv::U32(32)),
        ("llama.feed_forward_length", Kv::U32(64)),
        ("llama.attention.head_count", Kv::U32(2)),
        ("llama.attention.head_count_kv", Kv::U32(2)),
        ("llama.attention.layer_norm_rms_epsilon", Kv::F32(1e-5)),
        ("tokenizer.ggml.model", Kv::Str("gpt2")),
        (
            "tokenizer.ggml.tokens",
            Kv::Strs(vec!["a", "b", "c", "ab", "<s>", "</s>", "d", "e"]),
        ),
        ("tokenizer.ggml.merges", Kv::Strs(vec!["a b"])),
        ("tokenizer.ggml.add_bos_token", Kv::Bool(false)),
    ];
    let mut tensors = vec![
        f32_tensor("token_embd.weight", vec![32, 8]),
        f32_tensor("output_norm.weight", vec![32]),
    ];
    for (name, dims) in [
        ("blk.0.attn_norm.weight", vec![32]),
        ("blk.0.ffn_norm.weight", vec![32]),
        ("blk.0.attn_q.weight", vec![32, 32]),
        ("blk.0.attn_k.weight", vec![32, 32]),
        ("blk.0.attn_v.weight", vec![32, 32]),
        ("blk.0.attn_output.weight", vec![32, 32]),
        ("blk.0.ffn_gate.weight", vec![32, 64]),
        ("blk.0.ffn_up.weight", vec![32, 64]),
        ("blk.0.ffn_down.weight", vec![64, 32]),
    ] {
        tensors.push(f32_tensor(name, dims));
    }
    edit(&mut kvs, &mut tensors);
    write_gguf(path, &kvs, &tensors);
}

fn import_err(
    edit: impl FnOnce(&mut Vec<(&'static str, Kv)>, &mut Vec<TensorSpec>),
) -> (String, tempfile::TempDir) {
    let tmp = tempfile::tempdir().unwrap();
    let path = tmp.path().join("m.gguf");
    write_mini(&path, edit);
    let out = tmp.path().join("out");
    let err: ModelError =
        import_gguf(&path, &out, |_, _, _| {}).expect_err("the import should fail");
    assert!(!out.exists(), "a failed import left {}", out.display());
    let leftovers: Vec<_> = std::fs::read_dir(tmp.path())
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .filter(|n| n.contains(".tmp-"))
        .collect();
    assert!(
        leftovers.is_empty(),
        "temporary folders left: {leftovers:?}"
    );
    (err.to_string(), tmp)
}

#[test]
fn mini_gguf_written_here_imports_and_loads() {
    let tmp = tempfile::tempdir().unwrap();
    let path = tmp.path().join("m.gguf");
    write_mini(&path, |_, _| {});
    let out = tmp.path().join("out");
    let summary = import_gguf(&path, &out, |_, _, _| {}).unwrap();
    assert_eq!(summary.tensors, 11);
    assert!(summary.tied_embeddings);
    let model = load_dir(&out);
    // q rows come back un-permuted: GGUF row 2j + i of a head is HF row i·8 + j.
    let q = &model.vs.variables()["model.layers.0.self_attn.q_proj.weight"];
    let gguf_row =
        |r: i64| Tensor::arange_start(r * 32, r * 32 + 32, (Kind::Float, tch::Device::Cpu)) * 1e-3;
    for (hf, stored) in [(0, 0), (8, 1), (1, 2), (9, 3), (16, 16), (24, 17)] {
        let diff = max_abs(&q.get(hf), &gguf_row(stored));
        assert!(
            diff < 1e-9,
            "q row {hf} should be GGUF row {stored} (Δ {diff})"
        );
    }
}

#[test]
fn import_refuses_what_it_does_not_implement_by_name() {
    let (err, _t) = import_err(|kvs, _| kvs[0].1 = Kv::Str("gpt2"));
    assert!(
        err.contains("general.architecture") && err.contains("gpt2"),
        "{err}"
    );

    let (err, _t) = import_err(|_, tensors| {
        let q = tensors
            .iter_mut()
            .find(|t| t.name == "blk.0.attn_q.weight")
            .unwrap();
        q.type_id = 16; // IQ2_XXS
        q.dims = vec![256, 32];
    });
    assert!(
        err.contains("IQ2_XXS") && err.contains("blk.0.attn_q.weight"),
        "{err}"
    );

    let (err, _t) =
        import_err(|_, tensors| tensors.push(f32_tensor("blk.0.ssm_conv1d.weight", vec![4])));
    assert!(err.contains("blk.0.ssm_conv1d.weight"), "{err}");

    let (err, _t) = import_err(|kvs, _| kvs.push(("llama.rope.scaling.type", Kv::Str("yarn"))));
    assert!(
        err.contains("llama.rope.scaling.type") && err.contains("yarn"),
        "{err}"
    );

    let (err, _t) = import_err(|kvs, _| kvs[8].1 = Kv::Str("llama"));
    assert!(err.contains("tokenizer.ggml.model"), "{err}");

    // The last tensor's data runs past the end of the file: found while writing, and
    // nothing is left behind.
    let (err, _t) = import_err(|_, tensors| {
        let last = tensors.last_mut().unwrap();
        assert_eq!(last.name, "blk.0.ffn_down.weight");
        last.type_id = 8; // Q8_0: 34 bytes per 32 values
        last.data.truncate(100);
    });
    assert!(
        err.contains("blk.0.ffn_down.weight") && err.contains("truncated"),
        "{err}"
    );

    let (err, _t) = import_err(|_, tensors| tensors.retain(|t| t.name != "blk.0.ffn_up.weight"));
    assert!(
        err.contains("blk.0.ffn_up.weight") && err.contains("missing"),
        "{err}"
    );
}

#[derive(Parser)]
struct Cli {
    #[command(flatten)]
    args: model_import::Args,
}

#[test]
fn cli_replaces_only_a_model_folder_drmas_wrote_and_only_with_force() {
    let tmp = tempfile::tempdir().unwrap();
    let gguf = tmp.path().join("m.gguf");
    write_mini(&gguf, |_, _| {});
    let parse = |out: &Path, force: bool| {
        let mut argv = vec![
            "drmas".into(),
            gguf.clone().into_os_string(),
            out.to_path_buf().into_os_string(),
        ];
        if force {
            argv.push("--force".into());
        }
        Cli::parse_from(argv).args
    };
    // A folder holding something else is never replaced, forced or not.
    let foreign = tmp.path().join("foreign");
    std::fs::create_dir(&foreign).unwrap();
    std::fs::write(foreign.join("keep.txt"), "precious").unwrap();
    for force in [false, true] {
        let err = model_import::run(parse(&foreign, force)).expect_err("refused");
        assert_eq!(
            err.to_string(),
            format!(
                "{} exists and is not a model folder drmas wrote (no .drmas-model); refusing to replace it, even with --force (give a new folder or empty it yourself)",
                foreign.display()
            )
        );
    }
    assert!(foreign.join("keep.txt").exists());

    // An import (here into an empty folder) is replaced only with --force.
    let out = tmp.path().join("out");
    std::fs::create_dir(&out).unwrap();
    model_import::run(parse(&out, false)).unwrap();
    let err = model_import::run(parse(&out, false)).expect_err("refused without --force");
    assert_eq!(
        err.to_string(),
        format!(
            "{} exists (a model folder drmas wrote); pass --force to replace it",
            out.display()
        )
    );
    model_import::run(parse(&out, true)).unwrap();
    for file in [
        "config.json",
        "generation_config.json",
        "model.safetensors",
        "tokenizer.json",
        "tokenizer_config.json",
        ".drmas-model",
    ] {
        assert!(out.join(file).exists(), "{file} missing");
    }
    assert_eq!(
        std::fs::read_dir(tmp.path()).unwrap().count(),
        3,
        "m.gguf, foreign and out only"
    );
}

#[test]
fn cli_never_replaces_the_current_folder() {
    let tmp = tempfile::tempdir().unwrap();
    let gguf = tmp.path().join("m.gguf");
    write_mini(&gguf, |_, _| {});
    let work = tmp.path().join("work");
    std::fs::create_dir(&work).unwrap();
    std::fs::write(work.join("notes.txt"), "mine").unwrap();
    // `.` (the current folder) and `..` (a folder that holds it).
    for (dir, name) in [(".", "."), ("..", "..")] {
        let out = std::process::Command::new(env!("CARGO_BIN_EXE_drmas"))
            .current_dir(&work)
            .args(["model", "import"])
            .arg(&gguf)
            .args([dir, "--force"])
            .output()
            .unwrap();
        assert!(!out.status.success());
        assert_eq!(
            String::from_utf8_lossy(&out.stderr).trim_end(),
            format!(
                "error: {name} is the current folder or holds it; refusing to replace it (give a new folder)"
            )
        );
    }
    assert!(work.join("notes.txt").is_file());
}

#[test]
fn an_import_killed_at_any_step_leaves_the_old_model_or_the_new_one() {
    let tmp = tempfile::tempdir().unwrap();
    // Old and new differ in their context length, so each can be told apart.
    let (old_gguf, new_gguf) = (tmp.path().join("old.gguf"), tmp.path().join("new.gguf"));
    write_mini(&old_gguf, |_, _| {});
    write_mini(&new_gguf, |kvs, _| {
        for kv in kvs.iter_mut() {
            if kv.0 == "llama.context_length" {
                kv.1 = Kv::U32(32);
            }
        }
    });
    let out = tmp.path().join("model");
    let import = |gguf: &Path, fault: Option<&str>| {
        let mut c = std::process::Command::new(env!("CARGO_BIN_EXE_drmas"));
        c.args(["model", "import"])
            .arg(gguf)
            .arg(&out)
            .arg("--force");
        c.env_remove("DRMAS_FAULT_POINT");
        if let Some(f) = fault {
            c.env("DRMAS_FAULT_POINT", f);
        }
        c.output().unwrap()
    };
    let context = || -> Option<u64> {
        let config: Value =
            serde_json::from_str(&std::fs::read_to_string(out.join("config.json")).ok()?).ok()?;
        // The whole folder must load, not only its config.
        load_dir(&out);
        TextTokenizer::from_dir(&out).ok()?;
        config["max_position_embeddings"].as_u64()
    };
    for fault in [
        "file-partial",
        "file-written",
        "file-renamed",
        "dir-staged",
        "dir-swapped",
    ] {
        assert!(import(&old_gguf, None).status.success());
        assert_eq!(context(), Some(64));
        let run = import(&new_gguf, Some(fault));
        use std::os::unix::process::ExitStatusExt;
        assert_eq!(run.status.signal(), Some(9), "{fault}: not killed");
        let got = context();
        assert!(
            got == Some(64) || got == Some(32),
            "{fault}: the folder is neither the old model nor the new one"
        );
        if fault == "dir-swapped" {
            assert_eq!(got, Some(32), "after the swap the new model is in place");
        }
    }
    // The next import cleans what the killed ones left.
    assert!(import(&new_gguf, None).status.success());
    let names: Vec<String> = std::fs::read_dir(tmp.path())
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    assert_eq!(names.len(), 3, "{names:?}");
}

/// The weights of a loaded model by HF name.
fn weights_of(dir: &Path) -> std::collections::BTreeMap<String, Tensor> {
    load_dir(dir)
        .vs
        .variables()
        .into_iter()
        .map(|(k, v)| (k, v.detach().copy()))
        .collect()
}

#[test]
fn export_writes_the_model_s_weights_in_the_template_s_layout() {
    use drmas::model::gguf::{ExportType, GgufFile, export_gguf, reader::Value as Kv};
    let tmp = tempfile::tempdir().unwrap();
    let template = tmp.path().join("m.gguf");
    write_mini(&template, |_, _| {});
    let out = tmp.path().join("out");
    import_gguf(&template, &out, |_, _, _| {}).unwrap();
    // Trained weights: every tensor moved, so a layout error cannot hide.
    let mut weights = weights_of(&out);
    tch::manual_seed(3);
    for t in weights.values_mut() {
        *t = &*t + t.randn_like() * 0.01;
    }
    let source = GgufFile::open(&template).unwrap();
    for (kind, file_type, tolerance) in [(ExportType::F32, 0, 0.0), (ExportType::F16, 1, 1e-3)] {
        let exported = tmp.path().join(format!("{kind:?}.gguf"));
        let bytes = export_gguf(&source, &weights, kind, &exported).unwrap();
        assert_eq!(bytes, std::fs::metadata(&exported).unwrap().len());
        let back = GgufFile::open(&exported).unwrap();
        // The template's metadata (tokenizer, hyper-parameters), the file type updated.
        let mut want = source.metadata.clone();
        want.insert("general.file_type".into(), Kv::U32(file_type));
        assert_eq!(back.metadata, want);
        let names = |f: &GgufFile| f.tensors.iter().map(|t| t.name.clone()).collect::<Vec<_>>();
        assert_eq!(names(&back), names(&source));
        // Imported again (Q/K un-permuted): the weights that were exported.
        let again = tmp.path().join(format!("{kind:?}-hf"));
        import_gguf(&exported, &again, |_, _, _| {}).unwrap();
        let got = weights_of(&again);
        for (name, w) in &weights {
            let d = max_abs(&got[name], w);
            assert!(d <= tolerance, "{kind:?} {name}: {d}");
        }
    }
    // A weight of the wrong shape is refused before anything is written.
    let mut wrong = weights;
    wrong.insert(
        "model.layers.0.mlp.up_proj.weight".into(),
        Tensor::zeros([3, 3], (Kind::Float, tch::Device::Cpu)),
    );
    let bad = tmp.path().join("bad.gguf");
    let e = export_gguf(&source, &wrong, ExportType::F32, &bad)
        .unwrap_err()
        .to_string();
    assert!(
        e.contains("blk.0.ffn_up.weight")
            && e.contains("the model's `model.layers.0.mlp.up_proj.weight` is [3, 3], the template's tensor [64, 32]"),
        "{e}"
    );
    assert!(!bad.exists());
}
