"""The transformers peer of `drmas bench generate`: same folder, same prompts (chat
template with generation prompt), same fixed work (exactly N new tokens per prompt, no
early stop), float32, the same thread count. Prints one JSON line.

    python bench_generate.py MODEL_DIR PROMPTS.jsonl MAX_NEW_TOKENS THREADS {sample|greedy} [DEVICE] [DTYPE]
"""
import json
import resource
import sys
import time

import torch
from transformers import AutoModelForCausalLM, AutoTokenizer


DTYPES = {"f32": torch.float32, "bf16": torch.bfloat16, "f16": torch.float16}


def main(model_dir, prompts_file, max_new, threads, mode, device="cpu", dtype="f32"):
    torch.set_num_threads(int(threads))
    max_new = int(max_new)
    tok = AutoTokenizer.from_pretrained(model_dir)
    tok.padding_side = "left"
    model = AutoModelForCausalLM.from_pretrained(model_dir, dtype=DTYPES[dtype]).to(device).eval()
    prompts = [json.loads(l)["prompt"] for l in open(prompts_file)]
    texts = [tok.apply_chat_template([{"role": "user", "content": p}], tokenize=False, add_generation_prompt=True) for p in prompts]
    batch = tok(texts, return_tensors="pt", padding=True, add_special_tokens=False).to(device)
    sample = mode == "sample"
    extra = dict(do_sample=True, temperature=1.0, top_k=0, top_p=1.0) if sample else dict(do_sample=False)
    torch.manual_seed(0)
    start = time.perf_counter()
    with torch.no_grad():
        out = model.generate(**batch, max_new_tokens=max_new, min_new_tokens=max_new,
                             pad_token_id=tok.pad_token_id or 0, **extra)
    if device.startswith("cuda"):
        torch.cuda.synchronize()
    seconds = time.perf_counter() - start
    new_tokens = (out.shape[1] - batch["input_ids"].shape[1]) * out.shape[0]
    print(json.dumps({
        "impl": "transformers", "mode": mode, "device": device, "dtype": dtype,
        "prompts": len(prompts), "new_tokens": new_tokens,
        "seconds": round(seconds, 3), "tokens_per_s": round(new_tokens / seconds, 1),
        "peak_rss_mib": round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024),
    }))


if __name__ == "__main__":
    main(*sys.argv[1:8])
