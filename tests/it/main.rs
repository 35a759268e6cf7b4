//! The integration tests: one binary (`cargo test --test it`), one module a
//! file, the helpers shared in `common`.

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
mod plan_errors;
mod plan_groups;
mod plan_hostile;
mod plan_invariance;
mod plan_locality;
mod plan_props;
mod plan_quality;
mod plan_search;
mod plan_serde;
mod plan_value_stability;
