//! Fuzz target `serde`: JSON reading of every type with `Deserialize`, from
//! arbitrary bytes and from mutated valid documents. Whatever is accepted
//! must be usable: every accessor answers without panicking, the checked
//! invariants hold and writing it back reads back equal (see
//! fuzz/README.md).
#![no_main]

use std::collections::BTreeSet;
use std::fmt::Debug;

use arbitrary::Arbitrary;
use libfuzzer_sys::fuzz_target;
use microbatch::cost::{
    AttentionCount, Fit, Image, LlmShape, Phase, Phases, Preset, Sample, Tokens, Training,
    VitScope, VitShape,
};
use microbatch::pack::{first_fit_decreasing, Heuristic, LowerBounds, Packing, StreamedBin};
use microbatch::partition::{lpt, Algorithm, Dims, Objective, Partition};
use microbatch::plan::{
    Loss, Normalization, Plan, Planner, Reduction, Report, StepSample, SyncModel,
};
use microbatch::{InvalidReason, NotNan, Scalar};
use microbatch_fuzz::check;
use serde::de::DeserializeOwned;
use serde::Serialize;
use serde_json::Value;

#[derive(Arbitrary, Debug)]
enum Mutation {
    /// Replace the value at a path with a number.
    Number(Vec<u8>, i64),
    Float(Vec<u8>, f64),
    /// Remove an array element or object key.
    Remove(Vec<u8>),
    /// Duplicate an array element at the end.
    Duplicate(Vec<u8>),
    /// Swap two array elements.
    Swap(Vec<u8>, u8),
}

#[derive(Arbitrary, Debug)]
enum Input {
    Bytes(u8, Vec<u8>),
    Mutated(u8, u8, Vec<Mutation>),
}

fuzz_target!(|input: Input| {
    match input {
        Input::Bytes(ty, bytes) => {
            if bytes.len() <= 4096 {
                read(ty, &bytes);
            }
        }
        Input::Mutated(ty, seed, muts) => {
            let mut doc = valid_doc(ty, seed);
            for m in muts.iter().take(8) {
                mutate(&mut doc, m);
            }
            read(ty, doc.to_string().as_bytes());
        }
    }
});

/// A valid document of type `ty`.
fn valid_doc(ty: u8, seed: u8) -> Value {
    let n = 3 + seed as usize % 9;
    let sizes: Vec<u32> = (0..n)
        .map(|i| 1 + (i as u32 * 7919 + u32::from(seed)) % 50)
        .collect();
    let samples: Vec<StepSample> = sizes
        .iter()
        .enumerate()
        .map(|(i, &s)| {
            StepSample::new(
                i as u64 * 3,
                Sample::new(s * 10, (0..i % 3).map(|k| Image::new(64 * k as u32 + 16))),
            )
        })
        .collect();
    let v = match ty % 8 {
        0 => serde_json::to_value(first_fit_decreasing(&sizes, 60).unwrap()),
        1 => serde_json::to_value(lpt(&sizes, 1 + seed as usize % 3).unwrap()),
        2 | 3 => {
            let plan = Planner::new(Preset::Qwen25Vl7b.cost_model())
                .ranks(1 + seed as usize % 3)
                .seq_len(2048)
                .sync(if ty % 8 == 2 {
                    SyncModel::Phase
                } else {
                    SyncModel::Step
                })
                .plan(&samples)
                .unwrap();
            serde_json::to_value(plan)
        }
        4 => serde_json::to_value(
            microbatch::cost::fit(&[([1.0, 2.0], 3.0), ([2.0, 1.0], 4.0), ([3.0, 3.0], 7.5)])
                .unwrap(),
        ),
        5 => serde_json::to_value(
            lpt(
                &sizes
                    .iter()
                    .map(|&s| not_nan(f64::from(s) / 10.0))
                    .collect::<Vec<_>>(),
                2,
            )
            .unwrap(),
        ),
        6 => serde_json::to_value(Preset::ALL[seed as usize % 3].llm()),
        _ => serde_json::to_value(Preset::ALL[seed as usize % 3].vit()),
    };
    v.unwrap()
}

