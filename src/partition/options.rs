//! The settings a partition is asked for: the [`Objective`], the objective
//! over several [`Dims`] and the construction [`Algorithm`].

/// What a partition minimizes.
///
/// # Examples
///
/// ```
/// use microbatch::partition::{Objective, Partitioner};
///
/// let p = Partitioner::new(2).objective(Objective::Spread).partition(&[5u32, 4, 3, 3, 1])?;
/// assert_eq!(p.objective(), 0); // {5, 3} and {4, 3, 1}
/// # Ok::<(), microbatch::Error>(())
/// ```
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
#[cfg_attr(feature = "serde", derive(serde::Serialize, serde::Deserialize))]
#[non_exhaustive]
pub enum Objective {
    /// The largest part sum (the makespan): what a barrier waits for.
    #[default]
    MaxPart,
    /// The spread, largest part sum minus smallest.
    Spread,
}

impl Objective {
    /// Every objective, in order.
    ///
    /// # Examples
    ///
    /// ```
    /// use microbatch::partition::Objective;
    ///
    /// assert!(Objective::ALL.iter().all(|x| x.name().parse::<Objective>() == Ok(*x)));
    /// ```
    pub const ALL: [Objective; 2] = [Objective::MaxPart, Objective::Spread];

    /// The name of every objective, in the order of [`Objective::ALL`]: the
    /// names [`FromStr`](core::str::FromStr) reads and an unknown name's
    /// error lists.
    ///
    /// # Examples
    ///
    /// ```
    /// use microbatch::partition::Objective;
    ///
    /// assert_eq!(Objective::NAMES, ["max_part", "spread"]);
    /// assert!("?".parse::<Objective>().unwrap_err().to_string().ends_with("max_part, spread"));
    /// ```
    pub const NAMES: [&'static str; 2] = ["max_part", "spread"];

    /// The name used by [`Display`](core::fmt::Display) and
    /// [`FromStr`](core::str::FromStr): `max_part` or `spread`.
    ///
    /// # Examples
    ///
    /// ```
    /// use microbatch::partition::Objective;
    ///
    /// assert_eq!(Objective::MaxPart.name(), "max_part");
    /// assert_eq!("max_part".parse::<Objective>()?, Objective::MaxPart);
    /// # Ok::<(), microbatch::Error>(())
    /// ```
    #[must_use]
    pub const fn name(self) -> &'static str {
        Self::NAMES[self as usize]
    }
}

crate::error::impl_named!(Objective, "objective", &Objective::NAMES);

/// How the objective treats items with several dimensions.
///
/// # Examples
///
/// ```
/// use microbatch::partition::{Dims, Partitioner};
///
/// // (ViT cost, LLM cost) per sample.
/// let items = [[6u32, 0], [5, 0], [0, 6], [0, 5]];
/// // Balanced totals, but one rank has all the ViT work: 11 + 11 per phase.
/// let combined = Partitioner::new(2).partition(&items)?;
/// assert_eq!(combined.objective(), 11);
/// assert_eq!((combined.max_sum(0), combined.max_sum(1)), (11, 11));
/// // Each phase balanced: 6 + 6.
/// let per_dim = Partitioner::new(2).dims(Dims::PerDim).partition(&items)?;
/// assert_eq!(per_dim.objective(), 12);
/// assert_eq!((per_dim.max_sum(0), per_dim.max_sum(1)), (6, 6));
/// # Ok::<(), microbatch::Error>(())
/// ```
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
#[cfg_attr(feature = "serde", derive(serde::Serialize, serde::Deserialize))]
#[non_exhaustive]
pub enum Dims {
    /// The objective of the combined weight, the sum of an item's sizes over
    /// its dimensions: the largest part of `sum_d size_d` (one barrier for
    /// the whole work, as DDP with one all-reduce per step).
    #[default]
    Combined,
    /// The sum over dimensions of each dimension's objective: for
    /// [`Objective::MaxPart`], the sum of each dimension's largest part
    /// (phases that each wait at their own barrier, as a ViT and an LLM under
    /// FSDP).
    PerDim,
}

