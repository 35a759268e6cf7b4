//! Vision encoders: per-tile linear (CLIP, SigLIP, InternViT), per-image
//! quadratic (Qwen2-VL) and windowed with some full-attention layers
//! (Qwen2.5-VL); frozen (forward only) or trained (forward + backward).
//!
//! Every model here puts its cost in the vision phase, depends only on the
//! images of a sample, and is incremental with an integer state (tiles,
//! patches, squared patches), so that insertion is exact and independent of
//! order.

use core::fmt;

use super::{coefficient, f, impl_summed, Image, Phases, Sample};
use crate::error::Error;

/// Whether the vision encoder is trained or frozen, which sets the multiple
/// of its forward cost that a training step pays.
///
/// # Examples
///
/// ```
/// use microbatch::cost::Training;
///
/// assert_eq!(Training::Frozen.factor(), 1.0);
/// assert_eq!(Training::Trained.factor(), 3.0);
/// ```
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[cfg_attr(feature = "serde", derive(serde::Serialize, serde::Deserialize))]
pub enum Training {
    /// Frozen: forward only. The backward pass stops at the projector, so
    /// the encoder costs one forward pass (LLaVA-1.5's CLIP).
    Frozen,
    /// Trained: forward and backward, the backward costing about twice the
    /// forward (gradients with respect to inputs and to weights): 3x.
    Trained,
}

impl Training {
    /// Both values, in order: frozen, trained.
    ///
    /// # Examples
    ///
    /// ```
    /// use microbatch::cost::Training;
    ///
    /// assert!(Training::ALL.iter().all(|x| x.name().parse::<Training>() == Ok(*x)));
    /// ```
    pub const ALL: [Training; 2] = [Training::Frozen, Training::Trained];

    /// The name of each value, in the order of [`Training::ALL`]: the
    /// names [`FromStr`](core::str::FromStr) reads and an unknown name's
    /// error lists.
    ///
    /// # Examples
    ///
    /// ```
    /// use microbatch::cost::Training;
    ///
    /// assert_eq!(Training::NAMES, ["frozen", "trained"]);
    /// assert!("?".parse::<Training>().unwrap_err().to_string().ends_with("frozen, trained"));
    /// ```
    pub const NAMES: [&'static str; 2] = ["frozen", "trained"];

    /// The name used by [`Display`](core::fmt::Display) and
    /// [`FromStr`](core::str::FromStr): `frozen` or `trained`.
    ///
    /// # Examples
    ///
    /// ```
    /// use microbatch::cost::Training;
    ///
    /// assert_eq!(Training::Frozen.name(), "frozen");
    /// assert_eq!("frozen".parse::<Training>()?, Training::Frozen);
    /// # Ok::<(), microbatch::Error>(())
    /// ```
    #[must_use]
    pub const fn name(self) -> &'static str {
        Self::NAMES[self as usize]
    }

    /// The multiple of the forward cost: 1 when frozen, 3 when trained.
    ///
    /// # Examples
    ///
    /// ```
    /// use microbatch::cost::{CostModel, Image, PerTile, Sample, Training};
    ///
    /// let frozen = PerTile::new(2.0, 576, Training::Frozen)?;
    /// let trained = PerTile::new(2.0, 576, Training::Trained)?;
    /// let group = [&Sample::new(0, [Image::new(576)])];
    /// assert_eq!(trained.cost(&group).vision / frozen.cost(&group).vision, Training::Trained.factor());
    /// # Ok::<(), microbatch::Error>(())
    /// ```
    #[must_use]
    pub const fn factor(self) -> f64 {
        match self {
            Training::Frozen => 1.0,
            Training::Trained => 3.0,
        }
    }
}

crate::error::impl_named!(Training, "training", &Training::NAMES);

/// The state of every vision model: three integer feature sums (which ones
/// depends on the model).
type Features = [u128; 3];

