//! Checked command-line values: each parser refuses a bad value while the command line
//! is parsed, naming the option (clap adds it), before a model or a plugin is loaded.

use drmas::pool::{DeviceSpec, cuda_count, parse_device};

fn number(text: &str) -> Result<f64, String> {
    let v: f64 = text
        .trim()
        .parse()
        .map_err(|_| format!("`{text}` is not a number"))?;
    if v.is_finite() {
        Ok(v)
    } else {
        Err(format!("must be a finite number, got {text}"))
    }
}

/// A sampling temperature: 0 (greedy) or more.
pub fn temperature(text: &str) -> Result<f64, String> {
    let v = number(text)?;
    if v >= 0.0 {
        Ok(v)
    } else {
        Err(format!("must be >= 0 (0 = greedy), got {text}"))
    }
}

/// A nucleus mass in (0, 1].
pub fn top_p(text: &str) -> Result<f64, String> {
    let v = number(text)?;
    if v > 0.0 && v <= 1.0 {
        Ok(v)
    } else {
        Err(format!("must be in (0, 1], got {text}"))
    }
}

/// Any finite number (a threshold).
pub fn finite(text: &str) -> Result<f64, String> {
    number(text)
}

/// The dtype a merged checkpoint is saved in: f32 or bf16 (the merge is computed in
/// f32; f16's narrower range is not offered).
pub fn merge_dtype(text: &str) -> Result<drmas::model::Dtype, String> {
    use drmas::model::Dtype;
    match text.parse::<Dtype>() {
        Ok(d @ (Dtype::F32 | Dtype::Bf16)) => Ok(d),
        _ => Err(format!("`{text}` is not offered: f32 or bf16")),
    }
}

/// A device name that exists on this machine (`auto`, `cpu`, `cuda:N`).
pub fn device(text: &str) -> Result<DeviceSpec, String> {
    let spec = parse_device(text).map_err(|e| e.to_string())?;
    spec.resolve_with(cuda_count()).map_err(|e| e.to_string())?;
    Ok(spec)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bad_values_are_named() {
        assert_eq!(
            temperature("nan").unwrap_err(),
            "must be a finite number, got nan"
        );
        assert_eq!(
            temperature("-1").unwrap_err(),
            "must be >= 0 (0 = greedy), got -1"
        );
        assert_eq!(temperature("hot").unwrap_err(), "`hot` is not a number");
        assert_eq!(temperature("0").unwrap(), 0.0);
        assert_eq!(top_p("0").unwrap_err(), "must be in (0, 1], got 0");
        assert_eq!(top_p("1.5").unwrap_err(), "must be in (0, 1], got 1.5");
        assert_eq!(
            top_p("inf").unwrap_err(),
            "must be a finite number, got inf"
        );
        assert_eq!(top_p("1").unwrap(), 1.0);
        assert_eq!(device("cpu").unwrap(), DeviceSpec::Cpu);
        assert_eq!(
            device("tpu").unwrap_err(),
            "unknown device `tpu`: expected \"auto\", \"cpu\" or \"cuda:N\""
        );
    }
}
