//! A linear cost model over named integer features ([`Term`]s), each in a
//! fixed phase: the model a [`Calibrator`](super::Calibrator) fits, and every
//! [`Preset`] expressed exactly over terms ([`Linear::preset`]).

use core::fmt;
use core::num::NonZeroU32;
use core::str::FromStr;

use super::combinator::impl_add;
use super::vision::{window_squares, Vision};
use super::{
    coefficient, f, AttentionKernel, CostModel, GroupFloor, Incremental, Phase, Phases, Preset,
    Sample,
};
use crate::error::Error;

/// A feature of a group of samples that a [`Linear`] model multiplies by a
/// coefficient: an integer sufficient statistic, summed sample by sample
/// (so it does not depend on the order of the samples), in a fixed phase.
///
/// Sizes are in LLM tokens unless a term says otherwise; an image's
/// *units* are what its encoder attends within (tiles, frame groups: see
/// [`Image`](super::Image)), its tokens split over them as evenly as integers
/// allow.
///
/// | term | name (`Display`, `FromStr`) | phase | feature of a group |
/// |---|---|---|---|
/// | [`ImageTokens`](Term::ImageTokens) | `vision.image_tokens` | vision | image tokens (the encoder's linear work) |
/// | [`UnitAttention`](Term::UnitAttention) | `vision.unit_attention` | vision | sum over units of `tokens^2` (full attention within a unit) |
/// | [`WindowAttention`](Term::WindowAttention) | `vision.window_attention(W,P)` | vision | sum over units of `sum over windows of w^2`, a unit being `P` patches a token cut into windows of `W` patches |
/// | [`Tiles`](Term::Tiles) | `vision.tiles(T)` | vision | sum over images of `max(ceil(tokens / T), units)` |
/// | [`Images`](Term::Images) | `vision.images` | vision | images (a per-image overhead) |
/// | [`Units`](Term::Units) | `vision.units` | vision | units (a per-tile or per-frame-group overhead) |
/// | [`Tokens`](Term::Tokens) | `language.tokens` | language | tokens, text and image |
/// | [`DocumentAttention`](Term::DocumentAttention) | `language.document_attention` | language | sum over samples of `tokens^2` (document-masked attention) |
/// | [`Samples`](Term::Samples) | `language.samples` | language | samples (a per-sample overhead) |
/// | [`Groups`](Term::Groups) | `language.groups` | language | 1 for a non-empty group (a per-micro-batch or per-sequence overhead) |
/// | [`RowAttention`](Term::RowAttention) | `language.row_attention` | language | `(sum over samples of tokens)^2` (attention over the whole packed row: a dense mask) |
/// | [`VisionGroups`](Term::VisionGroups) | `vision.groups` | vision | 1 for a non-empty group (the vision tower's fixed cost per call) |
///
/// Every term but [`Groups`](Term::Groups),
/// [`VisionGroups`](Term::VisionGroups) and
/// [`RowAttention`](Term::RowAttention) is additive over samples; a group's
/// feature of `Groups` and `VisionGroups` is 1 however many samples it
/// holds, and of
/// `RowAttention` the square of its tokens, which assumes the group is one
/// packed sequence (a row), as the planner's sequences are; a micro-batch of
/// several rows is the sum of its rows (see
/// [`Calibrator::observe_rows`](super::Calibrator::observe_rows)).
///
/// The enum is `#[non_exhaustive]`: more terms may come in minor releases.
///
/// # Examples
///
/// ```
/// use core::num::NonZeroU32;
/// use microbatch::cost::{Phase, Term};
///
/// let tiles = Term::Tiles { tokens_per_tile: NonZeroU32::new(256).unwrap() };
/// assert_eq!(tiles.to_string(), "vision.tiles(256)");
/// assert_eq!("vision.tiles(256)".parse::<Term>()?, tiles);
/// assert_eq!("language.tokens".parse::<Term>()?, Term::Tokens);
/// assert_eq!(Term::Groups.phase(), Phase::Language);
/// assert!("vision.tiles(0)".parse::<Term>().is_err());
/// # Ok::<(), microbatch::Error>(())
/// ```
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
#[non_exhaustive]
pub enum Term {
    /// Image tokens: the vision encoder's linear work (its patches are a
    /// fixed multiple of them).
    ImageTokens,
    /// Sum over attention units of the unit's tokens squared: full attention
    /// within each unit (Qwen2-VL per image or frame group; the full layers
    /// of Qwen2.5-VL).
    UnitAttention,
    /// Windowed attention: each unit of `n` tokens is `P * n` patches cut
    /// into windows of `W` patches (the last one shorter); the feature sums
    /// the windows' squared sizes in patches (Qwen2.5-VL: `W = 64`, `P = 4`).
    WindowAttention {
        /// Patches per window (`W`).
        window: NonZeroU32,
        /// Encoder patches per LLM token (`P`).
        patches_per_token: NonZeroU32,
    },
    /// Tiles of `T` tokens: each image needs `ceil(tokens / T)` tiles, and
    /// at least its units (CLIP, SigLIP, InternViT).
    Tiles {
        /// LLM tokens per tile (`T`).
        tokens_per_tile: NonZeroU32,
    },
    /// Images: a fixed cost per image.
    Images,
    /// Attention units (tiles, frame groups): a fixed cost per unit.
    Units,
    /// Tokens of the language model, text and image.
    Tokens,
    /// Sum over samples of the sample's tokens squared: attention under a
    /// document mask.
    DocumentAttention,
    /// Samples: a fixed cost per sample.
    Samples,
    /// 1 for a non-empty group, 0 for the empty one: a fixed cost per
    /// micro-batch (or per packed sequence, for the planner's sequences).
    Groups,
    /// The square of the group's tokens (`(sum over samples of T)^2`):
    /// attention over a packed row under a dense mask, where the kernel
    /// computes every pair of the row (sdpa or eager attention with a block
    /// mask, see [`AttentionKernel::Dense`](super::AttentionKernel::Dense)),
    /// not only those within a document. Evaluate it on groups that are
    /// one packed sequence each.
    RowAttention,
    /// 1 for a non-empty group, 0 for the empty one, in the vision phase:
    /// the vision tower's fixed cost per call (kernel launches, the patch
    /// embedding's and merger's setup, the position embeddings), paid per
    /// micro-batch or per packed sequence whatever its images, and by a row
    /// without images too when the collator gives it a padding image (as
    /// `microbatch.hf.PackedCollator` does, so that every rank's tower
    /// runs). Without it, that cost has no vision term to go to.
    VisionGroups,
}

