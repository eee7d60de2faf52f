"""Writes data/train.jsonl and data/val.jsonl: easy Countdown tasks (three numbers from
1 to 9, a target one or two operations away), deterministic for a given seed.

    python make_tasks.py
"""

import json
import random
from pathlib import Path


def tasks(n: int, seed: int, prefix: str) -> list[dict]:
    rng = random.Random(seed)
    rows = []
    for i in range(n):
        a, b, c = (rng.randint(1, 9) for _ in range(3))
        target, solution = rng.choice([(a + b + c, f"{a} + {b} + {c}"),
                                       (a * b + c, f"{a} * {b} + {c}"),
                                       (a * b, f"{a} * {b}"),
                                       (a + b, f"{a} + {b}")])
        numbers = [a, b, c]
        rng.shuffle(numbers)
        rows.append({"id": f"{prefix}-{i:03d}", "source": "countdown",
                     "question": f"Use {', '.join(map(str, numbers))} to reach the target {target}.",
                     "answer": str(target),
                     "meta": {"numbers": numbers, "target": target, "solution": solution}})
    return rows


if __name__ == "__main__":
    here = Path(__file__).parent / "data"
    here.mkdir(exist_ok=True)
    for name, n, seed in [("train", 128, 1), ("val", 32, 2)]:
        with open(here / f"{name}.jsonl", "w") as f:
            for row in tasks(n, seed, name):
                f.write(json.dumps(row) + "\n")