/// Sums `per_unit(n)` over the attention units of every image of `sample`,
/// `n` being a unit's patches at `patches_per_token` patches per LLM token.
/// Units of equal size are counted once and multiplied (saturating).
///
/// `n` is a `u64`: a unit has at most `u32::MAX` tokens, so `n <
/// 2^64`; `per_unit` widens to `u128` only where a product needs it (`n^2`
/// and the like), so the common unit costs no `u128` division. A count of
/// one (every image of [`Image::new`]) adds its features without the
/// multiplication.
#[inline]
fn unit_features(
    sample: &Sample,
    patches_per_token: u32,
    per_unit: impl Fn(u64) -> Features,
) -> Features {
    let p = u64::from(patches_per_token);
    let images = sample.images();
    if let [one] = images {
        if one.units() == 1 {
            // The common sample: one image of one unit (its features added
            // to zero: no saturation, no loop).
            return per_unit(p * u64::from(one.tokens()));
        }
    }
    let mut x = [0u128; 3];
    for image in images {
        image.for_each_unit(|tokens, count| {
            // `tokens <= u32::MAX` and `p <= u32::MAX`: no overflow.
            let v = per_unit(p * tokens);
            if count == 1 {
                for (s, v) in x.iter_mut().zip(v) {
                    *s = s.saturating_add(v);
                }
            } else {
                let c = u128::from(count);
                for (s, v) in x.iter_mut().zip(v) {
                    *s = s.saturating_add(c.saturating_mul(v));
                }
            }
        });
    }
    x
}

/// `a * b` of two `u64`s, exact in `u128`.
#[inline]
fn wide(a: u64, b: u64) -> u128 {
    u128::from(a) * u128::from(b)
}

/// `sum(w_i^2)` over the windows of `w` patches that cover `n` patches
/// (full windows, then the rest): `full * w^2 + rest^2`. `full * w <= n <
/// 2^64` and `rest < w`, so the sum is at most `n * w < 2^128`, exact; the
/// division is of `u64`s. `w` is at least 1 (as every constructor checks;
/// 0 is taken as 1).
#[inline]
pub(super) fn window_squares(n: u64, w: u32) -> u128 {
    let w = u64::from(w.max(1));
    // A window of a power of two patches (Qwen2.5-VL's 64): a shift and a
    // mask, the same quotient and remainder without a division.
    let (full, rest) = if w.is_power_of_two() {
        (n >> w.trailing_zeros(), n & (w - 1))
    } else {
        (n / w, n % w)
    };
    wide(full * w, w) + wide(rest, rest)
}

/// Implements `CostModel`, `Incremental` and `+` from
/// `features(&Sample) -> Features` and `value(&Features) -> f64`.
macro_rules! impl_vision {
    ($ty:ident) => {
        // State: integer feature sums of the group.
        // Floor: additive over images, the cost alone.
        impl_summed!(
            $ty,
            Features,
            |m, s| m.features(s),
            |m, x| Phases::new(m.value(x), 0.0),
            alone
        );
    };
}

/// Checks that a count parameter is at least 1.
pub(super) fn at_least_one(name: &'static str, value: u32) -> Result<u32, Error> {
    if value == 0 {
        Err(Error::setting(name, 0, "at least 1"))
    } else {
        Ok(value)
    }
}

