"""Reads a run's TensorBoard event files with TensorBoard's own EventAccumulator and
compares them with the run's metrics.jsonl: every number of every line (flattened as
docs/tracking.md says: keys joined by '/', booleans 0/1, array items by index, the
line's `step` as the step) must be a scalar of that tag at that step, equal at f32, and
each tag's steps must be strictly increasing (no step twice). Prints a JSON summary.

    python tensorboard_check.py RUN
"""

import json
import math
import struct
import sys

from tensorboard.backend.event_processing.event_accumulator import EventAccumulator


def flatten(path, value, out):
    if isinstance(value, bool):
        out[path] = float(value)
    elif isinstance(value, (int, float)):
        if math.isfinite(value):
            out[path] = float(value)
    elif isinstance(value, dict):
        for k, v in value.items():
            flatten(f"{path}/{k}" if path else k, v, out)
    elif isinstance(value, list):
        for i, v in enumerate(value):
            flatten(f"{path}/{i}", v, out)


def f32(x):
    return struct.unpack("f", struct.pack("f", x))[0]


def main():
    run = sys.argv[1]
    acc = EventAccumulator(f"{run}/tensorboard", size_guidance={"scalars": 0, "tensors": 0})
    acc.Reload()
    tags = acc.Tags()["scalars"]
    series = {t: [(e.step, e.value) for e in acc.Scalars(t)] for t in tags}
    expected = {}
    for line in open(f"{run}/metrics.jsonl"):
        row = json.loads(line)
        step = row.pop("step")
        flat = {}
        flatten("", row, flat)
        for tag, value in flat.items():
            expected.setdefault(tag, []).append((step, value))
    mismatches = []
    for tag, points in expected.items():
        got = dict(series.get(tag, []))
        for step, value in points:
            if step not in got:
                mismatches.append(f"{tag}@{step}: missing")
            elif got[step] != f32(value):
                mismatches.append(f"{tag}@{step}: {got[step]} != {f32(value)}")
    not_monotone = [
        t for t, pts in series.items() if any(b[0] <= a[0] for a, b in zip(pts, pts[1:]))
    ]
    texts = sorted(acc.Tags().get("tensors", []))
    print(
        json.dumps(
            {
                "tags": len(series),
                "points": sum(len(v) for v in series.values()),
                "expected_points": sum(len(v) for v in expected.values()),
                "steps": sorted({s for pts in series.values() for s, _ in pts}),
                "mismatches": mismatches[:20],
                "not_monotone": not_monotone[:20],
                "text_tags": texts,
            }
        )
    )


if __name__ == "__main__":
    main()
