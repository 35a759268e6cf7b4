//! Seeded generators of realistic vision-language batches: `llava-sft`, `anyres-mix` and `interleaved`.
//!
//! Each [`Scenario`] draws one step's samples from the distributions of a
//! published training setup (the sources and the guesses are listed with
//! each variant), with the model pair's cost preset, the packed sequence
//! length and the caps it trains with. The generators use
//! [`rand_pcg::Pcg64`] and the distributions of `rand_distr`, both
//! value-stable across patch releases: the same seed gives the same batch
//! (`tests/plan_value_stability.rs` pins it). The log-normal draws go
//! through the platform's `exp` and `ln`, which are not correctly rounded
//! everywhere: on another platform a draw within one ulp of a rounding
//! boundary could round to a neighbouring token count. The planner itself
//! uses no such function and gives identical plans for identical samples
//! everywhere.
//!
//! | scenario | model pair (preset) | image tokens | mix | packing |
//! |---|---|---|---|---|
//! | `llava-sft` | CLIP-L/336 frozen + Vicuna-7B (`llava-1.5-7b`) | 576 per image | 6.1% text-only, rest one image | 4096 tokens |
//! | `anyres-mix` | Qwen2.5-VL ViT + Qwen2-7B (`qwen2.5-vl-7b`) | smart-resize, 4..4096 per image; video frame groups | 72% single, 13% multi (2-8), 9% video, 6% text-only | 16384 tokens |
//! | `interleaved` | InternViT-300M + InternLM2.5-7B (`internvl2.5-8b`) | 256 per 448px tile, `max(1, 12 / n)` tiles per image + thumbnail | 1 + geometric images (mean 2.5 or 5.6), at most 30 | 16384 tokens, 48 tiles |
//!
//! Available with the `scenarios` feature (on by default; it needs `std`).
//!
//! # Examples
//!
//! ```
//! use microbatch::scenario::Scenario;
//!
//! let s: Scenario = "anyres-mix".parse()?;
//! let batch = s.generate(1000, 7);
//! assert_eq!(batch.len(), 1000);
//! assert_eq!(batch, s.generate(1000, 7)); // seeded
//! assert!(batch.iter().all(|x| x.sample().tokens() <= u64::from(s.seq_len())));
//! let plan = s.planner(8).plan(&batch)?;
//! assert!(plan.report().ratio() < 1.05);
//! # Ok::<(), microbatch::Error>(())
//! ```

use alloc::vec::Vec;
use core::num::NonZeroU32;

use rand::distr::Distribution;
use rand::{Rng, SeedableRng};
use rand_distr::{Geometric, LogNormal};
use rand_pcg::Pcg64;

use crate::cost::{Image, Preset, PresetModel, Sample};
use crate::plan::{Planner, StepSample};

/// The names of the scenarios, in order.
///
/// # Examples
///
/// ```
/// use microbatch::scenario::{Scenario, SCENARIO_NAMES};
///
/// for name in SCENARIO_NAMES {
///     assert_eq!(name.parse::<Scenario>()?.name(), name);
/// }
/// # Ok::<(), microbatch::Error>(())
/// ```
pub const SCENARIO_NAMES: [&str; 3] = ["llava-sft", "anyres-mix", "interleaved"];

/// A built-in workload: one step's samples drawn from a published training
/// setup's distributions.
///
/// # Examples
///
/// ```
/// use microbatch::scenario::Scenario;
///
/// use microbatch::cost::Preset;
///
/// let s = Scenario::Interleaved;
/// assert_eq!((s.name(), s.seq_len(), s.max_units(), s.preset()), ("interleaved", 16384, Some(48), Preset::InternVl25_8b));
/// assert!("mmc4".parse::<Scenario>().is_err());
/// ```
///
/// The enum is `#[non_exhaustive]`: more scenarios may come in minor
/// releases.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum Scenario {
    /// LLaVA-1.5 SFT (LLaVA-665K): 6.1% text-only samples (median 700 text
    /// tokens), the rest one 576-token image with a question (median 130)
    /// or an instruction (median 250) of log-normal length (sigma 0.7,
    /// GUESS), at most 2048 tokens a sample; sequences of 4096 tokens.
    LlavaSft,
    /// A Qwen2.5-VL mixture: 72% single image, 13% 2 to 8 images, 9% video,
    /// 6% text-only (shares GUESS); text log-normal with median 180, sigma
    /// 1.0 (GUESS); images smart-resized to 28-pixel multiples from photos
    /// (~640 px), documents (~1600 px), screenshots (~1920 px) and small
    /// crops (~320 px) (GUESS), 4 to 4096 tokens; video at 2 fps in
    /// two-frame groups of 128 to 768 tokens (a ViT unit each); sequences of
    /// 16384 tokens.
    AnyresMix,
    /// OBELICS / MMC4-style interleaved web documents for InternVL 2.5: 1 +
    /// geometric images (mean 2.5 or 5.6, at most 30, GUESS), web images
    /// ~700 px on the long side (GUESS) in 448-pixel tiles of 256 tokens,
    /// `max(1, 12 / n)` tiles per image plus a thumbnail when there is more
    /// than one; text log-normal with mean 816 or 425; sequences of 16384
    /// tokens with at most 48 tiles.
    Interleaved,
}