/// The names of the terms without parameters, with the term.
const PLAIN: [(&str, Term); 10] = [
    ("vision.image_tokens", Term::ImageTokens),
    ("vision.unit_attention", Term::UnitAttention),
    ("vision.images", Term::Images),
    ("vision.units", Term::Units),
    ("language.tokens", Term::Tokens),
    ("language.document_attention", Term::DocumentAttention),
    ("language.samples", Term::Samples),
    ("language.groups", Term::Groups),
    ("language.row_attention", Term::RowAttention),
    ("vision.groups", Term::VisionGroups),
];

/// Every name a term can have: [`Term::NAMES`].
const KNOWN: [&str; 12] = [
    "vision.image_tokens",
    "vision.unit_attention",
    "vision.window_attention(W,P)",
    "vision.tiles(T)",
    "vision.images",
    "vision.units",
    "language.tokens",
    "language.document_attention",
    "language.samples",
    "language.groups",
    "language.row_attention",
    "vision.groups",
];

impl Term {
    /// The name of every term, in the order of the enum, as
    /// [`Display`](fmt::Display) writes it and [`FromStr`] reads it; a
    /// parameter is a letter in parentheses (`vision.tiles(T)`: write
    /// `vision.tiles(256)`). The names an unknown name's error lists.
    ///
    /// # Examples
    ///
    /// ```
    /// use microbatch::cost::Term;
    ///
    /// assert_eq!(Term::NAMES.len(), 12);
    /// assert_eq!(Term::NAMES[3], "vision.tiles(T)");
    /// // Every name parses once its parameters are written in.
    /// for name in Term::NAMES {
    ///     let name = name.replace("(W,P)", "(64,4)").replace("(T)", "(256)");
    ///     assert_eq!(name.parse::<Term>()?.to_string(), name);
    /// }
    /// # Ok::<(), microbatch::Error>(())
    /// ```
    pub const NAMES: &'static [&'static str] = &KNOWN;

    /// The phase whose time the term's feature explains.
    ///
    /// # Examples
    ///
    /// ```
    /// use microbatch::cost::{Phase, Term};
    ///
    /// assert_eq!(Term::Images.phase(), Phase::Vision);
    /// assert_eq!(Term::DocumentAttention.phase(), Phase::Language);
    /// ```
    #[must_use]
    pub const fn phase(self) -> Phase {
        match self {
            Term::ImageTokens
            | Term::UnitAttention
            | Term::WindowAttention { .. }
            | Term::Tiles { .. }
            | Term::Images
            | Term::Units
            | Term::VisionGroups => Phase::Vision,
            Term::Tokens
            | Term::DocumentAttention
            | Term::Samples
            | Term::Groups
            | Term::RowAttention => Phase::Language,
        }
    }

    /// The term's name without its parameters (`"vision.tiles"` for every
    /// [`Tiles`](Term::Tiles)): what an error about its coefficient names.
    ///
    /// # Examples
    ///
    /// ```
    /// use core::num::NonZeroU32;
    /// use microbatch::cost::Term;
    ///
    /// let tiles = Term::Tiles { tokens_per_tile: NonZeroU32::new(576).unwrap() };
    /// assert_eq!(tiles.kind(), "vision.tiles");
    /// assert_eq!(Term::Samples.kind(), "language.samples");
    /// ```
    #[must_use]
    pub const fn kind(self) -> &'static str {
        match self {
            Term::ImageTokens => "vision.image_tokens",
            Term::UnitAttention => "vision.unit_attention",
            Term::WindowAttention { .. } => "vision.window_attention",
            Term::Tiles { .. } => "vision.tiles",
            Term::Images => "vision.images",
            Term::Units => "vision.units",
            Term::Tokens => "language.tokens",
            Term::DocumentAttention => "language.document_attention",
            Term::Samples => "language.samples",
            Term::Groups => "language.groups",
            Term::RowAttention => "language.row_attention",
            Term::VisionGroups => "vision.groups",
        }
    }

    /// Whether the term is a sum of per-sample shares (every term but
    /// [`Groups`](Term::Groups), [`VisionGroups`](Term::VisionGroups) and
    /// [`RowAttention`](Term::RowAttention)).
    ///
    /// # Examples
    ///
    /// ```
    /// use microbatch::cost::Term;
    ///
    /// assert!(Term::Tokens.is_additive());
    /// assert!(!Term::Groups.is_additive());
    /// assert!(!Term::RowAttention.is_additive());
    /// assert!(!Term::VisionGroups.is_additive());
    /// ```
    #[must_use]
    pub const fn is_additive(self) -> bool {
        !matches!(self, Term::Groups | Term::VisionGroups | Term::RowAttention)
    }

    /// Whether a sample alone is sure to bring its own feature to every
    /// group holding it (every term but [`Groups`](Term::Groups) and
    /// [`VisionGroups`](Term::VisionGroups)): the additive terms, and
    /// [`RowAttention`](Term::RowAttention), as `(a + b)^2 >= a^2 + b^2`.
    /// What [`Linear`]'s floor keeps.
    const fn has_floor(self) -> bool {
        !matches!(self, Term::Groups | Term::VisionGroups)
    }

    /// The term's share of one sample, to be summed over a group (for
    /// [`Groups`](Term::Groups) and [`VisionGroups`](Term::VisionGroups):
    /// the sample count, mapped to 0 or 1 by
    /// [`feature`](Term::feature); for [`RowAttention`](Term::RowAttention):
    /// the tokens, squared by `feature`). Saturating; below `2^128` for every
    /// sample (tokens are below `2^64`, their squares below `2^128`).
    pub(crate) fn share(self, sample: &Sample) -> u128 {
        let mut x = 0u128;
        match self {
            Term::ImageTokens => x = u128::from(sample.image_tokens()),
            Term::UnitAttention => {
                for image in sample.images() {
                    image.for_each_unit(|tokens, count| {
                        let t = u128::from(tokens);
                        x = x.saturating_add((t * t).saturating_mul(u128::from(count)));
                    });
                }
            }
            Term::WindowAttention {
                window,
                patches_per_token,
            } => {
                let p = u64::from(patches_per_token.get());
                for image in sample.images() {
                    image.for_each_unit(|tokens, count| {
                        // `tokens` and `p` are below 2^32: `n < 2^64`.
                        let windows = window_squares(p * tokens, window.get());
                        x = x.saturating_add(windows.saturating_mul(u128::from(count)));
                    });
                }
            }
            Term::Tiles { tokens_per_tile } => {
                let t = u64::from(tokens_per_tile.get());
                for image in sample.images() {
                    let tiles = u64::from(image.tokens())
                        .div_ceil(t)
                        .max(u64::from(image.units()));
                    x = x.saturating_add(u128::from(tiles));
                }
            }
            Term::Images => x = sample.images().len() as u128,
            Term::Units => {
                for image in sample.images() {
                    x = x.saturating_add(u128::from(image.units()));
                }
            }
            Term::Tokens | Term::RowAttention => x = u128::from(sample.tokens()),
            Term::DocumentAttention => {
                let t = u128::from(sample.tokens());
                x = t * t;
            }
            Term::Samples | Term::Groups | Term::VisionGroups => x = 1,
        }
        x
    }

    /// The group's feature from the sum of its samples' shares.
    pub(crate) fn feature(self, sum: u128) -> f64 {
        match self {
            Term::Groups | Term::VisionGroups => {
                if sum > 0 {
                    1.0
                } else {
                    0.0
                }
            }
            // The row's tokens squared (saturating: beyond 2^128 the
            // feature is beyond any finite cost anyway).
            Term::RowAttention => f(sum.saturating_mul(sum)),
            _ => f(sum),
        }
    }
}

