//! Cost models: how long a sample or a group of samples takes to train, per phase.
//!
//! The planner balances *time*, not tokens. A vision-language model spends
//! its time in two places with their own barriers under FSDP/ZeRO-3: the
//! vision encoder (ViT), whose cost grows with image work only, and the
//! language model (LLM), whose cost grows with all tokens and with attention.
//! This module describes that time as a [`CostModel`]: a map from a group of
//! borrowed [`Sample`]s (a packed sequence or a micro-batch, `&[&Sample]`)
//! to a [`Phases`] vector (`vision`, `language`; [`Phases::total`] for a
//! single barrier).
//!
//! # Building a model
//!
//! Models are small values that compose, in the style of rand's
//! `Distribution::map` and tower's layers:
//!
//! - built-in terms: [`Tokens`], [`PerSample`] and [`PerGroup`] (linear
//!   terms and fixed overheads); [`DocumentAttention`] (`sum T^2` under a
//!   document mask) and [`FullAttention`] (`L^2` over the packed length); the
//!   vision encoders [`PerTile`] (CLIP, SigLIP, InternViT), [`PerImage`]
//!   (Qwen2-VL) and [`Windowed`] (Qwen2.5-VL), frozen or trained
//!   ([`Training`]);
//! - FLOPs from model shapes: [`LlmShape`], [`VitShape`] and the named
//!   [`Preset`]s [`Llava15_7b`](Preset::Llava15_7b),
//!   [`Qwen25Vl7b`](Preset::Qwen25Vl7b) and
//!   [`InternVl25_8b`](Preset::InternVl25_8b);
//! - coefficients from measured timings: [`fit`] and [`fit_terms`]
//!   (non-negative least squares, with R^2 and the worst relative error);
//! - a linear model over named features ([`Term`]s: image tokens, tiles,
//!   attention sums, images, samples, micro-batches, ...): [`Linear`], which
//!   writes every preset exactly ([`Linear::preset`]), and online
//!   calibration of its coefficients: [`Calibrator`] (see below);
//! - costs you measured or estimated yourself, per sample: [`Given`] over
//!   the costs attached by [`Sample::with_cost`];
//! - combinators: [`CostModel::plus`] (also `+`), [`CostModel::scale`],
//!   [`CostModel::in_phase`], [`CostModel::max`], the closures [`cost_fn`] and
//!   [`sample_fn`], the identity [`Zero`], and tuples `(A, B, ...)`, which
//!   sum their members. `Debug` prints a composition flat, as a formula;
//! - one type for any model, chosen or composed at run time:
//!   [`Incremental::boxed`], a [`BoxCostModel`].
//!
//! Every constructor validates its coefficients: a NaN, infinite or negative
//! coefficient is an [`Error::InvalidCoefficient`] naming the parameter, so
//! a model, once built, only produces non-negative costs, finite unless a
//! coefficient times a size exceeds `f64::MAX` (closures excepted: their
//! results are the caller's). The FLOPs models of [`LlmShape`] and
//! [`VitShape`] are finite for every shape and sample (below about 1e80),
//! and their integer counts cannot overflow. The [`Planner`](crate::plan::Planner)
//! refuses a sample whose cost is not finite ([`Error::InvalidCost`], naming
//! the phase).
//!
//! Every model also gives each sample a [`floor`](CostModel::floor): a
//! share of the cost of every group that holds the sample (its cost alone
//! for additive models, zero for a cost per group), which the planner's
//! lower bound sums so that it is a bound for every model.
//!
//! # Two ways to evaluate a model
//!
//! | trait | what | who uses it |
//! |---|---|---|
//! | [`CostModel`] | [`cost`](CostModel::cost) of a whole group, a slice of borrowed samples | [`fit_terms`], your own evaluations |
//! | [`Incremental`] | a small [`State`](Incremental::State) of sufficient statistics per group, with [`insert`](Incremental::insert) and [`evaluate`](Incremental::evaluate) | the [`Planner`](crate::plan::Planner) |
//!
//! The planner needs [`Incremental`]: it evaluates every sample's own cost
//! once ([`evaluate_with`](Incremental::evaluate_with) on the
//! [`empty`](Incremental::empty) state), balances by sums of those, and then
//! evaluates each packed sequence and micro-batch as a group, by inserting
//! its samples into a state, without collecting them into a slice. Built-in
//! states are integer sums (tokens, squared tokens, tiles, patches), so the
//! result does not depend on insertion order: every rank computes the same
//! plan. Every built-in model and every combinator of incremental models is
//! incremental; only the closure adapter [`cost_fn`], which sees the whole
//! group, is not.
//!
//! # Calibrating online
//!
//! A trainer knows its costs from what it measures. Time every micro-batch
//! (per phase where the vision encoder and the language model can be timed
//! apart, as a whole otherwise), [`observe`](Calibrator::observe) the rows,
//! [`refit`](Calibrator::refit) at the step boundary and plan the next step
//! with [`Calibrator::model`], a [`Linear`] model. The calibrator keeps a
//! bounded window, rejects outliers (a micro-batch slowed 2x by a hiccup),
//! leaves out terms the rows cannot tell apart, falls back to the model it
//! was given (say [`Linear::preset`]) until it can fit, and reports R^2, the
//! worst relative error, the rejected rows and the drift since the last
//! refit ([`Calibration`]).
//!
//! ```
//! use microbatch::cost::{Calibrator, Linear, Phases, Preset, Sample, Timing};
//!
//! let mut calibrator = Calibrator::new(Linear::preset(Preset::Llava15_7b));
//! for i in 1..=20u32 {
//!     let micro_batch = vec![Sample::text_only(200 * i), Sample::text_only(1000)];
//!     let tokens = f64::from(200 * i + 1000);
//!     let measured = Phases::new(0.0, 2e-5 * tokens + 1e-2); // seconds, from CUDA events
//!     calibrator.observe(&micro_batch, Timing::Phases(measured))?;
//! }
//! let status = calibrator.refit();
//! assert!(status.fitted() && status.r_squared().unwrap() > 0.999);
//! let model = calibrator.model(); // plan the next step with it
//! # let _ = model;
//! # Ok::<(), microbatch::Error>(())
//! ```
//!
//! # Examples
//!
//! The classic fitted model `a * sum(T) + b * sum(T^2) + c * n` with a
//! trained ViT in its own phase:
//!
//! ```
//! use microbatch::cost::{
//!     CostModel, DocumentAttention, Image, Incremental, PerSample, PerTile, Sample, Tokens,
//!     Training,
//! };
//!
//! let llm = Tokens::new(2e-5)? + DocumentAttention::new(3e-10)? + PerSample::new(1e-3)?;
//! let vit = PerTile::new(4e-3, 256, Training::Trained)?; // seconds per tile (forward)
//! let model = vit.plus(llm);
//!
//! let text = Sample::text_only(1000);
//! let photo = Sample::new(200, [Image::new(512)]); // 2 tiles of 256 tokens
//! let cost = model.cost(&[&text, &photo]); // borrowed: nothing is cloned
//! let tokens = 1000.0 + 712.0;
//! let squares = 1000.0 * 1000.0 + 712.0 * 712.0;
//! let language = 2e-5 * tokens + 3e-10 * squares + 1e-3 * 2.0;
//! assert!((cost.language - language).abs() < 1e-12);
//! assert!((cost.vision - 3.0 * 2.0 * 4e-3).abs() < 1e-12);
//!
//! // The same sample by sample, as the planner does it:
//! let mut state = model.empty();
//! for s in [&text, &photo] {
//!     model.insert(&mut state, s);
//! }
//! assert_eq!(model.evaluate(&state), cost);
//! println!("{model:?}");
//! # Ok::<(), microbatch::Error>(())
//! ```
//!
//! FLOPs of a named model pair:
//!
//! ```
//! use microbatch::cost::{CostModel, Image, Preset, Sample};
//!
//! let llava = Preset::Llava15_7b.cost_model();
//! let cost = llava.cost(&[&Sample::new(300, [Image::new(576)])]);
//! assert!(cost.vision / cost.total() < 0.02); // frozen CLIP: forward only
//! ```
//!
//! # References
//!
//! - D. Narayanan et al., *Efficient Large-Scale Language Model Training on
//!   GPU Clusters Using Megatron-LM*, SC 2021, appendix "Floating-point
//!   operations" (the FLOPs formula of [`LlmShape`]).
//! - C. L. Lawson and R. J. Hanson, *Solving Least Squares Problems*,
//!   Prentice-Hall 1974, chapter 23 (the NNLS algorithm of [`fit`]).
//! - verl `seqlen_balancing.py` (`24576 * T + T^2`) and LoongForge (fits
//!   `a * sum(T^2) + b * sum(T) + c * n` from timings): the peers' models.

