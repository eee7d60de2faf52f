"""The grader's peer comparison: (gold, prediction) pairs judged by math-verify.

    python grader_pairs.py DATA_DIR OUT.jsonl

Reads the gold answers of DATA_DIR/{math500/test,gsm8k/test,math/train}.jsonl (as
`drmas data prepare` writes them) and rewrites each into predictions that are either
equivalent to it (a fraction written as a decimal, `\\dfrac`, thousands separators, a unit
added, a union reordered, ...) or wrong (a digit off by one, a tuple's entries swapped, a
hedged answer, ...). Every line of OUT.jsonl is one pair:

    {"gold", "pred", "category", "construction": "equivalent" | "wrong", "math_verify": bool}

where `math_verify` is `verify(parse(gold), parse(pred))` of math-verify (pinned in
scripts/setup.sh), both answers wrapped in `\\boxed{}` as a model's completion would have
them. The pairs are the same on every run (seeded, input order). The Rust side is
plugins/math/tests/it/grader_peer.rs; scripts/py/grader_exceptions.json lists the pairs where
math-verify is judged wrong, with the reason.
"""
import json
import random
import re
import sys
from collections import Counter
from fractions import Fraction
from pathlib import Path

from math_verify import LatexExtractionConfig, parse, verify

SEED = 9
# Where the gold answers come from, in DATA_DIR.
SOURCES = {"math500": "math500/test.jsonl", "gsm8k": "gsm8k/test.jsonl", "math": "math/train.jsonl"}
# Most pairs drawn per category (categories with fewer applicable golds keep all).
PER_CATEGORY = 48
INT = re.compile(r"-?\d+")
DECIMAL = re.compile(r"-?\d*\.\d+")
# A thousands separator as MATH writes them: `10,\!080`, `58,500`.
THOUSANDS = re.compile(r"\d,(\\!)? ?\d{3}")
THOUSANDS_NUMBER = re.compile(r"\d{1,3}(,(\\!)? ?\d{3})+")


# math-verify reads a timeout as "not equal"; the slowest pair takes well under a second,
# so a generous limit keeps the verdicts independent of the machine's load.
TIMEOUT_S = 60


def math_verify(gold, pred):
    # As math-verify's README advises: a gold that is LaTeX is parsed as LaTeX only; the
    # prediction with the default configs (LaTeX, then plain expressions).
    gold_parsed = parse(
        f"\\boxed{{{gold}}}", extraction_config=[LatexExtractionConfig()], parsing_timeout=TIMEOUT_S
    )
    pred_parsed = parse(f"\\boxed{{{pred}}}", parsing_timeout=TIMEOUT_S)
    return bool(verify(gold_parsed, pred_parsed, timeout_seconds=TIMEOUT_S))


# ---------------------------------------------------------------- reading answers


def frac_arg(s, i):
    """The argument of a LaTeX command at s[i:] (after optional spaces): `{..}` or one
    character. Returns (text, end) or None."""
    while i < len(s) and s[i] == " ":
        i += 1
    if i >= len(s):
        return None
    if s[i] != "{":
        return s[i], i + 1
    depth = 0
    for j in range(i, len(s)):
        depth += {"{": 1, "}": -1}.get(s[j], 0)
        if depth == 0:
            return s[i + 1 : j], j + 1
    return None


def as_fraction(s):
    """`\\frac{a}{b}`, `\\dfrac ab`, `-\\frac{a}{b}` with integer a, b -> (sign, a, b)."""
    m = re.fullmatch(r"(-?)\\[dt]?frac(.*)", s.strip())
    if not m:
        return None
    num = frac_arg(m[2], 0)
    if not num:
        return None
    den = frac_arg(m[2], num[1])
    if not den or den[1] != len(m[2]) or not num[0].isdigit() or not den[0].isdigit():
        return None
    return m[1], int(num[0]), int(den[0])


