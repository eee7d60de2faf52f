//! Counts the experiment file must give as 1 or more (`steps`, `ppo_epochs`, an
//! engine's `parallel`, …): typed `NonZero*`, so the code past the file never checks
//! for 0, and refused while the file is read with the key, its position and the words
//! the checks always used: `must be at least 1`.

use serde::de::{Deserializer, Error, Unexpected, Visitor};
use std::{
    fmt,
    marker::PhantomData,
    num::{NonZeroU32, NonZeroUsize},
};

/// `n` as a count, for the defaults written in code (a 0 there is a bug: it panics).
pub const fn nz(n: u32) -> NonZeroU32 {
    match NonZeroU32::new(n) {
        Some(n) => n,
        None => panic!("a default count of 0"),
    }
}

/// A `NonZero` integer the file gives as a TOML integer.
pub trait Count: Sized {
    /// The primitive's name, as serde's own errors say it (`u32`).
    const NAME: &'static str;
    /// `None` for 0, or for a value out of the type's range.
    fn from_u64(v: u64) -> Option<Self>;
    /// Whether `v` fits the primitive (so a `None` of [`Count::from_u64`] is a 0).
    fn fits(v: u64) -> bool;
}

impl Count for NonZeroU32 {
    const NAME: &'static str = "u32";
    fn from_u64(v: u64) -> Option<Self> {
        NonZeroU32::new(u32::try_from(v).ok()?)
    }
    fn fits(v: u64) -> bool {
        u32::try_from(v).is_ok()
    }
}

impl Count for NonZeroUsize {
    const NAME: &'static str = "usize";
    fn from_u64(v: u64) -> Option<Self> {
        NonZeroUsize::new(usize::try_from(v).ok()?)
    }
    fn fits(v: u64) -> bool {
        usize::try_from(v).is_ok()
    }
}

/// `#[serde(deserialize_with = "count::at_least_one")]`. The error is raised inside
/// the value's own deserializer, so it carries the value's position.
pub fn at_least_one<'de, D: Deserializer<'de>, N: Count>(d: D) -> Result<N, D::Error> {
    d.deserialize_u64(AtLeastOne(PhantomData, "must be at least 1"))
}

/// [`at_least_one`] for a count that may be left out (`None`: no limit); give it with
/// `#[serde(default)]`.
pub fn at_least_one_when_set<'de, D: Deserializer<'de>, N: Count>(
    d: D,
) -> Result<Option<N>, D::Error> {
    d.deserialize_u64(AtLeastOne(PhantomData, "must be at least 1 when set"))
        .map(Some)
}

/// The count's type, and the words that refuse a 0.
struct AtLeastOne<N>(PhantomData<N>, &'static str);

impl<N: Count> Visitor<'_> for AtLeastOne<N> {
    type Value = N;

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(N::NAME)
    }

    fn visit_u64<E: Error>(self, v: u64) -> Result<N, E> {
        match N::from_u64(v) {
            Some(n) => Ok(n),
            None if v == 0 => Err(E::custom(self.1)),
            None => {
                debug_assert!(!N::fits(v));
                Err(E::invalid_value(Unexpected::Unsigned(v), &self))
            }
        }
    }

    fn visit_i64<E: Error>(self, v: i64) -> Result<N, E> {
        match u64::try_from(v) {
            Ok(v) => self.visit_u64(v),
            Err(_) => Err(E::invalid_value(Unexpected::Signed(v), &self)),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[derive(Debug, serde::Deserialize)]
    struct File {
        #[serde(deserialize_with = "at_least_one")]
        steps: NonZeroU32,
        #[serde(default, deserialize_with = "at_least_one_when_set")]
        limit: Option<NonZeroUsize>,
    }

    fn error(text: &str) -> String {
        toml::from_str::<File>(text)
            .unwrap_err()
            .message()
            .to_string()
    }

    #[test]
    fn a_count_of_zero_is_refused_in_the_words_of_the_checks() {
        assert_eq!(error("steps = 0"), "must be at least 1");
        assert_eq!(error("steps = 3\nlimit = 0"), "must be at least 1 when set");
        // Out of range and of the wrong type read as serde's own errors for a u32.
        assert_eq!(
            error("steps = -1"),
            "invalid value: integer `-1`, expected u32"
        );
        assert_eq!(
            error("steps = 5000000000"),
            "invalid value: integer `5000000000`, expected u32"
        );
        assert_eq!(
            error("steps = \"x\""),
            "invalid type: string \"x\", expected u32"
        );
        let f: File = toml::from_str("steps = 7").unwrap();
        assert_eq!(f.steps.get(), 7);
        assert_eq!(f.limit, None);
        let f: File = toml::from_str("steps = 7\nlimit = 2").unwrap();
        assert_eq!(f.limit.map(NonZeroUsize::get), Some(2));
    }
}
