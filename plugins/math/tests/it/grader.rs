//! The grader on real answer pairs: each case states whether the answer (left) matches
//! the gold (right).

use drmas_math::grader::{is_equiv, last_boxed, last_number, normalize, numeric_value};

fn check(cases: &[(&str, &str, bool)]) {
    let wrong: Vec<String> = cases
        .iter()
        .filter(|(answer, gold, want)| is_equiv(answer, gold) != *want)
        .map(|(answer, gold, want)| {
            format!(
                "is_equiv({answer:?}, {gold:?}) should be {want} (normalized {:?} vs {:?})",
                normalize(answer),
                normalize(gold)
            )
        })
        .collect();
    assert!(wrong.is_empty(), "{}", wrong.join("\n"));
}

#[test]
fn integers_and_decimals() {
    check(&[
        ("7", "7", true),
        ("7", "8", false),
        ("07", "7", true),
        ("7.0", "7", true),
        ("7.00", "7", true),
        ("3.14", "3.14159", false),
        ("0.1", "0.10", true),
        (".5", "0.5", true),
        ("1000000", "1000001", false),
        ("0.3333333", "0.33333334", true),
        ("0.333", "\\frac{1}{3}", false),
        ("-5", "-5", true),
        ("-5", "5", false),
        ("−5", "-5", true),
        ("+5", "5", true),
        ("- 5", "-5", true),
    ]);
}

#[test]
fn fractions() {
    check(&[
        ("\\frac{1}{2}", "0.5", true),
        ("0.5", "\\frac{1}{2}", true),
        ("1/2", "\\frac{1}{2}", true),
        ("\\dfrac{3}{4}", "\\frac{3}{4}", true),
        ("\\tfrac{3}{4}", "0.75", true),
        ("\\frac12", "\\frac{1}{2}", true),
        ("\\frac{1}2", "1/2", true),
        ("\\frac1{2}", "0.5", true),
        ("\\frac{2}{4}", "\\frac{1}{2}", true),
        ("\\frac{1}{3}", "\\frac{1}{2}", false),
        ("-\\frac{1}{2}", "\\frac{-1}{2}", true),
        ("-\\frac{1}{2}", "\\frac{1}{2}", false),
        ("\\frac{1}{0}", "0", false),
        ("3\\frac{1}{2}", "3.5", true),
        ("\\frac{12}{4}", "3", true),
        ("\\frac{\\frac{1}{2}}{2}", "\\frac{1}{4}", true),
    ]);
}

#[test]
fn radicals_and_pi() {
    check(&[
        ("\\sqrt{2}", "\\sqrt2", true),
        ("2\\sqrt{3}", "\\sqrt{12}", true),
        ("\\frac{\\sqrt{3}}{2}", "\\sqrt{3}/2", true),
        ("\\frac{\\sqrt{2}}{2}", "\\frac{1}{\\sqrt{2}}", true),
        ("\\sqrt{3}", "\\sqrt{2}", false),
        ("\\sqrt[3]{8}", "2", true),
        ("2\\pi", "6.283185307", true),
        ("2\\pi", "6.28", false),
        ("π", "\\pi", true),
    ]);
}

#[test]
fn no_arithmetic_is_done_for_the_model() {
    check(&[
        ("3+4", "7", false),
        ("3\\times4", "12", false),
        ("2^{3}", "8", false),
        ("12.5.3", "3.75", false),
    ]);
}

#[test]
fn latex_wrappers() {
    check(&[
        ("$5$", "5", true),
        ("\\$5", "5", true),
        ("\\boxed{5}", "5", true),
        ("\\left( 1, 2 \\right)", "(1,2)", true),
        ("\\text{(B)}", "(B)", true),
        ("(B)", "B", true),
        ("\\textbf{42}", "42", true),
        ("\\mbox{42}", "42", true),
        ("1,\\!000", "1000", true),
        ("10\\,000", "10000", true),
        ("\\displaystyle \\frac{1}{2}", "\\frac12", true),
        ("5.", "5", true),
        ("x = 5", "5", true),
        ("y=-3", "-3", true),
        ("x = 5", "6", false),
        ("y = 2x + 3", "2x+3", true),
        ("\\theta = \\frac{\\pi}{2}", "\\frac{\\pi}{2}", true),
    ]);
}