impl fmt::Display for Term {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Term::WindowAttention {
                window,
                patches_per_token,
            } => write!(f, "vision.window_attention({window},{patches_per_token})"),
            Term::Tiles { tokens_per_tile } => write!(f, "vision.tiles({tokens_per_tile})"),
            _ => f.write_str(self.kind()),
        }
    }
}

impl FromStr for Term {
    type Err = Error;

    /// The term of this name, as [`Display`](fmt::Display) writes it:
    /// `vision.tiles(256)`, `vision.window_attention(64,4)`, `language.tokens`,
    /// ... (parameters are positive integers, without spaces).
    ///
    /// # Errors
    ///
    /// [`Error::UnknownName`] of kind `"cost term"` for any other name; its
    /// message lists the known names.
    fn from_str(name: &str) -> Result<Self, Error> {
        let unknown = || Error::UnknownName {
            kind: "cost term",
            name: name.into(),
            known: &KNOWN,
        };
        if let Some(&(_, term)) = PLAIN.iter().find(|(n, _)| *n == name) {
            return Ok(term);
        }
        let positive = |s: &str| -> Option<NonZeroU32> {
            // Digits only: `u32::from_str` would also take a leading `+`.
            if s.is_empty() || !s.bytes().all(|b| b.is_ascii_digit()) {
                return None;
            }
            s.parse::<NonZeroU32>().ok()
        };
        let args = |prefix: &str| -> Option<&str> { name.strip_prefix(prefix)?.strip_suffix(')') };
        if let Some(t) = args("vision.tiles(") {
            let tokens_per_tile = positive(t).ok_or_else(unknown)?;
            return Ok(Term::Tiles { tokens_per_tile });
        }
        if let Some(a) = args("vision.window_attention(") {
            let (w, p) = a.split_once(',').ok_or_else(unknown)?;
            let (window, patches_per_token) = (
                positive(w).ok_or_else(unknown)?,
                positive(p).ok_or_else(unknown)?,
            );
            return Ok(Term::WindowAttention {
                window,
                patches_per_token,
            });
        }
        Err(unknown())
    }
}

