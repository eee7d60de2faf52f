"""HF PEFT as the LoRA reference for drmas' parity tests (CPU, float32, offline).

    python peft_reference.py make-adapter MODEL_DIR OUT_DIR --rank R --alpha A --targets q_proj,v_proj
        [--dropout 0.0] [--seed 0]
        # a PEFT LoRA adapter (adapter_config.json + adapter_model.safetensors) for MODEL_DIR,
        # every lora_A/lora_B set to seeded N(0, 1) * 0.05 (B non-zero, so logits change)
    python peft_reference.py logits MODEL_DIR ADAPTER_DIR INPUT OUT
        # base + adapter (PeftModel, unmerged) on the ids/mask in INPUT, logits to OUT
    python peft_reference.py merged-logits MODEL_DIR ADAPTER_DIR INPUT OUT [--save-merged DIR]
        # the same after merge_and_unload(); DIR gets the merged full model (safetensors)

INPUT and OUT are as for `drmas model logits` and tiny_models.py: INPUT holds input_ids
and attention_mask [B,T] (int64, left padded); OUT holds logits [B,T,V] (float32), with
eager attention and position ids from the mask.
"""
import argparse
import json
import os
import sys

# Set before transformers/peft import: a path that is not a local checkpoint must fail,
# not reach the Hub (peft's save also asks the Hub about base_model_name_or_path).
os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_VERBOSITY", "error")

import warnings  # noqa: E402

import torch  # noqa: E402
from safetensors import safe_open  # noqa: E402
from safetensors.torch import load_file, save_file  # noqa: E402
from transformers import AutoModelForCausalLM  # noqa: E402
from transformers.utils import logging as hf_logging  # noqa: E402

from peft import LoraConfig, PeftModel, get_peft_model  # noqa: E402


def number(text):
    # LoraConfig types lora_alpha as int: keep 16 an int (written 16, not 16.0) and allow 0.5.
    value = float(text)
    return int(value) if value.is_integer() else value


def load_base(model_dir):
    return AutoModelForCausalLM.from_pretrained(model_dir, dtype=torch.float32, attn_implementation="eager").eval()


def positions(mask):
    # As tiny_models.py and drmas: 0.. over the real tokens, 1 on the left padding.
    pos = mask.long().cumsum(-1) - 1
    return pos.masked_fill(mask == 0, 1)


def forward_logits(model, input_file):
    data = load_file(input_file)
    ids, mask = data["input_ids"].long(), data["attention_mask"].long()
    with torch.no_grad():
        return model(input_ids=ids, attention_mask=mask, position_ids=positions(mask)).logits.float().contiguous()


def make_adapter(args):
    torch.manual_seed(args.seed)
    base = load_base(args.model_dir)
    config = LoraConfig(
        r=args.rank,
        lora_alpha=args.alpha,
        target_modules=[t for t in args.targets.split(",") if t],
        lora_dropout=args.dropout,
        bias="none",
        task_type="CAUSAL_LM",
    )
    model = get_peft_model(base, config)
    gen = torch.Generator().manual_seed(args.seed)
    n = 0
    with torch.no_grad():
        # named_parameters is in module order, so the draws are the same on every run.
        for name, p in model.named_parameters():
            if ".lora_A." in name or ".lora_B." in name:
                p.copy_(torch.randn(p.shape, generator=gen, dtype=torch.float32) * 0.05)
                n += 1
    if n == 0:
        sys.exit(f"no LoRA weights: no module of {args.model_dir} matches --targets {args.targets}")
    model.save_pretrained(args.out_dir, safe_serialization=True)
    # peft keeps target_modules as a set, so the saved list's order follows the string hash
    # (PYTHONHASHSEED): sort it so the same arguments give the same file. Written as peft does.
    config_path = os.path.join(args.out_dir, "adapter_config.json")
    with open(config_path) as f:
        saved = json.load(f)
    if isinstance(saved.get("target_modules"), list):
        saved["target_modules"] = sorted(saved["target_modules"])
    with open(config_path, "w") as f:
        f.write(json.dumps(saved, indent=2, sort_keys=True))
    path = os.path.join(args.out_dir, "adapter_model.safetensors")
    with safe_open(path, "pt") as f:
        for key in f.keys():
            print(f"{key} {list(f.get_slice(key).get_shape())}", file=sys.stderr)


def load_adapted(args):
    return PeftModel.from_pretrained(load_base(args.model_dir), args.adapter_dir).eval()


def logits(args):
    save_file({"logits": forward_logits(load_adapted(args), args.input)}, args.out)


def merged_logits(args):
    model = load_adapted(args).merge_and_unload().eval()
    save_file({"logits": forward_logits(model, args.input)}, args.out)
    if args.save_merged:
        model.save_pretrained(args.save_merged, safe_serialization=True)


def main():
    torch.use_deterministic_algorithms(True)
    # stderr carries the adapter's tensor names: keep transformers' progress bars and
    # deprecation notices (peft 0.21 calls is_gradient_checkpointing) out of it.
    hf_logging.disable_progress_bar()
    warnings.filterwarnings("ignore", category=FutureWarning)
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    sub = parser.add_subparsers(dest="command", required=True)
    p = sub.add_parser("make-adapter", help="a seeded random LoRA adapter for MODEL_DIR")
    p.add_argument("model_dir")
    p.add_argument("out_dir")
    p.add_argument("--rank", type=int, required=True)
    p.add_argument("--alpha", type=number, required=True)
    p.add_argument("--targets", required=True, help="comma-separated module names, e.g. q_proj,v_proj")
    p.add_argument("--dropout", type=float, default=0.0)
    p.add_argument("--seed", type=int, default=0)
    p.set_defaults(run=make_adapter)
    for name, run, help in (
        ("logits", logits, "logits of base + adapter (unmerged)"),
        ("merged-logits", merged_logits, "logits after merge_and_unload()"),
    ):
        p = sub.add_parser(name, help=help)
        p.add_argument("model_dir")
        p.add_argument("adapter_dir")
        p.add_argument("input", help="safetensors with input_ids and attention_mask [B,T] (int64)")
        p.add_argument("out", help="where to write logits [B,T,V] (float32 safetensors)")
        if name == "merged-logits":
            p.add_argument("--save-merged", metavar="DIR", help="also save the merged model here")
        p.set_defaults(run=run)
    args = parser.parse_args()
    args.run(args)


if __name__ == "__main__":
    main()
