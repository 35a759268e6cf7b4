//! The integration tests, one binary (`cargo test --test it`; `cargo test`
//! runs it with the rest): one module a file, named `<area>_<what>` (`pack_`,
//! `partition_`, `cost_`, `plan_`, `balance_` for the example), so that
//! `cargo test --test it plan_` runs one area. One binary links the crate
//! once instead of once a file.
//!
//! - `common/`: what the tests share (the seeded generator, the packing
//!   oracles, sample and planner builders, float comparisons);
//! - `examples.rs`: the examples' own modules, compiled from their source;
//! - `../data/`: the known-answer data (BPPLIB, `known_answers.json`) with
//!   its provenance;
//! - `../proptest-regressions/<module>.txt`: the pinned seeds of each
//!   module's property tests. proptest finds them there because this
//!   directory holds a `main.rs` (its default `SourceParallel` persistence);
//!   they are replayed before any new case.

mod common;
mod examples;

mod balance_input;
mod balance_timings;
mod cost_boxed;
mod cost_calibrate;
mod cost_calibrator;
mod cost_flops;
mod cost_given;
mod cost_hostile;
mod cost_laws;
mod cost_row_attention;
mod pack_bpplib;
mod pack_errors;
mod pack_hostile;
mod pack_props;
mod pack_serde;
mod pack_value_stability;
mod partition_api;
mod partition_hostile;
mod partition_known;
mod partition_props;
mod plan_bound;
mod plan_bound_rows;
mod plan_errors;
mod plan_groups;
mod plan_hostile;
mod plan_invariance;
mod plan_locality;
// (Its families include the scenarios' batches.)
#[cfg(feature = "scenarios")]
mod plan_optimum;
mod plan_props;
mod plan_quality;
mod plan_search;
mod plan_serde;
mod plan_share;
mod plan_users;
mod plan_value_stability;
