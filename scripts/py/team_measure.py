#!/usr/bin/env python3
"""Measurements of the shipped math team (issue notes, docs/math.md): run in the
background, resumable (finished runs are kept, an interrupted one resumes).

1. Determinism: two fresh 3-step runs of the default config; their metrics lines minus
   the timing and memory keys must be equal, and so must their checkpoints' files.
2. Step time: those runs beside 3 steps of the previous default (the solver with no
   attempt limit, the verifier with the plugin's default prompt, max_turns 6,
   max_loops 2), on one machine, one after another.
3. The mechanism: a 30-step run of the default with `shadow_normalizer = "norms/grpo"`:
   per agent mean A² under Dr. MAS and under GRPO, their correlation, the clip-bound
   fraction per model.

    python3 scripts/py/team_measure.py [--drmas target/release/drmas] [--out runs/measure]
        [--steps 30] [--only determinism,steps,shadow]
"""

import argparse
import hashlib
import json
import os
import re
import statistics
import subprocess
import sys

def write_whole(path, text):
    """Writes `path` whole or not at all: a temporary file, synced, renamed over it."""
    tmp = path + ".tmp"
    with open(tmp, "w") as f:
        f.write(text)
        f.flush()
        os.fsync(f.fileno())
    os.replace(tmp, path)


OLD_TEAM = """[[agents]]
name = "solver"
component = "math/solver"
model = "solver-lm"
sampling = { temperature = 1.0, max_new_tokens = 48 }

[agents.config]
system_prompt = "You are a careful calculator. Reply with only the result in the form \\\\boxed{N}."
examples = [{ question = "What is 3 + 4?", answer = "\\\\boxed{7}" }]
verifier = "verifier"
max_attempts = 0

[[agents]]
name = "verifier"
component = "math/verifier"
model = "verifier-lm"
sampling = { temperature = 1.0, max_new_tokens = 16 }

[agents.config]
solver = "solver"

[workflow]
entry = "solver"
max_turns = 6
max_loops = 2
"""


def variant(base, name, out, old_team=False, shadow=None):
    text = base
    text = re.sub(r'^name = ".*"$', f'name = "{name}"', text, count=1, flags=re.M)
    text = text.replace("[experiment]\n", f"[experiment]\noutput_dir = {json.dumps(out)}\n", 1)
    if old_team:
        start = text.index("[[agents]]")
        end = text.index("[environment]")
        # Keep the comment lines right above [environment] out of the cut.
        text = text[:start] + OLD_TEAM + "\n" + text[end:]
    if shadow:
        text = text.replace("[trainer]\n", f"[trainer]\nshadow_normalizer = {json.dumps(shadow)}\n", 1)
    return text


def run(drmas, config_text, path, steps):
    write_whole(path, config_text)
    out = re.search(r'^output_dir = "(.*)"$', config_text, re.M).group(1)
    metrics = os.path.join(out, "metrics.jsonl")
    if os.path.exists(metrics) and sum(1 for _ in open(metrics)) >= steps:
        print(f"== {path}: {steps} steps done", flush=True)
        return out
    print(f"== {path}: training {steps} steps", flush=True)
    subprocess.run([drmas, "train", path, "--steps", str(steps), "--resume", "--quiet"], check=True)
    return out


def lines(out):
    return [json.loads(l) for l in open(os.path.join(out, "metrics.jsonl")) if l.strip()]


def without_timing(line):
    line = json.loads(json.dumps(line))
    for k in ("time", "tokens_per_s"):
        line.pop(k, None)
    for m in line.get("models", {}).values():
        m.pop("update_seconds", None)
        m.pop("update_gflops", None)
        m.pop("update_phases", None)
    for w in line.get("pool", {}).get("workers", {}).values():
        w.pop("device_used_bytes", None)
        w.pop("move_seconds", None)
    return line


def tree_hash(folder):
    out = {}
    for root, _, files in os.walk(folder):
        for f in sorted(files):
            p = os.path.join(root, f)
            if f.endswith(".lock"):
                continue
            out[os.path.relpath(p, folder)] = hashlib.sha256(open(p, "rb").read()).hexdigest()
    return out