impl Scenario {
    /// Every scenario, in order.
    ///
    /// # Examples
    ///
    /// ```
    /// use microbatch::scenario::{Scenario, SCENARIO_NAMES};
    ///
    /// let names: Vec<&str> = Scenario::ALL.iter().map(|s| s.name()).collect();
    /// assert_eq!(names, SCENARIO_NAMES);
    /// ```
    pub const ALL: [Scenario; 3] = [
        Scenario::LlavaSft,
        Scenario::AnyresMix,
        Scenario::Interleaved,
    ];

    /// The scenario's name: `llava-sft`, `anyres-mix` or `interleaved`.
    ///
    /// # Examples
    ///
    /// ```
    /// use microbatch::scenario::Scenario;
    ///
    /// assert_eq!(Scenario::AnyresMix.name(), "anyres-mix");
    /// assert_eq!(Scenario::AnyresMix.to_string(), "anyres-mix");
    /// assert_eq!("anyres-mix".parse::<Scenario>()?, Scenario::AnyresMix);
    /// # Ok::<(), microbatch::Error>(())
    /// ```
    #[must_use]
    pub const fn name(self) -> &'static str {
        match self {
            Scenario::LlavaSft => SCENARIO_NAMES[0],
            Scenario::AnyresMix => SCENARIO_NAMES[1],
            Scenario::Interleaved => SCENARIO_NAMES[2],
        }
    }

    /// The packed sequence length it trains with.
    ///
    /// # Examples
    ///
    /// ```
    /// use microbatch::scenario::Scenario;
    ///
    /// let s = Scenario::LlavaSft;
    /// assert_eq!(s.seq_len(), 4096);
    /// assert!(s.generate(500, 2).iter().all(|x| x.sample().tokens() <= u64::from(s.seq_len())));
    /// ```
    #[must_use]
    pub const fn seq_len(self) -> u32 {
        match self {
            Scenario::LlavaSft => 4096,
            Scenario::AnyresMix | Scenario::Interleaved => 16384,
        }
    }

    /// The cap on ViT units (tiles) per packed sequence, if any.
    ///
    /// # Examples
    ///
    /// ```
    /// use microbatch::scenario::Scenario;
    ///
    /// assert_eq!(Scenario::AnyresMix.max_units(), None);
    /// let s = Scenario::Interleaved;
    /// assert_eq!(s.max_units(), Some(48));
    /// assert!(s.generate(200, 9).iter().all(|x| x.units() <= 48));
    /// ```
    #[must_use]
    pub const fn max_units(self) -> Option<u32> {
        match self {
            Scenario::Interleaved => Some(48),
            _ => None,
        }
    }

    /// The model pair's cost [`Preset`].
    ///
    /// # Examples
    ///
    /// ```
    /// use microbatch::cost::{Preset, Training};
    /// use microbatch::scenario::Scenario;
    ///
    /// let p = Scenario::LlavaSft.preset();
    /// assert_eq!(p, Preset::Llava15_7b);
    /// assert_eq!(p.vit_training(), Training::Frozen); // LLaVA-1.5 freezes CLIP
    /// ```
    #[must_use]
    pub const fn preset(self) -> Preset {
        match self {
            Scenario::LlavaSft => Preset::Llava15_7b,
            Scenario::AnyresMix => Preset::Qwen25Vl7b,
            Scenario::Interleaved => Preset::InternVl25_8b,
        }
    }

    /// A planner for `ranks` ranks with the scenario's preset cost model,
    /// sequence length and caps (and the planner's defaults otherwise).
    ///
    /// # Examples
    ///
    /// ```
    /// use microbatch::plan::SyncModel;
    /// use microbatch::scenario::Scenario;
    ///
    /// let s = Scenario::LlavaSft;
    /// let plan = s.planner(4).sync(SyncModel::MicroStep).plan(&s.generate(256, 1))?;
    /// assert!(plan.report().ratio() < 1.02);
    /// # Ok::<(), microbatch::Error>(())
    /// ```
    #[must_use]
    pub fn planner(self, ranks: usize) -> Planner<PresetModel> {
        let planner = Planner::new(self.preset().cost_model())
            .ranks(ranks)
            .seq_len(self.seq_len());
        match self.max_units() {
            Some(u) => planner.max_units(u),
            None => planner,
        }
    }

    /// `n` samples with ids `0..n`, drawn with `seed`. Every sample fits the
    /// scenario's sequence length and caps; loss tokens are 20% to 90% of
    /// the text tokens (the answer's share, GUESS).
    ///
    /// # Complexity
    ///
    /// O(n) time and the O(n) of the samples returned (about 100 bytes a
    /// sample with its images): memory follows `n`, the size of the output
    /// asked for, as for any `Vec` of `n` elements.
    ///
    /// # Examples
    ///
    /// ```
    /// use microbatch::scenario::Scenario;
    ///
    /// let batch = Scenario::LlavaSft.generate(1000, 3);
    /// let text_only = batch.iter().filter(|s| s.sample().images().is_empty()).count();
    /// assert!((30..100).contains(&text_only)); // about 6.1%
    /// assert!(batch.iter().all(|s| s.sample().tokens() <= 2048));
    /// assert!(batch.iter().all(|s| s.loss_tokens() <= u64::from(s.sample().text())));
    /// ```
    #[must_use]
    pub fn generate(self, n: usize, seed: u64) -> Vec<StepSample> {
        let mut rng = Pcg64::seed_from_u64(seed);
        let draw = Draw::new();
        (0..n as u64)
            .map(|id| {
                let sample = match self {
                    Scenario::LlavaSft => draw.llava(&mut rng),
                    Scenario::AnyresMix => draw.anyres(&mut rng),
                    Scenario::Interleaved => draw.interleaved(&mut rng),
                };
                let share = rng.random_range(0.2..0.9);
                let loss = (f64::from(sample.text()) * share).ceil() as u64;
                StepSample::new(id, sample).with_loss_tokens(loss)
            })
            .collect()
    }
}