/// A linear cost model: `sum over terms of coefficient * feature(group)`,
/// each term's share in its [`phase`](Term::phase).
///
/// Up to [`MAX_TERMS`](Linear::MAX_TERMS) distinct terms, in the order
/// given (a term given twice counts once, with the sum of its
/// coefficients). The model is [`Incremental`]: its state is the array of
/// the terms' integer sums, so a group's cost does not depend on the order
/// of its samples. Its [`floor`](CostModel::floor) is a sample's cost alone
/// without the [`Groups`](Term::Groups) and
/// [`VisionGroups`](Term::VisionGroups) terms (paid once per group, so no
/// sample has a share of them). `Debug` prints the formula.
///
/// [`Linear::preset`] writes every [`Preset`] as a `Linear` of the same
/// costs (within rounding), with the overhead terms
/// [`Images`](Term::Images), [`Units`](Term::Units),
/// [`Samples`](Term::Samples), [`Groups`](Term::Groups) and
/// [`VisionGroups`](Term::VisionGroups) at zero, so that a
/// [`Calibrator`](super::Calibrator) can find them.
///
/// # Examples
///
/// ```
/// use microbatch::cost::{CostModel, Image, Linear, Phases, Sample, Term};
///
/// let model = Linear::new([
///     (Term::ImageTokens, 2e-5),
///     (Term::Images, 1e-3),
///     (Term::Tokens, 1e-4),
///     (Term::Groups, 0.01),
/// ])?;
/// let (a, b) = (Sample::new(100, [Image::new(400)]), Sample::text_only(500));
/// let cost = model.cost(&[&a, &b]);
/// assert!((cost.vision - (2e-5 * 400.0 + 1e-3)).abs() < 1e-15);
/// assert!((cost.language - (1e-4 * 1000.0 + 0.01)).abs() < 1e-15);
/// assert_eq!(model.floor(&b), Phases::new(0.0, 1e-4 * 500.0)); // no per-group share
/// assert_eq!(
///     format!("{model:?}"),
///     "2e-5 * vision.image_tokens + 0.001 * vision.images + 0.0001 * language.tokens + 0.01 * language.groups"
/// );
/// # Ok::<(), microbatch::Error>(())
/// ```
#[derive(Clone, Copy, PartialEq)]
#[must_use = "cost models do nothing unless evaluated"]
pub struct Linear {
    len: u8,
    terms: [Term; Linear::MAX_TERMS],
    coefficients: [f64; Linear::MAX_TERMS],
}

