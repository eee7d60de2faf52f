//! Exact fractions, so `6 / 4 * 2` is 3 and never 2.9999999.

use std::fmt;

/// Why a fraction could not be computed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ArithError {
    DivisionByZero,
    /// A value outside `i128`: far beyond any Countdown target, but a model may try.
    Overflow,
}

impl fmt::Display for ArithError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            ArithError::DivisionByZero => "division by zero",
            ArithError::Overflow => "a number too large to compute",
        })
    }
}

/// A fraction in lowest terms with a positive denominator, so equal values are equal
/// structs.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Rational {
    num: i128,
    den: i128,
}

impl Rational {
    pub fn integer(n: i128) -> Self {
        Self { num: n, den: 1 }
    }

    pub fn new(num: i128, den: i128) -> Result<Self, ArithError> {
        if den == 0 {
            return Err(ArithError::DivisionByZero);
        }
        let g = gcd(num, den);
        let (mut num, mut den) = (num / g, den / g);
        if den < 0 {
            num = num.checked_neg().ok_or(ArithError::Overflow)?;
            den = den.checked_neg().ok_or(ArithError::Overflow)?;
        }
        Ok(Self { num, den })
    }

    /// The value as an integer, when it is one.
    pub fn as_integer(self) -> Option<i128> {
        (self.den == 1).then_some(self.num)
    }

    pub fn add(self, other: Self) -> Result<Self, ArithError> {
        // a/b + c/d = (ad + cb) / bd
        let num = mul(self.num, other.den)?
            .checked_add(mul(other.num, self.den)?)
            .ok_or(ArithError::Overflow)?;
        Self::new(num, mul(self.den, other.den)?)
    }

    pub fn sub(self, other: Self) -> Result<Self, ArithError> {
        let neg = Self {
            num: other.num.checked_neg().ok_or(ArithError::Overflow)?,
            den: other.den,
        };
        self.add(neg)
    }

    pub fn mul(self, other: Self) -> Result<Self, ArithError> {
        Self::new(mul(self.num, other.num)?, mul(self.den, other.den)?)
    }

    pub fn div(self, other: Self) -> Result<Self, ArithError> {
        if other.num == 0 {
            return Err(ArithError::DivisionByZero);
        }
        Self::new(mul(self.num, other.den)?, mul(self.den, other.num)?)
    }
}

impl fmt::Display for Rational {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self.as_integer() {
            Some(n) => write!(f, "{n}"),
            None => write!(f, "{}/{}", self.num, self.den),
        }
    }
}

fn mul(a: i128, b: i128) -> Result<i128, ArithError> {
    a.checked_mul(b).ok_or(ArithError::Overflow)
}

/// The greatest common divisor, positive (1 for `gcd(0, 0)`, so dividing by it is safe).
fn gcd(a: i128, b: i128) -> i128 {
    let (mut a, mut b) = (a.unsigned_abs(), b.unsigned_abs());
    while b != 0 {
        (a, b) = (b, a % b);
    }
    // Only `gcd(i128::MIN, 0)` exceeds i128::MAX; dividing by 1 instead keeps it exact.
    i128::try_from(a).ok().filter(|&g| g != 0).unwrap_or(1)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn r(num: i128, den: i128) -> Rational {
        Rational::new(num, den).unwrap()
    }

    #[test]
    fn fractions_are_kept_in_lowest_terms_with_a_positive_denominator() {
        assert_eq!(r(6, 4), r(3, 2));
        assert_eq!(r(3, -6), r(-1, 2));
        assert_eq!(r(0, -5), Rational::integer(0));
        assert_eq!(r(-1, 2).to_string(), "-1/2");
        assert_eq!(r(8, 4).to_string(), "2");
        assert_eq!(r(8, 4).as_integer(), Some(2));
        assert_eq!(r(7, 2).as_integer(), None);
    }

    #[test]
    fn arithmetic_is_exact() {
        let third = r(1, 3);
        let sum = third.add(third).unwrap().add(third).unwrap();
        assert_eq!(sum, Rational::integer(1));
        assert_eq!(r(6, 1).div(r(4, 1)).unwrap().mul(r(2, 1)).unwrap(), r(3, 1));
        assert_eq!(r(1, 2).sub(r(3, 4)).unwrap(), r(-1, 4));
    }

    #[test]
    fn division_by_zero_and_overflow_are_errors() {
        assert_eq!(Rational::new(1, 0), Err(ArithError::DivisionByZero));
        assert_eq!(r(5, 1).div(r(0, 1)), Err(ArithError::DivisionByZero));
        let big = Rational::integer(i128::MAX);
        assert_eq!(big.add(Rational::integer(1)), Err(ArithError::Overflow));
        assert_eq!(big.mul(Rational::integer(2)), Err(ArithError::Overflow));
    }
}
