//! [`Phase`]: the vision encoder or the language model, a leaf module that
//! both `cost` (which re-exports it as `microbatch::cost::Phase`, its public
//! path) and `error` import, so that neither imports the other for it.

use core::fmt;

/// A phase of a training step with its own barrier under FSDP/ZeRO-3: the
/// vision encoder or the language model.
///
/// # Examples
///
/// ```
/// use microbatch::cost::{Phase, Phases};
///
/// let p = Phases::only(Phase::Vision, 2.0);
/// assert_eq!((p.get(Phase::Vision), p.get(Phase::Language)), (2.0, 0.0));
/// assert_eq!(Phase::ALL.len(), 2);
/// ```
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
#[cfg_attr(feature = "serde", derive(serde::Serialize, serde::Deserialize))]
pub enum Phase {
    /// The vision encoder (and its projector).
    Vision,
    /// The language model.
    Language,
}

impl Phase {
    /// Every phase, in order.
    ///
    /// # Examples
    ///
    /// ```
    /// use microbatch::cost::{Phase, Phases};
    ///
    /// let p = Phases::new(1.0, 4.0);
    /// let total: f64 = Phase::ALL.iter().map(|&phase| p.get(phase)).sum();
    /// assert_eq!(total, p.total());
    /// ```
    pub const ALL: [Phase; 2] = [Phase::Vision, Phase::Language];

    /// The name of every phase, in the order of [`Phase::ALL`], as
    /// [`Display`](fmt::Display) writes it: `vision`, `language`.
    ///
    /// # Examples
    ///
    /// ```
    /// use microbatch::cost::Phase;
    ///
    /// assert_eq!(Phase::NAMES, ["vision", "language"]);
    /// assert_eq!(Phase::NAMES[1], Phase::Language.to_string());
    /// ```
    pub const NAMES: [&'static str; 2] = ["vision", "language"];

    /// The phase's name: `vision` or `language`.
    ///
    /// # Examples
    ///
    /// ```
    /// use microbatch::cost::Phase;
    ///
    /// assert_eq!(Phase::Vision.name(), "vision");
    /// ```
    #[must_use]
    pub const fn name(self) -> &'static str {
        Self::NAMES[self as usize]
    }
}

impl fmt::Display for Phase {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}
