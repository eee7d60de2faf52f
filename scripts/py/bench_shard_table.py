"""The table of scripts/bench-shard.sh from its run folder: per `shard` mode, what each
rank held (from the workers' info logs and peak_rss.py's files), the bytes of each
collective per step, and the step's seconds against the first mode's.

    python bench_shard_table.py OUT MODE [MODE...]
"""

import json
import os
import re
import statistics
import sys

FIELD = re.compile(r"\b(\w+)=(\S+)")
GIB = float(1 << 20)  # printed in MiB: the test models are small


def logged(path, message):
    """Each line of `path` holding `message`, as its key=value fields."""
    rows = []
    for line in open(path, errors="replace"):
        if message in line:
            rows.append({k: v.strip('"') for k, v in FIELD.findall(line)})
    return rows


def mib(b):
    return f"{b / GIB:9.1f}"


def main():
    out, modes = sys.argv[1], sys.argv[2:]
    ranks = sorted(
        int(n[5:-4]) for n in os.listdir(os.path.join(out, modes[0])) if n.endswith(".log")
    )
    times = {}
    print("per rank, the solver's model (MiB)        optimizer  param grads  weights: shard  most whole  whole   peak RSS")
    for mode in modes:
        metrics = [json.loads(l) for l in open(os.path.join(out, mode, "run", "metrics.jsonl"))]
        after_warmup = metrics[1:] or metrics
        times[mode] = {
            k: statistics.median(m["time"][k] for m in after_warmup) for k in ("total", "update")
        }
        steps = len(metrics)
        traffic = {}
        for rank in ranks:
            log = os.path.join(out, mode, f"rank-{rank}.log")
            upd = [r for r in logged(log, "the update's collectives") if r.get("model") == "solver-lm"]
            last = upd[-1]
            held = [r for r in logged(log, "weights sharded during the update") if r.get("model") == "solver-lm"]
            rss = int(open(os.path.join(out, mode, f"rank-{rank}.rss")).read())
            if held:
                w = held[-1]
                weights = f"{mib(int(w['shard_bytes']))}   {mib(int(w['most_gathered_bytes']))} {mib(int(w['whole_bytes']))}"
            else:
                weights = f"{'(whole)':>9}   {'':>9} {'':>9}"
            print(
                f"{mode:>9} rank {rank}                       {mib(int(last['optimizer_bytes']))}  "
                f"{mib(int(last['held_grad_bytes']))}       {weights}  {mib(rss)}"
            )
            if rank == 0:
                for r in logged(log, "the update's collectives"):
                    for op in ("all_reduce", "reduce_scatter", "all_gather"):
                        c, b = traffic.get(op, (0, 0))
                        traffic[op] = (c + int(r[f"{op}_calls"]), b + int(r[f"{op}_bytes"]))
        ops = ", ".join(
            f"{op} {c / steps:.0f} calls {b / steps / GIB:.1f} MiB" for op, (c, b) in traffic.items()
        )
        print(f"{mode:>9} per step, both models: {ops}")
    base = times[modes[0]]
    print(f"\n{'seconds per step (median)':28}" + "".join(f"{m:>12}" for m in modes) + "   ratios to " + modes[0])
    for k in ("total", "update"):
        row = "".join(f"{times[m][k]:12.2f}" for m in modes)
        ratios = " ".join(f"{times[m][k] / max(base[k], 1e-9):.2f}" for m in modes[1:])
        print(f"{k:28}{row}   {ratios}")


if __name__ == "__main__":
    main()