def step_times(out):
    ls = lines(out)[1:]  # the first step pays for warm-up
    keys = ("rollout", "advantages", "update", "save", "total")
    return {k: statistics.median(l["time"][k] for l in ls) for k in keys}, ls


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--drmas", default="target/release/drmas")
    ap.add_argument("--base", default="configs/math-drmas.toml")
    ap.add_argument("--out", default="runs/measure")
    ap.add_argument("--steps", type=int, default=30)
    ap.add_argument("--only", default="determinism,steps,shadow")
    args = ap.parse_args()
    only = set(args.only.split(","))
    base = open(args.base).read()
    os.makedirs(args.out, exist_ok=True)
    summary = {}
    cfg = lambda n: os.path.join(args.out, f"{n}.toml")
    if only & {"determinism", "steps"}:
        a = run(args.drmas, variant(base, "det-a", os.path.join(args.out, "det-a")), cfg("det-a"), 3)
        b = run(args.drmas, variant(base, "det-b", os.path.join(args.out, "det-b")), cfg("det-b"), 3)
        la, lb = [without_timing(l) for l in lines(a)], [without_timing(l) for l in lines(b)]
        diff = [i + 1 for i, (x, y) in enumerate(zip(la, lb)) if x != y]
        ha, hb = tree_hash(os.path.join(a, "checkpoints")), tree_hash(os.path.join(b, "checkpoints"))
        differing = sorted(k for k in set(ha) | set(hb) if ha.get(k) != hb.get(k))
        summary["determinism"] = {"steps_compared": len(la), "metrics_lines_differing": diff,
                                  "checkpoint_files": len(ha), "checkpoint_files_differing": differing}
    if "steps" in only:
        old = run(args.drmas, variant(base, "old-default", os.path.join(args.out, "old-default"), old_team=True),
                  cfg("old-default"), 3)
        rows = {}
        for name, out in (("new (S→V→S)", a), ("new, second run", b), ("old (S→V→…)", old)):
            times, ls = step_times(out)
            rows[name] = {"median_seconds_steps_2_3": times,
                          "turns_mean": statistics.mean(l["turns_mean"] for l in ls),
                          "tokens_generated": statistics.mean(l["tokens_generated"] for l in ls),
                          "agents_valid": {n: statistics.mean(l["agents"][n]["valid_ratio"] for l in ls)
                                           for n in ls[0]["agents"]}}
        summary["step_time"] = rows
    if "shadow" in only:
        s = run(args.drmas, variant(base, "shadow-30", os.path.join(args.out, "shadow-30"), shadow="norms/grpo"),
                cfg("shadow-30"), args.steps)
        ls = lines(s)
        agents = {}
        for n in ls[0]["agents"]:
            get = lambda key: [l["agents"][n].get("shadow", {}).get(key) for l in ls]
            run_sq = [v for v in get("adv_sq_mean") if v is not None]
            shadow_sq = [v for v in get("shadow_adv_sq_mean") if v is not None]
            corr = [v for v in get("correlation") if v is not None]
            agents[n] = {"drmas_adv_sq_mean": statistics.mean(run_sq),
                         "grpo_adv_sq_mean": statistics.mean(shadow_sq),
                         "ratio_grpo_over_drmas": statistics.mean(shadow_sq) / statistics.mean(run_sq),
                         "correlation_mean": statistics.mean(corr) if corr else None,
                         "zero_variance_fraction_mean": statistics.mean(l["agents"][n]["zero_variance_fraction"] for l in ls),
                         "grad_norm_median": statistics.median(l["agents"][n]["grad_norm"] for l in ls
                                                               if l["agents"][n].get("grad_norm") is not None)}
        models = {m: {"grad_clip_bound_run": ls[-1]["models"][m]["grad_clip_bound_run"]} for m in ls[-1]["models"]}
        def env_metrics(line):
            # The step's environment metrics; lines of a drmas without the top-level
            # `metrics` have them per source only (one source here).
            if "metrics" in line:
                return line["metrics"]
            sources = list(line.get("sources", {}).values())
            return sources[0].get("metrics", {}) if len(sources) == 1 else {}
        env = {}
        for k in ("approve_rate", "approve_given_correct", "approve_given_wrong", "verdict_invalid",
                  "first_attempt_correct", "last_attempt_correct", "solver_attempts"):
            values = [env_metrics(l)[k] for l in ls if k in env_metrics(l)]
            env[k] = {"first_10": statistics.mean(values[:10]) if values else None,
                      "last_10": statistics.mean(values[-10:]) if values else None,
                      "steps": len(values)}
        summary["shadow"] = {"steps": len(ls), "agents": agents, "models": models,
                             "success_first_10": statistics.mean(l["success_rate"] for l in ls[:10]),
                             "success_last_10": statistics.mean(l["success_rate"] for l in ls[-10:]),
                             "environment_metrics": env,
                             "step_seconds_median": statistics.median(l["time"]["total"] for l in ls)}
    path = os.path.join(args.out, "summary.json")
    write_whole(path, json.dumps(summary, indent=2, ensure_ascii=False))
    print(json.dumps(summary, indent=2, ensure_ascii=False))


if __name__ == "__main__":
    sys.exit(main())
