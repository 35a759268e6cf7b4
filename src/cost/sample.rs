//! A [`Sample`] (text tokens, [`Image`]s, a given cost) and an [`Image`]
//! (its tokens and the units its encoder attends within), with their serde.

use core::fmt;
use core::num::NonZeroU32;

use smallvec::SmallVec;

use crate::error::Error;

use super::{coefficient, Phases};

/// One image of a [`Sample`]: the tokens it adds to the LLM sequence and the
/// number of units its vision encoder attends within.
///
/// A *unit* is what the ViT's attention stays inside: a tile (CLIP, SigLIP,
/// InternViT), a whole image or a two-frame group of a video (Qwen2-VL,
/// Qwen2.5-VL). The image's tokens are split over its units as evenly as
/// integers allow. At least one unit, by construction.
///
/// # Examples
///
/// ```
/// use core::num::NonZeroU32;
/// use microbatch::cost::Image;
///
/// let photo = Image::new(576);
/// assert_eq!((photo.tokens(), photo.units()), (576, 1));
///
/// // InternVL: 6 tiles + 1 thumbnail tile of 256 tokens each.
/// let tiled = Image::with_units(7 * 256, NonZeroU32::new(7).unwrap());
/// assert_eq!(tiled.units(), 7);
/// ```
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[cfg_attr(feature = "serde", derive(serde::Serialize, serde::Deserialize))]
pub struct Image {
    tokens: u32,
    units: NonZeroU32,
}

impl Image {
    /// An image of `tokens` LLM tokens, attended as one unit.
    ///
    /// # Examples
    ///
    /// ```
    /// use microbatch::cost::Image;
    ///
    /// let image = Image::new(576);
    /// assert_eq!((image.tokens(), image.units()), (576, 1));
    /// ```
    #[must_use]
    pub const fn new(tokens: u32) -> Self {
        Image {
            tokens,
            units: NonZeroU32::MIN,
        }
    }

    /// An image of `tokens` LLM tokens split into `units` attention units
    /// (tiles or frame groups).
    ///
    /// # Examples
    ///
    /// ```
    /// use core::num::NonZeroU32;
    /// use microbatch::cost::Image;
    ///
    /// let tiled = Image::with_units(1792, NonZeroU32::new(7).unwrap());
    /// assert_eq!((tiled.tokens(), tiled.units()), (1792, 7));
    /// ```
    #[must_use]
    pub const fn with_units(tokens: u32, units: NonZeroU32) -> Self {
        Image { tokens, units }
    }

    /// The tokens this image adds to the LLM sequence.
    ///
    /// # Examples
    ///
    /// ```
    /// use microbatch::cost::{Image, Sample};
    ///
    /// let image = Image::new(256);
    /// assert_eq!(image.tokens(), 256);
    /// assert_eq!(Sample::new(100, [image]).tokens(), 356);
    /// ```
    #[must_use]
    pub const fn tokens(&self) -> u32 {
        self.tokens
    }

    /// The number of attention units (at least 1).
    ///
    /// # Examples
    ///
    /// ```
    /// use core::num::NonZeroU32;
    /// use microbatch::cost::Image;
    ///
    /// assert_eq!(Image::new(576).units(), 1);
    /// assert_eq!(Image::with_units(512, NonZeroU32::new(2).unwrap()).units(), 2);
    /// ```
    #[must_use]
    pub const fn units(&self) -> u32 {
        self.units.get()
    }

    /// The sizes of the units in LLM tokens, as even as integers allow: the
    /// first `tokens % units` units get one token more. Calls `f(size, count)`
    /// at most twice.
    #[inline]
    pub(crate) fn for_each_unit(&self, mut f: impl FnMut(u64, u64)) {
        let units = self.units.get();
        if units == 1 {
            // The common image (`Image::new`): one unit, no division.
            f(u64::from(self.tokens), 1);
            return;
        }
        // In `u32` (a divisor that is not zero: no check).
        let (base, extra) = (self.tokens / self.units, self.tokens % self.units);
        if extra > 0 {
            f(u64::from(base) + 1, u64::from(extra));
        }
        if units > extra {
            f(u64::from(base), u64::from(units - extra));
        }
    }
}