impl Dims {
    /// Both values, in order: combined, per dimension.
    ///
    /// # Examples
    ///
    /// ```
    /// use microbatch::partition::Dims;
    ///
    /// assert!(Dims::ALL.iter().all(|x| x.name().parse::<Dims>() == Ok(*x)));
    /// ```
    pub const ALL: [Dims; 2] = [Dims::Combined, Dims::PerDim];

    /// The name of each value, in the order of [`Dims::ALL`]: the
    /// names [`FromStr`](core::str::FromStr) reads and an unknown name's
    /// error lists.
    ///
    /// # Examples
    ///
    /// ```
    /// use microbatch::partition::Dims;
    ///
    /// assert_eq!(Dims::NAMES, ["combined", "per_dim"]);
    /// assert!("?".parse::<Dims>().unwrap_err().to_string().ends_with("combined, per_dim"));
    /// ```
    pub const NAMES: [&'static str; 2] = ["combined", "per_dim"];

    /// The name used by [`Display`](core::fmt::Display) and
    /// [`FromStr`](core::str::FromStr): `combined` or `per_dim`.
    ///
    /// # Examples
    ///
    /// ```
    /// use microbatch::partition::Dims;
    ///
    /// assert_eq!(Dims::Combined.name(), "combined");
    /// assert_eq!("combined".parse::<Dims>()?, Dims::Combined);
    /// # Ok::<(), microbatch::Error>(())
    /// ```
    #[must_use]
    pub const fn name(self) -> &'static str {
        Self::NAMES[self as usize]
    }
}

crate::error::impl_named!(Dims, "dims", &Dims::NAMES);

/// The construction algorithm of a [`Partitioner`](super::Partitioner).
///
/// # Examples
///
/// ```
/// use microbatch::partition::{Algorithm, Partitioner};
///
/// let p = Partitioner::new(2).algorithm(Algorithm::Exact).partition(&[8u32, 7, 6, 5, 4])?;
/// assert_eq!(p.objective(), 15);
/// assert!(p.proven_optimal());
/// # Ok::<(), microbatch::Error>(())
/// ```
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
#[cfg_attr(feature = "serde", derive(serde::Serialize, serde::Deserialize))]
#[non_exhaustive]
pub enum Algorithm {
    /// Longest processing time first: see [`lpt`](super::lpt).
    #[default]
    Lpt,
    /// The largest differencing method: see [`karmarkar_karp`](super::karmarkar_karp).
    KarmarkarKarp,
    /// Branch and bound from the refined LPT result, within the node
    /// budget: see [`exact`](super::exact).
    Exact,
}

impl Algorithm {
    /// Every algorithm, in order.
    ///
    /// # Examples
    ///
    /// ```
    /// use microbatch::partition::Algorithm;
    ///
    /// assert!(Algorithm::ALL.iter().all(|x| x.name().parse::<Algorithm>() == Ok(*x)));
    /// ```
    pub const ALL: [Algorithm; 3] = [Algorithm::Lpt, Algorithm::KarmarkarKarp, Algorithm::Exact];

    /// The name of every algorithm, in the order of [`Algorithm::ALL`]: the
    /// names [`FromStr`](core::str::FromStr) reads and an unknown name's
    /// error lists.
    ///
    /// # Examples
    ///
    /// ```
    /// use microbatch::partition::Algorithm;
    ///
    /// assert_eq!(Algorithm::NAMES, ["lpt", "karmarkar_karp", "exact"]);
    /// assert!("?".parse::<Algorithm>().unwrap_err().to_string().ends_with("lpt, karmarkar_karp, exact"));
    /// ```
    pub const NAMES: [&'static str; 3] = ["lpt", "karmarkar_karp", "exact"];

    /// The name used by [`Display`](core::fmt::Display) and
    /// [`FromStr`](core::str::FromStr): `lpt`, `karmarkar_karp` or `exact`.
    ///
    /// # Examples
    ///
    /// ```
    /// use microbatch::partition::Algorithm;
    ///
    /// assert_eq!(Algorithm::Lpt.name(), "lpt");
    /// assert_eq!("lpt".parse::<Algorithm>()?, Algorithm::Lpt);
    /// # Ok::<(), microbatch::Error>(())
    /// ```
    #[must_use]
    pub const fn name(self) -> &'static str {
        Self::NAMES[self as usize]
    }
}

crate::error::impl_named!(Algorithm, "algorithm", &Algorithm::NAMES);
