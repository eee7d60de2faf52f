//! Device names in experiment files.

use std::fmt;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum DeviceSpec {
    /// Every visible GPU, or the CPU where there is none.
    Auto,
    Cpu,
    Cuda(usize),
}

impl fmt::Display for DeviceSpec {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            DeviceSpec::Auto => f.write_str("auto"),
            DeviceSpec::Cpu => f.write_str("cpu"),
            DeviceSpec::Cuda(i) => write!(f, "cuda:{i}"),
        }
    }
}

/// Parses `auto`, `cpu`, `cuda` (= `cuda:0`) or `cuda:N`.
pub fn parse_device(text: &str) -> Result<DeviceSpec, String> {
    match text {
        "auto" => Ok(DeviceSpec::Auto),
        "cpu" => Ok(DeviceSpec::Cpu),
        "cuda" => Ok(DeviceSpec::Cuda(0)),
        _ => text
            .strip_prefix("cuda:")
            .and_then(|n| n.parse().ok())
            .map(DeviceSpec::Cuda)
            .ok_or_else(|| {
                format!("unknown device `{text}`: expected \"auto\", \"cpu\" or \"cuda:N\"")
            }),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_device_names() {
        assert_eq!(parse_device("cpu"), Ok(DeviceSpec::Cpu));
        assert_eq!(parse_device("cuda:3"), Ok(DeviceSpec::Cuda(3)));
        assert_eq!(parse_device("cuda"), Ok(DeviceSpec::Cuda(0)));
        assert_eq!(
            parse_device("gpu0"),
            Err("unknown device `gpu0`: expected \"auto\", \"cpu\" or \"cuda:N\"".into())
        );
        assert!(parse_device("cuda:x").is_err());
    }
}