/// A vision encoder that attends within fixed-size tiles, so that its cost
/// is linear in tiles: `training.factor() * per_tile * tiles`, in the vision
/// phase (CLIP, SigLIP, InternViT).
///
/// An image's tiles are `max(units, ceil(tokens / tokens_per_tile))`: its
/// units when they are given ([`Image::with_units`]), or as many tiles as
/// its tokens need (LLaVA-1.5: 576 tokens per 336px tile; InternVL: 256
/// tokens per 448px tile). A text-only sample costs nothing.
///
/// # Examples
///
/// ```
/// use core::num::NonZeroU32;
/// use microbatch::cost::{CostModel, Image, PerTile, Sample, Training};
///
/// let internvit = PerTile::new(1.0, 256, Training::Trained)?;
/// let s = Sample::new(50, [Image::new(600)]); // ceil(600 / 256) = 3 tiles
/// assert_eq!(internvit.cost(&[&s]).vision, 9.0);
/// let tiled = Sample::new(0, [Image::with_units(256, NonZeroU32::new(2).unwrap())]);
/// assert_eq!(internvit.tiles(&tiled.images()[0]), 2);
/// # Ok::<(), microbatch::Error>(())
/// ```
#[derive(Clone, Copy, Debug, PartialEq)]
#[must_use = "cost models do nothing unless evaluated"]
pub struct PerTile {
    pub(super) per_tile: f64,
    pub(super) tokens_per_tile: u32,
    pub(super) training: Training,
}

impl PerTile {
    /// A forward cost of `per_tile` per tile of `tokens_per_tile` LLM tokens.
    ///
    /// # Errors
    ///
    /// [`Error::Invalid`] at a [coefficient](crate::Locator::Coefficient)
    /// naming `per_tile` if it is NaN, infinite or negative; [`Error::Invalid`]
    /// at a [setting](crate::Locator::Setting) if `tokens_per_tile` is zero.
    ///
    /// # Examples
    ///
    /// ```
    /// use microbatch::cost::{CostModel, Image, PerTile, Sample, Training};
    /// use microbatch::{Error, Locator};
    ///
    /// let clip = PerTile::new(1.0, 576, Training::Frozen)?;
    /// assert_eq!(clip.cost(&[&Sample::new(0, [Image::new(577)])]).vision, 2.0); // two tiles
    /// let err = PerTile::new(1.0, 0, Training::Frozen).unwrap_err();
    /// assert!(matches!(err, Error::Invalid { at: Locator::Setting { name: "tokens_per_tile", .. }, .. }));
    /// # Ok::<(), microbatch::Error>(())
    /// ```
    pub fn new(per_tile: f64, tokens_per_tile: u32, training: Training) -> Result<Self, Error> {
        Ok(PerTile {
            per_tile: coefficient("per_tile", per_tile)?,
            tokens_per_tile: at_least_one("tokens_per_tile", tokens_per_tile)?,
            training,
        })
    }

    /// The forward cost per tile.
    ///
    /// # Examples
    ///
    /// ```
    /// use microbatch::cost::{PerTile, Training};
    ///
    /// assert_eq!(PerTile::new(0.5, 256, Training::Trained)?.per_tile(), 0.5); // the forward cost, before the 3x
    /// # Ok::<(), microbatch::Error>(())
    /// ```
    #[must_use]
    pub fn per_tile(&self) -> f64 {
        self.per_tile
    }

    /// The LLM tokens of one tile.
    ///
    /// # Examples
    ///
    /// ```
    /// use microbatch::cost::{PerTile, Training};
    ///
    /// assert_eq!(PerTile::new(1.0, 256, Training::Trained)?.tokens_per_tile(), 256);
    /// # Ok::<(), microbatch::Error>(())
    /// ```
    #[must_use]
    pub fn tokens_per_tile(&self) -> u32 {
        self.tokens_per_tile
    }

    /// Frozen or trained.
    ///
    /// # Examples
    ///
    /// ```
    /// use microbatch::cost::{PerTile, Training};
    ///
    /// assert_eq!(PerTile::new(1.0, 576, Training::Frozen)?.training(), Training::Frozen);
    /// # Ok::<(), microbatch::Error>(())
    /// ```
    #[must_use]
    pub fn training(&self) -> Training {
        self.training
    }