fn not_nan(x: f64) -> NotNan<f64> {
    NotNan::new(x).unwrap()
}

fn walk<'a>(doc: &'a mut Value, path: &[u8]) -> &'a mut Value {
    let mut ptr = String::new();
    let mut cur: &Value = doc;
    for &p in path.iter().take(5) {
        cur = match cur {
            Value::Array(a) if !a.is_empty() => {
                let i = p as usize % a.len();
                ptr.push_str(&format!("/{i}"));
                &a[i]
            }
            Value::Object(o) if !o.is_empty() => {
                let (key, v) = o.iter().nth(p as usize % o.len()).unwrap();
                ptr.push_str(&format!("/{}", key.replace('~', "~0").replace('/', "~1")));
                v
            }
            _ => break,
        };
    }
    doc.pointer_mut(&ptr).unwrap()
}

fn mutate(doc: &mut Value, m: &Mutation) {
    match m {
        Mutation::Number(p, x) => *walk(doc, p) = Value::from(*x),
        Mutation::Float(p, x) => {
            if let Some(n) = serde_json::Number::from_f64(*x) {
                *walk(doc, p) = Value::Number(n);
            }
        }
        Mutation::Remove(p) => {
            let (last, head) = p.split_last().unwrap_or((&0, &[]));
            match walk(doc, head) {
                Value::Array(a) if !a.is_empty() => {
                    a.remove(*last as usize % a.len());
                }
                Value::Object(o) if !o.is_empty() => {
                    let key = o.keys().nth(*last as usize % o.len()).unwrap().clone();
                    o.remove(&key);
                }
                _ => {}
            }
        }
        Mutation::Duplicate(p) => {
            if let Value::Array(a) = walk(doc, p) {
                if let Some(x) = a.first().cloned() {
                    a.push(x);
                }
            }
        }
        Mutation::Swap(p, j) => {
            if let Value::Array(a) = walk(doc, p) {
                if a.len() > 1 {
                    let j = *j as usize % a.len();
                    a.swap(0, j);
                }
            }
        }
    }
}

/// Reads `bytes` as type `ty`; what is accepted is checked and written back.
fn read(ty: u8, bytes: &[u8]) {
    match ty % 30 {
        0 => take::<Packing<u32>>(bytes, check_packing),
        1 => take::<Packing<NotNan<f64>>>(bytes, check_packing),
        2 => take::<Partition<u128>>(bytes, check_partition),
        3 | 5 => take::<Plan>(bytes, check_plan),
        4 => take::<Fit>(bytes, |f| {
            let _ = (
                f.coefficients(),
                f.r_squared(),
                f.max_relative_error(),
                f.rows(),
                f.worst_row(),
            );
            let _ = f.predict(&[1.0, 2.0, 3.0]);
            let _ = f.predict(&[]);
        }),
        6 if microbatch_fuzz::on("cost_shapes") => take::<LlmShape>(bytes, |s| {
            let _ = (
                s.weights(),
                s.linear_flops_per_token(),
                s.attention_flops_per_token_pair(),
                s.training_flops(u64::MAX),
                s.check(),
                s.cost_model(),
            );
        }),
        7 if microbatch_fuzz::on("cost_shapes") => take::<VitShape>(bytes, |s| {
            let _ = (
                s.forward_flops(u64::MAX),
                s.linear_flops_per_token(),
                s.attention_flops_per_token_pair(),
                s.cost_model(Training::Trained),
            );
        }),
        8 => take::<Partition<f64>>(bytes, check_partition),
        9 => take::<Sample>(bytes, |s| {
            let _ = (s.tokens(), s.image_tokens(), s.text(), s.images().len());
        }),
        10 => take::<Image>(bytes, |i| {
            let _ = (i.tokens(), i.units());
        }),
        11 => take::<StepSample>(bytes, |s| {
            let _ = (s.id(), s.units(), s.loss_tokens(), s.sample().tokens());
        }),
        12 => take::<Report>(bytes, |r| {
            let _ = (r.ratio(), r.gain(), r.straggler());
        }),
        13 => take::<Loss>(bytes, |l| {
            for n in [Normalization::Token, Normalization::Sample] {
                for r in [Reduction::Sum, Reduction::Mean] {
                    let _ = (l.scale(n, r), l.scale_ratio(n, r), l.denominator(n));
                }
            }
        }),
        14 => take::<Phases>(bytes, |p| {
            let _ = p.total();
        }),
        15 => take::<StreamedBin<u32, u32>>(bytes, |b| {
            let _ = (b.arrivals(), b.items(), b.load());
        }),
        16 => take::<LowerBounds>(bytes, |_| {}),
        // `Oversize` reads only from 'static input (its `name`): not here.
        17 => take::<LowerBounds>(bytes, |_| {}),
        18 => take::<Scalar>(bytes, |_| {}),
        19 => take::<InvalidReason>(bytes, |_| {}),
        20 => take::<Heuristic>(bytes, |_| {}),
        21 => take::<Algorithm>(bytes, |_| {}),
        22 => take::<Dims>(bytes, |_| {}),
        23 => take::<Objective>(bytes, |_| {}),
        24 => take::<SyncModel>(bytes, |s| {
            let _ = s.name();
        }),
        25 => take::<Normalization>(bytes, |_| {}),
        26 => take::<Reduction>(bytes, |_| {}),
        27 => take::<VitScope>(bytes, |_| {}),
        28 => take::<AttentionCount>(bytes, |_| {}),
        _ => {
            take::<Phase>(bytes, |_| {});
            take::<Training>(bytes, |_| {});
        }
    }
}