/// One training sample: text tokens and the images it carries.
///
/// Each sample is one document of its packed sequence: under a document mask
/// its tokens attend only to each other. Its LLM length is
/// [`tokens`](Sample::tokens) = text tokens + the image tokens of every image.
///
/// A *group* is a slice of borrowed samples, `&[&Sample]`: a packed
/// sequence or a micro-batch, costed without cloning a sample.
///
/// # Examples
///
/// ```
/// use microbatch::cost::{Image, Sample};
///
/// let s = Sample::new(180, [Image::new(256), Image::new(1024)]);
/// assert_eq!((s.text(), s.image_tokens(), s.tokens()), (180, 1280, 1460));
/// assert_eq!(s.images().len(), 2);
/// assert_eq!(Sample::text_only(700).tokens(), 700);
/// ```
#[derive(Clone, Debug, Default, PartialEq, Eq, Hash)]
#[cfg_attr(feature = "serde", derive(serde::Serialize, serde::Deserialize))]
pub struct Sample {
    text: u32,
    images: SmallVec<[Image; 1]>,
    /// The cost given by the caller ([`Sample::with_cost`]), read by
    /// [`Given`](super::Given); absent from a document when zero, so that documents
    /// written before it read the same.
    #[cfg_attr(
        feature = "serde",
        serde(default, skip_serializing_if = "GivenCost::is_zero")
    )]
    cost: GivenCost,
}

/// A sample's given cost: finite, non-negative, `-0.0` stored as `0.0`, so
/// that equality and hashing by bits are exact (`Sample` is `Eq + Hash`).
#[derive(Clone, Copy, Default)]
#[cfg_attr(
    feature = "serde",
    derive(serde::Serialize, serde::Deserialize),
    serde(try_from = "Phases", into = "Phases")
)]
struct GivenCost(Phases);

impl GivenCost {
    /// Checks both phases: finite and non-negative, naming the phase.
    fn new(cost: Phases) -> Result<Self, Error> {
        // `+ 0.0` turns `-0.0` into `0.0` and keeps every other value.
        let vision = coefficient("vision cost", cost.vision)? + 0.0;
        let language = coefficient("language cost", cost.language)? + 0.0;
        Ok(GivenCost(Phases::new(vision, language)))
    }

    /// Whether both phases are zero (the field is then left out of a
    /// serialized sample).
    #[cfg_attr(not(feature = "serde"), allow(dead_code))]
    fn is_zero(&self) -> bool {
        self.0 == Phases::ZERO
    }

    fn bits(&self) -> (u64, u64) {
        (self.0.vision.to_bits(), self.0.language.to_bits())
    }
}

impl PartialEq for GivenCost {
    fn eq(&self, other: &Self) -> bool {
        self.bits() == other.bits()
    }
}

impl Eq for GivenCost {}

impl core::hash::Hash for GivenCost {
    fn hash<H: core::hash::Hasher>(&self, state: &mut H) {
        self.bits().hash(state);
    }
}

impl fmt::Debug for GivenCost {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        self.0.fmt(f)
    }
}

impl TryFrom<Phases> for GivenCost {
    type Error = Error;
    fn try_from(cost: Phases) -> Result<Self, Error> {
        GivenCost::new(cost)
    }
}

impl From<GivenCost> for Phases {
    fn from(cost: GivenCost) -> Phases {
        cost.0
    }
}

impl Sample {
    /// A sample of `text` text tokens and the given images.
    ///
    /// # Examples
    ///
    /// ```
    /// use microbatch::cost::{Image, Sample};
    ///
    /// let sample = Sample::new(300, [Image::new(576), Image::new(576)]);
    /// assert_eq!((sample.text(), sample.images().len()), (300, 2));
    /// ```
    pub fn new(text: u32, images: impl IntoIterator<Item = Image>) -> Self {
        Sample {
            text,
            images: images.into_iter().collect(),
            cost: GivenCost::default(),
        }
    }

    /// A sample without images.
    ///
    /// # Examples
    ///
    /// ```
    /// use microbatch::cost::Sample;
    ///
    /// let sample = Sample::text_only(700);
    /// assert!(sample.images().is_empty());
    /// assert_eq!(sample.tokens(), 700);
    /// ```
    #[must_use]
    pub fn text_only(text: u32) -> Self {
        Sample {
            text,
            images: SmallVec::new(),
            cost: GivenCost::default(),
        }
    }

