"""How much of each QA set the passage corpus can answer at all.

For every question of data/{nq,triviaqa}/test.jsonl and data/squad/dev.jsonl: does any
gold alias (meta.answers) occur in any passage of data/wiki/corpus.jsonl, compared
after SQuAD normalization on word boundaries (the rule search/env's answer_recall uses)?
That is the ceiling of answer recall for any searcher on this corpus.

    python3 scripts/py/qa_coverage.py [DATA_DIR]
"""

import json
import re
import string
import sys
import unicodedata

PUNCT = set(string.punctuation)


def normalize(text: str) -> str:
    """SQuAD's normalization, with Unicode punctuation removed too (search/em's rule)."""
    text = text.lower()
    text = "".join(
        c for c in text if c not in PUNCT and not unicodedata.category(c).startswith("P")
    )
    text = re.sub(r"\b(a|an|the)\b", " ", text)
    return " ".join(text.split())


def main() -> None:
    data = sys.argv[1] if len(sys.argv) > 1 else "data"
    passages = []
    with open(f"{data}/wiki/corpus.jsonl", encoding="utf-8") as f:
        for line in f:
            p = json.loads(line)
            passages.append(f" {normalize(p['title'])} {normalize(p['text'])} ")
    corpus = "\n".join(passages)
    print(f"corpus: {len(passages)} passages")
    for name, path in [
        ("nq", f"{data}/nq/test.jsonl"),
        ("triviaqa", f"{data}/triviaqa/test.jsonl"),
        ("squad", f"{data}/squad/dev.jsonl"),
    ]:
        total = covered = 0
        with open(path, encoding="utf-8") as f:
            for line in f:
                row = json.loads(line)
                golds = row.get("meta", {}).get("answers") or [row["answer"]]
                golds = [g for g in (normalize(a) for a in golds) if g]
                total += 1
                covered += any(f" {g} " in corpus for g in golds)
        print(f"{name}: {covered}/{total} questions ({100 * covered / total:.1f}%) have a gold alias in the corpus")


if __name__ == "__main__":
    main()
