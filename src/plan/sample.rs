//! The planner's input: one sample of an optimizer step, with its id, the tokens that carry loss, and where it is and what it belongs to.

use crate::cost::Sample;

/// One sample of an optimizer step: an id, the sample (text tokens and
/// images), the tokens that carry loss, and optionally the rank that already
/// holds it (its *origin*, for [locality](crate::plan::Locality)), the group
/// it must stay with, and the bytes it takes to move it.
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
    /// The rank whose data loader holds the sample; `None`: nowhere yet.
    #[cfg_attr(
        feature = "serde",
        serde(default, skip_serializing_if = "Option::is_none")
    )]
    origin: Option<u64>,
    /// The group the sample must stay with; `None`: none.
    #[cfg_attr(
        feature = "serde",
        serde(default, skip_serializing_if = "Option::is_none")
    )]
    group: Option<u64>,
    /// The bytes to move it; `None`: derived from its image tokens.
    #[cfg_attr(
        feature = "serde",
        serde(default, skip_serializing_if = "Option::is_none")
    )]
    bytes: Option<u64>,
}

/// The bytes a sample takes to move per image token when no size is given
/// ([`StepSample::with_bytes`]): the RGB pixels of one image token of
/// Qwen2-VL and its successors (a 28 x 28 patch, 2 x 2 patches of 14 x 14
/// merged, 3 bytes a pixel: 2,352 bytes). Text tokens count nothing: their ids
/// are a few bytes against thousands.
pub const BYTES_PER_IMAGE_TOKEN: u64 = 2352;

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
            origin: None,
            group: None,
            bytes: None,
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

    /// Sets the rank whose data loader already holds the sample (builder
    /// style): with [`Planner::locality`](crate::plan::Planner::locality)
    /// the planner keeps it there where it can, and the plan's
    /// [`Exchange`](crate::plan::Exchange) says what moves. The planner
    /// refuses an origin that is not below its ranks
    /// ([`Error::Invalid`](crate::Error::Invalid) at an
    /// [origin](crate::Locator::Origin)).
    ///
    /// # Examples
    ///
    /// ```
    /// use microbatch::cost::Sample;
    /// use microbatch::plan::StepSample;
    ///
    /// let s = StepSample::new(3, Sample::text_only(100));
    /// assert_eq!(s.origin(), None);
    /// assert_eq!(s.with_origin(5).origin(), Some(5));
    /// ```
    #[must_use]
    pub fn with_origin(mut self, rank: usize) -> Self {
        self.origin = Some(rank as u64);
        self
    }

    /// The rank that holds the sample before the step, if known.
    ///
    /// # Examples
    ///
    /// ```
    /// use microbatch::cost::Sample;
    /// use microbatch::plan::StepSample;
    ///
    /// assert_eq!(StepSample::new(0, Sample::text_only(1)).with_origin(2).origin(), Some(2));
    /// ```
    #[must_use]
    pub fn origin(&self) -> Option<usize> {
        self.origin
            .map(|r| usize::try_from(r).unwrap_or(usize::MAX))
    }

    /// Puts the sample in group `group` (builder style): every sample of a
    /// group lands in the same micro-batch (or, with
    /// [`GroupScope::Rank`](crate::plan::GroupScope::Rank), on the same
    /// rank): the responses of one prompt, the pieces of one conversation.
    ///
    /// # Examples
    ///
    /// ```
    /// use microbatch::cost::Sample;
    /// use microbatch::plan::StepSample;
    ///
    /// assert_eq!(StepSample::new(0, Sample::text_only(1)).with_group(9).group(), Some(9));
    /// ```
    #[must_use]
    pub fn with_group(mut self, group: u64) -> Self {
        self.group = Some(group);
        self
    }

    /// The sample's group, if any.
    ///
    /// # Examples
    ///
    /// ```
    /// use microbatch::cost::Sample;
    /// use microbatch::plan::StepSample;
    ///
    /// assert_eq!(StepSample::new(0, Sample::text_only(1)).group(), None);
    /// ```
    #[must_use]
    pub fn group(&self) -> Option<u64> {
        self.group
    }

    /// Sets the bytes it takes to move the sample to another rank (builder
    /// style): its pixels or vision features as the data loader holds them.
    ///
    /// # Examples
    ///
    /// ```
    /// use microbatch::cost::{Image, Sample};
    /// use microbatch::plan::StepSample;
    ///
    /// let s = StepSample::new(0, Sample::new(10, [Image::new(256)]));
    /// assert_eq!(s.clone().with_bytes(1 << 20).bytes(), 1 << 20);
    /// ```
    #[must_use]
    pub fn with_bytes(mut self, bytes: u64) -> Self {
        self.bytes = Some(bytes);
        self
    }

    /// The bytes it takes to move the sample: as set with
    /// [`with_bytes`](StepSample::with_bytes), or
    /// [`BYTES_PER_IMAGE_TOKEN`] per image token (saturating).
    ///
    /// # Examples
    ///
    /// ```
    /// use microbatch::cost::{Image, Sample};
    /// use microbatch::plan::{StepSample, BYTES_PER_IMAGE_TOKEN};
    ///
    /// let s = StepSample::new(0, Sample::new(10, [Image::new(256)]));
    /// assert_eq!(s.bytes(), 256 * BYTES_PER_IMAGE_TOKEN);
    /// assert_eq!(StepSample::new(1, Sample::text_only(900)).bytes(), 0);
    /// ```
    #[must_use]
    pub fn bytes(&self) -> u64 {
        self.bytes.unwrap_or_else(|| {
            self.sample
                .image_tokens()
                .saturating_mul(BYTES_PER_IMAGE_TOKEN)
        })
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
    #[inline]
    pub fn units(&self) -> u64 {
        self.sample
            .images()
            .iter()
            .map(|i| u64::from(i.units()))
            .sum()
    }
}