def as_mixed(s):
    """`1\\frac{4}{5}`, `137 \\frac{1}{2}` -> (whole, a, b)."""
    m = re.fullmatch(r"(\d+) ?(\\frac.*)", s.strip())
    f = m and as_fraction(m[2])
    return (int(m[1]), f[1], f[2]) if f and not f[0] else None


def terminating(q):
    d = q.denominator
    for p in (2, 5):
        while d % p == 0:
            d //= p
    return d == 1


def decimal_str(q):
    """The exact decimal of a terminating fraction."""
    sign = "-" if q < 0 else ""
    q = abs(q)
    whole, rest = divmod(q.numerator, q.denominator)
    digits = ""
    while rest:
        rest *= 10
        digits += str(rest // q.denominator)
        rest %= q.denominator
    return f"{sign}{whole}" + (f".{digits}" if digits else "")


def latex_frac(q):
    sign = "-" if q < 0 else ""
    return f"{sign}\\frac{{{abs(q.numerator)}}}{{{q.denominator}}}"


def plain_int(s):
    """`10,\\!080`, `58,500`, `1030` -> 10080, 58500, 1030 (None when not an integer)."""
    t = re.sub(r",\\!\s*|,\s*", "", s.strip()) if THOUSANDS_NUMBER.fullmatch(s.strip()) else s.strip()
    return int(t) if INT.fullmatch(t) else None


def question_variable(question):
    """The variable a question asks for (`What is the value of $x$?`), or None."""
    m = re.search(r"(?:value of|solve for|find|what is|compute|determine)\s+\$([a-z])\$", question, re.I)
    return m[1] if m else None


def tuple_entries(s):
    """`(a, b, c)` / `\\left( a, b \\right)` at top level -> [a, b, c], else None."""
    t = s.strip()
    t = re.sub(r"^\\left\(\s*", "(", t)
    t = re.sub(r"\s*\\right\)$", ")", t)
    if not (t.startswith("(") and t.endswith(")")):
        return None
    parts, depth, cur = [], 0, ""
    for ch in t[1:-1]:
        if ch in "({[":
            depth += 1
        elif ch in ")}]":
            depth -= 1
        if ch == "," and depth == 0:
            parts.append(cur.strip())
            cur = ""
        else:
            cur += ch
        if depth < 0:
            return None
    parts.append(cur.strip())
    return parts if len(parts) >= 2 and all(parts) else None


def top_level_split(s, sep):
    parts, depth, cur, i = [], 0, "", 0
    while i < len(s):
        if s.startswith("\\left", i) or s.startswith("\\right", i):
            word = "\\left" if s.startswith("\\left", i) else "\\right"
            cur += word
            i += len(word)
            continue
        ch = s[i]
        if ch in "({[":
            depth += 1
        elif ch in ")}]":
            depth -= 1
        if depth == 0 and s.startswith(sep, i):
            parts.append(cur.strip())
            cur = ""
            i += len(sep)
            continue
        cur += ch
        i += 1
    parts.append(cur.strip())
    return parts


def bare_letters(s):
    """Positions of the letters in s that are not part of a command name, `\\text{..}`
    or an environment's name."""
    spans = []
    for m in re.finditer(r"\\(?:text|mbox|mathrm|begin|end)\{[^}]*\}|\\[a-zA-Z]+|[a-zA-Z]", s):
        if not m[0].startswith("\\"):
            spans.append(m.start())
    return spans


def tighten(s):
    """s without spaces, except those that end a command name (`\\cot x`, `\\frac 34`)."""
    return re.sub(r"(?<![a-zA-Z]) +| +(?=[^a-zA-Z0-9])", "", s)


def is_text_answer(s):
    return bool(re.search(r"\\(text|mbox)\{", s))


# ---------------------------------------------------------------- equivalent rewrites


def eq_fraction_decimal(gold, q):
    f = as_fraction(gold)
    if f:
        value = Fraction(f[1], f[2]) * (-1 if f[0] else 1)
        if terminating(value) and f[2] != 1:
            return [decimal_str(value)]
        return []
    m = as_mixed(gold)
    if m:
        value = m[0] + Fraction(m[1], m[2])
        out = [latex_frac(value)]
        if terminating(value):
            out.append(decimal_str(value))
        return out
    if DECIMAL.fullmatch(gold):
        value = Fraction(gold if not gold.startswith(".") else "0" + gold)
        out = [latex_frac(value)]
        if gold.startswith("."):
            out.append("0" + gold)
        return out
    if INT.fullmatch(gold) and q["source"] == "gsm8k":
        return [f"{gold}.00", f"\\frac{{{2 * int(gold)}}}{{2}}"]
    return []


def eq_frac_notation(gold, q):
    if "frac" not in gold or is_text_answer(gold):
        return []
    out = []
    if "\\dfrac" in gold:
        out.append(gold.replace("\\dfrac", "\\frac"))
    elif "\\frac" in gold:
        out.append(gold.replace("\\frac", "\\dfrac"))
        out.append(gold.replace("\\frac", "\\tfrac"))
    f = as_fraction(gold)
    if f:
        out.append(f"{f[0]}{f[1]}/{f[2]}")
        braced = f"{f[0]}\\frac{{{f[1]}}}{{{f[2]}}}"
        out.append(braced if braced != gold else (f"{f[0]}\\frac{f[1]}{f[2]}" if f[1] < 10 and f[2] < 10 else None))
    return [p for p in out if p and p != gold]


def eq_spacing(gold, q):
    if q["source"] == "gsm8k" or is_text_answer(gold) or len(gold) < 3 or THOUSANDS.search(gold):
        return []
    tight = tighten(gold)
    loose = re.sub(r"\s*([+=,]|(?<=[\w}])-)\s*", r" \1 ", gold)
    loose = re.sub(r" , ", ", ", loose).strip()
    return [p for p in (tight, loose) if p != gold]


def eq_outer_braces(gold, q):
    # Not around a top-level comma: `{1,-2}` reads as a set.
    if is_text_answer(gold) or len(top_level_split(gold, ",")) > 1:
        return []
    return [f"{{{gold}}}"]


def grouped(n, sep):
    s = f"{n:,}"
    return s.replace(",", sep)


def eq_thousands(gold, q):
    n = plain_int(gold)
    if n is None or abs(n) < 1000:
        return []
    if not INT.fullmatch(gold):
        return [str(n), grouped(n, ",")] if grouped(n, ",") != gold else [str(n)]
    return [grouped(n, "{,}"), grouped(n, ","), grouped(n, "\\,")]


def eq_base_subscript(gold, q):
    m = re.fullmatch(r"(\d+)_\{?(\d+)\}?", gold)
    if not m:
        return []
    braced = f"{m[1]}_{{{m[2]}}}"
    if braced != gold:
        return [braced]
    # `141_{13}` must keep its braces: `141_13` is 141 with subscript 1, then a 3.
    return [f"{m[1]}_{m[2]}"] if len(m[2]) == 1 else []


def eq_lhs(gold, q):
    m = re.fullmatch(r"([a-z])\s*(=|\\in)\s*(.+)", gold)
    if m and not re.search(r"[a-z]", re.sub(r"\\[a-z]+", "", m[3])):
        return [m[3]]
    entries = tuple_entries(gold)
    names = re.search(r"\$\s*\(\s*([a-z]),\s*([a-z])\s*\)\s*\$", q["question"])
    if entries and len(entries) == 2 and names:
        a, b = names[1], names[2]
        return [f"({a} = {entries[0]}, {b} = {entries[1]})"]
    var = question_variable(q["question"])
    if var and (INT.fullmatch(gold) or as_fraction(gold) or DECIMAL.fullmatch(gold)):
        return [f"{var} = {gold}", f"{var}={gold}"]
    if var and re.fullmatch(r"[\[(].*[\])]", gold) and "interval" in q["question"]:
        return [f"{var} \\in {gold}"]
    return []


def eq_reordered(gold, q):
    if is_text_answer(gold):
        return []
    if "\\cup" in gold:
        parts = top_level_split(gold, "\\cup")
        return [" \\cup ".join(reversed(parts))] if len(parts) > 1 else []
    m = re.fullmatch(r"\\\{(.*)\\\}", gold)
    if m:
        parts = top_level_split(m[1], ",")
        if "\\pm" in m[1]:
            out = []
            for p in parts:
                if "\\pm" in p:
                    out += [p.replace("\\pm", "-", 1), p.replace("\\pm", "+", 1)]
                else:
                    out.append(p)
            parts = out
        return ["\\{" + ", ".join(reversed(parts)) + "\\}"] if len(parts) > 1 else []
    # Not `70,110`: it reads as seventy thousand one hundred and ten as well.
    if "separated by commas" in q["question"] and "(" not in gold and not THOUSANDS_NUMBER.fullmatch(gold):
        parts = top_level_split(gold, ",")
        if len(parts) > 1:
            return [", ".join(reversed(parts)), "\\{" + ",".join(parts) + "\\}"]
    m = re.fullmatch(r"(.*?)\s*\\pm\s*(.*)", gold)
    if m and "(" not in gold:
        return [f"{m[1]} + {m[2]}, {m[1]} - {m[2]}", f"{m[1]} - {m[2]}, {m[1]} + {m[2]}"]
    return []


def eq_units(gold, q):
    m = re.fullmatch(r"(\\\$)?(.+?)\s*(\\(text|mbox)\{\s*[a-z]+\s*\}(\^2)?)?", gold)
    if q["source"] == "math500":
        if m and (m[1] or m[3]) and (INT.fullmatch(m[2]) or DECIMAL.fullmatch(m[2]) or plain_int(m[2])):
            return [m[2]]
        return []
    unit = re.search(r"How many ([a-z]+s)\b", q["question"])
    if not unit or unit[1] in ("was", "does", "is", "has", "times", "less", "as", "this", "its", "his"):
        if re.search(r"How much (?:money|does|did|will|in dollars)", q["question"]) and "$" in q["question"]:
            return [f"\\${gold}", f"\\$ {gold}", f"{gold}\\text{{ dollars}}"]
        return []
    u = unit[1]
    return [f"{gold}\\text{{ {u}}}", f"{gold} \\text{{{u}}}", f"\\text{{{gold} {u}}}", f"{gold}\\mbox{{ {u}}}"]


UNICODE_FRACTIONS = {
    (1, 2): "½", (1, 3): "⅓", (2, 3): "⅔", (1, 4): "¼", (3, 4): "¾", (1, 5): "⅕",
    (2, 5): "⅖", (3, 5): "⅗", (4, 5): "⅘", (1, 6): "⅙", (5, 6): "⅚", (1, 8): "⅛",
    (3, 8): "⅜", (5, 8): "⅝", (7, 8): "⅞", (1, 7): "⅐", (1, 9): "⅑", (1, 10): "⅒",
}


def eq_unicode(gold, q):
    f = as_fraction(gold)
    if f and (f[1], f[2]) in UNICODE_FRACTIONS:
        return [("−" if f[0] else "") + UNICODE_FRACTIONS[(f[1], f[2])]]
    m = as_mixed(gold)
    if m and (m[1], m[2]) in UNICODE_FRACTIONS:
        return [f"{m[0]}{UNICODE_FRACTIONS[(m[1], m[2])]}"]
    if re.fullmatch(r"-\d+(\.\d+)?", gold):
        return ["−" + gold[1:]]
    if re.fullmatch(r"\d*\s*\\pi", gold):
        return [gold.replace("\\pi", "π").replace(" ", "")]
    m = re.fullmatch(r"(\d*)\s*\\sqrt\{?(\d+)\}?", gold)
    if m:
        return [f"{m[1]}√{m[2]}"]
    return []


def eq_matrix(gold, q):
    if "\\begin{pmatrix}" not in gold:
        return []
    out = [tighten(gold), gold.replace("pmatrix", "bmatrix")]
    fracs = re.sub(r"(-?)(\d+)/(\d+)", r"\1\\frac{\2}{\3}", gold)
    if fracs != gold:
        out.append(fracs)
    return out


def eq_left_right(gold, q):
    if "\\left" in gold:
        return [re.sub(r"\\(left|right)\s*", "", gold).replace("( ", "(").replace(" )", ")")]
    m = re.fullmatch(r"([(\[])(.*)([)\]])", gold)
    # One bracketed group, not a product such as `(a+5)(b+2)`.
    if m and "\\cup" not in gold and tuple_entries(f"({m[2]})") and not re.search(r"[)\]]\s*[(\[]", gold):
        return [f"\\left{m[1]} {m[2]} \\right{m[3]}", f"\\left{m[1]}{m[2]}\\right{m[3]}"]
    if "\\cup" in gold:
        return [re.sub(r"([(\[])([^()\[\]]*)([)\]])", r"\\left\1\2\\right\3", gold)]
    return []


def eq_degrees(gold, q):
    m = re.fullmatch(r"(\d+)\^\\circ", gold)
    if m:
        return [m[1], f"{m[1]}^{{\\circ}}", f"{m[1]}°", f"{m[1]}\\text{{ degrees}}"]
    m = re.fullmatch(r"(.+?)\s*\\text\{\s*degrees\}", gold)
    if m:
        f = as_fraction(m[1])
        braced = f"\\frac{{{f[1]}}}{{{f[2]}}}" if f else m[1]
        return [braced, f"{braced}^\\circ"]
    asks_degrees = r"in degrees|how many degrees|degree measure|measure, in degrees"
    if INT.fullmatch(gold) and re.search(asks_degrees, q["question"], re.I) and q["source"] != "gsm8k":
        return [f"{gold}^\\circ", f"{gold}^{{\\circ}}"]
    return []


# ---------------------------------------------------------------- wrong rewrites


def wrong_off_by_one(gold, q, rng):
    if is_text_answer(gold) or "\\begin" in gold:
        return []
    digits = [m for m in re.finditer(r"\d", gold)]
    if not digits:
        return []
    # Not a digit of a base subscript (`4210_5` in base 6 is another, but odd, answer).
    digits = [d for d in digits if not re.match(r"_\{?\d*$", gold[: d.start()][-3:])]
    if not digits:
        return []
    d = rng.choice(digits)
    v = int(d[0])
    new = str(v + 1) if v < 9 else "8"
    # `10` -> `00` would read as 0 with a leading zero; a leading 0 stays unchanged-looking.
    return [gold[: d.start()] + new + gold[d.end() :]]


def wrong_swapped_tuple(gold, q, rng):
    entries = tuple_entries(gold)
    if entries and len(set(entries)) > 1 and "interval" not in q["question"]:
        swapped = [entries[1], entries[0]] + entries[2:]
        if swapped != entries:
            return [f"({', '.join(swapped)})"]
    m = re.fullmatch(r"\\begin\{pmatrix\}(.*)\\end\{pmatrix\}", gold)
    if m and "&" not in m[1]:
        rows = [r.strip() for r in m[1].split("\\\\")]
        if len(set(rows)) > 1:
            rows[0], rows[1] = rows[1], rows[0]
            return ["\\begin{pmatrix} " + " \\\\ ".join(rows) + " \\end{pmatrix}"]
    return []


def wrong_hedged(gold, q, rng):
    if not (INT.fullmatch(gold) or DECIMAL.fullmatch(gold) or as_fraction(gold)) or gold.lstrip("-") in ("0",):
        return []
    other = str(int(gold) + 2) if INT.fullmatch(gold) else "1"
    neg = gold[1:] if gold.startswith("-") else f"-{gold}"
    forms = [
        f"{gold} \\text{{ or }} {other}",
        f"{other}\\text{{ or }}{gold}",
        f"\\pm {gold.lstrip('-')}",
    ]
    if not as_fraction(gold):
        # The hedge inside the text, as models write it: `5\text{ or 7}`.
        forms += [f"{gold}\\text{{ or {other}}}", f"{gold}\\text{{ and {neg}}}"]
    return [rng.choice(forms)]


def wrong_decimals(gold, q, rng):
    m = re.fullmatch(r"(\\\$)?(-?\d*\.\d+)", gold)
    if m:
        last = int(m[2][-1])
        return [f"{m[1] or ''}{m[2][:-1]}{last + 1 if last < 9 else 8}"]
    if INT.fullmatch(gold) and abs(int(gold)) >= 1000:
        n = int(gold)
        return [rng.choice([f"{n}.01", f"{n - 1}.99", f"{n}.001"])]
    return []


def wrong_case(gold, q, rng):
    # Not choice letters (`C`, `B, C`): their case does not matter.
    if re.fullmatch(r"[A-Z](,\s*[A-Z])*", gold):
        return []
    if is_text_answer(gold) or "i" in re.sub(r"\\[a-zA-Z]+", "", gold) and re.search(r"\di\b|\bi\b", gold):
        return []
    if re.fullmatch(r"[a-z]\s*(=|\\in).*", gold) and not bare_letters(gold.split("=", 1)[-1].split("\\in", 1)[-1]):
        return []
    spans = bare_letters(gold)
    if not spans:
        return []
    chars = list(gold)
    for i in spans:
        chars[i] = chars[i].swapcase()
    return ["".join(chars)]


def wrong_named_tuple(gold, q, rng):
    entries = tuple_entries(gold)
    if not entries or len(entries) not in (2, 3) or len(set(entries)) < len(entries):
        return []
    if "interval" in q["question"]:
        return []
    # The names the question gives the entries: `$(a,b)$`, `$(r,\theta)$`.
    names = re.search(r"\(\s*(\\?[a-z]+)\s*,\s*(\\?[a-z]+)\s*(?:,\s*(\\?[a-z]+)\s*)?\)", q["question"])
    letters = [n for n in names.groups() if n] if names else []
    if len(letters) != len(entries):
        return []
    named = ", ".join(f"{v} = {e}" for v, e in zip(reversed(letters), entries))
    return [f"({named})"]


def wrong_digit_groups(gold, q, rng):
    n = plain_int(gold)
    if n is None or n < 100000:
        return []
    groups = f"{n:,}".split(",")
    # Well-formed groupings only: the leading group stays first unless it has 3 digits.
    head, tail = groups[0], groups[1:]
    perms = [[head] + tail[k:] + tail[:k] for k in range(1, len(tail))]
    if len(head) == 3:
        perms.append(tail + [head])
    out = []
    for p in perms:
        if p != groups and not p[0].startswith("0") and int("".join(p)) != n:
            sep = rng.choice([",", "{,}", "\\,"])
            out.append(sep.join(p))
    return out[:2]


def wrong_sign_flip(gold, q, rng):
    if is_text_answer(gold) or "\\begin" in gold or "\\pm" in gold:
        return []
    if re.fullmatch(r"-?\d+(\.\d+)?|-?\\frac.*|-?\d*\\sqrt.*|-?\d*\\pi", gold) and gold.lstrip("-") not in ("0",):
        return [gold[1:] if gold.startswith("-") else f"-{gold}"]
    ops = [m for m in re.finditer(r"(?<=[\w}) ])\s*([+-])\s*(?=[\w\\])", gold)]
    if ops and "(" not in gold and "=" not in gold:
        m = ops[0]
        flipped = "-" if m[1] == "+" else "+"
        return [gold[: m.start(1)] + flipped + gold[m.end(1) :]]
    return []


EQUIVALENT = [
    ("fraction-decimal", eq_fraction_decimal),
    ("frac-notation", eq_frac_notation),
    ("spacing", eq_spacing),
    ("outer-braces", eq_outer_braces),
    ("thousands", eq_thousands),
    ("base-subscript", eq_base_subscript),
    ("lhs", eq_lhs),
    ("reordered", eq_reordered),
    ("units", eq_units),
    ("unicode", eq_unicode),
    ("matrix", eq_matrix),
    ("left-right", eq_left_right),
    ("degrees", eq_degrees),
]
WRONG = [
    ("off-by-one", wrong_off_by_one),
    ("swapped-tuple", wrong_swapped_tuple),
    ("hedged", wrong_hedged),
    ("decimals", wrong_decimals),
    ("case", wrong_case),
    ("named-tuple", wrong_named_tuple),
    ("digit-groups", wrong_digit_groups),
    ("sign-flip", wrong_sign_flip),
]


def read_rows(data_dir):
    rows = []
    for source, path in SOURCES.items():
        with open(Path(data_dir) / path) as f:
            for line in f:
                r = json.loads(line)
                rows.append({"source": source, "question": r["question"], "gold": r["answer"].strip()})
    return rows


def sample(rng, found):
    """At most PER_CATEGORY of found: half from MATH-500 and half from GSM8K where both
    have enough, the shortfall from MATH train (categories rare in MATH-500)."""
    by_source = {s: [i for i, f in enumerate(found) if f[0] == s] for s in SOURCES}
    quota = {s: 0 for s in SOURCES}
    quota["math500"] = min(len(by_source["math500"]), PER_CATEGORY // 2)
    quota["gsm8k"] = min(len(by_source["gsm8k"]), PER_CATEGORY // 2)
    for s in SOURCES:
        quota[s] += min(PER_CATEGORY - sum(quota.values()), len(by_source[s]) - quota[s])
    chosen = sorted(i for s, ix in by_source.items() for i in rng.sample(ix, quota[s]))
    return [found[i] for i in chosen]


def pairs(rows):
    rng = random.Random(SEED)
    out, taken = [], set()
    for construction, table in (("equivalent", EQUIVALENT), ("wrong", WRONG)):
        for category, rewrite in table:
            found, seen = [], set()
            for q in rows:
                preds = rewrite(q["gold"], q, rng) if construction == "wrong" else rewrite(q["gold"], q)
                for pred in preds:
                    key = (q["gold"], pred)
                    if pred and pred != q["gold"] and key not in seen and key not in taken:
                        seen.add(key)
                        found.append((q["source"], q["gold"], pred))
            for _, gold, pred in sample(rng, found):
                taken.add((gold, pred))
                out.append((gold, pred, category, construction))
    return out


def main(data_dir, out_path):
    rows = read_rows(data_dir)
    result = []
    for gold, pred, category, construction in pairs(rows):
        result.append(
            {
                "gold": gold,
                "pred": pred,
                "category": category,
                "construction": construction,
                "math_verify": math_verify(gold, pred),
            }
        )
    with open(out_path, "w") as f:
        for r in result:
            f.write(json.dumps(r, ensure_ascii=False) + "\n")
    counts = Counter((r["category"], r["math_verify"]) for r in result)
    for category in dict.fromkeys(r["category"] for r in result):
        print(f"{category:18} {counts[(category, True)] + counts[(category, False)]:4} pairs, "
              f"math-verify accepts {counts[(category, True)]}", file=sys.stderr)
    print(f"{len(result)} pairs -> {out_path}", file=sys.stderr)


if __name__ == "__main__":
    if len(sys.argv) != 3:
        sys.exit(__doc__)
    main(sys.argv[1], sys.argv[2])
