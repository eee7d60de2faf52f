"""The TRL peer of `drmas bench train`: one GRPO optimizer step per STEPS with TRL 1.16's
GRPOTrainer on the same work as drmas: the model folder in float32, the prompts of
bench_prompts.py (one user message each, chat template with generation prompt), 4
generations per prompt, exactly 128 completion tokens each, beta=0 (no reference model),
lr 1e-6, AdamW, max_grad_norm 1.0, 2 threads, CPU. Prints one JSON line on stdout;
everything else goes to stderr.

    python bench_grpo_trl.py MODEL_DIR PROMPTS.jsonl [STEPS]

TRL's own timers record nothing with report_to="none", so the step is timed from the
outside: a TrainerCallback takes on_step_begin..on_step_end (the whole optimizer step),
and a wrapper around GRPOTrainer._generate_and_score_completions takes the rollout
(tokenize, sample, decode, reward, advantages; with beta=0 and one generation per
optimizer step it computes no reference or old log-probs). update = total - generation.
A second wrapper, around _generate_single_turn, times model.generate alone ("sampling")
and counts every completion's tokens, which must all be 128.
"""
import os

os.environ.setdefault("TRANSFORMERS_VERBOSITY", "error")
os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("HF_DATASETS_OFFLINE", "1")
os.environ.setdefault("HF_HUB_DISABLE_TELEMETRY", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")

import contextlib
import json
import resource
import statistics
import sys
import tempfile
import time

import torch

THREADS = 2
GENERATIONS = 4
NEW_TOKENS = 128


def reward_len_mod7(completions, **kwargs):
    """Cheap, deterministic, and varied within a group so the advantages are non-zero."""
    out = []
    for c in completions:
        text = c[-1]["content"] if isinstance(c, list) else c
        out.append(float(len(text) % 7))
    return out


def main(model_dir, prompts_file, steps="5"):
    steps = int(steps)
    if steps < 1:
        sys.exit("bench_grpo_trl: STEPS must be >= 1")
    torch.set_num_threads(THREADS)

    import trl
    from datasets import Dataset
    from transformers import AutoModelForCausalLM, AutoTokenizer, TrainerCallback
    from trl import GRPOConfig, GRPOTrainer

    print(f"bench_grpo_trl: torch {torch.__version__}, trl {trl.__version__}", file=sys.stderr)
    prompts = [json.loads(line)["prompt"] for line in open(prompts_file) if line.strip()]
    dataset = Dataset.from_list([{"prompt": [{"role": "user", "content": p}]} for p in prompts])
    completions_per_step = len(prompts) * GENERATIONS

    tok = AutoTokenizer.from_pretrained(model_dir)
    model = AutoModelForCausalLM.from_pretrained(model_dir, dtype=torch.float32)

    out_dir = tempfile.mkdtemp(prefix="bench-grpo-trl-")
    args = GRPOConfig(
        output_dir=out_dir,
        use_cpu=True,
        bf16=False,
        fp16=False,
        learning_rate=1e-6,
        optim="adamw_torch",
        max_grad_norm=1.0,
        beta=0.0,
        num_generations=GENERATIONS,
        # One optimizer step consumes exactly one generation batch of len(prompts) x 4
        # completions: steps_per_generation = gradient_accumulation_steps = 1, so
        # generation_batch_size = per_device_train_batch_size = 16.
        per_device_train_batch_size=completions_per_step,
        gradient_accumulation_steps=1,
        num_iterations=1,
        max_completion_length=NEW_TOKENS,
        generation_kwargs={"min_new_tokens": NEW_TOKENS},
        gradient_checkpointing=False,
        use_vllm=False,
        report_to="none",
        max_steps=steps,
        save_strategy="no",
        logging_strategy="no",
        disable_tqdm=True,
        dataloader_num_workers=0,
        seed=0,
    )
    assert args.generation_batch_size == completions_per_step, args.generation_batch_size
    assert args.steps_per_generation == 1, args.steps_per_generation

    trainer = GRPOTrainer(
        model=model,
        reward_funcs=reward_len_mod7,
        args=args,
        train_dataset=dataset,
        processing_class=tok,
    )
    torch.set_num_threads(THREADS)  # in case anything above reset it

    records = []  # one dict per optimizer step
    cur = {}

    gen_and_score = trainer._generate_and_score_completions
    single_turn = trainer._generate_single_turn

    def timed_generate_and_score(inputs):
        t0 = time.perf_counter()
        output = gen_and_score(inputs)
        cur["generation"] = cur.get("generation", 0.0) + time.perf_counter() - t0
        # The tokens the loss actually sees.
        cur["mask_tokens"] = cur.get("mask_tokens", 0) + int(output["completion_mask"].sum().item())
        return output

    def timed_single_turn(prompt_ids, *a, **kw):
        t0 = time.perf_counter()
        completion_ids, logprobs = single_turn(prompt_ids, *a, **kw)
        cur["sampling"] = cur.get("sampling", 0.0) + time.perf_counter() - t0
        lengths = [len(ids) for ids in completion_ids]
        cur["lengths"] = cur.get("lengths", []) + lengths
        return completion_ids, logprobs

    trainer._generate_and_score_completions = timed_generate_and_score
    trainer._generate_single_turn = timed_single_turn

    class StepTimer(TrainerCallback):
        def on_step_begin(self, args, state, control, **kwargs):
            cur.clear()
            cur["t0"] = time.perf_counter()

        def on_step_end(self, args, state, control, **kwargs):
            total = time.perf_counter() - cur["t0"]
            lengths = cur.get("lengths", [])
            if len(lengths) != completions_per_step or any(n != NEW_TOKENS for n in lengths):
                raise RuntimeError(f"step {state.global_step}: completion lengths {lengths}, "
                                   f"expected {completions_per_step} x {NEW_TOKENS}")
            if cur.get("mask_tokens") != completions_per_step * NEW_TOKENS:
                raise RuntimeError(f"step {state.global_step}: {cur.get('mask_tokens')} completion tokens "
                                   f"in the loss mask, expected {completions_per_step * NEW_TOKENS}")
            rec = {
                "generation": round(cur["generation"], 3),
                "update": round(total - cur["generation"], 3),
                "total": round(total, 3),
                "sampling": round(cur["sampling"], 3),
                "completion_tokens": sum(lengths),
            }
            records.append(rec)
            print(f"bench_grpo_trl: step {state.global_step}: {rec}", file=sys.stderr)

    trainer.add_callback(StepTimer())
    with contextlib.redirect_stdout(sys.stderr):
        trainer.train()

    if len(records) != steps:
        sys.exit(f"bench_grpo_trl: timed {len(records)} optimizer steps, expected {steps}")
    timed = records[1:] or records  # the first step is warm-up

    def med(key):
        return round(statistics.median(r[key] for r in timed), 3)

    print(json.dumps({
        "impl": "trl",
        "steps": [{k: r[k] for k in ("generation", "update", "total", "sampling", "completion_tokens")} for r in records],
        "median_step": med("total"),
        "median_generation": med("generation"),
        "median_update": med("update"),
        "peak_rss_mib": round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024),
        "completion_tokens": records[-1]["completion_tokens"],
        "completions": completions_per_step,
        "threads": torch.get_num_threads(),
        "versions": {"torch": torch.__version__.split("+")[0], "trl": trl.__version__},
    }), flush=True)


if __name__ == "__main__":
    if len(sys.argv) not in (3, 4):
        sys.exit(__doc__)
    main(*sys.argv[1:4])
