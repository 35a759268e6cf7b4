//! Loss normalization: the step-global denominators and the scale of each micro-batch's summed loss.

/// What the loss is averaged over in the unbalanced step.
///
/// # Examples
///
/// ```
/// use microbatch::plan::Normalization;
///
/// assert_eq!(Normalization::Token.to_string(), "token");
/// ```
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[cfg_attr(feature = "serde", derive(serde::Serialize, serde::Deserialize))]
pub enum Normalization {
    /// The mean over every loss token of the step: a micro-batch's summed
    /// loss is the sum over its loss tokens.
    Token,
    /// The mean over the step's samples of each sample's mean loss: a
    /// micro-batch's summed loss is the sum over its samples of each
    /// sample's mean.
    Sample,
}

impl Normalization {
    /// Every normalization, in order.
    ///
    /// # Examples
    ///
    /// ```
    /// use microbatch::plan::Normalization;
    ///
    /// assert!(Normalization::ALL.iter().all(|x| x.name().parse::<Normalization>() == Ok(*x)));
    /// ```
    pub const ALL: [Normalization; 2] = [Normalization::Token, Normalization::Sample];

    /// The name of every normalization, in the order of [`Normalization::ALL`]: the
    /// names [`FromStr`](core::str::FromStr) reads and an unknown name's
    /// error lists.
    ///
    /// # Examples
    ///
    /// ```
    /// use microbatch::plan::Normalization;
    ///
    /// assert_eq!(Normalization::NAMES, ["token", "sample"]);
    /// assert!("?".parse::<Normalization>().unwrap_err().to_string().ends_with("token, sample"));
    /// ```
    pub const NAMES: [&'static str; 2] = ["token", "sample"];

    /// The name used by [`Display`](core::fmt::Display) and
    /// [`FromStr`](core::str::FromStr): `token` or `sample`.
    ///
    /// # Examples
    ///
    /// ```
    /// use microbatch::plan::Normalization;
    ///
    /// assert_eq!(Normalization::Token.name(), "token");
    /// assert_eq!("token".parse::<Normalization>()?, Normalization::Token);
    /// # Ok::<(), microbatch::Error>(())
    /// ```
    #[must_use]
    pub const fn name(self) -> &'static str {
        Self::NAMES[self as usize]
    }
}

crate::error::impl_named!(Normalization, "normalization", &Normalization::NAMES);

/// How the ranks' gradients are combined.
///
/// # Examples
///
/// ```
/// use microbatch::plan::Reduction;
///
/// assert_eq!(Reduction::Mean.to_string(), "mean");
/// ```
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[cfg_attr(feature = "serde", derive(serde::Serialize, serde::Deserialize))]
pub enum Reduction {
    /// An all-reduce that sums (FSDP with a custom reduction, or a manual
    /// `all_reduce(SUM)`).
    Sum,
    /// An all-reduce that averages over the `R` ranks (PyTorch DDP's
    /// default): the scale carries a factor `R` that undoes it.
    Mean,
}

impl Reduction {
    /// Every reduction, in order.
    ///
    /// # Examples
    ///
    /// ```
    /// use microbatch::plan::Reduction;
    ///
    /// assert!(Reduction::ALL.iter().all(|x| x.name().parse::<Reduction>() == Ok(*x)));
    /// ```
    pub const ALL: [Reduction; 2] = [Reduction::Sum, Reduction::Mean];

    /// The name of every reduction, in the order of [`Reduction::ALL`]: the
    /// names [`FromStr`](core::str::FromStr) reads and an unknown name's
    /// error lists.
    ///
    /// # Examples
    ///
    /// ```
    /// use microbatch::plan::Reduction;
    ///
    /// assert_eq!(Reduction::NAMES, ["sum", "mean"]);
    /// assert!("?".parse::<Reduction>().unwrap_err().to_string().ends_with("sum, mean"));
    /// ```
    pub const NAMES: [&'static str; 2] = ["sum", "mean"];

    /// The name used by [`Display`](core::fmt::Display) and
    /// [`FromStr`](core::str::FromStr): `sum` or `mean`.
    ///
    /// # Examples
    ///
    /// ```
    /// use microbatch::plan::Reduction;
    ///
    /// assert_eq!(Reduction::Sum.name(), "sum");
    /// assert_eq!("sum".parse::<Reduction>()?, Reduction::Sum);
    /// # Ok::<(), microbatch::Error>(())
    /// ```
    #[must_use]
    pub const fn name(self) -> &'static str {
        Self::NAMES[self as usize]
    }
}

crate::error::impl_named!(Reduction, "reduction", &Reduction::NAMES);