crate::error::impl_named!(Scenario, "scenario", &SCENARIO_NAMES);

/// A log-normal with the given median and sigma (valid by construction).
fn lognormal(median: f64, sigma: f64) -> LogNormal<f64> {
    LogNormal::new(median.ln(), sigma).unwrap_or_else(|_| unreachable!("finite parameters"))
}

/// Clamps a draw to `[lo, hi]` and rounds it.
fn clamp(x: f64, lo: u32, hi: u32) -> u32 {
    x.round().clamp(f64::from(lo), f64::from(hi)) as u32
}

/// The distributions, built once per batch.
struct Draw {
    llava_text_only: LogNormal<f64>,
    llava_vqa: LogNormal<f64>,
    llava_instruct: LogNormal<f64>,
    anyres_text: LogNormal<f64>,
    anyres_side: LogNormal<f64>,
    video_seconds: LogNormal<f64>,
    video_group: LogNormal<f64>,
    web_side: LogNormal<f64>,
    obelics_text: LogNormal<f64>,
    mmc4_text: LogNormal<f64>,
    obelics_images: Geometric,
    mmc4_images: Geometric,
}

impl Draw {
    fn new() -> Self {
        let geometric =
            |mean: f64| Geometric::new(1.0 / mean).unwrap_or_else(|_| unreachable!("p in (0, 1]"));
        // A log-normal of mean m and sigma s has median m / exp(s^2 / 2).
        let by_mean = |mean: f64, sigma: f64| lognormal(mean / (sigma * sigma / 2.0).exp(), sigma);
        Draw {
            llava_text_only: lognormal(700.0, 0.7),
            llava_vqa: lognormal(130.0, 0.7),
            llava_instruct: lognormal(250.0, 0.7),
            anyres_text: lognormal(180.0, 1.0),
            anyres_side: lognormal(1.0, 0.25),
            video_seconds: lognormal(8.0, 0.6),
            video_group: lognormal(300.0, 0.4),
            web_side: lognormal(700.0, 0.3),
            obelics_text: by_mean(816.0, 1.0),
            mmc4_text: by_mean(425.0, 1.0),
            // 1 + geometric (failures before a success, mean (1 - p) / p):
            // p = 1 / mean gives mean images `mean`.
            obelics_images: geometric(2.5),
            mmc4_images: geometric(5.6),
        }
    }

