"""Markdown table of `drmas bench step --json` reports: one row per report (and per
folder when given several), the median step split and the ratios to the bounds.

Usage: python3 scripts/py/bench_step_table.py DIR [DIR...]   (each DIR holds CONFIG.json)
"""

import json
import sys
from pathlib import Path


def row(label, report):
    m = report["median"]
    models = report["models"]
    per_model = ", ".join(
        f"{mid} {v['update_seconds']:.1f} s ({v['update_gflops']:.0f} GFLOP/s)"
        for mid, v in models.items()
    )
    gemm = max(report["gemm_gflops"])
    return (
        f"| {label} | {m['total']:.1f} s | {m['rollout']:.1f} s | {m['update']:.1f} s "
        f"| {m['tokens_generated']:.0f} | {m['rollout_bound']:.1f} s ({m['rollout_ratio']:.1f}×) "
        f"| {m['update_bound']:.1f} s ({m['update_ratio']:.1f}×) | {m['step_ratio']:.1f}× "
        f"| {gemm:.0f} | {report['last_checkpoint_seconds']:.1f} s | {per_model} |"
    )


def main(dirs):
    print(
        "| config | step | rollout | update | tokens generated | rollout bound (ratio) "
        "| update bound (ratio) | step / bound | GEMM GFLOP/s | checkpoint | update per model |"
    )
    print("|---|---|---|---|---|---|---|---|---|---|---|")
    for d in dirs:
        for path in sorted(Path(d).glob("*.json")):
            report = json.loads(path.read_text())
            label = path.stem if len(dirs) == 1 else f"{path.stem} ({Path(d).name})"
            print(row(label, report))


if __name__ == "__main__":
    if len(sys.argv) < 2:
        sys.exit(__doc__)
    main(sys.argv[1:])
