//! FLOPs of the model shapes and presets against numbers derived by hand,
//! GEMM by GEMM, independently of the library's closed forms; and the LLM
//! against Megatron-LM's `num_floating_point_operations` written out as in
//! its source.

use core::num::NonZeroU32;

use microbatch::cost::{
    AttentionCount, CostModel, Image, LlmShape, Phases, Preset, Sample, Training, VitShape,
};
use microbatch::{Error, Locator, Scalar};

use crate::common::float::rel;

/// Training FLOPs per token of the linear layers, GEMM by GEMM: a GEMM of
/// `[T, k] x [k, n]` is `2 T k n` forward, 3x for training.
fn llm_linear_by_hand(layers: u64, h: u64, ffn: u64, heads: u64, kv_heads: u64, vocab: u64) -> u64 {
    let head_dim = h / heads;
    let q = 2 * h * h;
    let k = 2 * h * (kv_heads * head_dim);
    let v = 2 * h * (kv_heads * head_dim);
    let o = 2 * h * h;
    let gate = 2 * h * ffn;
    let up = 2 * h * ffn;
    let down = 2 * ffn * h;
    let logits = 2 * h * vocab;
    3 * (layers * (q + k + v + o + gate + up + down) + logits)
}

/// Training FLOPs of attention for one document of `t` tokens, counting the
/// full score matrix: Q K^T is `[t, d] x [d, t]` per head, scores x V is
/// `[t, t] x [t, d]`, over all heads (heads * d = h).
fn llm_attention_by_hand(layers: u64, h: u64, t: u64) -> u64 {
    let qk = 2 * t * h * t;
    let av = 2 * t * t * h;
    3 * layers * (qk + av)
}

/// Megatron-LM's `num_floating_point_operations(args, batch_size)` for a
/// dense model (no MoE), as in `megatron/training/training.py`:
///
/// ```python
/// expansion_factor = 3 * 2 * 2
/// return (expansion_factor * batch_size * seq_length * num_layers * hidden_size * hidden_size * (
///     ((1 + (num_query_groups / num_attention_heads) + (seq_length / hidden_size))
///         * query_projection_to_hidden_size_ratio)
///     + ((ffn_hidden_size / hidden_size) * num_experts_routed_to * gated_linear_multiplier)
///     + (padded_vocab_size / (2 * num_layers * hidden_size))))
/// ```
fn megatron(shape: &LlmShape, batch: f64, seq: f64) -> f64 {
    let (l, h) = (f64::from(shape.layers), f64::from(shape.hidden));
    let gated = if shape.swiglu { 1.5 } else { 1.0 };
    12.0 * batch
        * seq
        * l
        * h
        * h
        * ((1.0 + f64::from(shape.kv_heads) / f64::from(shape.heads) + seq / h) * 1.0
            + (f64::from(shape.ffn) / h) * 1.0 * gated
            + f64::from(shape.vocab) / (2.0 * l * h))
}

const LLMS: [(&str, LlmShape, [u64; 6]); 3] = [
    (
        "vicuna-7b",
        LlmShape::VICUNA_7B,
        [32, 4096, 11008, 32, 32, 32000],
    ),
    (
        "qwen2-7b",
        LlmShape::QWEN2_7B,
        [28, 3584, 18944, 28, 4, 152064],
    ),
    (
        "internlm2.5-7b",
        LlmShape::INTERNLM2_5_7B,
        [32, 4096, 14336, 32, 8, 92544],
    ),
];

#[test]
fn llm_linear_flops_match_the_gemms() {
    for (name, shape, [l, h, f, a, g, v]) in LLMS {
        let by_hand = llm_linear_by_hand(l, h, f, a, g, v);
        assert_eq!(shape.linear_flops_per_token(), by_hand as f64, "{name}");
        assert_eq!(6 * shape.weights(), u128::from(by_hand), "{name}");
    }
    // The numbers themselves, for the record (FLOPs per token).
    assert_eq!(
        llm_linear_by_hand(32, 4096, 11008, 32, 32, 32000),
        39_642_464_256
    );
    assert_eq!(
        llm_linear_by_hand(28, 3584, 18944, 28, 4, 152064),
        42_421_714_944
    );
    assert_eq!(
        llm_linear_by_hand(32, 4096, 14336, 32, 8, 92544),
        44_150_292_480
    );
}

#[test]
fn llm_attention_flops_match_the_gemms() {
    for (name, shape, [l, h, ..]) in LLMS {
        let full = LlmShape {
            attention: AttentionCount::Full,
            ..shape
        };
        let causal = LlmShape {
            attention: AttentionCount::Causal,
            ..shape
        };
        for t in [1u64, 577, 2048, 16384] {
            let by_hand = llm_attention_by_hand(l, h, t) as f64;
            let linear = shape.linear_flops_per_token() * t as f64;
            assert_eq!(full.training_flops(t) - linear, by_hand, "{name} T={t}");
            assert_eq!(
                causal.training_flops(t) - linear,
                by_hand / 2.0,
                "{name} T={t}"
            );
        }
    }
}

