"""transformers' chat-template renderings, the reference for drmas' minijinja renderer.

    python chat_reference.py OUT.json

Covers the Qwen3 tokenizer (models/tokenizers/qwen3) and SmolLM2 as transformers reads
it from the GGUF itself (models/gguf), with and without system messages.
"""
import json
import sys
from pathlib import Path

from transformers import AutoTokenizer

CONVERSATIONS = [
    [{"role": "user", "content": "What is the capital of France?"}],
    [
        {"role": "system", "content": "You are a careful calculator. Reply with only the result in the form \\boxed{N}."},
        {"role": "user", "content": "What is 3 + 4?"},
    ],
    [
        {"role": "system", "content": "You are a careful calculator."},
        {"role": "user", "content": "What is 3 + 4?"},
        {"role": "assistant", "content": "\\boxed{7}"},
        {"role": "user", "content": "What is 2 × 5? Put the answer in \\boxed{}."},
    ],
    [
        {"role": "user", "content": "Is 91 prime?"},
        {"role": "assistant", "content": "<think>\n91 = 7 × 13\n</think>\n\nNo."},
        {"role": "user", "content": "  And 97?\n"},
    ],
]


def render(tok):
    out = []
    for messages in CONVERSATIONS:
        text = tok.apply_chat_template(messages, tokenize=False, add_generation_prompt=True)
        ids = tok.encode(text, add_special_tokens=False)
        out.append({"messages": messages, "text": text, "ids": ids})
    return out


def main(path):
    root = Path(__file__).resolve().parents[2] / "models"
    reference = {
        "qwen3": render(AutoTokenizer.from_pretrained(root / "tokenizers/qwen3")),
        "smollm2": render(AutoTokenizer.from_pretrained(root / "gguf", gguf_file="SmolLM2-135M-Instruct.Q4_1.gguf")),
    }
    Path(path).write_text(json.dumps(reference, ensure_ascii=False, indent=1))


if __name__ == "__main__":
    main(sys.argv[1])