impl Linear {
    /// The most distinct terms a model holds: its state is a fixed array of
    /// this many `u128` sums.
    ///
    /// # Examples
    ///
    /// ```
    /// use microbatch::cost::{Linear, Preset};
    ///
    /// assert!(Preset::ALL.iter().all(|&p| Linear::preset(p).len() <= Linear::MAX_TERMS));
    /// ```
    pub const MAX_TERMS: usize = 12;

    /// A model of these `(term, coefficient)` pairs, in order; a term given
    /// twice is kept at its first place with the sum of its coefficients.
    ///
    /// # Errors
    ///
    /// - [`Error::Invalid`] at a [coefficient](crate::Locator::Coefficient)
    ///   naming the term's [`kind`](Term::kind) for a NaN, infinite or negative
    ///   coefficient;
    /// - [`Error::Invalid`] at a [setting](crate::Locator::Setting) named
    ///   `terms` for more than [`MAX_TERMS`](Linear::MAX_TERMS) distinct terms.
    ///
    /// # Examples
    ///
    /// ```
    /// use microbatch::cost::{Linear, Term};
    /// use microbatch::{Error, Locator};
    ///
    /// let model = Linear::new([(Term::Tokens, 1.0), (Term::Samples, 2.0), (Term::Tokens, 0.5)])?;
    /// assert_eq!(model.terms(), [Term::Tokens, Term::Samples]);
    /// assert_eq!(model.coefficients(), [1.5, 2.0]);
    /// assert!(matches!(
    ///     Linear::new([(Term::Images, -1.0)]),
    ///     Err(Error::Invalid { at: Locator::Coefficient { name: "vision.images" }, .. })
    /// ));
    /// # Ok::<(), microbatch::Error>(())
    /// ```
    pub fn new(terms: impl IntoIterator<Item = (Term, f64)>) -> Result<Self, Error> {
        let mut model = Linear::zero();
        for (term, c) in terms {
            let c = coefficient(term.kind(), c)?;
            if let Some(i) = model.position(term) {
                let sum = model.coefficients[i] + c;
                model.coefficients[i] = coefficient(term.kind(), sum)?;
                continue;
            }
            let n = usize::from(model.len);
            if n == Linear::MAX_TERMS {
                return Err(Error::setting(
                    "terms",
                    (n + 1) as u64,
                    "at most 12 distinct terms",
                ));
            }
            model.terms[n] = term;
            model.coefficients[n] = c;
            model.len += 1;
        }
        Ok(model)
    }

    /// The model without terms: zero for every group.
    fn zero() -> Self {
        Linear {
            len: 0,
            terms: [Term::Groups; Linear::MAX_TERMS],
            coefficients: [0.0; Linear::MAX_TERMS],
        }
    }