    /// The tiles of one image: `max(units, ceil(tokens / tokens_per_tile))`.
    ///
    /// # Examples
    ///
    /// ```
    /// use core::num::NonZeroU32;
    /// use microbatch::cost::{Image, PerTile, Training};
    ///
    /// let vit = PerTile::new(1.0, 256, Training::Trained)?;
    /// assert_eq!(vit.tiles(&Image::new(513)), 3); // ceil(513 / 256)
    /// assert_eq!(vit.tiles(&Image::with_units(256, NonZeroU32::new(4).unwrap())), 4);
    /// # Ok::<(), microbatch::Error>(())
    /// ```
    #[must_use]
    pub fn tiles(&self, image: &Image) -> u64 {
        let needed = u64::from(image.tokens()).div_ceil(u64::from(self.tokens_per_tile));
        needed.max(u64::from(image.units()))
    }

    fn features(&self, sample: &Sample) -> Features {
        let tiles = sample
            .images()
            .iter()
            .fold(0u64, |a, i| a.saturating_add(self.tiles(i)));
        [u128::from(tiles), 0, 0]
    }

    fn value(&self, x: &Features) -> f64 {
        // Tiles first: a zero count stays zero even when the coefficient
        // times the factor would overflow (inf * 0 is NaN).
        self.per_tile * f(x[0]) * self.training.factor()
    }
}

impl_vision!(PerTile);

/// A vision encoder with full attention over each image (or each frame group
/// of a video): `training.factor() * (per_patch * sum(n) + per_patch_pair *
/// sum(n^2))` over the units of every image, `n` being a unit's patches, in
/// the vision phase (Qwen2-VL).
///
/// A unit of `t` LLM tokens has `n = patches_per_token * t` patches (4 for
/// Qwen2-VL's 2x2 patch merger). An image's tokens are split over its units
/// as evenly as integers allow.
///
/// # Examples
///
/// ```
/// use microbatch::cost::{CostModel, Image, PerImage, Sample, Training};
///
/// let vit = PerImage::new(1.0, 0.5, 4, Training::Frozen)?;
/// // 100 tokens = 400 patches: 400 + 0.5 * 400^2.
/// assert_eq!(vit.cost(&[&Sample::new(7, [Image::new(100)])]).vision, 80_400.0);
/// # Ok::<(), microbatch::Error>(())
/// ```
#[derive(Clone, Copy, Debug, PartialEq)]
#[must_use = "cost models do nothing unless evaluated"]
pub struct PerImage {
    pub(super) per_patch: f64,
    pub(super) per_patch_pair: f64,
    pub(super) patches_per_token: u32,
    pub(super) training: Training,
}

impl PerImage {
    /// A forward cost of `per_patch` per patch (projections, MLP) plus
    /// `per_patch_pair` per squared patch count of each unit (attention), with
    /// `patches_per_token` ViT patches per LLM token.
    ///
    /// # Errors
    ///
    /// [`Error::Invalid`] at a [coefficient](crate::Locator::Coefficient)
    /// naming `per_patch` or `per_patch_pair` if one is NaN, infinite or
    /// negative; [`Error::Invalid`] at a [setting](crate::Locator::Setting) if
    /// `patches_per_token` is zero.
    ///
    /// # Examples
    ///
    /// ```
    /// use microbatch::cost::{CostModel, Image, PerImage, Sample, Training};
    /// use microbatch::{Error, Locator};
    ///
    /// let vit = PerImage::new(1.0, 0.0, 4, Training::Trained)?;
    /// assert_eq!(vit.cost(&[&Sample::new(0, [Image::new(10)])]).vision, 3.0 * 40.0); // 40 patches, trained
    /// let err = PerImage::new(1.0, 0.0, 0, Training::Frozen).unwrap_err();
    /// assert!(matches!(err, Error::Invalid { at: Locator::Setting { name: "patches_per_token", .. }, .. }));
    /// # Ok::<(), microbatch::Error>(())
    /// ```
    pub fn new(
        per_patch: f64,
        per_patch_pair: f64,
        patches_per_token: u32,
        training: Training,
    ) -> Result<Self, Error> {
        Ok(PerImage {
            per_patch: coefficient("per_patch", per_patch)?,
            per_patch_pair: coefficient("per_patch_pair", per_patch_pair)?,
            patches_per_token: at_least_one("patches_per_token", patches_per_token)?,
            training,
        })
    }

