#!/usr/bin/env bash
# Memory and step time of the math team on this machine, side by side in one run:
# non-sharing full models (configs/math-drmas.toml) against one base + two LoRA adapters
# (configs/math-lora.toml), each in f32 and bf16; then the log-prob drift of bf16 against
# f32 on the same prompts. Usage: scripts/bench-pool.sh [STEPS] (default 2; the last
# step's times are reported, the first includes warm-up).
set -euo pipefail
cd "$(dirname "$0")/.."
steps=${1:-2}
scripts/setup.sh --test-deps >/dev/null
cargo build --release --quiet -p drmas
bin=target/release/drmas
out=$(mktemp -d)
trap 'rm -rf "$out"' EXIT
echo "cpu: $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | xargs); $(nproc) cores; $(grep -o -m1 -w 'avx512_bf16\|avx512f\|avx2' /proc/cpuinfo | sort -u | xargs)"
printf '%-10s %-5s %10s %12s %12s %12s\n' config dtype peak_rss rollout_s update_s step_s
for cfg in math-drmas math-lora; do
  for dt in f32 bf16; do
    exp="$out/$cfg-$dt.toml"
    sed "0,/^name = /s|^name = \".*\"|name = \"bench-$cfg-$dt\"\noutput_dir = \"$out/run-$cfg-$dt\"|; s|^id = \"\\(.*\\)-lm\"|id = \"\\1-lm\"\ndtype = \"$dt\"|; s|^save_every = .*|save_every = 0|; s|^\\[data\\]|[data]|" \
      "configs/$cfg.toml" > "$exp"
    /usr/bin/time -f '%M' -o "$out/rss" "$bin" train "$exp" --steps "$steps" --quiet >/dev/null 2>"$out/err" \
      || { cat "$out/err" >&2; exit 1; }
    rss=$(awk '{printf "%.2f GiB", $1 / 1048576}' "$out/rss")
    tail -n 1 "$out/run-$cfg-$dt/metrics.jsonl" | .venv/bin/python -c "
import json, sys
t = json.load(sys.stdin)['time']
print('%-10s %-5s %10s %12.1f %12.1f %12.1f' % ('$cfg', '$dt', '$rss', t['rollout'], t['update'], t['total']))"
  done
done

echo "== log-prob drift of bf16 against f32 (SmolLM2-135M-Instruct, 8 GSM8K prompts)"
.venv/bin/python - "$out" <<'PY'
import json, sys, torch
from safetensors.torch import save_file
from transformers import AutoTokenizer
out = sys.argv[1]
tok = AutoTokenizer.from_pretrained("models/smollm2-135m-instruct")
rows = [json.loads(l) for l in open("data/gsm8k/test.jsonl")][:8]
enc = tok([r["question"] for r in rows], return_tensors="pt", padding=True, padding_side="left")
save_file({"input_ids": enc["input_ids"].long().contiguous(), "attention_mask": enc["attention_mask"].long().contiguous()}, f"{out}/in.safetensors")
PY
for dt in f32 bf16; do
  "$bin" model logits --model models/smollm2-135m-instruct --input "$out/in.safetensors" \
    --output "$out/logits-$dt.safetensors" --dtype "$dt"
done
.venv/bin/python - "$out" <<'PY'
import sys, torch
from safetensors.torch import load_file
out = sys.argv[1]
mask = load_file(f"{out}/in.safetensors")["attention_mask"].bool()
a = load_file(f"{out}/logits-f32.safetensors")["logits"].log_softmax(-1)
b = load_file(f"{out}/logits-bf16.safetensors")["logits"].log_softmax(-1)
# The log-prob of the f32 model's top token at every real position, both ways.
top = a.argmax(-1, keepdim=True)
d = (a.gather(-1, top) - b.gather(-1, top)).squeeze(-1)[mask].abs()
print(f"|logp_f32 - logp_bf16| of the top token over {int(mask.sum())} positions: mean {d.mean():.4f}, max {d.max():.4f}")
print(f"top-1 agreement: {(a.argmax(-1) == b.argmax(-1))[mask].float().mean():.3f}")
PY
