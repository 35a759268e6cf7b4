//! Pinned outputs for fixed seeds: the scenario generators' first samples
//! and totals, and the fingerprints of the plans of a seeded batch under
//! every sync model. A change in a generator, a tie-break or the
//! fingerprint's encoding shows up here; update the pins only on purpose
//! (and say so in the CHANGELOG: plans change for the same input).
#![cfg(feature = "scenarios")]

use microbatch::plan::SyncModel;
use microbatch::scenario::Scenario;

/// A sample as pinned: id, text tokens, (tokens, units) per image, loss tokens.
type Pin = (u64, u32, Vec<(u32, u32)>, u64);

fn first(s: Scenario) -> Vec<Pin> {
    s.generate(512, 7)[..3]
        .iter()
        .map(|x| {
            let images = x
                .sample()
                .images()
                .iter()
                .map(|i| (i.tokens(), i.units()))
                .collect();
            (x.id(), x.sample().text(), images, x.loss_tokens())
        })
        .collect()
}

#[test]
fn generators_are_value_stable() {
    assert_eq!(
        first(Scenario::LlavaSft),
        vec![
            (0, 341, vec![], 284),
            (1, 141, vec![(576, 1)], 38),
            (2, 327, vec![(576, 1)], 106)
        ]
    );
    assert_eq!(
        first(Scenario::AnyresMix),
        vec![
            (0, 382, vec![(312, 1)], 164),
            (1, 268, vec![(638, 1)], 172),
            (2, 21, vec![(789, 3)], 5)
        ]
    );
    assert_eq!(
        first(Scenario::Interleaved),
        vec![
            (0, 638, vec![(768, 3), (1024, 4), (1024, 4), (1024, 4)], 132),
            (1, 4615, vec![(256, 1); 8], 2524),
            (2, 469, vec![(256, 1); 7], 190),
        ]
    );
    let total = |s: Scenario| {
        s.generate(512, 7)
            .iter()
            .map(|x| x.sample().tokens())
            .sum::<u64>()
    };
    assert_eq!(total(Scenario::LlavaSft), 419_235);
    assert_eq!(total(Scenario::AnyresMix), 1_138_183);
    assert_eq!(total(Scenario::Interleaved), 1_682_913);
}

/// Every scenario's plan under every sync model (8 ranks, 512 samples,
/// seed 7, the scenario's planner), by fingerprint: a change that moves a
/// plan re-pins it here in the same commit, with the quality tables of
/// `BENCHMARKS.md` before and after.
#[test]
fn plan_fingerprints_are_pinned() {
    let pins: [(Scenario, [u64; 3], usize); 3] = [
        (
            Scenario::LlavaSft,
            [0x5f35dd1505334f4a, 0xc52e58fbd710a346, 0x79956ddd2f1d8af2],
            14,
        ),
        (
            Scenario::AnyresMix,
            [0x7054e2a018986321, 0xa874f75221f9b2d7, 0x39773bf9a909d3bb],
            9,
        ),
        (
            Scenario::Interleaved,
            [0x1357f91a1f5d6e01, 0xb4462f126db80609, 0xe123a2f00cb60701],
            15,
        ),
    ];
    for (scenario, fingerprints, steps) in pins {
        let batch = scenario.generate(512, 7);
        for (sync, fp) in SyncModel::ALL.into_iter().zip(fingerprints) {
            let plan = scenario.planner(8).sync(sync).plan(&batch).unwrap();
            assert_eq!(plan.micro_steps(), steps, "{scenario} {sync}");
            assert_eq!(
                plan.fingerprint(),
                fp,
                "{scenario} {sync}: 0x{:016x}",
                plan.fingerprint()
            );
        }
    }
}

/// The users' baseline and the gain over it, pinned for the scenarios
/// (8 ranks, seed 7, the plans pinned above), relative `1e-12`. Here the
/// users' baseline is below the naive packed one under one barrier a step
/// (dealt in turn by sample, not by runs of sequences) and above it under
/// the barriers a micro-step (fixed micro-batches of equal count).
#[test]
fn users_baselines_are_pinned() {
    let pins: [(Scenario, [(f64, f64); 3]); 3] = [
        (
            Scenario::LlavaSft,
            [
                (2.203828895219712e15, 1.0310698697777285),
                (2.698631153713152e15, 1.262549842585656),
                (2.701680950378496e15, 1.2631191177228698),
            ],
        ),
        (
            Scenario::AnyresMix,
            [
                (1.1004463785885696e16, 1.274318121594956),
                (1.4974661908033536e16, 1.7344162174419389),
                (1.4982155433209856e16, 1.7296599344435215),
            ],
        ),
        (
            Scenario::Interleaved,
            [
                (1.193534375215104e16, 1.0474530070252916),
                (1.5047203938435072e16, 1.3208439986418676),
                (1.5110812223864832e16, 1.3218471517120272),
            ],
        ),
    ];
    let close = |a: f64, b: f64| (a - b).abs() <= 1e-12 * b.abs();
    for (scenario, want) in pins {
        let batch = scenario.generate(512, 7);
        for (sync, (users, gain)) in SyncModel::ALL.into_iter().zip(want) {
            let r = *scenario
                .planner(8)
                .sync(sync)
                .plan(&batch)
                .unwrap()
                .report();
            assert!(
                close(r.users_baseline, users) && close(r.gain(), gain),
                "{scenario} {sync}: ({:e}, {:e})",
                r.users_baseline,
                r.gain()
            );
        }
    }
}