    /// The forward cost per patch.
    ///
    /// # Examples
    ///
    /// ```
    /// use microbatch::cost::{PerImage, Training};
    ///
    /// assert_eq!(PerImage::new(2.0, 0.5, 4, Training::Frozen)?.per_patch(), 2.0);
    /// # Ok::<(), microbatch::Error>(())
    /// ```
    #[must_use]
    pub fn per_patch(&self) -> f64 {
        self.per_patch
    }

    /// The forward cost per squared patch count of a unit.
    ///
    /// # Examples
    ///
    /// ```
    /// use microbatch::cost::{PerImage, Training};
    ///
    /// assert_eq!(PerImage::new(2.0, 0.5, 4, Training::Frozen)?.per_patch_pair(), 0.5);
    /// # Ok::<(), microbatch::Error>(())
    /// ```
    #[must_use]
    pub fn per_patch_pair(&self) -> f64 {
        self.per_patch_pair
    }

    /// ViT patches per LLM token.
    ///
    /// # Examples
    ///
    /// ```
    /// use microbatch::cost::{PerImage, Training};
    ///
    /// assert_eq!(PerImage::new(2.0, 0.5, 4, Training::Frozen)?.patches_per_token(), 4);
    /// # Ok::<(), microbatch::Error>(())
    /// ```
    #[must_use]
    pub fn patches_per_token(&self) -> u32 {
        self.patches_per_token
    }

    /// Frozen or trained.
    ///
    /// # Examples
    ///
    /// ```
    /// use microbatch::cost::{PerImage, Training};
    ///
    /// assert_eq!(PerImage::new(2.0, 0.5, 4, Training::Trained)?.training(), Training::Trained);
    /// # Ok::<(), microbatch::Error>(())
    /// ```
    #[must_use]
    pub fn training(&self) -> Training {
        self.training
    }

    fn features(&self, sample: &Sample) -> Features {
        unit_features(sample, self.patches_per_token, |n| {
            [u128::from(n), wide(n, n), 0]
        })
    }

    fn value(&self, x: &Features) -> f64 {
        self.training.factor() * (self.per_patch * f(x[0]) + self.per_patch_pair * f(x[1]))
    }
}

impl_vision!(PerImage);

/// A vision encoder whose layers mostly attend within windows of `window`
/// patches, with full attention over the unit in a few layers (Qwen2.5-VL:
/// 8x8 = 64-patch windows, full attention in 4 of 32 layers):
/// `training.factor() * (per_patch * sum(n) + per_window_pair * sum(w_i^2) +
/// per_patch_pair * sum(n^2))`, in the vision phase.
///
/// A unit of `n` patches is cut into `floor(n / window)` full windows and one
/// window of the remaining `n mod window` patches, so `sum(w_i^2) =
/// floor(n / window) * window^2 + (n mod window)^2`: linear in `n` for large
/// images, quadratic for images smaller than a window. The real windows are
/// 2-D blocks (8x8 patches), and an image whose sides are not multiples of
/// the window side has smaller windows along its right and bottom edges;
/// a [`Sample`] does not carry the image's 2-D shape, so this count packs
/// the patches into as many full windows as fit and overestimates the
/// windowed term of such images somewhat (by 20% for 20x20 patches).
///
/// # Examples
///
/// ```
/// use microbatch::cost::{CostModel, Image, Sample, Training, Windowed};
///
/// let vit = Windowed::new(0.0, 1.0, 64, 0.0, 4, Training::Frozen)?;
/// // 40 tokens = 160 patches = 64 + 64 + 32.
/// let s = Sample::new(0, [Image::new(40)]);
/// assert_eq!(vit.cost(&[&s]).vision, 2.0 * 64.0 * 64.0 + 32.0 * 32.0);
/// # Ok::<(), microbatch::Error>(())
/// ```
#[derive(Clone, Copy, Debug, PartialEq)]
#[must_use = "cost models do nothing unless evaluated"]
pub struct Windowed {
    pub(super) per_patch: f64,
    pub(super) per_window_pair: f64,
    pub(super) window: u32,
    pub(super) per_patch_pair: f64,
    pub(super) patches_per_token: u32,
    pub(super) training: Training,
}

