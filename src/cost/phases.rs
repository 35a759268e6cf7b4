//! [`Phases`]: a cost per phase (vision encoder, LLM) and its arithmetic.

use core::ops::{Add, AddAssign, Mul, Sub};

use super::Phase;

/// A cost per phase, in the model's unit (seconds, FLOPs, ...).
///
/// Costs add phase by phase; [`total`](Phases::total) is the scalar view for
/// setups with a single barrier (DDP with `no_sync`). Built-in models only
/// produce finite, non-negative values.
///
/// # Examples
///
/// ```
/// use microbatch::cost::Phases;
///
/// let a = Phases::new(1.0, 4.0);
/// let b = Phases::new(3.0, 2.0);
/// assert_eq!(a + b, Phases::new(4.0, 6.0));
/// assert_eq!(a.max(b), Phases::new(3.0, 4.0));
/// assert_eq!((a * 2.0).total(), 10.0);
/// assert_eq!([a, b].into_iter().sum::<Phases>(), a + b);
/// ```
#[derive(Clone, Copy, Debug, Default, PartialEq)]
#[cfg_attr(feature = "serde", derive(serde::Serialize, serde::Deserialize))]
pub struct Phases {
    /// The vision encoder's cost.
    pub vision: f64,
    /// The language model's cost.
    pub language: f64,
}

impl Phases {
    /// The zero cost.
    ///
    /// # Examples
    ///
    /// ```
    /// use microbatch::cost::Phases;
    ///
    /// assert_eq!(Phases::ZERO, Phases::default());
    /// assert_eq!(Phases::new(1.0, 2.0) + Phases::ZERO, Phases::new(1.0, 2.0));
    /// ```
    pub const ZERO: Phases = Phases {
        vision: 0.0,
        language: 0.0,
    };

    /// A cost of `vision` in the vision phase and `language` in the language
    /// phase.
    ///
    /// # Examples
    ///
    /// ```
    /// use microbatch::cost::Phases;
    ///
    /// let p = Phases::new(1.5, 4.0);
    /// assert_eq!((p.vision, p.language), (1.5, 4.0));
    /// ```
    #[must_use]
    pub const fn new(vision: f64, language: f64) -> Self {
        Phases { vision, language }
    }

    /// `value` in `phase`, zero elsewhere.
    ///
    /// # Examples
    ///
    /// ```
    /// use microbatch::cost::{Phase, Phases};
    ///
    /// assert_eq!(Phases::only(Phase::Language, 3.0), Phases::new(0.0, 3.0));
    /// ```
    #[must_use]
    pub const fn only(phase: Phase, value: f64) -> Self {
        match phase {
            Phase::Vision => Phases::new(value, 0.0),
            Phase::Language => Phases::new(0.0, value),
        }
    }

    /// The cost of one phase.
    ///
    /// # Examples
    ///
    /// ```
    /// use microbatch::cost::{Phase, Phases};
    ///
    /// let p = Phases::new(1.5, 4.0);
    /// assert_eq!((p.get(Phase::Vision), p.get(Phase::Language)), (1.5, 4.0));
    /// ```
    #[must_use]
    pub const fn get(&self, phase: Phase) -> f64 {
        match phase {
            Phase::Vision => self.vision,
            Phase::Language => self.language,
        }
    }

    /// The sum over phases: the cost under a single barrier.
    ///
    /// # Examples
    ///
    /// ```
    /// use microbatch::cost::Phases;
    ///
    /// assert_eq!(Phases::new(1.5, 4.0).total(), 5.5);
    /// ```
    #[must_use]
    pub fn total(&self) -> f64 {
        self.vision + self.language
    }

    /// The phase-wise maximum.
    ///
    /// # Examples
    ///
    /// ```
    /// use microbatch::cost::Phases;
    ///
    /// let a = Phases::new(1.0, 4.0);
    /// assert_eq!(a.max(Phases::new(3.0, 2.0)), Phases::new(3.0, 4.0));
    /// ```
    #[must_use]
    pub fn max(self, other: Phases) -> Phases {
        Phases::new(
            max_f64(self.vision, other.vision),
            max_f64(self.language, other.language),
        )
    }

    /// Applies `f` to every phase.
    ///
    /// # Examples
    ///
    /// ```
    /// use microbatch::cost::Phases;
    ///
    /// let seconds = Phases::new(2e12, 6e12).map(|flops| flops / 1e12);
    /// assert_eq!(seconds, Phases::new(2.0, 6.0));
    /// ```
    #[must_use]
    pub fn map(self, mut f: impl FnMut(f64) -> f64) -> Phases {
        Phases::new(f(self.vision), f(self.language))
    }
}

/// `max` without `f64::max` semantics questions: NaN never occurs in built-in
/// costs; if one does (a user closure), it propagates from `a`.
#[inline]
fn max_f64(a: f64, b: f64) -> f64 {
    if b > a {
        b
    } else {
        a
    }
}

impl Add for Phases {
    type Output = Phases;
    #[inline]
    fn add(self, rhs: Phases) -> Phases {
        Phases::new(self.vision + rhs.vision, self.language + rhs.language)
    }
}

impl AddAssign for Phases {
    #[inline]
    fn add_assign(&mut self, rhs: Phases) {
        *self = *self + rhs;
    }
}

impl Sub for Phases {
    type Output = Phases;
    #[inline]
    fn sub(self, rhs: Phases) -> Phases {
        Phases::new(self.vision - rhs.vision, self.language - rhs.language)
    }
}

impl Mul<f64> for Phases {
    type Output = Phases;
    #[inline]
    fn mul(self, rhs: f64) -> Phases {
        Phases::new(self.vision * rhs, self.language * rhs)
    }
}

impl core::iter::Sum for Phases {
    fn sum<I: Iterator<Item = Phases>>(iter: I) -> Phases {
        iter.fold(Phases::ZERO, Add::add)
    }
}

impl<'a> core::iter::Sum<&'a Phases> for Phases {
    fn sum<I: Iterator<Item = &'a Phases>>(iter: I) -> Phases {
        iter.fold(Phases::ZERO, |a, b| a + *b)
    }
}