    /// The preset's FLOPs model ([`Preset::cost_model`]) as a linear model
    /// over terms, equal to it within rounding (`1e-12` relative, checked by
    /// tests), followed by the overhead terms [`Images`](Term::Images),
    /// [`Units`](Term::Units), [`Samples`](Term::Samples),
    /// [`Groups`](Term::Groups) and [`VisionGroups`](Term::VisionGroups)
    /// at coefficient zero (`VisionGroups` last: on total times it is the
    /// same feature as `Groups`, and a calibrator keeps the first).
    ///
    /// | preset | vision terms | language terms |
    /// |---|---|---|
    /// | `llava-1.5-7b` | `vision.tiles(576)` | `language.tokens`, `language.document_attention` |
    /// | `qwen2.5-vl-7b` | `vision.image_tokens`, `vision.window_attention(64,4)`, `vision.unit_attention` | the same |
    /// | `internvl2.5-8b` | `vision.tiles(256)` | the same |
    ///
    /// # Examples
    ///
    /// ```
    /// use microbatch::cost::{CostModel, Image, Linear, Preset, Sample, Term};
    ///
    /// let p = Preset::Qwen25Vl7b;
    /// let linear = Linear::preset(p);
    /// let sample = Sample::new(180, [Image::new(1024)]);
    /// let (a, b) = (linear.cost(&[&sample]), p.cost_model().cost(&[&sample]));
    /// assert!((a.vision / b.vision - 1.0).abs() < 1e-12);
    /// assert!((a.language / b.language - 1.0).abs() < 1e-12);
    /// assert_eq!(linear.coefficient(Term::Groups), Some(0.0));
    /// ```
    pub fn preset(preset: Preset) -> Self {
        let model = preset.cost_model();
        let (vision, llm) = model.terms();
        let (tokens, attention) = llm.terms();
        let mut out = Linear::zero();
        let mut push = |term: Term, c: f64| {
            // At most 10 terms, each once: no merge, no overflow of the array.
            let n = usize::from(out.len);
            out.terms[n] = term;
            out.coefficients[n] = c;
            out.len += 1;
        };
        let one = NonZeroU32::MIN;
        let nonzero = |x: u32| NonZeroU32::new(x).unwrap_or(one);
        match vision {
            Vision::PerTile(m) => {
                let factor = m.training().factor();
                push(
                    Term::Tiles {
                        tokens_per_tile: nonzero(m.tokens_per_tile()),
                    },
                    m.per_tile() * factor,
                );
            }
            Vision::PerImage(m) => {
                let factor = m.training().factor();
                let p = f64::from(m.patches_per_token());
                push(Term::ImageTokens, factor * m.per_patch() * p);
                push(Term::UnitAttention, factor * m.per_patch_pair() * p * p);
            }
            Vision::Windowed(m) => {
                let factor = m.training().factor();
                let p = f64::from(m.patches_per_token());
                push(Term::ImageTokens, factor * m.per_patch() * p);
                push(
                    Term::WindowAttention {
                        window: nonzero(m.window()),
                        patches_per_token: nonzero(m.patches_per_token()),
                    },
                    factor * m.per_window_pair(),
                );
                push(Term::UnitAttention, factor * m.per_patch_pair() * p * p);
            }
        }
        push(Term::Tokens, tokens.per_token());
        push(Term::DocumentAttention, attention.per_token_pair());
        // `VisionGroups` last: on total times it is the same feature as
        // `Groups` (1 a group), and the calibrator keeps the first of two
        // such terms.
        for term in [
            Term::Images,
            Term::Units,
            Term::Samples,
            Term::Groups,
            Term::VisionGroups,
        ] {
            push(term, 0.0);
        }
        out
    }

    /// The preset's model for the attention `kernel` the training runs:
    /// [`AttentionKernel::Varlen`] is [`Linear::preset`];
    /// [`AttentionKernel::Dense`] has [`RowAttention`](Term::RowAttention)
    /// in place of [`DocumentAttention`](Term::DocumentAttention), at the
    /// same coefficient (the same FLOPs per token pair, over every pair of
    /// the packed row instead of those within a sample).
    ///
    /// # Examples
    ///
    /// ```
    /// use microbatch::cost::{AttentionKernel, CostModel, Linear, Preset, Sample, Term};
    ///
    /// let p = Preset::Llava15_7b;
    /// assert_eq!(Linear::preset_with(p, AttentionKernel::Varlen), Linear::preset(p));
    /// let dense = Linear::preset_with(p, AttentionKernel::Dense);
    /// let c = Linear::preset(p).coefficient(Term::DocumentAttention);
    /// assert_eq!(dense.coefficient(Term::RowAttention), c);
    /// assert_eq!(dense.coefficient(Term::DocumentAttention), None);
    /// // Two samples of 1000 tokens in one row: 2000^2 pairs, not 2 x 1000^2.
    /// let (a, b) = (Sample::text_only(1000), Sample::text_only(1000));
    /// let extra = dense.cost(&[&a, &b]).language - Linear::preset(p).cost(&[&a, &b]).language;
    /// assert!((extra / (c.unwrap() * 2e6) - 1.0).abs() < 1e-12);
    /// ```
    pub fn preset_with(preset: Preset, kernel: AttentionKernel) -> Self {
        let mut out = Linear::preset(preset);
        if kernel == AttentionKernel::Dense {
            for t in &mut out.terms[..usize::from(out.len)] {
                if *t == Term::DocumentAttention {
                    *t = Term::RowAttention;
                }
            }
        }
        out
    }