impl Windowed {
    /// A forward cost of `per_patch` per patch, `per_window_pair` per
    /// squared window size (the windowed layers' attention, windows of
    /// `window` patches) and `per_patch_pair` per squared patch count of a
    /// unit (the full-attention layers), with `patches_per_token` ViT
    /// patches per LLM token.
    ///
    /// # Errors
    ///
    /// [`Error::Invalid`] at a [coefficient](crate::Locator::Coefficient)
    /// naming the first NaN, infinite or negative coefficient;
    /// [`Error::Invalid`] at a [setting](crate::Locator::Setting) if `window`
    /// or `patches_per_token` is zero.
    ///
    /// # Examples
    ///
    /// ```
    /// use microbatch::cost::{CostModel, Image, Sample, Training, Windowed};
    /// use microbatch::{Error, Locator};
    ///
    /// // Full attention only: 10 tokens = 40 patches, 40^2.
    /// let vit = Windowed::new(0.0, 0.0, 64, 1.0, 4, Training::Frozen)?;
    /// assert_eq!(vit.cost(&[&Sample::new(0, [Image::new(10)])]).vision, 1600.0);
    /// let err = Windowed::new(0.0, 1.0, 0, 0.0, 4, Training::Frozen).unwrap_err();
    /// assert!(matches!(err, Error::Invalid { at: Locator::Setting { name: "window", .. }, .. }));
    /// # Ok::<(), microbatch::Error>(())
    /// ```
    pub fn new(
        per_patch: f64,
        per_window_pair: f64,
        window: u32,
        per_patch_pair: f64,
        patches_per_token: u32,
        training: Training,
    ) -> Result<Self, Error> {
        Ok(Windowed {
            per_patch: coefficient("per_patch", per_patch)?,
            per_window_pair: coefficient("per_window_pair", per_window_pair)?,
            window: at_least_one("window", window)?,
            per_patch_pair: coefficient("per_patch_pair", per_patch_pair)?,
            patches_per_token: at_least_one("patches_per_token", patches_per_token)?,
            training,
        })
    }

    /// The forward cost per patch.
    ///
    /// # Examples
    ///
    /// ```
    /// use microbatch::cost::{Training, Windowed};
    ///
    /// assert_eq!(Windowed::new(2.0, 1.0, 64, 0.5, 4, Training::Frozen)?.per_patch(), 2.0);
    /// # Ok::<(), microbatch::Error>(())
    /// ```
    #[must_use]
    pub fn per_patch(&self) -> f64 {
        self.per_patch
    }

    /// The forward cost per squared window size.
    ///
    /// # Examples
    ///
    /// ```
    /// use microbatch::cost::{Training, Windowed};
    ///
    /// assert_eq!(Windowed::new(2.0, 1.0, 64, 0.5, 4, Training::Frozen)?.per_window_pair(), 1.0);
    /// # Ok::<(), microbatch::Error>(())
    /// ```
    #[must_use]
    pub fn per_window_pair(&self) -> f64 {
        self.per_window_pair
    }

    /// The window, in patches.
    ///
    /// # Examples
    ///
    /// ```
    /// use microbatch::cost::{Training, Windowed};
    ///
    /// assert_eq!(Windowed::new(2.0, 1.0, 64, 0.5, 4, Training::Frozen)?.window(), 64);
    /// # Ok::<(), microbatch::Error>(())
    /// ```
    #[must_use]
    pub fn window(&self) -> u32 {
        self.window
    }

