"""GPU checks that need no network: random checkpoints made here with transformers,
drmas' logits on CUDA (via `drmas model logits`) against transformers' on CUDA.

    python gpu_parity.py make OUT_DIR TOKENIZER_DIR   # tiny-qwen3, tiny-llama, qwen3-0.6b-shape
    python gpu_parity.py compare MODEL_DIR DRMAS_LOGITS INPUT DTYPE
"""
import json
import os
import shutil
import sys
from pathlib import Path

import torch
from safetensors.torch import load_file, save_file
from transformers import AutoModelForCausalLM, LlamaConfig, Qwen3Config

DTYPES = {"f32": torch.float32, "bf16": torch.bfloat16}


def make(out, tokenizer_dir):
    torch.manual_seed(0)
    small = dict(vocab_size=151936, num_hidden_layers=2, hidden_size=128, intermediate_size=256,
                 num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=2048)
    models = {
        "tiny-qwen3": Qwen3Config(**small, head_dim=64, tie_word_embeddings=True),
        "tiny-llama": LlamaConfig(**small, tie_word_embeddings=False),
        # Qwen3-0.6B's shape with random weights: real sizes for throughput.
        "qwen3-0.6b-shape": Qwen3Config(vocab_size=151936, hidden_size=1024, intermediate_size=3072,
                                        num_hidden_layers=28, num_attention_heads=16, num_key_value_heads=8,
                                        head_dim=128, max_position_embeddings=40960, rope_theta=1000000.0,
                                        tie_word_embeddings=True),
    }
    if os.environ.get("GPU_PARITY_SMALL"):
        del models["qwen3-0.6b-shape"]
    for name, cfg in models.items():
        cfg.bos_token_id, cfg.eos_token_id, cfg.pad_token_id = 151643, 151645, 151643
        model = AutoModelForCausalLM.from_config(cfg, dtype=torch.float32)
        d = Path(out) / name
        model.save_pretrained(d)
        for f in ("tokenizer.json", "tokenizer_config.json"):
            shutil.copy(Path(tokenizer_dir) / f, d / f)
    rows = [[151644, 872, 198, 3838, 374, 220, 17, 10, 17, 30, 151645, 198, 151644, 77091, 198],
            [151644, 872, 198, 9707, 151645, 198, 151644, 77091, 198]]
    width = max(map(len, rows))
    ids = torch.tensor([[151643] * (width - len(r)) + r for r in rows])
    mask = torch.tensor([[0] * (width - len(r)) + [1] * len(r) for r in rows])
    save_file({"input_ids": ids, "attention_mask": mask}, Path(out) / "input.safetensors")


def compare(model_dir, drmas_logits, input_file, dtype):
    data = load_file(input_file)
    device = os.environ.get("GPU_PARITY_DEVICE", "cuda")
    ids, mask = data["input_ids"].to(device), data["attention_mask"].to(device)
    model = AutoModelForCausalLM.from_pretrained(model_dir, dtype=DTYPES[dtype]).to(device).eval()
    pos = (mask.long().cumsum(-1) - 1).masked_fill(mask == 0, 1)
    with torch.no_grad():
        theirs = model(input_ids=ids, attention_mask=mask, position_ids=pos).logits.float().cpu()
    ours = load_file(drmas_logits)["logits"]
    valid = data["attention_mask"].bool().unsqueeze(-1).expand_as(ours)
    diff = (ours - theirs).abs()[valid].max().item()
    scale = theirs.abs()[valid].max().item()
    agree = (ours.argmax(-1) == theirs.argmax(-1))[data["attention_mask"].bool()].float().mean().item()
    print(f"{Path(model_dir).name} {dtype}: max |dlogit| {diff:.2e} (max |logit| {scale:.2f}), argmax agreement {agree:.3f}")
    if os.environ.get("GPU_PARITY_JSON"):
        with open(os.environ["GPU_PARITY_JSON"], "a") as f:
            f.write(json.dumps({"model": Path(model_dir).name, "dtype": dtype, "max_abs_dlogit": diff,
                                "max_abs_logit": scale, "argmax_agreement": agree}) + "\n")


if __name__ == "__main__":
    {"make": make, "compare": compare}[sys.argv[1]](*sys.argv[2:])
