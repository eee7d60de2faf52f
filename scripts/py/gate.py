#!/usr/bin/env python3
"""The gate before training, over prompt variants of the math team (docs/math.md).

Each variant replaces the verifier's [agents.config] table (and its token budget, and
the solver's retry template) of a base experiment; every variant's untrained team runs
on the first --limit train tasks, --k episodes each, with the agents' own training
sampling (`drmas eval --train --agent-sampling`). The table gives per variant the
verifier's invalid rate, its approve rate, P(approve | correct), P(approve | wrong),
the solver's first-attempt and the team's success. Prompts are chosen on train tasks
only; the val sets are never read here.

    python3 scripts/py/gate.py [--base configs/math-drmas.toml] [--limit 64] [--k 4]
        [--variants a,b,...] [--drmas target/release/drmas] [--out runs/gate]
"""

import argparse
import json
import os
import re
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


# The worked verdicts, in the solver's exact output form (`\boxed{N}`).
APPROVE_1 = {"question": "What is 3 + 4?", "solution": "\\boxed{7}"}
REJECT_1 = {"question": "What is 5 + 2?", "solution": "\\boxed{8}"}
APPROVE_2 = {"question": "What is 6 + 2?", "solution": "\\boxed{8}"}
REJECT_2 = {"question": "What is 4 + 5?", "solution": "\\boxed{8}"}

SYSTEM_CHECK = ("You check answers to arithmetic problems. Work out the result yourself, "
                "compare it with the proposed answer, and end your reply with "
                "<verify>approve</verify> if the proposed answer is right or "
                "<verify>reject</verify> if it is wrong.")
USER_SHORT = "Problem: {question}\nProposed answer: {solution}"
# The model rejects nearly everything under SYSTEM_CHECK, whatever the examples' order:
# a verifier that may reject only what is clearly wrong.
SYSTEM_LENIENT = ("You check answers to arithmetic problems. Reply <verify>approve</verify> "
                  "if the proposed answer is right, and <verify>reject</verify> only if you "
                  "are sure it is wrong.")


def worked(example, result, verdict):
    """A worked verdict: the computation, then the tag."""
    a, op, b = re.match(r"What is (\d+) (.) (\d+)\?", example["question"]).groups()
    proposed = re.search(r"\\boxed\{(.*)\}", example["solution"]).group(1)
    if verdict == "approve":
        reply = f"{a} {op} {b} = {result}. The answer {proposed} is right. <verify>approve</verify>"
    else:
        reply = f"{a} {op} {b} = {result}, not {proposed}. <verify>reject</verify>"
    return dict(example, reply=reply)


def bare(example, verdict):
    return dict(example, reply=f"<verify>{verdict}</verify>")


def variant(system, examples, max_new_tokens, **sampling):
    """A verifier prompt under the check system prompt `system` (or the plugin's own
    when None), with its token budget and any sampling change (`temperature`, `top_p`)."""
    config = {} if system is None else {"system_prompt": system, "user_template": USER_SHORT,
                                        "examples": examples}
    return {"verifier": config, "max_new_tokens": max_new_tokens, "sampling": sampling}


A1, R1 = bare(APPROVE_1, "approve"), bare(REJECT_1, "reject")
A2, R2 = bare(APPROVE_2, "approve"), bare(REJECT_2, "reject")
WA1, WR1 = worked(APPROVE_1, 7, "approve"), worked(REJECT_1, 7, "reject")
WA2, WR2 = worked(APPROVE_2, 8, "approve"), worked(REJECT_2, 9, "reject")

VARIANTS = {
    # The verifier plugin's own defaults, no examples (the config before this gate).
    "defaults": variant(None, [], 16),
    # Bare verdicts (the tag alone) and worked ones (the computation, then the tag), at
    # T 1.0, reject last unless named otherwise.
    "bare-2": variant(SYSTEM_CHECK, [A1, R1], 16),
    "worked-2": variant(SYSTEM_CHECK, [WA1, WR1], 32),
    "worked-2-approve-last": variant(SYSTEM_CHECK, [WR1, WA1], 32),
    "worked-4": variant(SYSTEM_CHECK, [WR1, WA1, WR2, WA2], 32),
    # At T 1.0 a third of the verdicts are words that are neither
    # (`<verify>maintain</verify>`): sampled at T 0.7 or with top-p 0.9.
    "bare-2-t0.7": variant(SYSTEM_CHECK, [A1, R1], 16, temperature=0.7),
    "bare-2-p0.9": variant(SYSTEM_CHECK, [A1, R1], 16, top_p=0.9),
    "bare-2-approve-last-t0.7": variant(SYSTEM_CHECK, [R1, A1], 16, temperature=0.7),
    "bare-3-t0.7": variant(SYSTEM_CHECK, [A1, R1, A2], 16, temperature=0.7),
    "bare-4-t0.7": variant(SYSTEM_CHECK, [A1, R1, A2, R2], 16, temperature=0.7),
    "lenient-3-t0.7": variant(SYSTEM_LENIENT, [A1, R1, A2], 16, temperature=0.7),
    "lenient-2-approve-last-t0.7": variant(SYSTEM_LENIENT, [R1, A1], 16, temperature=0.7),
    "worked-4-t0.7": variant(SYSTEM_CHECK, [WR1, WA1, WR2, WA2], 32, temperature=0.7),
}
# The solver's retry after a reject: a plain resample of the question.
RETRY = "{question}"