    /// The forward cost per squared patch count of a unit.
    ///
    /// # Examples
    ///
    /// ```
    /// use microbatch::cost::{Training, Windowed};
    ///
    /// assert_eq!(Windowed::new(2.0, 1.0, 64, 0.5, 4, Training::Frozen)?.per_patch_pair(), 0.5);
    /// # Ok::<(), microbatch::Error>(())
    /// ```
    #[must_use]
    pub fn per_patch_pair(&self) -> f64 {
        self.per_patch_pair
    }

    /// ViT patches per LLM token.
    ///
    /// # Examples
    ///
    /// ```
    /// use microbatch::cost::{Training, Windowed};
    ///
    /// assert_eq!(Windowed::new(2.0, 1.0, 64, 0.5, 4, Training::Frozen)?.patches_per_token(), 4);
    /// # Ok::<(), microbatch::Error>(())
    /// ```
    #[must_use]
    pub fn patches_per_token(&self) -> u32 {
        self.patches_per_token
    }

    /// Frozen or trained.
    ///
    /// # Examples
    ///
    /// ```
    /// use microbatch::cost::{Training, Windowed};
    ///
    /// assert_eq!(Windowed::new(2.0, 1.0, 64, 0.5, 4, Training::Trained)?.training(), Training::Trained);
    /// # Ok::<(), microbatch::Error>(())
    /// ```
    #[must_use]
    pub fn training(&self) -> Training {
        self.training
    }

    fn features(&self, sample: &Sample) -> Features {
        unit_features(sample, self.patches_per_token, |n| {
            [u128::from(n), window_squares(n, self.window), wide(n, n)]
        })
    }

    fn value(&self, x: &Features) -> f64 {
        self.training.factor()
            * (self.per_patch * f(x[0])
                + self.per_window_pair * f(x[1])
                + self.per_patch_pair * f(x[2]))
    }
}

impl_vision!(Windowed);

/// Any of the three vision encoders, as built by
/// [`VitShape::cost_model`](super::VitShape::cost_model). `Debug` prints the
/// encoder inside.
///
/// # Examples
///
/// ```
/// use microbatch::cost::{CostModel, Image, PerTile, Sample, Training, Vision};
///
/// let vit = Vision::from(PerTile::new(2.0, 576, Training::Frozen)?);
/// assert_eq!(vit.cost(&[&Sample::new(0, [Image::new(576)])]).vision, 2.0);
/// assert!(format!("{vit:?}").starts_with("PerTile {"));
/// # Ok::<(), microbatch::Error>(())
/// ```
#[derive(Clone, Copy, PartialEq)]
#[must_use = "cost models do nothing unless evaluated"]
pub enum Vision {
    /// Attention within tiles: linear in tiles.
    PerTile(PerTile),
    /// Full attention per image: quadratic per image.
    PerImage(PerImage),
    /// Windowed attention with some full-attention layers.
    Windowed(Windowed),
}

impl From<PerTile> for Vision {
    fn from(m: PerTile) -> Self {
        Vision::PerTile(m)
    }
}

impl From<PerImage> for Vision {
    fn from(m: PerImage) -> Self {
        Vision::PerImage(m)
    }
}

impl From<Windowed> for Vision {
    fn from(m: Windowed) -> Self {
        Vision::Windowed(m)
    }
}

impl fmt::Debug for Vision {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Vision::PerTile(m) => fmt::Debug::fmt(m, f),
            Vision::PerImage(m) => fmt::Debug::fmt(m, f),
            Vision::Windowed(m) => fmt::Debug::fmt(m, f),
        }
    }
}

impl Vision {
    #[inline]
    fn features(&self, sample: &Sample) -> Features {
        match self {
            Vision::PerTile(m) => m.features(sample),
            Vision::PerImage(m) => m.features(sample),
            Vision::Windowed(m) => m.features(sample),
        }
    }

    fn value(&self, x: &Features) -> f64 {
        match self {
            Vision::PerTile(m) => m.value(x),
            Vision::PerImage(m) => m.value(x),
            Vision::Windowed(m) => m.value(x),
        }
    }
}