    /// Adds one image (builder style).
    ///
    /// # Examples
    ///
    /// ```
    /// use microbatch::cost::{Image, Sample};
    ///
    /// let sample = Sample::text_only(100).with_image(Image::new(256)).with_image(Image::new(64));
    /// assert_eq!(sample, Sample::new(100, [Image::new(256), Image::new(64)]));
    /// assert_eq!(sample.image_tokens(), 320);
    /// ```
    #[must_use]
    pub fn with_image(mut self, image: Image) -> Self {
        self.images.push(image);
        self
    }

    /// Attaches the sample's own cost per phase, measured or estimated by the
    /// caller (a profiler, a model of your own), for the [`Given`](super::Given) cost
    /// model; other models ignore it.
    ///
    /// `-0.0` is stored as `0.0`.
    ///
    /// # Errors
    ///
    /// [`Error::Invalid`] at a [coefficient](crate::Locator::Coefficient)
    /// naming `"vision cost"` or `"language cost"` if that phase's cost is NaN,
    /// infinite or negative.
    ///
    /// # Examples
    ///
    /// ```
    /// use microbatch::cost::{Phases, Sample};
    /// use microbatch::{Error, Locator};
    ///
    /// let sample = Sample::text_only(700).with_cost(Phases::new(0.0, 0.25))?;
    /// assert_eq!(sample.given_cost(), Phases::new(0.0, 0.25));
    /// assert!(matches!(
    ///     Sample::text_only(1).with_cost(Phases::new(f64::NAN, 1.0)),
    ///     Err(Error::Invalid { at: Locator::Coefficient { name: "vision cost" }, .. })
    /// ));
    /// # Ok::<(), microbatch::Error>(())
    /// ```
    pub fn with_cost(mut self, cost: Phases) -> Result<Self, Error> {
        self.cost = GivenCost::new(cost)?;
        Ok(self)
    }

    /// The cost attached by [`with_cost`](Sample::with_cost);
    /// [`Phases::ZERO`] when none was given.
    ///
    /// # Examples
    ///
    /// ```
    /// use microbatch::cost::{Phases, Sample};
    ///
    /// assert_eq!(Sample::text_only(10).given_cost(), Phases::ZERO);
    /// let sample = Sample::text_only(10).with_cost(Phases::new(1.0, 2.0))?;
    /// assert_eq!(sample.given_cost().total(), 3.0);
    /// # Ok::<(), microbatch::Error>(())
    /// ```
    #[must_use]
    pub fn given_cost(&self) -> Phases {
        self.cost.0
    }

    /// The text tokens.
    ///
    /// # Examples
    ///
    /// ```
    /// use microbatch::cost::{Image, Sample};
    ///
    /// assert_eq!(Sample::new(180, [Image::new(256)]).text(), 180);
    /// ```
    #[must_use]
    pub fn text(&self) -> u32 {
        self.text
    }

    /// The images, in order.
    ///
    /// # Examples
    ///
    /// ```
    /// use microbatch::cost::{Image, Sample};
    ///
    /// let sample = Sample::new(10, [Image::new(256), Image::new(64)]);
    /// let tokens: Vec<u32> = sample.images().iter().map(|i| i.tokens()).collect();
    /// assert_eq!(tokens, [256, 64]);
    /// ```
    #[must_use]
    pub fn images(&self) -> &[Image] {
        &self.images
    }

    /// The image tokens of all images, in `u64` so that no sum overflows.
    ///
    /// # Examples
    ///
    /// ```
    /// use microbatch::cost::{Image, Sample};
    ///
    /// let sample = Sample::new(10, [Image::new(u32::MAX), Image::new(1)]);
    /// assert_eq!(sample.image_tokens(), 1 << 32); // no overflow
    /// ```
    #[must_use]
    pub fn image_tokens(&self) -> u64 {
        // Saturating: only 2^32 images of 2^32 tokens would reach it.
        self.images
            .iter()
            .fold(0u64, |a, i| a.saturating_add(u64::from(i.tokens)))
    }

    /// The sample's length in the LLM: text + image tokens.
    ///
    /// # Examples
    ///
    /// ```
    /// use microbatch::cost::{Image, Sample};
    ///
    /// assert_eq!(Sample::new(180, [Image::new(256), Image::new(1024)]).tokens(), 1460);
    /// ```
    #[must_use]
    #[inline]
    pub fn tokens(&self) -> u64 {
        let text = u64::from(self.text);
        match self.images.as_slice() {
            [] => text,
            // Two `u32`s: no overflow.
            [one] => text + u64::from(one.tokens),
            _ => text.saturating_add(self.image_tokens()),
        }
    }
}
