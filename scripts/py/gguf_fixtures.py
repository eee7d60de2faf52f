"""GGUF fixtures and transformers' reference outputs for host/tests/it/gguf_import.rs.

    python gguf_fixtures.py OUT_DIR [--real PATH]

Writes, under OUT_DIR:

tiny.gguf                  a tiny random Llama (2 layers, hidden 256) written with gguf-py's
                           GGUFWriter, its tensors in every type the importer implements
                           (F32, F16, BF16, Q4_0, Q4_1, Q5_0, Q5_1, Q8_0 quantized with
                           gguf.quants from random weights; Q2_K..Q6_K as random valid
                           blocks, which gguf-py cannot quantize), with a small byte-level
                           BPE vocabulary (pre = qwen2) and a chat template.
tiny-qwen2.gguf            the same for Qwen2 (q/k/v biases) and Qwen3 (q/k norms, explicit
tiny-qwen3.gguf            head size, tied embeddings), in a few types.
NAME-reference.safetensors weight.<hf name>: gguf.quants.dequantize of each tensor, Llama Q/K
                           rows un-permuted (checked equal to transformers' own GGUF load);
                           original.<hf name>: the weights before quantizing (quantized
                           types only); input_ids [2, 16] and transformers' logits.
NAME.json                  the ggml type of each HF tensor; for tiny, tokenizer cases: text,
                           transformers' ids with and without special tokens, decoded text.

and, when the real SmolLM2 GGUF exists (default models/gguf/SmolLM2-135M-Instruct.Q4_1.gguf):

smollm2-reference.safetensors  weight.<hf name> for a few tensors of transformers' GGUF load
                           (first/last layer q/k/v/o, norms; rows.<name> for the first
                           EMBED_ROWS rows of the embedding), ids.<i> / logits.<i> for
                           three prompts, greedy: transformers' greedy continuation of the
                           chat prompt.
smollm2.json               tokenizer cases as above, the chat prompt text and ids, and the
                           greedy answer text.

Outputs are skipped when a stamp of this script, the real file and the package versions
says they are up to date.
"""
import hashlib
import json
import sys
from pathlib import Path

import numpy as np
import torch
from safetensors.torch import save_file

import gguf
from gguf import GGMLQuantizationType as T
from gguf import GGUFWriter
from gguf.quants import dequantize, quantize

ROOT = Path(__file__).resolve().parents[2]
REAL = ROOT / "models/gguf/SmolLM2-135M-Instruct.Q4_1.gguf"
EMBED_ROWS = 2048

TEXTS = [
    "Hello world!",
    "12345 + 678 = 13023, in 2024.",
    "h\u00e9llo w\u00f6rld \u4f60\u597d \U0001f642 na\u00efve caf\u00e9",
    "<|im_start|>user\nHi there<|im_end|>\n<|im_start|>assistant\n",
    "  leading spaces\n\n\ttabs and\r\nnewlines   ",
    "don't STOP, we'll've it's THE end's",
    "<think>reasoning</think> done",
]

# ---------------------------------------------------------------------------------------
# tiny GGUF

HIDDEN, INTER, LAYERS, CTX = 256, 512, 2, 128
SPECIALS = ["<|endoftext|>", "<|im_start|>", "<|im_end|>"]
CHAT_TEMPLATE = (
    "{% for message in messages %}{{'<|im_start|>' + message['role'] + '\n' + message['content'] + '<|im_end|>' + '\n'}}"
    "{% endfor %}{% if add_generation_prompt %}{{ '<|im_start|>assistant\n' }}{% endif %}"
)
CORPUS = [
    "The quick brown fox jumps over the lazy dog. The dog sleeps; the fox runs.",
    "In 2024 there were 12345 apples and 678 oranges: 13023 fruits in all.",
    "Numbers like 1000, 2000 and 2024 repeat: 2024 2024 2024 1000 1000.",
    "We'll see what they've done; it's the end of the world as we know it.",
    "Hello world! Hello there, hello again. Caf\u00e9 na\u00efve r\u00e9sum\u00e9.",
    "def add(a, b):\n    return a + b\n\nprint(add(1, 2))\n",
] * 4

