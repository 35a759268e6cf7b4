//! What the tests share, each helper written once:
//!
//! - [`rng`]: the seeded generator of every test (and of the benches);
//! - [`oracle`]: naive reference packings and the invariants of a packing;
//! - [`plan`]: samples and planners the planning tests build alike;
//! - [`float`]: comparisons of floats, relative and to the last bits;
//! - [`cost`]: strategies and helpers of the cost-model tests;
//! - [`exact`]: the exact oracle of the planner (optimal plans of small
//!   instances by branch and bound).
//!
//! A module a concern, not a prelude: tests name what they use
//! (`use crate::common::plan::text;`).
#![allow(dead_code)]

pub mod cost;
pub mod exact;
pub mod float;
pub mod oracle;
pub mod plan;
pub mod rng;

pub use rng::TestRng;