fn take<T: DeserializeOwned + Serialize + PartialEq + Debug>(bytes: &[u8], use_it: impl Fn(&T)) {
    let Ok(x) = serde_json::from_slice::<T>(bytes) else {
        return;
    };
    use_it(&x);
    let again = serde_json::to_vec(&x).expect("an accepted value writes");
    match serde_json::from_slice::<T>(&again) {
        Ok(y) => check!(
            "serde_roundtrip",
            y == x,
            "{} reads back different: {x:?} vs {y:?}",
            std::any::type_name::<T>()
        ),
        Err(e) => check!(
            "serde_roundtrip",
            false,
            "{} written back is refused: {e}",
            std::any::type_name::<T>()
        ),
    }
}

fn check_packing<T: microbatch::Size + Debug>(p: &Packing<T>) {
    let n = p.item_count();
    let mut seen = BTreeSet::new();
    for (b, bin) in p.bins().enumerate() {
        check!("serde_packing", !bin.items().is_empty(), "bin {b} is empty");
        check!(
            "serde_packing",
            bin.load().len() == p.dims(),
            "bin {b} load has {} dims",
            bin.load().len()
        );
        for (l, c) in bin.load().iter().zip(p.capacity()) {
            check!(
                "serde_packing",
                l <= c,
                "bin {b} load {l:?} above the capacity {c:?}"
            );
        }
        for &i in bin.items() {
            check!(
                "serde_packing",
                i < n && seen.insert(i),
                "item {i} out of range or repeated ({n} items)"
            );
        }
    }
    check!(
        "serde_packing",
        seen.len() == n,
        "{} items listed of {n}",
        seen.len()
    );
    let lb = p.lower_bounds();
    check!(
        "serde_packing",
        lb.l1 <= lb.l2 && lb.l2 as usize <= p.len(),
        "bounds {lb:?} with {} bins",
        p.len()
    );
    let _ = (
        p.assignment(),
        p.get(p.len()),
        p.efficiency(0),
        p.efficiency(usize::MAX),
        p.is_empty(),
    );
}

