//! Known answers: small instances with exact optima and the LPT and KK part
//! sums of two Python libraries, read from `tests/data/known_answers.json`
//! (or `$MICROBATCH_KNOWN_ANSWERS`; provenance in `tests/data/README.md`).
//! Where the file is absent (a copy without `tests/data`), the test says so and
//! passes, except under `CI=true`.

use std::path::PathBuf;

use microbatch::partition::{
    exact, karmarkar_karp, lower_bound, lpt, Algorithm, Objective, Partitioner,
};
use serde_json::Value;

fn known_answers() -> Option<Vec<Value>> {
    let path = std::env::var_os("MICROBATCH_KNOWN_ANSWERS")
        .map(PathBuf::from)
        .unwrap_or_else(|| {
            PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tests/data/known_answers.json")
        });
    match std::fs::read_to_string(&path) {
        Ok(text) => Some(serde_json::from_str(&text).expect("known_answers.json is valid JSON")),
        Err(e) => {
            let ci = std::env::var("CI").is_ok_and(|v| v == "true");
            assert!(
                !ci,
                "known answers missing at {} ({e}) and CI=true",
                path.display()
            );
            eprintln!("known answers absent at {} ({e}); skipping", path.display());
            None
        }
    }
}

fn u64s(v: &Value) -> Vec<u64> {
    v.as_array()
        .unwrap()
        .iter()
        .map(|x| x.as_u64().unwrap())
        .collect()
}

fn sorted_sums(p: &microbatch::partition::Partition<u128>) -> Vec<u64> {
    let mut s: Vec<u64> = (0..p.len()).map(|i| p.sum(i)[0] as u64).collect();
    s.sort_unstable();
    s
}

#[test]
fn known_answers_match() {
    let Some(cases) = known_answers() else {
        return;
    };
    assert_eq!(cases.len(), 47);
    let (mut kk_same, mut exact_proven) = (0, 0);
    for (i, case) in cases.iter().enumerate() {
        let items = u64s(&case["items"]);
        let k = case["k"].as_u64().unwrap() as usize;
        let opt = u128::from(case["opt_max_sum"].as_u64().unwrap());
        let opt_diff = u128::from(case["opt_diff"].as_u64().unwrap());
        let what = format!("case {i} ({}, k = {k}, n = {})", case["kind"], items.len());

        // The file's bound is max(ceil(sum / k), largest); ours adds the
        // bounds of items that must share a part, so it may be higher, never
        // above the optimum.
        let lb = lower_bound(&items, k).unwrap();
        assert!(
            lb >= u128::from(case["lb"].as_u64().unwrap()),
            "{what}: bound"
        );
        assert!(lb <= opt, "{what}: bound above the optimum");

        // LPT sums do not depend on tie-breaking.
        let greedy = lpt(&items, k).unwrap();
        assert_eq!(sorted_sums(&greedy), u64s(&case["lpt_sums"]), "{what}: LPT");
        assert_eq!(
            greedy.objective(),
            u128::from(case["lpt_max"].as_u64().unwrap()),
            "{what}"
        );

        // KK sums can depend on ties; the largest part must not be worse
        // than the reference's by more than the tie effect, and the exact
        // optimum bounds it below.
        let kk = karmarkar_karp(&items, k).unwrap();
        let kk_ref = u64s(&case["kk_sums"]);
        if sorted_sums(&kk) == kk_ref {
            kk_same += 1;
        } else {
            eprintln!(
                "{what}: KK sums {:?}, reference {kk_ref:?}",
                sorted_sums(&kk)
            );
        }
        assert!(kk.objective() >= opt, "{what}: KK below the optimum");

        // Budgets keep the debug-mode test short: the large planted
        // instances are not proven within any of them.
        let large = items.len() >= 20;
        let budget = if large { 100_000 } else { 2_000_000 };
        let best = exact(&items, k, budget).unwrap();
        assert!(best.objective() >= opt, "{what}: exact below the optimum");
        assert!(best.proven_optimal() || large, "{what}: not proven");
        if !best.proven_optimal() {
            eprintln!(
                "{what}: exact not proven: {} (optimum {opt}, KK {}, LPT {})",
                best.objective(),
                kk.objective(),
                greedy.objective()
            );
        }
        if best.proven_optimal() {
            exact_proven += 1;
            assert_eq!(best.objective(), opt, "{what}: exact");
        }
        assert!(best.objective() <= greedy.objective().min(kk.objective()));

        let spread = Partitioner::new(k)
            .algorithm(Algorithm::Exact)
            .objective(Objective::Spread)
            .node_budget(budget)
            .partition(&items)
            .unwrap();
        assert!(
            spread.objective() >= opt_diff,
            "{what}: spread below the optimum"
        );
        if spread.proven_optimal() {
            assert_eq!(spread.objective(), opt_diff, "{what}: spread");
        }
    }
    eprintln!(
        "KK sums equal to the reference in {kk_same} of 47; exact proven in {exact_proven} of 47"
    );
    // The three planted perfect partitions with 20, 48 and 128 items need
    // more nodes than given here (the 20-item one takes about 10 million);
    // every other instance is proven.
    assert!(exact_proven >= 44, "only {exact_proven} of 47 proven");
}
