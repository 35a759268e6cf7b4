//! Sync models: where the ranks wait for each other, which decides the step time.

/// Where the ranks wait for each other, which decides the step time.
///
/// # Examples
///
/// ```
/// use microbatch::plan::SyncModel;
///
/// assert_eq!("micro-step".parse::<SyncModel>(), Ok(SyncModel::MicroStep));
/// assert_eq!(SyncModel::Phase.to_string(), "phase");
/// assert!("fsdp".parse::<SyncModel>().is_err());
/// ```
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Default)]
#[cfg_attr(feature = "serde", derive(serde::Serialize, serde::Deserialize))]
#[non_exhaustive]
pub enum SyncModel {
    /// One barrier per step (DDP with `no_sync` during accumulation): the
    /// step takes the longest rank total.
    #[default]
    Step,
    /// A barrier every micro-step (FSDP / ZeRO-3, pipelines): the sum over
    /// micro-steps of the slowest rank.
    MicroStep,
    /// A barrier per phase inside each micro-step (the ViT and the LLM
    /// gather their parameters separately): the sum over micro-steps and
    /// phases of the slowest rank in that phase.
    Phase,
}

impl SyncModel {
    /// Every sync model, in order.
    ///
    /// # Examples
    ///
    /// ```
    /// use microbatch::plan::SyncModel;
    ///
    /// assert_eq!(SyncModel::ALL[0], SyncModel::default());
    /// assert!(SyncModel::ALL.iter().all(|m| m.name().parse::<SyncModel>() == Ok(*m)));
    /// ```
    pub const ALL: [SyncModel; 3] = [SyncModel::Step, SyncModel::MicroStep, SyncModel::Phase];

    /// The name of every sync model, in the order of [`SyncModel::ALL`]: the
    /// names [`FromStr`](core::str::FromStr) reads and an unknown name's
    /// error lists.
    ///
    /// # Examples
    ///
    /// ```
    /// use microbatch::plan::SyncModel;
    ///
    /// assert_eq!(SyncModel::NAMES, ["step", "micro-step", "phase"]);
    /// ```
    pub const NAMES: [&'static str; 3] = ["step", "micro-step", "phase"];

    /// The name used by [`Display`](core::fmt::Display) and
    /// [`FromStr`](core::str::FromStr): `step`, `micro-step` or `phase`.
    ///
    /// # Examples
    ///
    /// ```
    /// use microbatch::plan::SyncModel;
    ///
    /// let names: Vec<&str> = SyncModel::ALL.iter().map(SyncModel::name).collect();
    /// assert_eq!(names, ["step", "micro-step", "phase"]);
    /// ```
    #[must_use]
    pub const fn name(&self) -> &'static str {
        Self::NAMES[*self as usize]
    }
}

crate::error::impl_named!(SyncModel, "sync model", &SyncModel::NAMES);