fn check_partition<T: microbatch::Total + Debug + PartialOrd + Default>(p: &Partition<T>) {
    let n: usize = p.parts().map(|q| q.len()).sum();
    let mut seen = BTreeSet::new();
    for (i, q) in p.parts().enumerate() {
        for &x in q {
            check!(
                "serde_partition",
                x < n && seen.insert(x),
                "item {x} out of range or repeated"
            );
        }
        let s = p.sum(i);
        check!(
            "serde_partition",
            s.len() == p.dims(),
            "part {i} has {} sums for {} dims",
            s.len(),
            p.dims()
        );
        if q.is_empty() {
            check!(
                "serde_partition",
                s.iter().all(|x| *x == T::default()),
                "empty part {i} has sums {s:?}"
            );
        }
    }
    for d in 0..p.dims() {
        let (lo, hi) = (p.min_sum(d), p.max_sum(d));
        check!(
            "serde_partition",
            lo <= hi,
            "min_sum {lo:?} > max_sum {hi:?}"
        );
    }
    check!(
        "serde_partition",
        p.lower_bound() <= p.objective(),
        "lower bound {:?} above objective {:?}",
        p.lower_bound(),
        p.objective()
    );
    let _ = (
        p.assignment(),
        p.ratio(),
        p.proven_optimal(),
        p.len(),
        p.is_empty(),
        p.clone().into_parts(),
    );
}

fn check_plan(plan: &Plan) {
    let (r, a, s) = (
        plan.ranks(),
        plan.micro_steps(),
        plan.sequences_per_micro_step(),
    );
    check!(
        "serde_plan",
        r > 0 && a > 0 && s > 0,
        "shape ({r}, {a}, {s})"
    );
    let slots = r.checked_mul(a).and_then(|x| x.checked_mul(s));
    check!(
        "serde_plan",
        slots.is_some(),
        "shape ({r}, {a}, {s}) overflows"
    );
    let ids: Vec<u64> = (0..r).flat_map(|i| plan.rank(i).to_vec()).collect();
    let set: BTreeSet<u64> = ids.iter().copied().collect();
    check!(
        "serde_plan",
        set.len() == ids.len() && ids.len() == plan.len() && !plan.is_empty(),
        "{} ids, {} distinct, len {}",
        ids.len(),
        set.len(),
        plan.len()
    );
    if slots.is_none_or(|k| k > 4 * ids.len() + 64) {
        return;
    }
    for i in 0..r {
        for j in 0..a {
            let _ = plan.micro_batch(i, j);
            for q in 0..s {
                let seq = plan.sequence(i, j, q);
                check!(
                    "serde_plan",
                    seq.windows(2).all(|w| w[0] < w[1]),
                    "sequence ({i}, {j}, {q}) not ascending"
                );
                let c = plan.sequence_cost(i, j, q);
                check!(
                    "serde_plan",
                    c.vision >= 0.0 && c.language >= 0.0 && c.total().is_finite(),
                    "cost {c:?}"
                );
            }
        }
    }
    let loss = plan.loss();
    check!(
        "serde_plan",
        loss.samples == ids.len() as u64 && loss.ranks == r as u64,
        "loss {loss:?} for {} samples on {r} ranks",
        ids.len()
    );
    for n in [Normalization::Token, Normalization::Sample] {
        for red in [Reduction::Sum, Reduction::Mean] {
            let f = loss.scale(n, red);
            check!("serde_plan", f.is_finite() && f >= 0.0, "scale {f}");
        }
    }
    let _ = (
        plan.to_nested(),
        plan.to_sequences(),
        plan.fingerprint(),
        plan.report().ratio(),
    );
    // The plan's own samples: predict must answer.
    let samples: Vec<StepSample> = ids
        .iter()
        .map(|&id| StepSample::new(id, Sample::text_only((id % 1000) as u32)))
        .collect();
    let t = plan.predict(&samples, &Tokens::new(1.0).unwrap(), SyncModel::Phase);
    check!(
        "serde_plan",
        t.as_ref().is_ok_and(|t| t.is_finite() && *t >= 0.0),
        "predict on its own ids: {t:?}"
    );
    let _ = plan.predict(
        &samples[..samples.len() / 2],
        &Preset::Llava15_7b.cost_model(),
        SyncModel::MicroStep,
    );
}