# The tiny models. `linear`: (layer 0, layer 1) types of each linear. In the Llama, q/k
# get quantizable types in layer 0 (so the un-permuted result can be checked against the
# original weights) and K-quants in layer 1; between them all 13 types appear.
TINY = {
    "tiny": dict(
        arch="llama", heads=4, kv_heads=2, head_dim=64, tied=False, bias=False, qk_norm=False,
        embed=T.Q8_0, output=T.Q6_K,
        linear={
            "attn_q": (T.Q4_0, T.Q2_K),
            "attn_k": (T.Q4_1, T.Q3_K),
            "attn_v": (T.Q8_0, T.Q5_K),
            "attn_output": (T.Q4_K, T.Q5_1),
            "ffn_gate": (T.Q6_K, T.BF16),
            "ffn_up": (T.F16, T.F32),
            "ffn_down": (T.Q5_0, T.Q4_K),
        },
    ),
    # Qwen2: q/k/v biases, no permutation, untied.
    "tiny-qwen2": dict(
        arch="qwen2", heads=4, kv_heads=2, head_dim=64, tied=False, bias=True, qk_norm=False,
        embed=T.Q8_0, output=T.Q4_K,
        linear={n: (T.Q8_0, T.Q5_K) for n in ("attn_q", "attn_k", "attn_v", "attn_output", "ffn_gate", "ffn_up", "ffn_down")},
    ),
    # Qwen3: per-head q/k norms, explicit head size, tied embeddings.
    "tiny-qwen3": dict(
        arch="qwen3", heads=2, kv_heads=1, head_dim=128, tied=True, bias=False, qk_norm=True,
        embed=T.Q6_K, output=None,
        linear={n: (T.Q4_K, T.F16) for n in ("attn_q", "attn_k", "attn_v", "attn_output", "ffn_gate", "ffn_up", "ffn_down")},
    ),
}
HF_LINEAR = {
    "attn_q": "self_attn.q_proj",
    "attn_k": "self_attn.k_proj",
    "attn_v": "self_attn.v_proj",
    "attn_output": "self_attn.o_proj",
    "ffn_gate": "mlp.gate_proj",
    "ffn_up": "mlp.up_proj",
    "ffn_down": "mlp.down_proj",
}
K_QUANTS = {T.Q2_K, T.Q3_K, T.Q4_K, T.Q5_K, T.Q6_K}


