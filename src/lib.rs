//! Load balancing for data-parallel training: bin packing, multiway
//! partitioning, cost models and a planner over ranks and micro-steps.
//!
//! Data-parallel training of vision-language models gives every GPU (rank)
//! its slice of the global batch, packs variable-length samples into
//! fixed-length sequences and sums the gradients of all ranks at a barrier.
//! A rank that got more work, often more images, makes every other rank wait.
//! Because an optimizer step depends only on the *sum* of per-sample
//! gradients, the samples of one step may be repacked and redistributed
//! freely; `microbatch` provides the algorithms to do it well.
//!
//! # Overview
//!
//! - [`pack`]: bin packing. First-fit-decreasing, best-fit-decreasing, online
//!   first-fit, best-fit and next-fit, and a [`StreamingPacker`](pack::StreamingPacker),
//!   all with multi-dimensional capacities ("16384 tokens and at most 48
//!   tiles"), in O(n log n) for one dimension.
//! - [`cost`]: cost models of a sample or a group of samples, per phase
//!   (vision, language): linear tokens, document-masked and full attention,
//!   vision encoders, FLOPs from model shapes with named presets, fitting to
//!   measured timings, and combinators to compose them
//!   ([`CostModel`](cost::CostModel)).
//! - [`partition`]: multiway partitioning over ranks. LPT, Karmarkar-Karp,
//!   refinement, an exact branch and bound and lower bounds, with equal-count,
//!   per-part cap and no-empty-part constraints and multi-dimensional weights.
//! - [`plan`]: the planner. One optimizer step's samples to a plan over `R`
//!   ranks and `A` micro-steps of packed sequences, balanced for a sync model
//!   (one barrier per step, per micro-step, or per phase), with the loss
//!   scales that keep the update equal to the unbalanced one, a report
//!   against the lower bound and a stable fingerprint
//!   ([`Planner`](plan::Planner)).
//! - `scenario` (feature `scenarios`): seeded generators of realistic
//!   vision-language batches (`llava-sft`, `anyres-mix`, `interleaved`).
//! - [`Size`], [`Total`] and [`Item`]: the small numeric traits every algorithm
//!   is generic over (unsigned integers and [`NotNan`] floats; scalars,
//!   arrays, vectors and `(id, item)` pairs). [`NotNan`] is re-exported from
//!   `ordered-float`, and [`not_nan`] converts raw `f64`s, so no dependency
//!   of your own is needed for float sizes.
//! - [`Error`]: one error type; every error names the offending item.
//!
//! Every public type has one path: the algorithms and their types under
//! their module (`microbatch::pack::first_fit_decreasing`,
//! `microbatch::partition::lpt`, `microbatch::cost::Tokens`,
//! `microbatch::plan::Planner`), and at the root only what the modules
//! share: the numeric traits, [`NotNan`], and the error.
//!
//! # Example
//!
//! Pack sample lengths into sequences of 4096 tokens:
//!
//! ```
//! use microbatch::pack::first_fit_decreasing;
//!
//! let lengths = [3000u32, 2500, 1200, 900, 700, 300];
//! let packing = first_fit_decreasing(&lengths, 4096)?;
//! assert_eq!(packing.len(), 3);
//! assert_eq!(packing.bin(0).items(), &[0, 3]); // 3000 + 900
//! assert_eq!(packing.bin(0).load(), &[3900]);
//! assert_eq!(packing.lower_bounds().l1, 3);
//! # Ok::<(), microbatch::Error>(())
//! ```
//!
//! Plan one step of a vision-language batch over 4 ranks with per-phase
//! barriers (FSDP gathering the ViT and the LLM separately):
//!
//! ```
//! use microbatch::cost::{Image, Preset, Sample};
//! use microbatch::plan::{Normalization, Planner, Reduction, StepSample, SyncModel};
//!
//! let model = Preset::InternVl25_8b.cost_model();
//! let samples: Vec<StepSample> = (0..40u64)
//!     .map(|id| StepSample::new(id, Sample::new(200 + 37 * (id as u32 % 13), [Image::new(256 * (1 + id as u32 % 4))])))
//!     .collect();
//! let plan = Planner::new(model).ranks(4).seq_len(8192).sync(SyncModel::Phase).plan(&samples)?;
//! for rank in 0..plan.ranks() {
//!     for step in 0..plan.micro_steps() {
//!         let _ids: &[u64] = plan.micro_batch(rank, step); // feed these to the model
//!     }
//! }
//! let scale = plan.loss().scale(Normalization::Token, Reduction::Mean); // DDP averages
//! assert!(scale > 0.0);
//! assert!(plan.report().ratio() < 1.05);
//! # Ok::<(), microbatch::Error>(())
//! ```
//!
//! # Determinism
//!
//! Every algorithm is a pure function of its input: ties between equal sizes
//! are broken by id (for `(id, item)` items) and then by input index, never by
//! hash order or a random number generator, so every rank and every platform
//! computes the same result.
//!
//! # Crate features
//!
//! - `std` (default): links the standard library. Everything works without
//!   it, on `alloc` alone (`#![no_std]`).
//! - `alloc`: implied by `std`; the crate always needs an allocator.
//! - `serde`: `Serialize` and `Deserialize` on the result types. Reading a
//!   packing, a partition or a plan is checked: an inconsistent document is
//!   an error that names what is wrong, never a value that panics later.
//! - `scenarios` (off by default): the `scenario` module, seeded batch
//!   generators built on `rand`, `rand_distr` and `rand_pcg`, for the
//!   examples, the benches and experiments; implies `std`. Without it the
//!   crate's only dependencies are `ordered-float` and `smallvec`.
#![no_std]
#![deny(missing_docs)]
#![warn(
    clippy::std_instead_of_core,
    clippy::alloc_instead_of_core,
    clippy::std_instead_of_alloc
)]
#![doc(test(attr(deny(warnings))))]
#![cfg_attr(docsrs, feature(doc_cfg))]

extern crate alloc;
#[cfg(feature = "std")]
extern crate std;

mod bitset;
pub mod cost;
mod error;
mod grouped;
mod num;
pub mod pack;
pub mod partition;
mod phase;
pub mod plan;
#[cfg(feature = "scenarios")]
#[cfg_attr(docsrs, doc(cfg(feature = "scenarios")))]
pub mod scenario;
#[cfg(test)]
mod test_rng;

pub use crate::error::{Error, ErrorKind, InvalidReason, Locator, Oversize, Scalar};
pub use crate::num::{not_nan, Item, Size, Total};
pub use ordered_float::NotNan;

/// The README's examples, compiled and run as doctests so they cannot rot.
#[cfg(doctest)]
#[doc = include_str!("../README.md")]
pub struct ReadmeDoctests;
