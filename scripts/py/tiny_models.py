"""Tiny random HF checkpoints and transformers' reference outputs for the parity tests.

    python tiny_models.py make OUT_DIR      # writes OUT_DIR/<name>/ and OUT_DIR/<name>/reference.safetensors
    python tiny_models.py logits MODEL_DIR INPUT OUTPUT
        # loads MODEL_DIR with transformers, runs the ids/mask in INPUT, writes logits to OUTPUT

Reference files hold: input_ids [B,T] and attention_mask [B,T] (left padded), logits
[B,T,V] (float32, eager attention, position ids from the mask), greedy [B,N] (the N
tokens transformers' generate picks greedily after the prompt).
"""
import sys
from pathlib import Path

import torch
from safetensors.torch import load_file, save_file
from transformers import AutoModelForCausalLM, LlamaConfig, Qwen2Config, Qwen3Config

COMMON = dict(
    vocab_size=128,
    hidden_size=64,
    intermediate_size=96,
    num_hidden_layers=2,
    num_attention_heads=4,
    num_key_value_heads=2,
    max_position_embeddings=256,
    rms_norm_eps=1e-5,
    initializer_range=0.2,  # spread logits so greedy picks have no near-ties
    bos_token_id=1,
    eos_token_id=2,
    pad_token_id=0,
)

MODELS = {
    "llama": lambda: LlamaConfig(**COMMON, rope_theta=10000.0, tie_word_embeddings=False),
    "llama-tied": lambda: LlamaConfig(**COMMON, rope_theta=500000.0, tie_word_embeddings=True),
    "qwen2": lambda: Qwen2Config(**COMMON, rope_theta=1000000.0, tie_word_embeddings=True),
    "qwen3": lambda: Qwen3Config(**COMMON, head_dim=32, rope_theta=1000000.0, tie_word_embeddings=True),
    "qwen3-untied": lambda: Qwen3Config(**COMMON, head_dim=24, rope_theta=10000.0, tie_word_embeddings=False),
}

GREEDY_TOKENS = 12


def batch():
    rows = [[1, 17, 33, 5, 99, 42, 7, 64], [1, 120, 3, 45], [1, 8, 9, 10, 11, 12]]
    width = max(len(r) for r in rows)
    ids = torch.tensor([[0] * (width - len(r)) + r for r in rows])
    mask = torch.tensor([[0] * (width - len(r)) + [1] * len(r) for r in rows])
    return ids, mask


def positions(mask):
    pos = mask.long().cumsum(-1) - 1
    return pos.masked_fill(mask == 0, 1)


def forward_logits(model, ids, mask):
    with torch.no_grad():
        return model(input_ids=ids, attention_mask=mask, position_ids=positions(mask)).logits.float()


def make(out):
    torch.manual_seed(0)
    for name, config in MODELS.items():
        cfg = config()
        cfg._attn_implementation = "eager"
        model = AutoModelForCausalLM.from_config(cfg, dtype=torch.float32).eval()
        with torch.no_grad():  # RMSNorm weights start at 1: perturb them so they matter
            for n, p in model.named_parameters():
                if "norm" in n:
                    p.add_(torch.randn_like(p) * 0.1)
        d = Path(out) / name
        model.save_pretrained(d)
        ids, mask = batch()
        logits = forward_logits(model, ids, mask)
        # No EOS: exactly GREEDY_TOKENS argmax picks, as drmas makes without stop tokens.
        model.generation_config.eos_token_id = None
        with torch.no_grad():
            gen = model.generate(
                input_ids=ids,
                attention_mask=mask,
                do_sample=False,
                max_new_tokens=GREEDY_TOKENS,
                pad_token_id=0,
            )
        greedy = gen[:, ids.shape[1]:].contiguous()
        save_file(
            {"input_ids": ids, "attention_mask": mask, "logits": logits.contiguous(), "greedy": greedy},
            d / "reference.safetensors",
        )
        print(f"{name}: {sum(p.numel() for p in model.parameters())} parameters -> {d}")


CHATML = (
    "{% for message in messages %}{{ '<|im_start|>' + message['role'] + '\\n' + message['content'] + '<|im_end|>\\n' }}"
    "{% endfor %}{% if add_generation_prompt %}{{ '<|im_start|>assistant\\n' }}{% endif %}"
)


def make_chat(out):
    """A tiny Qwen3 with a byte-level tokenizer (256 byte tokens + ChatML specials), so
    whole episodes can run end to end on a random model in seconds."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers
    from transformers import PreTrainedTokenizerFast

    alphabet = pre_tokenizers.ByteLevel.alphabet()
    vocab = {ch: i for i, ch in enumerate(sorted(alphabet))}
    specials = ["<|endoftext|>", "<|im_start|>", "<|im_end|>"]
    for sp in specials:
        vocab[sp] = len(vocab)
    tok = Tokenizer(models.BPE(vocab=vocab, merges=[]))
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=True)
    tok.decoder = decoders.ByteLevel()
    tok.add_special_tokens(specials)
    fast = PreTrainedTokenizerFast(tokenizer_object=tok, eos_token="<|im_end|>", pad_token="<|endoftext|>")
    fast.chat_template = CHATML
    torch.manual_seed(1)
    # One token per byte: the math agents' prompts (a verifier's holds the question and a
    # solution) run past 256 positions, and positions past the context are an error.
    cfg = Qwen3Config(**{**COMMON, "vocab_size": len(vocab), "bos_token_id": None,
                         "eos_token_id": vocab["<|im_end|>"], "pad_token_id": vocab["<|endoftext|>"],
                         "max_position_embeddings": 4096},
                      head_dim=16, tie_word_embeddings=True)
    model = AutoModelForCausalLM.from_config(cfg, dtype=torch.float32).eval()
    d = Path(out) / "tiny-chat"
    model.save_pretrained(d)
    fast.save_pretrained(d)
    print(f"tiny-chat: vocab {len(vocab)} -> {d}")


def logits(model_dir, input_file, output_file):
    model = AutoModelForCausalLM.from_pretrained(model_dir, dtype=torch.float32, attn_implementation="eager").eval()
    data = load_file(input_file)
    save_file({"logits": forward_logits(model, data["input_ids"], data["attention_mask"]).contiguous()}, output_file)


if __name__ == "__main__":
    cmd = sys.argv[1]
    if cmd == "make":
        make(sys.argv[2])
        make_chat(sys.argv[2])
    elif cmd == "logits":
        logits(*sys.argv[2:5])
    else:
        sys.exit(f"unknown command {cmd}")