#[test]
fn units_degrees_percent_and_thousands() {
    check(&[
        ("5 \\text{ cm}", "5", true),
        ("5\\text{ apples}", "5", true),
        ("12\\text{ cm}^2", "12", true),
        ("5\\mathrm{cm}", "5", true),
        ("5 cm", "5", true),
        ("18 dollars", "18", true),
        ("18 dollars.", "18.00", true),
        ("3 square units", "3", true),
        ("90^\\circ", "90", true),
        ("90^{\\circ}", "90", true),
        ("90°", "90", true),
        ("90 degrees", "90", true),
        ("50\\%", "50", true),
        ("50%", "50", true),
        ("50\\%", "0.5", false),
        ("1,000", "1000", true),
        ("1,234,567.5", "1234567.5", true),
        ("1,000", "1", false),
        // A noun after a number is a unit (`\text{247 classes}` is 247)...
        ("5 apples", "5", true),
        ("247 classes", "247", true),
        // ...but a hedge is not.
        ("5 or 7", "5", false),
    ]);
}

#[test]
fn sets_tuples_and_intervals() {
    check(&[
        ("1, 2", "1,2", true),
        ("1, 2", "2, 1", true),
        ("1, 2", "1, 3", false),
        ("1, 2", "1, 2, 3", false),
        ("1, 2", "12", false),
        ("\\{1, 2\\}", "\\{2, 1\\}", true),
        ("\\{1,2\\}", "1, 2", true),
        ("\\left\\{ \\frac{1}{2}, 3 \\right\\}", "3, 0.5", true),
        ("(1, 2)", "(1,2)", true),
        ("(1, 2)", "(2, 1)", false),
        ("(0.5, -3)", "\\left(\\frac{1}{2}, -3\\right)", true),
        ("(1, 2)", "[1, 2]", false),
        ("[1, 2)", "[1,2)", true),
        ("[1, 2)", "[1, 2]", false),
        ("[\\frac{1}{2}, 3)", "[0.5, 3)", true),
        ("(-\\infty, 2]", "(-\\infty,2]", true),
        ("(-\\infty, 2]", "(\\infty, 2]", false),
        ("(1, (2, 3))", "(1,(2,3))", true),
        ("x = 1, y = 2", "x=1,y=2", true),
        ("(1,2)\\cup(3,4)", "(1,2) \\cup (3,4)", true),
        ("(1,2)\\cup(3,4)", "(1,2)\\cup(3,5)", false),
    ]);
}

#[test]
fn text_answers() {
    check(&[
        ("Yes", "yes", true),
        ("\\text{Monday}", "monday", true),
        ("\\text{Tuesday}", "Monday", false),
        ("New York", "new york", true),
        ("(C)", "\\text{(C)}", true),
        ("C", "D", false),
        ("even", "\\text{even}", true),
        ("odd", "even", false),
    ]);
}

#[test]
fn missing_and_empty_answers_never_match() {
    check(&[
        ("", "", false),
        ("", "0", false),
        ("   ", "0", false),
        ("$$", "0", false),
        ("5", "", false),
    ]);
}

#[test]
fn last_boxed_finds_the_final_answer() {
    let cases: &[(&str, Option<&str>)] = &[
        ("so \\boxed{5}.", Some("5")),
        ("first \\boxed{3}, then \\boxed{4}", Some("4")),
        ("\\boxed{\\frac{1}{2}}", Some("\\frac{1}{2}")),
        ("\\boxed{\\{1, 2\\}}", Some("\\{1, 2\\}")),
        ("\\boxed{{a}{b}{c}}", Some("{a}{b}{c}")),
        ("\\boxed 5$", Some("5")),
        ("$\\boxed 42$ done", Some("42")),
        ("\\fbox{7}", Some("7")),
        ("\\boxed{ 8 }", Some("8")),
        ("\\boxed{}", Some("")),
        ("\\boxed{3} and then \\boxed{4", Some("3")),
        ("\\boxed{4", None),
        ("the answer is 5", None),
        ("\\boxedx{5}", None),
        ("", None),
    ];
    for (text, want) in cases {
        assert_eq!(last_boxed(text).as_deref(), *want, "last_boxed({text:?})");
    }
}

