//! The planner's input: one sample of an optimizer step, with its id and the tokens that carry loss.

use crate::cost::Sample;

/// One sample of an optimizer step: an id, the sample (text tokens and
/// images) and the tokens that carry loss.
///
/// Ids must be unique within a step; they are the data loader's order, and
/// the plan lists samples by id.
///
/// # Examples
///
/// ```
/// use microbatch::cost::{Image, Sample};
/// use microbatch::plan::StepSample;
///
/// let s = StepSample::new(7, Sample::new(312, [Image::new(576), Image::new(576)]));
/// assert_eq!((s.id(), s.sample().tokens()), (7, 1464));
/// assert_eq!(s.loss_tokens(), 312); // the text tokens, by default
/// assert_eq!(s.with_loss_tokens(40).loss_tokens(), 40);
/// ```
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
#[cfg_attr(feature = "serde", derive(serde::Serialize, serde::Deserialize))]
pub struct StepSample {
    id: u64,
    sample: Sample,
    /// The tokens that carry loss; `None` means all text tokens.
    loss_tokens: Option<u64>,
}

impl StepSample {
    /// A sample whose loss tokens are its text tokens.
    ///
    /// # Examples
    ///
    /// ```
    /// use microbatch::cost::{Image, Sample};
    /// use microbatch::plan::StepSample;
    ///
    /// let s = StepSample::new(3, Sample::new(120, [Image::new(576)]));
    /// assert_eq!((s.id(), s.loss_tokens()), (3, 120));
    /// assert_eq!(s.sample().tokens(), 696);
    /// ```
    #[must_use]
    pub fn new(id: u64, sample: Sample) -> Self {
        StepSample {
            id,
            sample,
            loss_tokens: None,
        }
    }

    /// Sets the tokens that carry loss (builder style), for example the
    /// answer's tokens of a chat sample: positions of the packed sequence,
    /// so at most the sample's [`tokens`](Sample::tokens) (text and image);
    /// [`Planner::plan`](crate::plan::Planner::plan) refuses more with
    /// [`Error::LossTokens`](crate::Error::LossTokens).
    ///
    /// # Examples
    ///
    /// ```
    /// use microbatch::cost::{Sample, Tokens};
    /// use microbatch::plan::{Planner, StepSample};
    ///
    /// let samples = [
    ///     StepSample::new(0, Sample::text_only(500)).with_loss_tokens(120),
    ///     StepSample::new(1, Sample::text_only(80)),
    /// ];
    /// let plan = Planner::new(Tokens::new(1.0)?).ranks(1).seq_len(1024).plan(&samples)?;
    /// assert_eq!(plan.loss().loss_tokens, 200); // 120 as set + 80 text tokens
    /// # Ok::<(), microbatch::Error>(())
    /// ```
    #[must_use]
    pub fn with_loss_tokens(mut self, loss_tokens: u64) -> Self {
        self.loss_tokens = Some(loss_tokens);
        self
    }

    /// The sample's id, unique within the step.
    ///
    /// # Examples
    ///
    /// ```
    /// use microbatch::cost::Sample;
    /// use microbatch::plan::StepSample;
    ///
    /// assert_eq!(StepSample::new(42, Sample::text_only(10)).id(), 42);
    /// ```
    #[must_use]
    pub fn id(&self) -> u64 {
        self.id
    }

    /// Its text tokens and images.
    ///
    /// # Examples
    ///
    /// ```
    /// use microbatch::cost::{Image, Sample};
    /// use microbatch::plan::StepSample;
    ///
    /// let s = StepSample::new(0, Sample::new(90, [Image::new(576)]));
    /// assert_eq!((s.sample().text(), s.sample().images().len()), (90, 1));
    /// ```
    #[must_use]
    pub fn sample(&self) -> &Sample {
        &self.sample
    }

    /// The tokens that carry loss: as set with
    /// [`with_loss_tokens`](StepSample::with_loss_tokens), or the text
    /// tokens.
    ///
    /// # Examples
    ///
    /// ```
    /// use microbatch::cost::{Image, Sample};
    /// use microbatch::plan::StepSample;
    ///
    /// let s = StepSample::new(0, Sample::new(90, [Image::new(576)]));
    /// assert_eq!(s.loss_tokens(), 90); // the text tokens: images carry no loss
    /// assert_eq!(s.with_loss_tokens(30).loss_tokens(), 30);
    /// ```
    #[must_use]
    pub fn loss_tokens(&self) -> u64 {
        self.loss_tokens
            .unwrap_or_else(|| u64::from(self.sample.text()))
    }

    /// The ViT units (tiles or frame groups) of all images.
    ///
    /// # Examples
    ///
    /// ```
    /// use core::num::NonZeroU32;
    /// use microbatch::cost::{Image, Sample};
    /// use microbatch::plan::StepSample;
    ///
    /// let tiles = NonZeroU32::new(5).unwrap();
    /// let s = StepSample::new(1, Sample::new(10, [Image::with_units(1280, tiles), Image::new(64)]));
    /// assert_eq!(s.units(), 6);
    /// ```
    #[must_use]
    pub fn units(&self) -> u64 {
        self.sample
            .images()
            .iter()
            .map(|i| u64::from(i.units()))
            .sum()
    }
}