impl_vision!(Vision);

#[cfg(test)]
mod tests {
    use super::*;
    use alloc::vec::Vec;
    use core::num::NonZeroU32;

    /// The features as they were computed before the `u64` path: every
    /// product and division in `u128` (the reference the fast path must
    /// equal bit for bit).
    fn reference(sample: &Sample, p: u32, per_unit: impl Fn(u128) -> Features) -> Features {
        let p = u128::from(p);
        let mut x = [0u128; 3];
        for image in sample.images() {
            let tokens = u128::from(image.tokens());
            let units = u128::from(image.units());
            let (base, extra) = (tokens / units, tokens % units);
            let mut add = |t: u128, c: u128| {
                for (s, v) in x.iter_mut().zip(per_unit(p * t)) {
                    *s = s.saturating_add(c.saturating_mul(v));
                }
            };
            if extra > 0 {
                add(base + 1, extra);
            }
            if units > extra {
                add(base, units - extra);
            }
        }
        x
    }

    fn hostile_samples() -> Vec<Sample> {
        let units = |u: u32| NonZeroU32::new(u).unwrap_or(NonZeroU32::MIN);
        let sizes = [
            0u32,
            1,
            3,
            63,
            64,
            65,
            4095,
            1 << 20,
            u32::MAX - 1,
            u32::MAX,
        ];
        let counts = [1u32, 2, 3, 7, 64, 1 << 16, u32::MAX];
        let mut out = Vec::new();
        for &t in &sizes {
            for &u in &counts {
                out.push(Sample::new(5, [Image::with_units(t, units(u))]));
            }
            out.push(Sample::new(
                5,
                [Image::new(t), Image::new(t), Image::new(7)],
            ));
        }
        // Sums that saturate: many images of the largest units.
        let big = Image::with_units(u32::MAX, units(1));
        out.push(Sample::new(0, core::iter::repeat(big).take(64)));
        out.push(Sample::text_only(9));
        out
    }

    #[test]
    fn fast_features_equal_the_u128_reference() {
        for sample in hostile_samples() {
            for p in [1u32, 4, 1000, u32::MAX] {
                let image = PerImage::new(1.0, 1.0, p, Training::Frozen).unwrap();
                let want = reference(&sample, p, |n| [n, n * n, 0]);
                assert_eq!(image.features(&sample), want, "{sample:?} {p}");
                for w in [1u32, 2, 64, 1000, u32::MAX] {
                    let m = Windowed::new(1.0, 1.0, w, 1.0, p, Training::Trained).unwrap();
                    let wu = u128::from(w);
                    let want = reference(&sample, p, |n| {
                        let (full, rest) = (n / wu, n % wu);
                        [n, full * wu * wu + rest * rest, n * n]
                    });
                    assert_eq!(m.features(&sample), want, "{sample:?} {p} {w}");
                    let x = m.features(&sample);
                    assert_eq!(m.value(&x).to_bits(), m.value(&want).to_bits());
                }
            }
        }
    }

    #[test]
    fn units_split_as_evenly_as_integers_allow() {
        let mut seen = Vec::new();
        Image::with_units(10, NonZeroU32::new(4).unwrap()).for_each_unit(|t, c| seen.push((t, c)));
        assert_eq!(seen, [(3, 2), (2, 2)]);
        seen.clear();
        Image::with_units(8, NonZeroU32::new(4).unwrap()).for_each_unit(|t, c| seen.push((t, c)));
        assert_eq!(seen, [(2, 4)]);
        seen.clear();
        Image::with_units(3, NonZeroU32::new(5).unwrap()).for_each_unit(|t, c| seen.push((t, c)));
        assert_eq!(seen, [(1, 3), (0, 2)]);
        seen.clear();
        Image::new(u32::MAX).for_each_unit(|t, c| seen.push((t, c)));
        assert_eq!(seen, [(u64::from(u32::MAX), 1)]);
    }
}
