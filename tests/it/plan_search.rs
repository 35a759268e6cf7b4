//! The search across micro-steps: it never makes a plan slower than the
//! plan without it, keeps every sample exactly once and every cap, is
//! deterministic, and is off with an effort of 0.

use microbatch::cost::{Image, Preset, Sample};
use microbatch::plan::{Planner, StepSample, SyncModel};
use proptest::prelude::*;

fn batch(items: &[(u32, u32, u32)]) -> Vec<StepSample> {
    items
        .iter()
        .enumerate()
        .map(|(i, &(t, images, size))| {
            let imgs = (0..images).map(|k| Image::new(16 + (size + 37 * k) % 600));
            StepSample::new(i as u64, Sample::new(t, imgs))
        })
        .collect()
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(48))]

    #[test]
    fn search_never_slows_a_plan(
        items in prop::collection::vec((1u32..1500, 0u32..4, 0u32..1000), 8..160),
        ranks in 1usize..6,
        phase in any::<bool>(),
    ) {
        prop_assume!(items.len() >= ranks);
        let samples = batch(&items);
        let sync = if phase { SyncModel::Phase } else { SyncModel::MicroStep };
        let planner = Planner::new(Preset::Qwen25Vl7b.cost_model()).ranks(ranks).seq_len(4096).sync(sync);
        let off = planner.clone().search_effort(0).plan(&samples).unwrap();
        let on = planner.plan(&samples).unwrap();
        prop_assert!(on.report().predicted <= off.report().predicted * (1.0 + 1e-12));
        prop_assert_eq!(on.micro_steps(), off.micro_steps());
        let mut ids: Vec<u64> = (0..ranks).flat_map(|r| on.rank(r).to_vec()).collect();
        ids.sort_unstable();
        prop_assert_eq!(ids, (0..items.len() as u64).collect::<Vec<_>>());
        for r in 0..ranks {
            for j in 0..on.micro_steps() {
                let tokens: u64 = on.sequence(r, j, 0).iter().map(|&id| samples[id as usize].sample().tokens()).sum();
                prop_assert!(tokens <= 4096);
            }
        }
        prop_assert_eq!(planner.plan(&samples).unwrap().fingerprint(), on.fingerprint());
    }
}

/// On a batch of the benches' kind, the search lowers the step time.
#[cfg(feature = "scenarios")]
#[test]
fn search_helps_per_phase() {
    let samples = microbatch::scenario::Scenario::AnyresMix.generate(64 * 16, 7);
    let planner = microbatch::scenario::Scenario::AnyresMix
        .planner(16)
        .sync(SyncModel::Phase);
    let off = planner.clone().search_effort(0).plan(&samples).unwrap();
    let on = planner.plan(&samples).unwrap();
    assert!(on.report().predicted < off.report().predicted);
    let step = planner.clone().sync(SyncModel::Step);
    assert_eq!(
        step.clone()
            .search_effort(0)
            .plan(&samples)
            .unwrap()
            .fingerprint(),
        step.plan(&samples).unwrap().fingerprint()
    );
}