use core::fmt;
use core::num::NonZeroU32;
use core::ops::{Add, AddAssign, Mul, Sub};

use smallvec::SmallVec;

use crate::error::{Error, InvalidReason};

mod attention;
mod boxed;
mod calibrate;
mod calibrator;
mod combinator;
mod flops;
mod given;
mod linear;
mod tokens;
mod vision;

pub use self::attention::{DocumentAttention, FullAttention};
pub use self::boxed::{BoxCostModel, BoxState};
pub use self::calibrate::{fit, fit_terms, Fit};
pub use self::calibrator::{Calibration, Calibrator, Drift, Fallback, Timing};
pub use self::combinator::{cost_fn, sample_fn, CostFn, InPhase, Max, SampleFn, Scale, Sum, Zero};
// Defined in a leaf module that `error` also imports (no cycle).
pub use crate::phase::Phase;
pub use self::flops::{AttentionCount, LlmShape, Preset, PresetModel, VitScope, VitShape};
pub use self::given::Given;
pub use self::linear::{Linear, Term};
pub use self::tokens::{PerGroup, PerSample, Tokens};
pub use self::vision::{PerImage, PerTile, Training, Vision, Windowed};

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
    pub(crate) fn for_each_unit(&self, mut f: impl FnMut(u64, u64)) {
        let tokens = u64::from(self.tokens);
        let units = u64::from(self.units.get());
        let (base, extra) = (tokens / units, tokens % units);
        if extra > 0 {
            f(base + 1, extra);
        }
        if units > extra {
            f(base, units - extra);
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
    /// [`Given`]; absent from a document when zero, so that documents
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
    /// caller (a profiler, a model of your own), for the [`Given`] cost
    /// model; other models ignore it.
    ///
    /// `-0.0` is stored as `0.0`.
    ///
    /// # Errors
    ///
    /// [`Error::InvalidCoefficient`] naming `"vision cost"` or `"language
    /// cost"` if that phase's cost is NaN, infinite or negative.
    ///
    /// # Examples
    ///
    /// ```
    /// use microbatch::cost::{Phases, Sample};
    /// use microbatch::Error;
    ///
    /// let sample = Sample::text_only(700).with_cost(Phases::new(0.0, 0.25))?;
    /// assert_eq!(sample.given_cost(), Phases::new(0.0, 0.25));
    /// assert!(matches!(
    ///     Sample::text_only(1).with_cost(Phases::new(f64::NAN, 1.0)),
    ///     Err(Error::InvalidCoefficient { name: "vision cost", .. })
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
    pub fn tokens(&self) -> u64 {
        u64::from(self.text).saturating_add(self.image_tokens())
    }
}

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

/// A cost model: the cost of a group of samples, per phase.
///
/// One required method, [`cost`](CostModel::cost), over a group of
/// *borrowed* samples (`&[&Sample]`), so that costing a group held by
/// reference (a packed sequence's samples picked out of a batch) never
/// clones a sample. The provided methods are adapters that build bigger
/// models from smaller ones. O(1) updates of a group's cost are the
/// separate trait [`Incremental`], which the planner needs.
///
/// The trait is implemented for references and boxes of models, for tuples
/// of models (which sum their members), and is object safe:
/// `&dyn CostModel` and `Box<dyn CostModel>` are models too.
///
/// # Examples
///
/// A model of your own, composed with built-in terms:
///
/// ```
/// use microbatch::cost::{CostModel, Image, Phases, Sample, Tokens};
///
/// /// One second per image, in the vision phase.
/// #[derive(Debug)]
/// struct PerImageSecond;
///
/// impl CostModel for PerImageSecond {
///     fn cost(&self, group: &[&Sample]) -> Phases {
///         let images: usize = group.iter().map(|s| s.images().len()).sum();
///         Phases::new(images as f64, 0.0)
///     }
/// }
///
/// let model = PerImageSecond.plus(Tokens::new(1e-3)?);
/// let batch = vec![Sample::new(1000, [Image::new(24)]), Sample::text_only(5)];
/// // Cost the first sample of the batch, borrowed.
/// assert_eq!(model.cost(&[&batch[0]]), Phases::new(1.0, 1.024));
/// let all: Vec<&Sample> = batch.iter().collect();
/// assert_eq!(model.cost(&all), Phases::new(1.0, 1.029));
/// assert_eq!(format!("{model:?}"), "PerImageSecond + Tokens { per_token: 0.001 }");
/// # Ok::<(), microbatch::Error>(())
/// ```
pub trait CostModel {
    /// The cost of a group of samples (a packed sequence or a micro-batch),
    /// borrowed. The empty group costs zero for every built-in model.
    ///
    /// # Complexity
    ///
    /// O(group length + images) for every built-in model.
    fn cost(&self, group: &[&Sample]) -> Phases;

    /// A per-phase *floor* of `sample`'s share of any group's cost: for every
    /// group `g`, `cost(g) >= sum of floor(s) over s in g`, phase by phase
    /// (up to floating-point rounding). This is what the
    /// [`Planner`](crate::plan::Planner)'s lower bound
    /// ([`Report::lower_bound`](crate::plan::Report::lower_bound)) sums, so
    /// that it is a bound for every model, not only for additive ones.
    ///
    /// | model | floor |
    /// |---|---|
    /// | [`Tokens`], [`PerSample`], [`DocumentAttention`], the vision encoders, [`sample_fn`] (additive) | the sample's own cost |
    /// | [`FullAttention`] (superadditive: `(a + b)^2 >= a^2 + b^2`) | the sample's own cost |
    /// | [`PerGroup`] (a fixed cost per group), [`cost_fn`], [`Zero`] | zero |
    /// | [`CostModel::plus`], tuples | the sum of the members' floors |
    /// | [`CostModel::scale`] | the inner floor times the factor |
    /// | [`CostModel::in_phase`] | the inner floor's total, in the phase |
    /// | [`CostModel::max`] | the floor of `self` (the first operand: write the dominant model first) |
    ///
    /// The default is zero, which is valid for every model with
    /// non-negative costs; implement it for a model of your own to get a
    /// useful bound. A floor must be finite, non-negative and at most the
    /// sample's cost alone (`floor(s) <= cost(&[s])`, the law for the group
    /// of one); the planner checks that and reports
    /// [`Error::InvalidFloor`] otherwise.
    ///
    /// # Complexity
    ///
    /// O(images of the sample) for every built-in model.
    ///
    /// # Examples
    ///
    /// ```
    /// use microbatch::cost::{CostModel, PerGroup, Phases, Sample, Tokens};
    ///
    /// let (a, b) = (Sample::text_only(10), Sample::text_only(20));
    /// let model = Tokens::new(1.0)? + PerGroup::new(5.0)?;
    /// // The per-group overhead is paid once per group, not once per sample:
    /// // it has no share in the floor.
    /// assert_eq!(model.floor(&a), Phases::new(0.0, 10.0));
    /// let floors = model.floor(&a) + model.floor(&b);
    /// assert!(model.cost(&[&a, &b]).language >= floors.language); // 35 >= 30
    /// # Ok::<(), microbatch::Error>(())
    /// ```
    fn floor(&self, sample: &Sample) -> Phases {
        let _ = sample;
        Phases::ZERO
    }

    /// The sum of `self` and `other`, phase by phase. Also written `self + other`.
    ///
    /// # Examples
    ///
    /// ```
    /// use microbatch::cost::{CostModel, PerSample, Sample, Tokens};
    ///
    /// let model = Tokens::new(1.0)?.plus(PerSample::new(10.0)?);
    /// assert_eq!(model.cost(&[&Sample::text_only(5)]).total(), 15.0);
    /// # Ok::<(), microbatch::Error>(())
    /// ```
    fn plus<B: CostModel>(self, other: B) -> Sum<Self, B>
    where
        Self: Sized,
    {
        Sum::new(self, other)
    }

    /// `self` with every cost multiplied by `factor` (finite, non-negative).
    ///
    /// # Errors
    ///
    /// [`Error::InvalidCoefficient`] naming `factor` if it is NaN, infinite or
    /// negative.
    ///
    /// # Examples
    ///
    /// ```
    /// use microbatch::cost::{CostModel, Sample, Tokens};
    ///
    /// let model = Tokens::new(2.0)?.scale(0.5)?;
    /// assert_eq!(model.cost(&[&Sample::text_only(8)]).language, 8.0);
    /// assert!(Tokens::new(2.0)?.scale(-1.0).is_err());
    /// # Ok::<(), microbatch::Error>(())
    /// ```
    fn scale(self, factor: f64) -> Result<Scale<Self>, Error>
    where
        Self: Sized,
    {
        Scale::new(self, factor)
    }

    /// `self` with its whole cost ([`Phases::total`]) placed in `phase`.
    ///
    /// # Examples
    ///
    /// ```
    /// use microbatch::cost::{CostModel, Phase, Phases, Sample, Tokens};
    ///
    /// // The projector runs per image token, next to the ViT.
    /// let projector = Tokens::new(1.0)?.in_phase(Phase::Vision);
    /// assert_eq!(projector.cost(&[&Sample::text_only(3)]), Phases::new(3.0, 0.0));
    /// # Ok::<(), microbatch::Error>(())
    /// ```
    fn in_phase(self, phase: Phase) -> InPhase<Self>
    where
        Self: Sized,
    {
        InPhase::new(self, phase)
    }

    /// The phase-wise maximum of `self` and `other`: two pieces of work that
    /// overlap in time (say, two CUDA streams) cost as much as the longer.
    ///
    /// # Examples
    ///
    /// ```
    /// use microbatch::cost::{CostModel, PerSample, Sample, Tokens};
    ///
    /// // Data loading overlaps the language model's compute.
    /// let loading = PerSample::new(0.5)?;
    /// let model = Tokens::new(0.01)?.max(loading);
    /// let group = [&Sample::text_only(100), &Sample::text_only(20)];
    /// assert_eq!(model.cost(&group).language, 1.2); // max(1.2, 1.0)
    /// # Ok::<(), microbatch::Error>(())
    /// ```
    fn max<B: CostModel>(self, other: B) -> Max<Self, B>
    where
        Self: Sized,
    {
        Max::new(self, other)
    }
}

/// A [`CostModel`] that keeps a small state of sufficient statistics per
/// group, so that adding a sample and re-evaluating the group's cost take
/// O(1) (per image of the sample).
///
/// This is what the [`Planner`](crate::plan::Planner) requires of its model.
/// It evaluates every sample's own cost once, as
/// [`evaluate_with`](Incremental::evaluate_with) on the
/// [`empty`](Incremental::empty) state, and balances packed sequences and
/// ranks by sums of those; then it evaluates every packed sequence and
/// micro-batch of the plan as a group, by [`insert`](Incremental::insert)ing
/// its samples into a fresh state and calling
/// [`evaluate`](Incremental::evaluate), so that non-additive terms (full
/// attention over the packed length, a cost per group) are reported exactly
/// without collecting the group into a slice.
///
/// Laws, for every group `g` and sample `s`:
///
/// - inserting the samples of `g` into [`empty`](Incremental::empty) and
///   evaluating gives [`CostModel::cost`] of `g`;
/// - [`evaluate_with`](Incremental::evaluate_with)`(state, s)` equals
///   inserting `s` into a copy of `state` and evaluating it;
/// - the state does not depend on the order of insertion (for built-in
///   models: their states are integer sums).
///
/// Every built-in model and every adapter over incremental models is
/// incremental, except the closure adapter [`cost_fn`], which needs the
/// whole group.
///
/// # Examples
///
/// ```
/// use microbatch::cost::{CostModel, FullAttention, Incremental, PerGroup, Sample, Tokens};
///
/// // Not a sum of per-sample costs: L^2 over the packed length, and a fixed
/// // cost per group.
/// let model = Tokens::new(1.0)? + FullAttention::new(0.01)? + PerGroup::new(5.0)?;
/// let (a, b) = (Sample::text_only(10), Sample::text_only(20));
/// let mut pack = model.empty();
/// assert_eq!(model.evaluate(&pack).total(), 0.0);
///
/// model.insert(&mut pack, &a);
/// // "pack + one more sample", without changing `pack`:
/// let with = model.evaluate_with(&pack, &b);
/// assert_eq!(with.total(), 30.0 + 0.01 * 900.0 + 5.0);
/// assert_eq!(with, model.cost(&[&a, &b]));
/// // One sample's own cost, as the planner evaluates it:
/// assert_eq!(model.evaluate_with(&model.empty(), &b).total(), 20.0 + 4.0 + 5.0);
/// # Ok::<(), microbatch::Error>(())
/// ```
pub trait Incremental: CostModel {
    /// The sufficient statistics of a group (token sums, squared sums,
    /// counts, ...). Small and cheap to clone for every built-in model.
    type State: Clone + fmt::Debug;

    /// The state of the empty group.
    ///
    /// # Examples
    ///
    /// ```
    /// use microbatch::cost::{Incremental, Phases, Tokens};
    ///
    /// let model = Tokens::new(1.0)?;
    /// assert_eq!(model.evaluate(&model.empty()), Phases::ZERO);
    /// # Ok::<(), microbatch::Error>(())
    /// ```
    fn empty(&self) -> Self::State;

    /// Adds `sample` to the group of `state`.
    ///
    /// # Examples
    ///
    /// ```
    /// use microbatch::cost::{Incremental, Sample, Tokens};
    ///
    /// let model = Tokens::new(2.0)?;
    /// let mut state = model.empty();
    /// model.insert(&mut state, &Sample::text_only(3));
    /// model.insert(&mut state, &Sample::text_only(4));
    /// assert_eq!(model.evaluate(&state).language, 14.0);
    /// # Ok::<(), microbatch::Error>(())
    /// ```
    fn insert(&self, state: &mut Self::State, sample: &Sample);

    /// The cost of the group of `state`; equal to [`CostModel::cost`] of the
    /// group.
    ///
    /// # Examples
    ///
    /// ```
    /// use microbatch::cost::{CostModel, FullAttention, Incremental, Sample};
    ///
    /// let model = FullAttention::new(1.0)?;
    /// let (a, b) = (Sample::text_only(3), Sample::text_only(4));
    /// let mut state = model.empty();
    /// model.insert(&mut state, &a);
    /// model.insert(&mut state, &b);
    /// assert_eq!(model.evaluate(&state), model.cost(&[&a, &b])); // (3 + 4)^2
    /// # Ok::<(), microbatch::Error>(())
    /// ```
    fn evaluate(&self, state: &Self::State) -> Phases;

    /// The cost of the group of `state` with `sample` added, leaving `state`
    /// as it is.
    ///
    /// # Complexity
    ///
    /// One clone of the state, one insertion, one evaluation: O(1) per image
    /// of the sample for the built-in models.
    ///
    /// # Examples
    ///
    /// ```
    /// use microbatch::cost::{Incremental, PerGroup, Sample};
    ///
    /// let model = PerGroup::new(5.0)?;
    /// let state = model.empty();
    /// assert_eq!(model.evaluate_with(&state, &Sample::text_only(1)).language, 5.0);
    /// assert_eq!(model.evaluate(&state).language, 0.0); // unchanged
    /// # Ok::<(), microbatch::Error>(())
    /// ```
    fn evaluate_with(&self, state: &Self::State, sample: &Sample) -> Phases {
        let mut s = state.clone();
        self.insert(&mut s, sample);
        self.evaluate(&s)
    }

    /// `self` behind one type-erased model, [`BoxCostModel`], whose state is
    /// a [`BoxState`]: for a model chosen or composed at run time. It gives
    /// the same costs, floors and states as `self`, bit for bit, and
    /// composes like any model; boxing a [`BoxCostModel`] returns it as it
    /// is.
    ///
    /// # Complexity
    ///
    /// O(1): one allocation. Evaluating through the box costs one virtual
    /// call and one downcast of the state per method.
    ///
    /// # Examples
    ///
    /// ```
    /// use microbatch::cost::{BoxCostModel, CostModel, Incremental, Preset, Sample, Tokens};
    ///
    /// // Two model types, one variable.
    /// let models: Vec<BoxCostModel> =
    ///     vec![Tokens::new(1.0)?.boxed(), Preset::Llava15_7b.cost_model().boxed()];
    /// let group = [&Sample::text_only(100)];
    /// assert_eq!(models[0].cost(&group).language, 100.0);
    /// assert_eq!(models[1].cost(&group), Preset::Llava15_7b.cost_model().cost(&group));
    /// # Ok::<(), microbatch::Error>(())
    /// ```
    fn boxed(self) -> BoxCostModel
    where
        Self: Sized + fmt::Debug + Send + Sync + 'static,
        Self::State: Send + Sync + 'static,
    {
        boxed::boxed(self)
    }
}

/// The cost of a group through an incremental model's state: the one
/// [`CostModel::cost`] of every built-in model.
#[inline]
pub(crate) fn cost_by_state<M: Incremental + ?Sized>(model: &M, group: &[&Sample]) -> Phases {
    let mut state = model.empty();
    for sample in group {
        model.insert(&mut state, sample);
    }
    model.evaluate(&state)
}

/// The cost of `sample` alone through an incremental model's state: the
/// floor of every additive or superadditive built-in model (computed as the
/// planner computes the cost alone, so that `floor(s) <= cost(&[s])` holds
/// exactly).
#[inline]
pub(crate) fn alone<M: Incremental + ?Sized>(model: &M, sample: &Sample) -> Phases {
    model.evaluate_with(&model.empty(), sample)
}

/// A statistic summed over a group's samples with saturating integer
/// addition: the state of every built-in term.
pub(crate) trait SaturatingSum: Copy + Default + fmt::Debug {
    /// `self + rhs`, saturating.
    fn saturating_add(self, rhs: Self) -> Self;
}

impl SaturatingSum for u64 {
    #[inline]
    fn saturating_add(self, rhs: Self) -> Self {
        u64::saturating_add(self, rhs)
    }
}

impl SaturatingSum for u128 {
    #[inline]
    fn saturating_add(self, rhs: Self) -> Self {
        u128::saturating_add(self, rhs)
    }
}

impl SaturatingSum for [u128; 3] {
    #[inline]
    fn saturating_add(mut self, rhs: Self) -> Self {
        for (s, v) in self.iter_mut().zip(rhs) {
            *s = s.saturating_add(v);
        }
        self
    }
}

/// Implements [`CostModel`] (through the state), [`Incremental`] and `+`
/// for a built-in term whose state is the saturating sum of a per-sample
/// statistic: `$stat(&self, &Sample) -> $state` is one sample's share,
/// `$value(&self, &$state) -> Phases` the group's cost, `$floor(&self,
/// &Sample) -> Phases` the floor of [`CostModel::floor`].
macro_rules! impl_summed {
    ($ty:ident, $state:ty, $stat:expr, $value:expr, $floor:expr) => {
        impl $crate::cost::CostModel for $ty {
            #[inline]
            fn cost(&self, group: &[&$crate::cost::Sample]) -> $crate::cost::Phases {
                $crate::cost::cost_by_state(self, group)
            }
            #[inline]
            fn floor(&self, sample: &$crate::cost::Sample) -> $crate::cost::Phases {
                let floor: fn(&$ty, &$crate::cost::Sample) -> $crate::cost::Phases = $floor;
                floor(self, sample)
            }
        }

        impl $crate::cost::Incremental for $ty {
            type State = $state;
            #[inline]
            fn empty(&self) -> $state {
                <$state>::default()
            }
            #[inline]
            fn insert(&self, state: &mut $state, sample: &$crate::cost::Sample) {
                let stat: fn(&$ty, &$crate::cost::Sample) -> $state = $stat;
                *state = $crate::cost::SaturatingSum::saturating_add(*state, stat(self, sample));
            }
            #[inline]
            fn evaluate(&self, state: &$state) -> $crate::cost::Phases {
                let value: fn(&$ty, &$state) -> $crate::cost::Phases = $value;
                value(self, state)
            }
        }

        $crate::cost::combinator::impl_add!($ty);
    };
}
pub(crate) use impl_summed;

/// What makes `value` invalid as a cost, a coefficient or a time: NaN,
/// infinite or negative; `None` for a finite non-negative value.
pub(crate) fn invalid(value: f64) -> Option<InvalidReason> {
    if value.is_nan() {
        Some(InvalidReason::NaN)
    } else if value.is_infinite() {
        Some(InvalidReason::Infinite)
    } else if value < 0.0 {
        Some(InvalidReason::Negative)
    } else {
        None
    }
}

/// Checks one coefficient: finite and non-negative, naming `name` otherwise.
pub(crate) fn coefficient(name: &'static str, value: f64) -> Result<f64, Error> {
    match invalid(value) {
        None => Ok(value),
        Some(reason) => Err(Error::InvalidCoefficient {
            name,
            value,
            reason,
        }),
    }
}

/// Converts a `u128` sum to `f64` (rounding to nearest above 2^53).
#[inline]
pub(crate) fn f(x: u128) -> f64 {
    x as f64
}