def llama_permute(w, n_head):
    """llama.cpp's convert_hf_to_gguf `LlamaModel.permute`."""
    return w.reshape(n_head, 2, w.shape[0] // n_head // 2, *w.shape[1:]).swapaxes(1, 2).reshape(w.shape)


def llama_unpermute(w, n_head):
    """transformers' `LlamaTensorProcessor._reverse_permute_weights`."""
    return w.reshape(n_head, w.shape[0] // n_head // 2, 2, *w.shape[1:]).swapaxes(2, 1).reshape(w.shape)


def f16_bytes(values):
    return np.asarray(values, dtype=np.float16).view(np.uint8).reshape(*np.shape(values), 2)


def random_k_blocks(rng, qtype, rows, cols):
    """Random valid blocks of a K-quant, scaled so values stay around ±0.1."""
    n_blocks = rows * cols // 256
    size = {T.Q2_K: 84, T.Q3_K: 110, T.Q4_K: 144, T.Q5_K: 176, T.Q6_K: 210}[qtype]
    b = rng.integers(0, 256, size=(n_blocks, size), dtype=np.uint8)
    d = rng.uniform(0.5, 1.0, size=n_blocks)
    if qtype == T.Q2_K:
        b[:, 80:82] = f16_bytes(d * 2e-3)
        b[:, 82:84] = f16_bytes(rng.uniform(0.5, 1.0, size=n_blocks) * 2e-3)
    elif qtype == T.Q3_K:
        b[:, 108:110] = f16_bytes(d * 8e-4)
    elif qtype in (T.Q4_K, T.Q5_K):
        scale = 1e-4 if qtype == T.Q4_K else 5e-5
        b[:, 0:2] = f16_bytes(d * scale)
        b[:, 2:4] = f16_bytes(rng.uniform(0.5, 1.0, size=n_blocks) * scale)
    elif qtype == T.Q6_K:
        b[:, 192:208] = rng.integers(-16, 17, size=(n_blocks, 16), dtype=np.int8).view(np.uint8)
        b[:, 208:210] = f16_bytes(d * 2e-4)
    return b.reshape(rows, -1)


def encode(qtype, w):
    """(bytes or array to write, raw_dtype) for the float32 weights `w` in `qtype`."""
    if qtype == T.F32:
        return w.astype(np.float32), None
    if qtype == T.F16:
        return w.astype(np.float16), None
    return quantize(w.astype(np.float32), qtype), qtype


def train_vocab():
    from tokenizers import Tokenizer, models, pre_tokenizers, trainers

    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    trainer = trainers.BpeTrainer(
        vocab_size=360,
        special_tokens=SPECIALS,
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    tok.train_from_iterator(CORPUS, trainer)
    model = json.loads(tok.to_str())["model"]
    vocab = model["vocab"]
    tokens = [None] * len(vocab)
    for t, i in vocab.items():
        tokens[i] = t
    merges = [m if isinstance(m, str) else " ".join(m) for m in model["merges"]]
    types = [3 if t in SPECIALS else 1 for t in tokens]
    # A user-defined added token, kept whole but not special.
    tokens.append("<think>")
    types.append(4)
    tokens.append("</think>")
    types.append(4)
    return tokens, types, merges


def tokenizer_cases(tok, texts):
    cases = []
    for text in texts:
        ids = tok(text)["input_ids"]
        cases.append(
            {
                "text": text,
                "ids": ids,
                "ids_plain": tok(text, add_special_tokens=False)["input_ids"],
                "decoded": tok.decode(ids),
            }
        )
    return cases


def make_tiny(out: Path, name: str, spec: dict, seed: int):
    from transformers import AutoModelForCausalLM, AutoTokenizer

    rng = np.random.default_rng(seed)
    tokens, token_types, merges = train_vocab()
    vocab = len(tokens)
    heads, kv_heads, head_dim = spec["heads"], spec["kv_heads"], spec["head_dim"]
    permute = spec["arch"] == "llama"
    path = out / f"{name}.gguf"
    w = GGUFWriter(str(path), spec["arch"])
    w.add_custom_alignment(64)
    w.add_name(f"{name}-random")
    w.add_block_count(LAYERS)
    w.add_context_length(CTX)
    w.add_embedding_length(HIDDEN)
    w.add_feed_forward_length(INTER)
    w.add_head_count(heads)
    w.add_head_count_kv(kv_heads)
    if head_dim != HIDDEN // heads:
        w.add_key_length(head_dim)
        w.add_value_length(head_dim)
    w.add_rope_freq_base(10000.0 if permute else 1000000.0)
    w.add_layer_norm_rms_eps(1e-5 if permute else 1e-6)
    w.add_rope_dimension_count(head_dim)
    w.add_vocab_size(vocab)
    w.add_tokenizer_model("gpt2")
    w.add_tokenizer_pre("qwen2")
    w.add_token_list(tokens)
    w.add_token_types(token_types)
    w.add_token_merges(merges)
    w.add_bos_token_id(0)
    w.add_eos_token_id(2)
    w.add_unk_token_id(0)
    w.add_pad_token_id(0)
    w.add_add_bos_token(True)
    w.add_chat_template(CHAT_TEMPLATE)

    reference, types = {}, {}

    def add(gguf_name, hf_name, qtype, torch_shape, n_head=None):
        rows, cols = torch_shape if len(torch_shape) == 2 else (torch_shape[0], 1)
        if qtype in K_QUANTS:
            data, raw = random_k_blocks(rng, qtype, rows, cols), qtype
            stored = dequantize(data, qtype).reshape(torch_shape)
        else:
            original = rng.normal(0.0, 0.05, size=torch_shape).astype(np.float32)
            if "norm" in hf_name:
                original = (1.0 + 0.1 * rng.normal(size=torch_shape)).astype(np.float32)
            hf_layout = llama_permute(original, n_head) if n_head else original
            data, raw = encode(qtype, hf_layout)
            reference["original." + hf_name] = torch.from_numpy(original.copy())
            stored = dequantize(data.view(np.uint8) if raw else data, raw or qtype).reshape(torch_shape)
        w.add_tensor(gguf_name, data, raw_dtype=raw)
        value = llama_unpermute(stored, n_head) if n_head else stored
        reference["weight." + hf_name] = torch.from_numpy(np.ascontiguousarray(value, dtype=np.float32))
        types[hf_name] = qtype.name

    add("token_embd.weight", "model.embed_tokens.weight", spec["embed"], (vocab, HIDDEN))
    shapes = {
        "attn_q": (heads * head_dim, HIDDEN),
        "attn_k": (kv_heads * head_dim, HIDDEN),
        "attn_v": (kv_heads * head_dim, HIDDEN),
        "attn_output": (HIDDEN, heads * head_dim),
        "ffn_gate": (INTER, HIDDEN),
        "ffn_up": (INTER, HIDDEN),
        "ffn_down": (HIDDEN, INTER),
    }
    for i in range(LAYERS):
        p = f"model.layers.{i}"
        add(f"blk.{i}.attn_norm.weight", f"{p}.input_layernorm.weight", T.F32, (HIDDEN,))
        add(f"blk.{i}.ffn_norm.weight", f"{p}.post_attention_layernorm.weight", T.F32, (HIDDEN,))
        for lin, shape in shapes.items():
            n_head = {"attn_q": heads, "attn_k": kv_heads}.get(lin) if permute else None
            add(f"blk.{i}.{lin}.weight", f"{p}.{HF_LINEAR[lin]}.weight", spec["linear"][lin][i], shape, n_head)
        if spec["bias"]:
            for lin in ("attn_q", "attn_k", "attn_v"):
                add(f"blk.{i}.{lin}.bias", f"{p}.{HF_LINEAR[lin]}.bias", T.F32, (shapes[lin][0],))
        if spec["qk_norm"]:
            add(f"blk.{i}.attn_q_norm.weight", f"{p}.self_attn.q_norm.weight", T.F32, (head_dim,))
            add(f"blk.{i}.attn_k_norm.weight", f"{p}.self_attn.k_norm.weight", T.F32, (head_dim,))
    add("output_norm.weight", "model.norm.weight", T.F32, (HIDDEN,))
    if not spec["tied"]:
        add("output.weight", "lm_head.weight", spec["output"], (vocab, HIDDEN))
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()

    # transformers' own load of the file must agree with the reference above.
    model = AutoModelForCausalLM.from_pretrained(
        str(out), gguf_file=path.name, dtype=torch.float32, attn_implementation="eager"
    ).eval()
    assert model.config.tie_word_embeddings == spec["tied"], model.config
    state = model.state_dict()
    for key, value in reference.items():
        if key.startswith("weight."):
            theirs = state[key[len("weight.") :]]
            assert torch.equal(theirs, value), f"{name}: {key}: transformers differs by {(theirs - value).abs().max()}"
    ids = torch.from_numpy(rng.integers(3, vocab, size=(2, 16))).long()
    with torch.no_grad():
        logits = model(input_ids=ids).logits.float()
    reference["input_ids"] = ids
    reference["logits"] = logits
    save_file(reference, str(out / f"{name}-reference.safetensors"))

    meta = {"arch": spec["arch"], "types": types, "vocab": vocab, "tied": spec["tied"]}
    if name == "tiny":
        tok = AutoTokenizer.from_pretrained(str(out), gguf_file=path.name)
        meta["tokenizer"] = tokenizer_cases(tok, TEXTS)
    (out / f"{name}.json").write_text(json.dumps(meta, indent=1, ensure_ascii=False))


# ---------------------------------------------------------------------------------------
# the real SmolLM2 file


def make_real(out: Path, real: Path):
    from transformers import AutoModelForCausalLM, AutoTokenizer

    tok = AutoTokenizer.from_pretrained(str(real.parent), gguf_file=real.name)
    model = AutoModelForCausalLM.from_pretrained(
        str(real.parent), gguf_file=real.name, dtype=torch.float32, attn_implementation="eager"
    ).eval()
    state = model.state_dict()
    last = model.config.num_hidden_layers - 1
    names = ["model.norm.weight", "model.layers.0.input_layernorm.weight"]
    for layer in (0, last):
        names += [f"model.layers.{layer}.self_attn.{p}_proj.weight" for p in "qkvo"]
    names += [f"model.layers.{last}.mlp.down_proj.weight"]
    reference = {f"weight.{n}": state[n].float().contiguous() for n in names}
    reference["rows.model.embed_tokens.weight"] = state["model.embed_tokens.weight"][:EMBED_ROWS].float().contiguous()

    messages = [{"role": "user", "content": "What is the capital of France?"}]
    chat_text = tok.apply_chat_template(messages, add_generation_prompt=True, tokenize=False)
    chat_ids = tok(chat_text)["input_ids"]
    prompts = [
        tok("The capital of France is")["input_ids"],
        tok("def fibonacci(n):\n    ")["input_ids"],
        chat_ids,
    ]
    with torch.no_grad():
        for i, p in enumerate(prompts):
            ids = torch.tensor([p])
            reference[f"ids.{i}"] = ids
            reference[f"logits.{i}"] = model(input_ids=ids).logits.float().contiguous()
        greedy = model.generate(
            torch.tensor([chat_ids]), max_new_tokens=24, do_sample=False, eos_token_id=tok.eos_token_id
        )[0, len(chat_ids) :]
    reference["greedy"] = greedy.contiguous()
    save_file(reference, str(out / "smollm2-reference.safetensors"))
    meta = {
        "embed_rows": EMBED_ROWS,
        "chat_text": chat_text,
        "chat_ids": chat_ids,
        "greedy_text": tok.decode(greedy, skip_special_tokens=True),
        "tokenizer": tokenizer_cases(tok, TEXTS + [chat_text]),
    }
    (out / "smollm2.json").write_text(json.dumps(meta, indent=1, ensure_ascii=False))


def stamp(real: Path | None) -> str:
    import transformers

    h = hashlib.sha256(Path(__file__).read_bytes())
    h.update(f"gguf {gguf.__file__} transformers {transformers.__version__} torch {torch.__version__}".encode())
    if real is not None:
        st = real.stat()
        h.update(f"{real.resolve()} {st.st_size} {st.st_mtime_ns}".encode())
    return h.hexdigest()


def main(argv):
    if len(argv) < 1:
        sys.exit(__doc__)
    out = Path(argv[0])
    real = REAL
    if "--real" in argv:
        real = Path(argv[argv.index("--real") + 1])
    out.mkdir(parents=True, exist_ok=True)
    torch.manual_seed(0)

    tiny_stamp = out / "tiny.stamp"
    want = stamp(None)
    if not (tiny_stamp.exists() and tiny_stamp.read_text() == want and all((out / f"{n}.json").exists() for n in TINY)):
        for seed, (name, spec) in enumerate(TINY.items()):
            make_tiny(out, name, spec, 1234 + seed)
        tiny_stamp.write_text(want)
        print(f"gguf fixtures: wrote {', '.join(TINY)} GGUF files and their references to {out}")
    else:
        print(f"gguf fixtures: the tiny GGUF files in {out} are up to date")

    if not real.exists():
        print(f"gguf fixtures: {real} is absent, no SmolLM2 references")
        return
    real_stamp = out / "smollm2.stamp"
    want = stamp(real)
    if real_stamp.exists() and real_stamp.read_text() == want and (out / "smollm2.json").exists():
        print("gguf fixtures: SmolLM2 references are up to date")
        return
    make_real(out, real)
    real_stamp.write_text(want)
    print(f"gguf fixtures: wrote SmolLM2 references from {real}")


if __name__ == "__main__":
    main(sys.argv[1:])
