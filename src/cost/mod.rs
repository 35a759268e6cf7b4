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
//!   document mask) and [`FullAttention`] (`L^2` over the packed length;
//!   which of the two a training run pays is its [`AttentionKernel`]); the
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
//! coefficient is an [`Error::Invalid`] at a
//! [coefficient](crate::Locator::Coefficient) naming the parameter, so a model,
//! once built, only produces non-negative costs, finite unless a coefficient
//! times a size exceeds `f64::MAX` (closures excepted: their results are the
//! caller's). The FLOPs models of [`LlmShape`] and [`VitShape`] are finite for
//! every shape and sample (below about 1e80), and their integer counts cannot
//! overflow. The [`Planner`](crate::plan::Planner) refuses a sample whose cost
//! is not finite ([`Error::Invalid`] at a [cost](crate::Locator::Cost), naming
//! the phase).
//!
//! Every model also gives each sample a [`floor`](CostModel::floor): a
//! share of the cost of every group that holds the sample (its cost alone
//! for additive models, zero for a cost per group), which the planner's
//! lower bound sums so that it is a bound for every model; and a
//! [`group_floor`](CostModel::group_floor) ([`GroupFloor`]): what every
//! non-empty group costs beyond its samples' floors (a cost per packed
//! sequence, dense attention over the packed row), which the bound adds for
//! the fewest and most even groups any plan can have.
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

mod adapter;
mod attention;
mod boxed;
mod calibrate;
mod calibrator;
mod combinator;
mod erase;
mod flops;
mod given;
mod group_floor;
mod linear;
mod model;
mod phases;
mod sample;
mod summed;
mod tokens;
mod values;
mod vision;

pub use self::adapter::{InPhase, Max, Scale, Sum};
pub use self::attention::{AttentionKernel, DocumentAttention, FullAttention};
pub use self::boxed::{BoxCostModel, BoxState};
pub use self::calibrate::{fit, fit_terms, Fit};
pub use self::calibrator::{Calibration, Calibrator, Drift, Fallback, Timing};
pub use self::combinator::{cost_fn, sample_fn, CostFn, SampleFn, Zero};
pub use self::flops::{AttentionCount, LlmShape, Preset, PresetModel, VitScope, VitShape};
pub use self::given::Given;
pub use self::group_floor::GroupFloor;
pub use self::linear::{Linear, Term};
pub use self::model::{CostModel, Incremental};
pub use self::phases::Phases;
pub use self::sample::{Image, Sample};
pub use self::tokens::{PerGroup, PerSample, Tokens};
pub use self::vision::{PerImage, PerTile, Training, Vision, Windowed};

// Defined in a leaf module that `error` also imports (no cycle).
pub use crate::phase::Phase;

// Crate-internal: the state helpers and `impl_summed!` of the built-in
// models, and the value checks (`coefficient`) the planner's settings use.
pub(crate) use self::model::{alone, cost_by_state};
pub(crate) use self::summed::{impl_summed, SaturatingSum};
pub(crate) use self::values::{coefficient, f, invalid};

#[cfg(doc)]
use crate::error::Error;