    /// The terms, in order.
    ///
    /// # Examples
    ///
    /// ```
    /// use microbatch::cost::{Linear, Term};
    ///
    /// let model = Linear::new([(Term::Samples, 1.0), (Term::Tokens, 2.0)])?;
    /// assert_eq!(model.terms(), [Term::Samples, Term::Tokens]);
    /// # Ok::<(), microbatch::Error>(())
    /// ```
    #[must_use]
    pub fn terms(&self) -> &[Term] {
        &self.terms[..usize::from(self.len)]
    }

    /// The coefficients, in the order of [`terms`](Linear::terms).
    ///
    /// # Examples
    ///
    /// ```
    /// use microbatch::cost::{Linear, Term};
    ///
    /// let model = Linear::new([(Term::Samples, 1.0), (Term::Tokens, 2.0)])?;
    /// assert_eq!(model.coefficients(), [1.0, 2.0]);
    /// # Ok::<(), microbatch::Error>(())
    /// ```
    #[must_use]
    pub fn coefficients(&self) -> &[f64] {
        &self.coefficients[..usize::from(self.len)]
    }

    /// The coefficient of `term`, or `None` if the model does not have it.
    ///
    /// # Examples
    ///
    /// ```
    /// use microbatch::cost::{Linear, Term};
    ///
    /// let model = Linear::new([(Term::Tokens, 2.0)])?;
    /// assert_eq!(model.coefficient(Term::Tokens), Some(2.0));
    /// assert_eq!(model.coefficient(Term::Images), None);
    /// # Ok::<(), microbatch::Error>(())
    /// ```
    #[must_use]
    pub fn coefficient(&self, term: Term) -> Option<f64> {
        self.position(term).map(|i| self.coefficients[i])
    }

    /// The number of terms.
    ///
    /// # Examples
    ///
    /// ```
    /// use microbatch::cost::{Linear, Preset};
    ///
    /// assert_eq!(Linear::preset(Preset::Llava15_7b).len(), 8);
    /// ```
    #[must_use]
    pub fn len(&self) -> usize {
        usize::from(self.len)
    }

    /// Whether the model has no term (it costs zero).
    ///
    /// # Examples
    ///
    /// ```
    /// use microbatch::cost::Linear;
    ///
    /// assert!(Linear::new([])?.is_empty());
    /// # Ok::<(), microbatch::Error>(())
    /// ```
    #[must_use]
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// The same terms with other coefficients, in the order of
    /// [`terms`](Linear::terms) (missing ones are zero, extra ones ignored).
    ///
    /// # Errors
    ///
    /// [`Error::Invalid`] at a [coefficient](crate::Locator::Coefficient)
    /// naming the term of a NaN, infinite or negative coefficient.
    ///
    /// # Examples
    ///
    /// ```
    /// use microbatch::cost::{Linear, Term};
    ///
    /// let model = Linear::new([(Term::Tokens, 2.0), (Term::Samples, 1.0)])?;
    /// let other = model.with_coefficients(&[3.0])?;
    /// assert_eq!(other.coefficients(), [3.0, 0.0]);
    /// # Ok::<(), microbatch::Error>(())
    /// ```
    pub fn with_coefficients(&self, coefficients: &[f64]) -> Result<Self, Error> {
        let mut out = *self;
        for (i, (term, c)) in self.terms().iter().zip(&mut out.coefficients).enumerate() {
            *c = coefficient(term.kind(), coefficients.get(i).copied().unwrap_or(0.0))?;
        }
        Ok(out)
    }

    fn position(&self, term: Term) -> Option<usize> {
        self.terms().iter().position(|&t| t == term)
    }

    /// The features of a group from its state, one per term (zero beyond
    /// [`len`](Linear::len)).
    pub(crate) fn features(&self, state: &[u128; Linear::MAX_TERMS]) -> [f64; Linear::MAX_TERMS] {
        let mut x = [0.0; Linear::MAX_TERMS];
        for ((xi, term), &s) in x.iter_mut().zip(self.terms()).zip(state) {
            *xi = term.feature(s);
        }
        x
    }