    fn llava(&self, rng: &mut Pcg64) -> Sample {
        if rng.random_bool(0.061) {
            return Sample::text_only(clamp(self.llava_text_only.sample(rng), 1, 2048));
        }
        let text = if rng.random_bool(0.5) {
            self.llava_vqa.sample(rng)
        } else {
            self.llava_instruct.sample(rng)
        };
        Sample::new(clamp(text, 1, 2048 - 576), [Image::new(576)])
    }

    /// One smart-resized image: a class's long side, an aspect ratio, then
    /// 28-pixel patches merged 2x2 into tokens, 4..4096 tokens.
    fn anyres_image(&self, rng: &mut Pcg64) -> u32 {
        let class = rng.random_range(0.0..1.0);
        let side = if class < 0.5 {
            640.0
        } else if class < 0.7 {
            1600.0
        } else if class < 0.85 {
            1920.0
        } else {
            320.0
        };
        let long = side * self.anyres_side.sample(rng);
        let short = long * rng.random_range(0.5..1.0);
        let (w, h) = (
            (long / 28.0).round().max(1.0),
            (short / 28.0).round().max(1.0),
        );
        let tokens = w * h;
        if tokens > 4096.0 {
            let f = (4096.0 / tokens).sqrt();
            ((w * f).floor() * (h * f).floor()).max(4.0) as u32
        } else {
            (tokens as u32).max(4)
        }
    }

    fn anyres(&self, rng: &mut Pcg64) -> Sample {
        const L: u32 = 16384;
        let text = clamp(self.anyres_text.sample(rng), 1, 8192);
        let kind = rng.random_range(0.0..1.0);
        if kind < 0.06 {
            return Sample::text_only(text);
        }
        let room = L - text;
        if kind < 0.15 {
            // Video: one unit per two-frame group (one second at 2 fps).
            let per_group = clamp(self.video_group.sample(rng), 128, 768);
            let groups =
                clamp(self.video_seconds.sample(rng), 2, 64).min(12288.min(room) / per_group);
            let units = NonZeroU32::new(groups.max(1)).unwrap_or(NonZeroU32::MIN);
            return Sample::new(text, [Image::with_units(units.get() * per_group, units)]);
        }
        let count = if kind < 0.28 {
            rng.random_range(2..=8u32)
        } else {
            1
        };
        let mut images: Vec<u32> = (0..count).map(|_| self.anyres_image(rng)).collect();
        let sum: u32 = images.iter().sum();
        if sum > room {
            // Shrink every image alike (a smaller max_pixels) to fit one sequence.
            let f = f64::from(room) / f64::from(sum);
            for t in &mut images {
                *t = ((f64::from(*t) * f).floor() as u32).max(4);
            }
        }
        Sample::new(text, images.into_iter().map(Image::new))
    }

    fn interleaved(&self, rng: &mut Pcg64) -> Sample {
        const L: u32 = 16384;
        let obelics = rng.random_bool(0.5);
        let extra = if obelics {
            self.obelics_images.sample(rng)
        } else {
            self.mmc4_images.sample(rng)
        };
        let n = (1 + extra).min(30) as u32;
        let max_tiles = (12 / n).max(1);
        let images: Vec<Image> = (0..n)
            .map(|_| {
                let long = self.web_side.sample(rng);
                let short = long * rng.random_range(0.5..1.0);
                let grid = ((long / 448.0).ceil() * (short / 448.0).ceil()).max(1.0) as u32;
                let tiles = grid.min(max_tiles);
                let tiles = if tiles > 1 { tiles + 1 } else { tiles }; // + thumbnail
                let units = NonZeroU32::new(tiles).unwrap_or(NonZeroU32::MIN);
                Image::with_units(256 * tiles, units)
            })
            .collect();
        let image_tokens: u32 = images.iter().map(Image::tokens).sum();
        let text = if obelics {
            self.obelics_text.sample(rng)
        } else {
            self.mmc4_text.sample(rng)
        };
        Sample::new(clamp(text, 1, (L - image_tokens).min(8192)), images)
    }
}
