use microbatch::cost::{Image, Preset, Sample, Tokens};
use microbatch::plan::{Planner, StepSample, SyncModel};
use std::time::Instant;
fn main() {
    let args: Vec<String> = std::env::args().collect();
    let case = args[1].as_str();
    let n: u64 = args[2].parse().unwrap();
    let samples: Vec<StepSample> = (0..n)
        .map(|i| {
            let h = (i as u32).wrapping_mul(2654435761u32) >> 8;
            if i % 2 == 0 {
                StepSample::new(i, Sample::new(1 + h % 97, [Image::new(1 + h % 89)]))
            } else {
                StepSample::new(i, Sample::text_only(1 + h % 150))
            }
        })
        .collect();
    let model = Preset::Qwen25Vl7b.cost_model();
    let t = Instant::now();
    let r = match case {
        "bigseq-phase" => Planner::new(&model).ranks(2).seq_len(u32::MAX).sync(SyncModel::Phase).plan(&samples).map(|p| p.report().predicted),
        "bigseq-micro" => Planner::new(&model).ranks(2).seq_len(u32::MAX).sync(SyncModel::MicroStep).plan(&samples).map(|p| p.report().predicted),
        "bigseq-step" => Planner::new(&model).ranks(2).seq_len(u32::MAX).sync(SyncModel::Step).plan(&samples).map(|p| p.report().predicted),
        "manyS-phase" => Planner::new(&model).ranks(2).seq_len(400).sequences_per_micro_step((n/2) as usize).sync(SyncModel::Phase).plan(&samples).map(|p| p.report().predicted),
        "bigR-phase" => Planner::new(&model).ranks(n as usize).seq_len(u32::MAX).sync(SyncModel::Phase).plan(&samples).map(|p| p.report().predicted),
        "bigR-step" => Planner::new(&model).ranks(n as usize/2).seq_len(u32::MAX).sync(SyncModel::Step).plan(&samples).map(|p| p.report().predicted),
        "microsteps" => Planner::new(&model).ranks(1).seq_len(u32::MAX).micro_steps(args[3].parse().unwrap()).plan(&samples).map(|p| p.report().predicted),
        "tokens-phase" => Planner::new(Tokens::new(1.0).unwrap()).ranks(2).seq_len(u32::MAX).sync(SyncModel::Phase).plan(&samples).map(|p| p.report().predicted),
        "scen" => {
            let sc: microbatch::scenario::Scenario = args[3].parse().unwrap();
            let sync: SyncModel = args[4].parse().unwrap();
            let r: usize = args[5].parse().unwrap();
            let b = sc.generate(n as usize, 42);
            sc.planner(r).sync(sync).plan(&b).map(|p| p.report().ratio())
        }
        _ => panic!(),
    };
    println!("{case} n={n}: {:?} in {:.3} s", r.map_err(|e| e.to_string()), t.elapsed().as_secs_f64());
}