#[test]
fn boxed_answers_compare_after_extraction() {
    let completion = "We add: $3 + 4 = 7$. The answer is $\\boxed{\\dfrac{14}{2}}$.";
    let answer = last_boxed(completion).unwrap();
    assert!(is_equiv(&answer, "7"));
    assert!(!is_equiv(&answer, "8"));
    // Nested braces inside the box survive extraction.
    let answer = last_boxed("\\boxed{\\frac{\\sqrt{3}}{2}}").unwrap();
    assert_eq!(answer, "\\frac{\\sqrt{3}}{2}");
    assert!(is_equiv(&answer, "\\frac{\\sqrt3}{2}"));
}

#[test]
fn last_number_reads_free_text() {
    let cases: &[(&str, Option<f64>)] = &[
        ("She pays $1,234.50 in total.", Some(1234.5)),
        ("x = -4", Some(-4.0)),
        ("3-4", Some(4.0)),
        ("from 2 to 3, so .5", Some(0.5)),
        ("1, 2", Some(2.0)),
        ("no digits", None),
    ];
    for (text, want) in cases {
        assert_eq!(last_number(text), *want, "last_number({text:?})");
    }
}

#[test]
fn numeric_value_grammar() {
    let cases: &[(&str, Option<f64>)] = &[
        ("12", Some(12.0)),
        ("-0.25", Some(-0.25)),
        ("\\frac{3}{4}", Some(0.75)),
        ("3/4", Some(0.75)),
        ("3\\frac{1}{4}", Some(3.25)),
        ("2\\sqrt{4}", Some(4.0)),
        ("3+4", None),
        ("x", None),
        ("\\frac{1}{0}", None),
        ("", None),
    ];
    for (text, want) in cases {
        assert_eq!(numeric_value(text), *want, "numeric_value({text:?})");
    }
}

#[test]
fn garbage_never_panics() {
    let deep_frac = "\\frac{".repeat(5000) + &"}".repeat(5000);
    let deep_tuple = "(".repeat(5000) + &")".repeat(5000);
    let garbage = [
        "\\",
        "{",
        "}",
        "\\boxed",
        "\\boxed{",
        "\\frac",
        "\\frac{",
        "\\sqrt[",
        "\\sqrt[0]{2}",
        "\\text{",
        "\\left",
        "((((",
        "))))",
        "\\{\\}",
        ",,,",
        "=",
        "x==",
        "é\\frac{é}{ü}",
        "1,\\!",
        "°%$",
        deep_frac.as_str(),
        deep_tuple.as_str(),
    ];
    let many_open_boxes = "\\boxed{".repeat(50_000);
    assert_eq!(last_boxed(&many_open_boxes), None);
    assert_eq!(
        last_boxed(&format!("\\boxed{{1}}{many_open_boxes}")).as_deref(),
        Some("1")
    );
    for a in garbage {
        for b in garbage {
            let _ = is_equiv(a, b);
        }
        let _ = last_boxed(a);
        let _ = last_number(a);
        let _ = numeric_value(a);
    }
}

#[test]
fn hedges_names_decimals_and_case_are_not_accepted() {
    check(&[
        // A trailing text is a unit or a noun, never a hedge.
        ("5\\text{ or 7}", "5", false),
        ("5\\text{ and -5}", "5", false),
        ("5\\text{ apples}", "5", true),
        ("5\\text{ cm}", "5", true),
        // Names inside tuples count.
        ("(y = 1, x = 2)", "(1, 2)", false),
        ("(x = 1, y = 2)", "(1, 2)", true),
        ("(x = 1, y = 2)", "(x = 1, y = 2)", true),
        ("(y = 2, x = 1)", "(x = 1, y = 2)", false),
        // Decimals compare rounded to 6 places; integers exactly.
        ("12345.68", "12345.67", false),
        ("0.333333", "\\frac{1}{3}", true),
        ("0.3333", "\\frac{1}{3}", false),
        ("2\\sqrt{3}", "\\sqrt{12}", true),
        // Case matters in math; text answers compare without it.
        ("X+1", "x+1", false),
        ("X", "x", false),
        ("Yes", "yes", true),
        ("\\text{Monday}", "monday", true),
        // `,\! ` with a space is a thousands separator, not a list.
        ("1000000", "1,\\! 000,\\! 000", true),
        ("000,1", "1,\\! 000", false),
    ]);
}