    /// `sum of coefficient * feature` per phase, over the terms `keep`
    /// selects; a zero feature adds nothing (no `inf * 0`).
    fn value(&self, state: &[u128; Linear::MAX_TERMS], keep: impl Fn(Term) -> bool) -> Phases {
        let mut out = Phases::ZERO;
        for ((&term, &c), &s) in self.terms().iter().zip(&self.coefficients).zip(state) {
            if s == 0 || !keep(term) {
                continue;
            }
            let v = c * term.feature(s);
            match term.phase() {
                Phase::Vision => out.vision += v,
                Phase::Language => out.language += v,
            }
        }
        out
    }
}

impl fmt::Debug for Linear {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.is_empty() {
            return f.write_str("0");
        }
        for (i, (term, c)) in self.terms().iter().zip(self.coefficients()).enumerate() {
            if i > 0 {
                f.write_str(" + ")?;
            }
            write!(f, "{c:?} * {term}")?;
        }
        Ok(())
    }
}

impl CostModel for Linear {
    #[inline]
    fn cost(&self, group: &[&Sample]) -> Phases {
        super::cost_by_state(self, group)
    }

    /// The sample's cost alone without the [`Groups`](Term::Groups) and
    /// [`VisionGroups`](Term::VisionGroups) terms
    /// ([`RowAttention`](Term::RowAttention) keeps the sample's own square,
    /// which every row holding it has).
    fn floor(&self, sample: &Sample) -> Phases {
        let mut state = self.empty();
        self.insert(&mut state, sample);
        // The same sum as the cost alone with one non-negative term left
        // out: at most the cost alone, term by term in rounding too.
        self.value(&state, Term::has_floor)
    }

    /// The coefficients of [`Groups`](Term::Groups) (language) and
    /// [`VisionGroups`](Term::VisionGroups) (vision) per group, paid by
    /// every non-empty group and left out of the floors, and that of
    /// [`RowAttention`](Term::RowAttention) per token pair: a row costs
    /// `c * T^2`, its samples' floors `c * t^2` each.
    fn group_floor(&self) -> GroupFloor {
        let mut out = GroupFloor::ZERO;
        for (&term, &c) in self.terms().iter().zip(&self.coefficients) {
            match term {
                Term::Groups => out.per_group.language += c,
                Term::VisionGroups => out.per_group.vision += c,
                Term::RowAttention => out.per_token_pair.language += c,
                _ => {}
            }
        }
        out
    }
}

impl Incremental for Linear {
    /// The terms' integer sums over the group, in the order of
    /// [`terms`](Linear::terms).
    type State = [u128; Linear::MAX_TERMS];

    #[inline]
    fn empty(&self) -> Self::State {
        [0; Linear::MAX_TERMS]
    }

    #[inline]
    fn insert(&self, state: &mut Self::State, sample: &Sample) {
        for (s, term) in state.iter_mut().zip(self.terms()) {
            *s = s.saturating_add(term.share(sample));
        }
    }

    #[inline]
    fn evaluate(&self, state: &Self::State) -> Phases {
        self.value(state, |_| true)
    }

    /// The sample inserted once; its cost and its floor both read from
    /// that state.
    #[inline]
    fn cost_and_floor(&self, sample: &Sample) -> (Phases, Phases) {
        let mut state = self.empty();
        self.insert(&mut state, sample);
        (
            self.value(&state, |_| true),
            self.value(&state, Term::has_floor),
        )
    }
}

impl_add!(Linear);

#[cfg(test)]
mod tests {
    use super::*;
    use alloc::string::ToString;

    #[test]
    fn every_name_reads_back() {
        let w = NonZeroU32::new(64).unwrap();
        let p = NonZeroU32::new(4).unwrap();
        let mut terms: alloc::vec::Vec<Term> = PLAIN.iter().map(|&(_, t)| t).collect();
        terms.push(Term::WindowAttention {
            window: w,
            patches_per_token: p,
        });
        terms.push(Term::Tiles { tokens_per_tile: w });
        for t in terms {
            assert_eq!(t.to_string().parse::<Term>(), Ok(t));
        }
        for bad in [
            "vision.tiles()",
            "vision.tiles(+3)",
            "vision.tiles(3",
            "vision.window_attention(1)",
            "vision.window_attention(1,0)",
            "language.token",
        ] {
            assert!(bad.parse::<Term>().is_err(), "{bad}");
        }
    }
}
