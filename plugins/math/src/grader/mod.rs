//! The answer grader: pure functions on strings, no state, never panicking.
//!
//! - [`last_boxed`] finds the final answer in a completion (the last `\boxed{..}`).
//! - [`normalize`] rewrites an answer into a canonical string (LaTeX wrappers, units,
//!   thousands separators, `\dfrac`, ...).
//! - [`numeric_value`] evaluates a normalized answer that is a plain value (number,
//!   fraction, simple radical).
//! - [`is_equiv`] decides whether an answer matches the gold answer.
//! - [`last_number`] finds the last number in free text (GSM8K-style fallback).
//!
//! ```
//! use drmas_math::grader::{is_equiv, last_boxed};
//!
//! let answer = last_boxed(r"so the total is \boxed{\dfrac{1}{2}}.").unwrap();
//! assert!(is_equiv(&answer, "0.5"));
//! assert!(!is_equiv("3+4", "7"));
//! ```

mod boxed;
mod equiv;
mod normalize;
mod value;

pub use boxed::{last_boxed, last_number};
pub use equiv::{DECIMALS, TOLERANCE, is_equiv, numbers_close};
pub use normalize::{normalize, split_assignment, strip_assignment};
pub use value::numeric_value;