#[test]
fn llm_flops_equal_megatrons_formula() {
    for (name, shape, _) in LLMS {
        let full = LlmShape {
            attention: AttentionCount::Full,
            ..shape
        };
        for t in [128u64, 2048, 4096, 32768] {
            let ours = full.training_flops(t);
            let theirs = megatron(&shape, 1.0, t as f64);
            assert!(
                rel(ours, theirs) < 1e-12,
                "{name} T={t}: {ours} vs {theirs}"
            );
        }
    }
    // Vicuna-7B at 4096 tokens: 6.5e15 FLOPs per sequence.
    let t = 4096.0;
    let vicuna = 39_642_464_256.0 * t + 12.0 * 32.0 * 4096.0 * t * t;
    assert!(rel(megatron(&LlmShape::VICUNA_7B, 1.0, t), vicuna) < 1e-12);
}

#[test]
fn llm_quadratic_term_equals_the_linear_one_near_50k_to_65k_tokens() {
    // The domain notes: for 7B models, 6 N T = 6 L d T^2 near T = 50k-65k.
    // Vicuna-7B 50.4k, InternLM2.5-7B 56.1k (causal count); Qwen2-7B, with a larger FFN and
    // vocabulary on a smaller hidden size, 70.5k.
    let crossings: Vec<f64> = LLMS
        .iter()
        .map(|(_, shape, _)| {
            shape.linear_flops_per_token() / shape.attention_flops_per_token_pair()
        })
        .collect();
    assert_eq!(
        crossings.iter().map(|t| t.round()).collect::<Vec<_>>(),
        [50408.0, 70455.0, 56140.0]
    );
}

/// Forward FLOPs of one ViT attention unit of `n` tokens, GEMM by GEMM.
fn vit_forward_by_hand(layers: u64, h: u64, mlp_mats: u64, mlp: u64, n: u64) -> u64 {
    let qkv = 2 * n * h * (3 * h);
    let o = 2 * n * h * h;
    let mlp = mlp_mats * 2 * n * h * mlp;
    let qk = 2 * n * h * n;
    let av = 2 * n * n * h;
    layers * (qkv + o + mlp + qk + av)
}

#[test]
fn clip_and_internvit_tiles() {
    let clip_tile = vit_forward_by_hand(24, 1024, 2, 4096, 577);
    assert_eq!(clip_tile, 381_224_583_168);
    assert_eq!(VitShape::CLIP_L_14_336.forward_flops(577), clip_tile as f64);
    let intern_tile = vit_forward_by_hand(24, 1024, 2, 4096, 1025);
    assert_eq!(intern_tile, 722_359_910_400);
    assert_eq!(
        VitShape::INTERNVIT_300M.forward_flops(1025),
        intern_tile as f64
    );

    // Frozen CLIP: one forward per 576-token image.
    let clip = VitShape::CLIP_L_14_336
        .cost_model(Training::Frozen)
        .unwrap();
    let one = [&Sample::new(40, [Image::new(576)])];
    assert_eq!(clip.cost(&one), Phases::new(clip_tile as f64, 0.0));
    // Trained InternViT, an image of 6 tiles + thumbnail and one of 1 tile.
    let intern = VitShape::INTERNVIT_300M
        .cost_model(Training::Trained)
        .unwrap();
    let s = Sample::new(
        100,
        [
            Image::with_units(7 * 256, NonZeroU32::new(7).unwrap()),
            Image::new(256),
        ],
    );
    assert_eq!(intern.cost(&[&s]).vision, 3.0 * 8.0 * intern_tile as f64);
}

#[test]
fn qwen_vits() {
    let h = 1280u64;
    // Qwen2.5-VL: an image of 1024 LLM tokens = 4096 patches = 64 windows of 64.
    let n = 4096u64;
    let linear = 32 * (2 * n * h * 3 * h + 2 * n * h * h + 3 * 2 * n * h * 3420);
    let windowed = 28 * 64 * (2 * 64 * h * 64 + 2 * 64 * 64 * h);
    let full = 4 * (2 * n * h * n + 2 * n * n * h);
    let forward = linear + windowed + full;
    assert_eq!(VitShape::QWEN2_5_VL.forward_flops(n), forward as f64);
    let vit = VitShape::QWEN2_5_VL.cost_model(Training::Trained).unwrap();
    let image = [&Sample::new(20, [Image::new(1024)])];
    assert_eq!(vit.cost(&image).vision, 3.0 * forward as f64);
    // 1000 tokens = 4000 patches = 62 windows of 64 + one of 32.
    let n = 4000u64;
    let linear = 32 * (2 * n * h * 3 * h + 2 * n * h * h + 3 * 2 * n * h * 3420);
    let windowed = 28 * (62 * 4 * 64 * 64 * h + 4 * 32 * 32 * h);
    let full = 4 * 4 * n * n * h;
    let forward = (linear + windowed + full) as f64;
    assert_eq!(
        vit.cost(&[&Sample::new(0, [Image::new(1000)])]).vision,
        3.0 * forward
    );

    // Qwen2-VL: full attention over the image's 4096 patches, plain MLP.
    let forward = vit_forward_by_hand(32, h, 2, 5120, 4096);
    assert_eq!(VitShape::QWEN2_VL.forward_flops(4096), forward as f64);
    let vit = VitShape::QWEN2_VL.cost_model(Training::Frozen).unwrap();
    assert_eq!(vit.cost(&image).vision, forward as f64);
}

