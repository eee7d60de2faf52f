//! Answer scoring as the SQuAD evaluation script (v1.1) does it: normalization, exact
//! match and token F1, plus the answer a completion gives. Pure functions; the rewards
//! (`search/em`, `search/f1`) apply them to an episode.

use std::collections::HashMap;

/// The answer `text` gives: the trimmed content of its last `<answer>…</answer>` block,
/// or `text` itself when it has none.
pub fn extract_answer(text: &str) -> &str {
    drmas_plugin_api::kit::last_content(text, "answer").map_or(text, str::trim)
}

/// SQuAD's `normalize_answer`: lower-case, remove punctuation, remove the articles
/// `a`, `an`, `the` as whole words, collapse whitespace.
///
/// - Lower-casing is Unicode-aware, as Python's `str.lower` (`É` → `é`, final sigma).
/// - Punctuation: the official script removes only ASCII `string.punctuation` (the 32
///   characters `!"#$%&'()*+,-./:;<=>?@[\]^_`{|}~`), so there `“Paris”` does not match
///   `Paris` and `Jean–Luc` keeps its en dash. We also remove every character of the
///   Unicode punctuation categories (P*: dashes, curly quotes, guillemets, `¿`, `…`,
///   CJK `。「」`), because retrieved Wikipedia text is full of them and the difference
///   is noise, not a wrong answer. Non-ASCII symbols (S*: `€`, `°`, `©`, `×`) and
///   accents are kept. No Unicode normalization (NFC) is applied, as in the script.
/// - Like the script, a punctuation character is deleted, not replaced by a space:
///   `don't` → `dont`, `U.S.` → `us`.
/// - Articles are whole words in the sense of Python's `\b`: a maximal run of letters
///   and digits (`théâtre` keeps its `the`; `the-end` becomes `theend` first, as the
///   punctuation goes before the articles).
pub fn normalize_answer(text: &str) -> String {
    let lower = text.to_lowercase();
    let unpunctuated: String = lower.chars().filter(|&c| !is_punctuation(c)).collect();
    let without_articles = remove_articles(&unpunctuated);
    without_articles
        .split_whitespace()
        .collect::<Vec<_>>()
        .join(" ")
}

/// Whether SQuAD normalization removes `c` (see [`normalize_answer`]).
pub fn is_punctuation(c: char) -> bool {
    if c.is_ascii() {
        return c.is_ascii_punctuation();
    }
    let c = c as u32;
    // The number of ranges that start at or before `c`; `c` is in the last of them or
    // in none.
    let (mut lo, mut hi) = (0, UNICODE_PUNCTUATION.len() / 2);
    while lo < hi {
        let mid = (lo + hi) / 2;
        if UNICODE_PUNCTUATION[2 * mid] <= c {
            lo = mid + 1;
        } else {
            hi = mid;
        }
    }
    lo > 0 && c <= UNICODE_PUNCTUATION[2 * (lo - 1) + 1]
}

/// A character of a word in the sense of Python's `\w` on `str`.
fn is_word(c: char) -> bool {
    c.is_alphanumeric() || c == '_'
}

/// `re.sub(r'\b(a|an|the)\b', ' ', text)`: each maximal run of word characters that is
/// exactly an article becomes a space.
fn remove_articles(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    let mut rest = text;
    while !rest.is_empty() {
        let word_len = rest.find(|c: char| !is_word(c)).unwrap_or(rest.len());
        let (word, after) = rest.split_at(word_len);
        if matches!(word, "a" | "an" | "the") {
            out.push(' ');
        } else {
            out.push_str(word);
        }
        let gap_len = after.find(is_word).unwrap_or(after.len());
        out.push_str(&after[..gap_len]);
        rest = &after[gap_len..];
    }
    out
}

/// SQuAD exact match: the normalized texts are equal.
pub fn exact_match(prediction: &str, gold: &str) -> bool {
    normalize_answer(prediction) == normalize_answer(gold)
}