#[test]
fn bases_separators_matrices_sets_and_units_are_accepted() {
    check(&[
        ("4210_5", "4210_{5}", true),
        ("52_{8}", "52_8", true),
        ("52_{8}", "52_9", false),
        ("1{,}030", "1030", true),
        ("1{,}030", "1{,}031", false),
        (
            "\\begin{pmatrix} 1 & 2 \\\\ 3 & 4 \\end{pmatrix}",
            "\\begin{pmatrix}1&2\\\\3&4\\end{pmatrix}",
            true,
        ),
        (
            "\\begin{pmatrix} 1 & 2 \\\\ 3 & 4 \\end{pmatrix}",
            "\\begin{pmatrix}1&2\\\\4&3\\end{pmatrix}",
            false,
        ),
        ("x \\in [-2,7]", "[-2,7]", true),
        ("x \\in [-2,7]", "[-2,8]", false),
        ("\\boxed{{5}}", "5", true),
        ("{{5}}", "6", false),
        (
            "(3, \\infty) \\cup (-\\infty, 2)",
            "(-\\infty, 2) \\cup (3, \\infty)",
            true,
        ),
        (
            "(3, \\infty) \\cup (-\\infty, 2]",
            "(-\\infty, 2) \\cup (3, \\infty)",
            false,
        ),
        ("\\text{247 classes}", "247", true),
        ("½", "\\frac{1}{2}", true),
        ("2½", "2.5", true),
        ("¾", "\\frac{1}{2}", false),
    ]);
}

#[test]
fn a_large_set_is_matched_by_sorting() {
    let n = 3000;
    let gold: Vec<String> = (0..n).map(|i| i.to_string()).collect();
    let mut answer = gold.clone();
    answer.reverse();
    let (gold, answer) = (gold.join(", "), answer.join(", "));
    // Pairwise matching took seconds on this; sorting takes milliseconds.
    assert!(is_equiv(&answer, &gold));
    let wrong = answer.replacen("2999", "3000", 1);
    assert!(!is_equiv(&wrong, &gold));
    // Values, not only strings: `0.5` matches `\frac{1}{2}` in a large set too.
    let halves: Vec<String> = (0..n)
        .map(|i| format!("\\frac{{{}}}{{2}}", 2 * i + 1))
        .collect();
    let decimals: Vec<String> = (0..n).rev().map(|i| format!("{}.5", i)).collect();
    assert!(is_equiv(&decimals.join(", "), &halves.join(", ")));
}

#[test]
fn matrices_plus_minus_roots_and_lists_compare_by_value() {
    check(&[
        (
            "\\begin{bmatrix} 1/5 \\\\ -18/5 \\end{bmatrix}",
            "\\begin{pmatrix} \\frac{1}{5} \\\\ -\\frac{18}{5} \\end{pmatrix}",
            true,
        ),
        (
            "\\begin{bmatrix} 1/5 \\\\ 18/5 \\end{bmatrix}",
            "\\begin{pmatrix} \\frac{1}{5} \\\\ -\\frac{18}{5} \\end{pmatrix}",
            false,
        ),
        ("1 + \\sqrt{19}, 1 - \\sqrt{19}", "1 \\pm \\sqrt{19}", true),
        ("1 + \\sqrt{19}", "1 \\pm \\sqrt{19}", false),
        (
            "\\{-2, 1+\\sqrt{5}, 1-\\sqrt{5}\\}",
            "\\{1\\pm\\sqrt{5},-2\\}",
            true,
        ),
        ("√51", "\\sqrt{51}", true),
        ("2√113", "2\\sqrt{113}", true),
        ("\\{45^\\circ,135^\\circ\\}", "45^\\circ, 135^\\circ", true),
        // A list with a space after its comma is a list, not a thousands number.
        ("45135", "45, 135", false),
        (".0000673", ".0000672", false),
        ("P - Q", "p - q", false),
        (
            "(\\theta = 3, r = \\frac{\\pi}{2})",
            "\\left( 3, \\frac{\\pi}{2} \\right)",
            false,
        ),
        (
            "(r = 3, \\theta = \\frac{\\pi}{2})",
            "\\left( 3, \\frac{\\pi}{2} \\right)",
            true,
        ),
    ]);
}
