//! The examples' own modules under test, each compiled once into this binary
//! from the example's source: the `balance` example's JSON Lines readers
//! (`examples/balance/input.rs`, `timings.rs`) and the closed loop's
//! simulation (`examples/closed_loop/sim.rs`). The examples build them into
//! their binaries the same way (`mod input;`), so what is tested here is what
//! the example runs; `.ci/run` also runs the `balance` binary end to end.
//!
//! They are not part of the crate's API, which is why they live with the
//! examples rather than in `src/`. The examples need `scenarios`.
#![cfg(feature = "scenarios")]
#![allow(dead_code)]

#[path = "../../examples/balance/input.rs"]
pub mod input;
#[path = "../../examples/closed_loop/sim.rs"]
pub mod sim;
#[path = "../../examples/balance/timings.rs"]
pub mod timings;