/// SQuAD token F1 of the normalized, whitespace-split texts: the tokens in common
/// (counted with multiplicity, as `Counter & Counter`), precision over the
/// prediction's tokens, recall over the gold's, their harmonic mean; 0 when no token
/// is common. Two texts that normalize to nothing score 1 and one empty against one
/// non-empty scores 0, as in SQuAD v2.0's script (v1.1's returns 0 for empty vs empty,
/// which would make "The" against "a" wrong under F1 but right under EM).
pub fn token_f1(prediction: &str, gold: &str) -> f64 {
    let predicted = normalize_answer(prediction);
    let expected = normalize_answer(gold);
    let predicted: Vec<&str> = predicted.split_whitespace().collect();
    let expected: Vec<&str> = expected.split_whitespace().collect();
    if predicted.is_empty() || expected.is_empty() {
        return if predicted.is_empty() && expected.is_empty() {
            1.0
        } else {
            0.0
        };
    }
    let mut gold_counts: HashMap<&str, usize> = HashMap::new();
    for token in &expected {
        *gold_counts.entry(token).or_default() += 1;
    }
    let mut common = 0usize;
    for token in &predicted {
        if let Some(left) = gold_counts.get_mut(token)
            && *left > 0
        {
            *left -= 1;
            common += 1;
        }
    }
    if common == 0 {
        return 0.0;
    }
    let precision = common as f64 / predicted.len() as f64;
    let recall = common as f64 / expected.len() as f64;
    2.0 * precision * recall / (precision + recall)
}

/// Whether `prediction` exactly matches any of `aliases`.
pub fn exact_match_any(prediction: &str, aliases: &[impl AsRef<str>]) -> bool {
    aliases.iter().any(|a| exact_match(prediction, a.as_ref()))
}

/// The best [`token_f1`] of `prediction` over `aliases`; 0 when there is none.
pub fn best_token_f1(prediction: &str, aliases: &[impl AsRef<str>]) -> f64 {
    aliases
        .iter()
        .map(|a| token_f1(prediction, a.as_ref()))
        .fold(0.0, f64::max)
}

