//! The element type of a model's weights as people write it (`f32`, `bf16`, `f16`): one
//! type and one parser for the experiment file and every command's `--dtype`.

use std::{fmt, str::FromStr};
use tch::Kind;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Dtype {
    F32,
    F16,
    Bf16,
}

/// The names the experiment file lists in its error (serde's "expected one of").
const NAMES: &[&str] = &["f32", "f16", "bf16"];

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("unknown dtype `{0}`: expected f32, bf16 or f16")]
pub struct DtypeError(pub String);

impl Dtype {
    pub fn kind(self) -> Kind {
        match self {
            Dtype::F32 => Kind::Float,
            Dtype::F16 => Kind::Half,
            Dtype::Bf16 => Kind::BFloat16,
        }
    }

    /// The short name (`f32`, `f16`, `bf16`).
    pub fn name(self) -> &'static str {
        match self {
            Dtype::F32 => "f32",
            Dtype::F16 => "f16",
            Dtype::Bf16 => "bf16",
        }
    }
}

/// The short names, and PyTorch's long ones (`float32`, `bfloat16`, `float16`).
impl FromStr for Dtype {
    type Err = DtypeError;

    fn from_str(text: &str) -> Result<Self, DtypeError> {
        match text {
            "f32" | "float32" => Ok(Dtype::F32),
            "bf16" | "bfloat16" => Ok(Dtype::Bf16),
            "f16" | "float16" => Ok(Dtype::F16),
            other => Err(DtypeError(other.to_string())),
        }
    }
}

impl fmt::Display for Dtype {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

impl serde::Serialize for Dtype {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(self.name())
    }
}

/// Parsed by [`Dtype::from_str`]; a name it does not know is refused the way serde
/// refuses an unknown variant, listing the short names.
impl<'de> serde::Deserialize<'de> for Dtype {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let text = String::deserialize(d)?;
        text.parse()
            .map_err(|_| serde::de::Error::unknown_variant(&text, NAMES))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_parse_to_one_type() {
        for (text, dtype) in [
            ("f32", Dtype::F32),
            ("float32", Dtype::F32),
            ("bf16", Dtype::Bf16),
            ("bfloat16", Dtype::Bf16),
            ("f16", Dtype::F16),
            ("float16", Dtype::F16),
        ] {
            assert_eq!(text.parse::<Dtype>().unwrap(), dtype, "{text}");
        }
        assert_eq!(Dtype::Bf16.kind(), Kind::BFloat16);
        assert_eq!(Dtype::F16.to_string(), "f16");
        assert_eq!(
            "fp8".parse::<Dtype>().unwrap_err().to_string(),
            "unknown dtype `fp8`: expected f32, bf16 or f16"
        );
    }

    #[test]
    fn the_file_refuses_an_unknown_name_as_an_unknown_variant() {
        #[derive(serde::Deserialize)]
        struct File {
            #[allow(dead_code)]
            dtype: Dtype,
        }
        let e = toml::from_str::<File>("dtype = \"fp8\"").err().unwrap();
        assert_eq!(
            e.message(),
            "unknown variant `fp8`, expected one of `f32`, `f16`, `bf16`"
        );
        let f: File = toml::from_str("dtype = \"bfloat16\"").unwrap();
        assert_eq!(f.dtype, Dtype::Bf16);
    }
}
