//! A metrics line as scalar series: every number at its path, joined by `/`
//! (`agents/solver/grad_norm`, `models/solver-lm/update_phases/forward`,
//! `eval/sources/arith-l1/avg_at_k`), booleans as 0 and 1, array items by index.
//! Strings and nulls are not scalars; the line's own `step` is the series' step.

use serde_json::Value;

/// The scalars of `line`, in the line's key order.
pub fn scalars(line: &Value) -> Vec<(String, f64)> {
    let mut out = Vec::new();
    if let Value::Object(map) = line {
        for (key, value) in map {
            if key != "step" {
                walk(key, value, &mut out);
            }
        }
    }
    out
}

fn walk(path: &str, value: &Value, out: &mut Vec<(String, f64)>) {
    match value {
        Value::Number(n) => {
            if let Some(x) = n.as_f64().filter(|x| x.is_finite()) {
                out.push((path.to_string(), x));
            }
        }
        Value::Bool(b) => out.push((path.to_string(), f64::from(u8::from(*b)))),
        Value::Object(map) => {
            for (key, value) in map {
                walk(&format!("{path}/{key}"), value, out);
            }
        }
        Value::Array(items) => {
            for (i, value) in items.iter().enumerate() {
                walk(&format!("{path}/{i}"), value, out);
            }
        }
        Value::String(_) | Value::Null => {}
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn numbers_and_booleans_become_series_at_their_paths() {
        let line = json!({
            "step": 3,
            "reward_mean": 0.25,
            "models": {"lm": {"grad_norm": 1.5, "grad_spike": true, "tis_weight_mean": null}},
            "agents": {"solver": {"model": "lm", "finish": {"length": 2}}},
            "eval": {"k": 4, "sources": {"arith-l1": {"avg_at_k": 0.5}}},
            "grad_norms": [0.5, 2.0],
        });
        let got = scalars(&line);
        let want: Vec<(String, f64)> = [
            ("agents/solver/finish/length", 2.0),
            ("eval/k", 4.0),
            ("eval/sources/arith-l1/avg_at_k", 0.5),
            ("grad_norms/0", 0.5),
            ("grad_norms/1", 2.0),
            ("models/lm/grad_norm", 1.5),
            ("models/lm/grad_spike", 1.0),
            ("reward_mean", 0.25),
        ]
        .iter()
        .map(|(k, v)| (k.to_string(), *v))
        .collect();
        assert_eq!(got, want);
    }
}