/// The non-ASCII characters of the Unicode general categories P* (Pc, Pd, Ps, Pe, Pi, Pf,
/// Po) as inclusive `start, end` pairs, sorted; generated from Python's `unicodedata`
/// (Unicode 14.0): `[c for c in range(128, 0x110000) if category(chr(c))[0] == "P"]`.
#[rustfmt::skip]
const UNICODE_PUNCTUATION: [u32; 360] = [
    0x00A1, 0x00A1, 0x00A7, 0x00A7, 0x00AB, 0x00AB, 0x00B6, 0x00B7, 0x00BB, 0x00BB, 0x00BF, 0x00BF,
    0x037E, 0x037E, 0x0387, 0x0387, 0x055A, 0x055F, 0x0589, 0x058A, 0x05BE, 0x05BE, 0x05C0, 0x05C0,
    0x05C3, 0x05C3, 0x05C6, 0x05C6, 0x05F3, 0x05F4, 0x0609, 0x060A, 0x060C, 0x060D, 0x061B, 0x061B,
    0x061D, 0x061F, 0x066A, 0x066D, 0x06D4, 0x06D4, 0x0700, 0x070D, 0x07F7, 0x07F9, 0x0830, 0x083E,
    0x085E, 0x085E, 0x0964, 0x0965, 0x0970, 0x0970, 0x09FD, 0x09FD, 0x0A76, 0x0A76, 0x0AF0, 0x0AF0,
    0x0C77, 0x0C77, 0x0C84, 0x0C84, 0x0DF4, 0x0DF4, 0x0E4F, 0x0E4F, 0x0E5A, 0x0E5B, 0x0F04, 0x0F12,
    0x0F14, 0x0F14, 0x0F3A, 0x0F3D, 0x0F85, 0x0F85, 0x0FD0, 0x0FD4, 0x0FD9, 0x0FDA, 0x104A, 0x104F,
    0x10FB, 0x10FB, 0x1360, 0x1368, 0x1400, 0x1400, 0x166E, 0x166E, 0x169B, 0x169C, 0x16EB, 0x16ED,
    0x1735, 0x1736, 0x17D4, 0x17D6, 0x17D8, 0x17DA, 0x1800, 0x180A, 0x1944, 0x1945, 0x1A1E, 0x1A1F,
    0x1AA0, 0x1AA6, 0x1AA8, 0x1AAD, 0x1B5A, 0x1B60, 0x1B7D, 0x1B7E, 0x1BFC, 0x1BFF, 0x1C3B, 0x1C3F,
    0x1C7E, 0x1C7F, 0x1CC0, 0x1CC7, 0x1CD3, 0x1CD3, 0x2010, 0x2027, 0x2030, 0x2043, 0x2045, 0x2051,
    0x2053, 0x205E, 0x207D, 0x207E, 0x208D, 0x208E, 0x2308, 0x230B, 0x2329, 0x232A, 0x2768, 0x2775,
    0x27C5, 0x27C6, 0x27E6, 0x27EF, 0x2983, 0x2998, 0x29D8, 0x29DB, 0x29FC, 0x29FD, 0x2CF9, 0x2CFC,
    0x2CFE, 0x2CFF, 0x2D70, 0x2D70, 0x2E00, 0x2E2E, 0x2E30, 0x2E4F, 0x2E52, 0x2E5D, 0x3001, 0x3003,
    0x3008, 0x3011, 0x3014, 0x301F, 0x3030, 0x3030, 0x303D, 0x303D, 0x30A0, 0x30A0, 0x30FB, 0x30FB,
    0xA4FE, 0xA4FF, 0xA60D, 0xA60F, 0xA673, 0xA673, 0xA67E, 0xA67E, 0xA6F2, 0xA6F7, 0xA874, 0xA877,
    0xA8CE, 0xA8CF, 0xA8F8, 0xA8FA, 0xA8FC, 0xA8FC, 0xA92E, 0xA92F, 0xA95F, 0xA95F, 0xA9C1, 0xA9CD,
    0xA9DE, 0xA9DF, 0xAA5C, 0xAA5F, 0xAADE, 0xAADF, 0xAAF0, 0xAAF1, 0xABEB, 0xABEB, 0xFD3E, 0xFD3F,
    0xFE10, 0xFE19, 0xFE30, 0xFE52, 0xFE54, 0xFE61, 0xFE63, 0xFE63, 0xFE68, 0xFE68, 0xFE6A, 0xFE6B,
    0xFF01, 0xFF03, 0xFF05, 0xFF0A, 0xFF0C, 0xFF0F, 0xFF1A, 0xFF1B, 0xFF1F, 0xFF20, 0xFF3B, 0xFF3D,
    0xFF3F, 0xFF3F, 0xFF5B, 0xFF5B, 0xFF5D, 0xFF5D, 0xFF5F, 0xFF65, 0x10100, 0x10102, 0x1039F, 0x1039F,
    0x103D0, 0x103D0, 0x1056F, 0x1056F, 0x10857, 0x10857, 0x1091F, 0x1091F, 0x1093F, 0x1093F, 0x10A50, 0x10A58,
    0x10A7F, 0x10A7F, 0x10AF0, 0x10AF6, 0x10B39, 0x10B3F, 0x10B99, 0x10B9C, 0x10EAD, 0x10EAD, 0x10F55, 0x10F59,
    0x10F86, 0x10F89, 0x11047, 0x1104D, 0x110BB, 0x110BC, 0x110BE, 0x110C1, 0x11140, 0x11143, 0x11174, 0x11175,
    0x111C5, 0x111C8, 0x111CD, 0x111CD, 0x111DB, 0x111DB, 0x111DD, 0x111DF, 0x11238, 0x1123D, 0x112A9, 0x112A9,
    0x1144B, 0x1144F, 0x1145A, 0x1145B, 0x1145D, 0x1145D, 0x114C6, 0x114C6, 0x115C1, 0x115D7, 0x11641, 0x11643,
    0x11660, 0x1166C, 0x116B9, 0x116B9, 0x1173C, 0x1173E, 0x1183B, 0x1183B, 0x11944, 0x11946, 0x119E2, 0x119E2,
    0x11A3F, 0x11A46, 0x11A9A, 0x11A9C, 0x11A9E, 0x11AA2, 0x11C41, 0x11C45, 0x11C70, 0x11C71, 0x11EF7, 0x11EF8,
    0x11FFF, 0x11FFF, 0x12470, 0x12474, 0x12FF1, 0x12FF2, 0x16A6E, 0x16A6F, 0x16AF5, 0x16AF5, 0x16B37, 0x16B3B,
    0x16B44, 0x16B44, 0x16E97, 0x16E9A, 0x16FE2, 0x16FE2, 0x1BC9F, 0x1BC9F, 0x1DA87, 0x1DA8B, 0x1E95E, 0x1E95F,
];