#[test]
fn presets_equal_hand_computed_flops() {
    let causal = |l: u64, h: u64, t: u64| llm_attention_by_hand(l, h, t) as f64 / 2.0;

    // LLaVA-1.5-7B: 300 text tokens + one 576-token image; frozen CLIP.
    let llava = Preset::Llava15_7b.cost_model();
    let t = 300 + 576;
    let language = 39_642_464_256.0 * t as f64 + causal(32, 4096, t);
    let vision = vit_forward_by_hand(24, 1024, 2, 4096, 577) as f64;
    let got = llava.cost(&[&Sample::new(300, [Image::new(576)])]);
    assert_eq!(got, Phases::new(vision, language));

    // InternVL2.5-8B: 500 text tokens + a 3-tile image; trained InternViT.
    let intern = Preset::InternVl25_8b.cost_model();
    let t = 500 + 768;
    let language = 44_150_292_480.0 * t as f64 + causal(32, 4096, t);
    let vision = 3.0 * 3.0 * vit_forward_by_hand(24, 1024, 2, 4096, 1025) as f64;
    let got = intern.cost(&[&Sample::new(500, [Image::new(768)])]);
    assert!(
        rel(got.language, language) < 1e-15 && got.vision == vision,
        "{got:?}"
    );

    // Qwen2.5-VL-7B: 180 text tokens + a 1024-token image; trained ViT.
    let qwen = Preset::Qwen25Vl7b.cost_model();
    let t = 180 + 1024;
    let language = 42_421_714_944.0 * t as f64 + causal(28, 3584, t);
    let vision = 3.0 * VitShape::QWEN2_5_VL.forward_flops(4096);
    let got = qwen.cost(&[&Sample::new(180, [Image::new(1024)])]);
    assert!(
        rel(got.language, language) < 1e-15 && got.vision == vision,
        "{got:?}"
    );
}

#[test]
fn vit_shares_per_image_token_match_the_domain_notes() {
    // domain.md: ViT share of training FLOPs per image token ~17%
    // (InternVL2.5-8B), LLaVA-1.5's frozen CLIP a few percent at most.
    let share = |name: &str, tokens: u32| {
        let model = name.parse::<Preset>().unwrap().cost_model();
        let c = model.cost(&[&Sample::new(0, [Image::new(tokens)])]);
        c.vision / c.total()
    };
    let intern = share("internvl2.5-8b", 256);
    assert!((0.15..0.18).contains(&intern), "{intern}");
    let llava = share("llava-1.5-7b", 576);
    assert!((0.01..0.05).contains(&llava), "{llava}");
    let qwen = share("qwen2.5-vl-7b", 1024);
    assert!((0.2..0.35).contains(&qwen), "{qwen}");
}

#[test]
fn unknown_preset_lists_the_known_ones() {
    let err = "gpt-5".parse::<Preset>().unwrap_err();
    assert!(
        matches!(&err, Error::UnknownName { kind: "cost model preset", name, known } if name == "gpt-5" && known.len() == 3)
    );
    let msg = err.to_string();
    for preset in Preset::ALL {
        let name = preset.to_string();
        assert!(msg.contains(&name), "{msg}");
        assert_eq!(name.parse::<Preset>().unwrap(), preset);
    }
}

#[test]
fn invalid_shapes_are_errors() {
    let no_heads = LlmShape {
        heads: 0,
        ..LlmShape::VICUNA_7B
    };
    assert!(matches!(
        no_heads.cost_model(),
        Err(Error::Invalid {
            at: Locator::Setting { name: "heads", .. },
            ..
        })
    ));
    let too_many_kv = LlmShape {
        kv_heads: 64,
        ..LlmShape::VICUNA_7B
    };
    assert_eq!(
        too_many_kv.cost_model().unwrap_err().to_string(),
        "the setting `kv_heads` is 64; it must be between 1 and heads"
    );
    let mut vit = VitShape::QWEN2_5_VL;
    vit.layers = 3;
    assert!(matches!(
        vit.cost_model(Training::Trained),
        Err(Error::Invalid {
            at: Locator::Setting {
                name: "full_layers",
                ..
            },
            value: Scalar::Int(4),
            ..
        })
    ));
}

#[test]
fn preset_models_equal_the_checked_shape_models() {
    // `Preset::cost_model` is infallible because the presets' constant
    // shapes pass every check: the checked path gives the same model.
    for p in Preset::ALL {
        let vit = p.vit().cost_model(p.vit_training()).unwrap();
        let llm = p.llm().cost_model().unwrap();
        assert_eq!(p.cost_model(), vit.plus(llm), "{p}");
        assert!(p.llm().check().is_ok(), "{p}");
    }
}