/// The step-global loss denominators of a plan and the scales that make the
/// accumulated gradient equal the unbalanced one.
///
/// Every micro-batch on every rank multiplies its *summed* loss by the same
/// [`scale`](Loss::scale) before backward; gradients accumulate over the
/// micro-steps and are all-reduced once. The scale depends only on the
/// step, never on the micro-batch, which is what makes the update
/// independent of where the planner put each sample.
///
/// A sample's loss tokens default to its text tokens
/// ([`StepSample::loss_tokens`](crate::plan::StepSample::loss_tokens)).
///
/// # Examples
///
/// ```
/// use microbatch::plan::{Loss, Normalization, Reduction};
///
/// let loss = Loss::new(1000, 10, 4);
/// assert_eq!(loss.scale(Normalization::Token, Reduction::Sum), 1.0 / 1000.0);
/// assert_eq!(loss.scale(Normalization::Token, Reduction::Mean), 4.0 / 1000.0);
/// assert_eq!(loss.scale_ratio(Normalization::Sample, Reduction::Mean), (4, 10));
/// ```
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[cfg_attr(feature = "serde", derive(serde::Serialize, serde::Deserialize))]
pub struct Loss {
    /// The loss tokens of the whole step (saturating at `u64::MAX`).
    pub loss_tokens: u64,
    /// The samples of the whole step.
    pub samples: u64,
    /// The data-parallel ranks.
    pub ranks: u64,
}

impl Loss {
    /// The denominators of a step with `loss_tokens` loss tokens, `samples`
    /// samples and `ranks` ranks.
    ///
    /// # Examples
    ///
    /// ```
    /// use microbatch::plan::{Loss, Normalization};
    ///
    /// let loss = Loss::new(512, 8, 4);
    /// assert_eq!((loss.loss_tokens, loss.samples, loss.ranks), (512, 8, 4));
    /// assert_eq!(loss.denominator(Normalization::Token), 512);
    /// ```
    #[must_use]
    pub const fn new(loss_tokens: u64, samples: u64, ranks: u64) -> Self {
        Loss {
            loss_tokens,
            samples,
            ranks,
        }
    }

    /// The step-global denominator of a normalization: the loss tokens or
    /// the samples of the step.
    ///
    /// # Examples
    ///
    /// ```
    /// use microbatch::plan::{Loss, Normalization};
    ///
    /// assert_eq!(Loss::new(1000, 10, 4).denominator(Normalization::Sample), 10);
    /// ```
    #[must_use]
    pub const fn denominator(&self, normalization: Normalization) -> u64 {
        match normalization {
            Normalization::Token => self.loss_tokens,
            Normalization::Sample => self.samples,
        }
    }

    /// The scale as an exact fraction `(numerator, denominator)`: `1 / D`
    /// for [`Reduction::Sum`] and `R / D` for [`Reduction::Mean`], where `D`
    /// is the [`denominator`](Loss::denominator). A zero denominator (a step
    /// without loss tokens) gives `(0, 1)`: nothing to learn.
    ///
    /// # Examples
    ///
    /// ```
    /// use microbatch::plan::{Loss, Normalization, Reduction};
    ///
    /// let loss = Loss::new(1000, 10, 4);
    /// assert_eq!(loss.scale_ratio(Normalization::Token, Reduction::Sum), (1, 1000));
    /// assert_eq!(loss.scale_ratio(Normalization::Sample, Reduction::Mean), (4, 10)); // not reduced
    /// assert_eq!(Loss::new(0, 3, 2).scale_ratio(Normalization::Token, Reduction::Mean), (0, 1));
    /// ```
    #[must_use]
    pub const fn scale_ratio(
        &self,
        normalization: Normalization,
        reduction: Reduction,
    ) -> (u64, u64) {
        let d = self.denominator(normalization);
        if d == 0 {
            return (0, 1);
        }
        match reduction {
            Reduction::Sum => (1, d),
            Reduction::Mean => (self.ranks, d),
        }
    }

    /// The factor each micro-batch's summed loss is multiplied by before
    /// backward: `1 / D` for a summing all-reduce, `R / D` for an averaging
    /// one, and `0` for a step without loss tokens.
    ///
    /// # Examples
    ///
    /// ```
    /// use microbatch::plan::{Loss, Normalization, Reduction};
    ///
    /// let loss = Loss::new(0, 3, 2);
    /// assert_eq!(loss.scale(Normalization::Token, Reduction::Mean), 0.0);
    /// ```
    #[must_use]
    pub fn scale(&self, normalization: Normalization, reduction: Reduction) -> f64 {
        let (num, den) = self.scale_ratio(normalization, reduction);
        num as f64 / den as f64
    }
}