def toml_value(v):
    # JSON strings are TOML basic strings (same escapes); inline tables by hand.
    if isinstance(v, str):
        return json.dumps(v, ensure_ascii=False)
    if isinstance(v, list):
        return "[\n" + "".join(f"  {toml_value(x)},\n" for x in v) + "]"
    if isinstance(v, dict):
        return "{ " + ", ".join(f"{k} = {toml_value(x)}" for k, x in v.items()) + " }"
    return str(v)


def sections(text):
    """The file as (header, lines) sections; the first header is None."""
    out, header, lines = [], None, []
    for line in text.splitlines():
        if re.match(r"^\[", line):
            out.append((header, lines))
            header, lines = line, []
        else:
            lines.append(line)
    out.append((header, lines))
    return out


def variant_config(base, name, spec, out_dir):
    secs = sections(base)
    result, owner = [], None
    for header, lines in secs:
        body = "\n".join(lines)
        if header == "[[agents]]":
            m = re.search(r'^name = "(.*)"', body, re.M)
            owner = m.group(1) if m else None
            if owner == "verifier":
                sampling = {"temperature": 1.0, **spec.get("sampling", {}),
                            "max_new_tokens": spec["max_new_tokens"]}
                body = re.sub(r"^sampling = .*$", f"sampling = {toml_value(sampling)}", body, flags=re.M)
        elif header == "[agents.config]" and owner == "verifier":
            body = "\n".join(f"{k} = {toml_value(v)}" for k, v in spec["verifier"].items())
            body += "\n"
        elif header == "[agents.config]" and owner == "solver":
            body = re.sub(r"^retry_template = .*$", "", body, flags=re.M).rstrip("\n")
            body += f"\nretry_template = {toml_value(RETRY)}\n"
        elif header == "[experiment]":
            body = re.sub(r'^name = ".*"', f'name = "gate-{name}"', body, flags=re.M)
            body = re.sub(r"^output_dir = .*$", "", body, flags=re.M)
            body += f'\noutput_dir = {toml_value(os.path.join(out_dir, name))}\n'
        if header is not None:
            result.append(header)
        result.append(body)
    return "\n".join(result) + "\n"


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--base", default="configs/math-drmas.toml")
    ap.add_argument("--limit", type=int, default=64)
    ap.add_argument("--k", type=int, default=4)
    ap.add_argument("--variants", default=",".join(VARIANTS))
    ap.add_argument("--drmas", default="target/release/drmas")
    ap.add_argument("--out", default="runs/gate")
    args = ap.parse_args()
    base = open(args.base).read()
    os.makedirs(args.out, exist_ok=True)
    rows = []
    for name in args.variants.split(","):
        if name not in VARIANTS:
            sys.exit(f"gate: no variant {name!r} (variants: {', '.join(VARIANTS)})")
        cfg = os.path.join(args.out, f"{name}.toml")
        write_whole(cfg, variant_config(base, name, VARIANTS[name], args.out))
        report = os.path.join(args.out, f"{name}.json")
        if not os.path.exists(report):
            print(f"== gate: {name}", flush=True)
            subprocess.run([args.drmas, "eval", cfg, "--train", "--agent-sampling",
                            "--limit", str(args.limit), "--k", str(args.k), "--out", report],
                           check=True)
        r = json.load(open(report))["overall"]
        m, agents = r["metrics"], r["agents"]
        get = lambda key: m.get(key, float("nan"))
        rows.append((name, agents["verifier"]["invalid_rate"], get("approve_rate"),
                     get("approve_given_correct"), get("approve_given_wrong"),
                     agents["solver"]["invalid_rate"], get("first_attempt_correct"),
                     r["avg_at_k"], get("solver_attempts")))
    print(f"\n{args.limit} train tasks × {args.k} episodes, agents' own sampling ({args.base})\n")
    print("| variant | verifier invalid | approve | approve given correct | approve given wrong "
          "| solver invalid | first attempt correct | team success | solver attempts | gate |")
    print("|---|---|---|---|---|---|---|---|---|---|")
    for name, inv, app, ac, aw, sinv, first, succ, att in rows:
        ok = inv <= 0.20 and 0.30 <= app <= 0.85
        print(f"| {name} | {inv:.1%} | {app:.1%} | {ac:.1%} | {aw:.1%} | {sinv:.1%} | {first:.1%} "
              f"| {succ:.1%} | {att:.2f} | {'pass' if ok else 'fail'} |")


if __name__ == "__main__":
    main()
