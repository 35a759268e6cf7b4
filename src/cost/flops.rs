//! FLOPs from model shapes: a decoder-only LLM ([`LlmShape`]), a vision
//! encoder ([`VitShape`]), and the named [`Preset`]s for the model pairs of
//! the crate's workloads.

use super::adapter::Sum;
use super::attention::DocumentAttention;
use super::tokens::Tokens;
use super::vision::{at_least_one, PerImage, PerTile, Training, Vision, Windowed};
use super::{f, CostModel};
use crate::error::Error;

/// How the LLM's attention FLOPs count the `T x T` score matrix of a causal
/// model.
///
/// # Examples
///
/// ```
/// use microbatch::cost::{AttentionCount, LlmShape};
///
/// let full = LlmShape { attention: AttentionCount::Full, ..LlmShape::VICUNA_7B };
/// let causal = LlmShape { attention: AttentionCount::Causal, ..LlmShape::VICUNA_7B };
/// assert_eq!(full.attention_flops_per_token_pair(), 2.0 * causal.attention_flops_per_token_pair());
/// ```
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[cfg_attr(feature = "serde", derive(serde::Serialize, serde::Deserialize))]
pub enum AttentionCount {
    /// Only the causal lower triangle (what FlashAttention computes):
    /// `6 * L * h * T^2`.
    Causal,
    /// The full matrix, as Megatron-LM's classic `num_floating_point_operations`
    /// counts: `12 * L * h * T^2`.
    Full,
}

/// The shape of a decoder-only language model, for its training FLOPs.
///
/// # Formula
///
/// A GEMM of an `m x k` by a `k x n` matrix costs `2 * m * k * n` FLOPs;
/// training runs each GEMM three times (forward, gradient of the input,
/// gradient of the weight), so a trained layer costs 3x its forward pass.
/// Norms, activations, rotary embeddings, softmax, biases and the input
/// embedding lookup are not counted (each below 1% for these shapes).
///
/// For `L` layers, hidden size `h`, FFN size `f`, `a` query heads, `g`
/// key/value heads (grouped-query attention; query projection size `h`),
/// vocabulary `V`, trained on one document of `T` tokens:
///
/// ```text
/// linear    = 3 * [ L * (2hh (Q) + 2 * 2h(h*g/a) (K, V) + 2hh (O) + m * 2hf (MLP)) + 2hV (logits) ] * T
///           = [ 12 L h^2 (1 + g/a) + 6m L h f + 6 h V ] * T        (m = 3 with SwiGLU, 2 without)
/// attention = 3 * L * (2 T^2 h (Q K^T) + 2 T^2 h (scores x V)) * c  = 12 c L h T^2
/// ```
///
/// with `c = 1` counting the full score matrix ([`AttentionCount::Full`],
/// exactly Megatron-LM's `num_floating_point_operations`) or `c = 1/2`
/// counting the causal half that FlashAttention computes
/// ([`AttentionCount::Causal`]). The linear part is `6 * N * T` for the `N`
/// weights of the matrices above ([`LlmShape::weights`]).
///
/// The formula is that of D. Narayanan et al., *Efficient Large-Scale
/// Language Model Training on GPU Clusters Using Megatron-LM*, SC 2021,
/// appendix, as implemented (with grouped-query attention and SwiGLU) by
/// Megatron-LM's `num_floating_point_operations` in
/// `megatron/training/training.py`. The shapes are from the models'
/// published configurations (`config.json` on the Hugging Face Hub):
/// `lmsys/vicuna-7b-v1.5`, `Qwen/Qwen2-7B`, `internlm/internlm2_5-7b`.
///
/// # Examples
///
/// ```
/// use microbatch::cost::{CostModel, LlmShape, Sample};
///
/// let vicuna = LlmShape::VICUNA_7B;
/// // 6 FLOPs per weight per token, plus causal attention.
/// assert_eq!(vicuna.linear_flops_per_token(), 6.0 * vicuna.weights() as f64);
/// let t = 2048.0;
/// let flops = vicuna.training_flops(2048);
/// assert_eq!(flops, vicuna.linear_flops_per_token() * t + 6.0 * 32.0 * 4096.0 * t * t);
///
/// let model = vicuna.cost_model()?;
/// assert_eq!(model.cost(&[&Sample::text_only(2048)]).language, flops);
/// # Ok::<(), microbatch::Error>(())
/// ```
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[cfg_attr(feature = "serde", derive(serde::Serialize, serde::Deserialize))]
pub struct LlmShape {
    /// Transformer layers.
    pub layers: u32,
    /// Hidden size (also the query projection size).
    pub hidden: u32,
    /// FFN (intermediate) size.
    pub ffn: u32,
    /// Gated FFN (SwiGLU: three matrices) or plain (two matrices).
    pub swiglu: bool,
    /// Query attention heads.
    pub heads: u32,
    /// Key/value heads (grouped-query attention); equal to `heads` for
    /// multi-head attention.
    pub kv_heads: u32,
    /// Vocabulary size (the output layer).
    pub vocab: u32,
    /// How the causal score matrix is counted.
    pub attention: AttentionCount,
}

impl LlmShape {
    /// Vicuna-7B v1.5 (LLaMA-2-7B shape), the LLM of LLaVA-1.5-7B.
    ///
    /// # Examples
    ///
    /// ```
    /// use microbatch::cost::{LlmShape, Preset};
    ///
    /// let llm = LlmShape::VICUNA_7B;
    /// assert_eq!(llm.kv_heads, llm.heads); // multi-head attention
    /// assert_eq!(Preset::Llava15_7b.llm(), llm);
    /// # Ok::<(), microbatch::Error>(())
    /// ```
    pub const VICUNA_7B: LlmShape = LlmShape {
        layers: 32,
        hidden: 4096,
        ffn: 11008,
        swiglu: true,
        heads: 32,
        kv_heads: 32,
        vocab: 32000,
        attention: AttentionCount::Causal,
    };

    /// Qwen2-7B, the LLM of Qwen2-VL-7B and Qwen2.5-VL-7B.
    ///
    /// # Examples
    ///
    /// ```
    /// use microbatch::cost::{LlmShape, Preset};
    ///
    /// let llm = LlmShape::QWEN2_7B;
    /// assert_eq!(llm.heads / llm.kv_heads, 7); // grouped-query attention
    /// assert_eq!(Preset::Qwen25Vl7b.llm(), llm);
    /// # Ok::<(), microbatch::Error>(())
    /// ```
    pub const QWEN2_7B: LlmShape = LlmShape {
        layers: 28,
        hidden: 3584,
        ffn: 18944,
        swiglu: true,
        heads: 28,
        kv_heads: 4,
        vocab: 152064,
        attention: AttentionCount::Causal,
    };

    /// InternLM2.5-7B, the LLM of InternVL2.5-8B.
    ///
    /// # Examples
    ///
    /// ```
    /// use microbatch::cost::{LlmShape, Preset};
    ///
    /// let llm = LlmShape::INTERNLM2_5_7B;
    /// assert_eq!((llm.heads, llm.kv_heads), (32, 8));
    /// assert_eq!(Preset::InternVl25_8b.llm(), llm);
    /// # Ok::<(), microbatch::Error>(())
    /// ```
    pub const INTERNLM2_5_7B: LlmShape = LlmShape {
        layers: 32,
        hidden: 4096,
        ffn: 14336,
        swiglu: true,
        heads: 32,
        kv_heads: 8,
        vocab: 92544,
        attention: AttentionCount::Causal,
    };

    /// Checks the shape: at least one head and `1 <= kv_heads <= heads`.
    ///
    /// # Errors
    ///
    /// [`Error::Invalid`] at a [setting](crate::Locator::Setting) naming
    /// `heads` or `kv_heads`.
    ///
    /// # Examples
    ///
    /// ```
    /// use microbatch::cost::LlmShape;
    /// use microbatch::{Error, Locator};
    ///
    /// assert!(LlmShape::QWEN2_7B.check().is_ok());
    /// let bad = LlmShape { kv_heads: 64, ..LlmShape::VICUNA_7B }; // more KV heads than heads
    /// assert!(matches!(
    ///     bad.check(),
    ///     Err(Error::Invalid { at: Locator::Setting { name: "kv_heads", .. }, .. })
    /// ));
    /// ```
    pub fn check(&self) -> Result<(), Error> {
        if self.heads == 0 {
            return Err(Error::setting("heads", 0, "at least 1"));
        }
        if self.kv_heads == 0 || self.kv_heads > self.heads {
            return Err(Error::setting(
                "kv_heads",
                u64::from(self.kv_heads),
                "between 1 and heads",
            ));
        }
        Ok(())
    }

    /// The weights of the matrices counted (Q, K, V, O and the FFN of every
    /// layer, and the output layer): `N` in `6 * N * T`.
    ///
    /// Exact for every shape that passes [`check`](LlmShape::check): in
    /// `u128`, where the largest `u32` fields give below `2^100` (a `u64`
    /// would overflow from `hidden` = 2^31 on). A shape with more KV heads
    /// than heads, which `check` rejects, saturates at `u128::MAX`.
    ///
    /// # Examples
    ///
    /// ```
    /// use microbatch::cost::LlmShape;
    ///
    /// // About 6.6 billion matrix weights for "7B" (the input embeddings are not counted).
    /// assert_eq!(LlmShape::VICUNA_7B.weights(), 6_607_077_376);
    /// let huge = LlmShape { layers: u32::MAX, hidden: u32::MAX, ffn: u32::MAX, vocab: u32::MAX, ..LlmShape::VICUNA_7B };
    /// assert!(huge.weights() > u128::from(u64::MAX)); // no overflow
    /// ```
    #[must_use]
    pub fn weights(&self) -> u128 {
        // With `kv <= h` (a checked shape) every product is of at most four
        // `u32` values times a small constant: below 2^100. Without, `kv` is
        // up to `h * 2^32` and the sum saturates.
        let h = u128::from(self.hidden);
        let kv = h * u128::from(self.kv_heads) / u128::from(self.heads.max(1));
        let mats = if self.swiglu { 3 } else { 2 };
        let layer = (2 * h * h + 2 * h * kv).saturating_add(mats * h * u128::from(self.ffn));
        u128::from(self.layers)
            .saturating_mul(layer)
            .saturating_add(h * u128::from(self.vocab))
    }

    /// Training FLOPs per token of the linear part (projections, FFN, output
    /// layer): `12 L h^2 (1 + g/a) + 6m L h f + 6 h V`.
    ///
    /// # Examples
    ///
    /// ```
    /// use microbatch::cost::LlmShape;
    ///
    /// // The 6N rule: 2N forward and 4N backward per token.
    /// let llm = LlmShape::QWEN2_7B;
    /// assert_eq!(llm.linear_flops_per_token(), 6.0 * llm.weights() as f64);
    /// ```
    #[must_use]
    pub fn linear_flops_per_token(&self) -> f64 {
        let l = f64::from(self.layers);
        let h = f64::from(self.hidden);
        // The K and V projection size h * g / a (exact for the shapes here).
        let kv = h * f64::from(self.kv_heads) / f64::from(self.heads.max(1));
        let mats = if self.swiglu { 3.0 } else { 2.0 };
        12.0 * l * h * (h + kv)
            + 6.0 * mats * l * h * f64::from(self.ffn)
            + 6.0 * h * f64::from(self.vocab)
    }

    /// Training FLOPs of attention per squared document length: `12 L h`
    /// ([`AttentionCount::Full`]) or `6 L h` ([`AttentionCount::Causal`]).
    ///
    /// # Examples
    ///
    /// ```
    /// use microbatch::cost::{AttentionCount, LlmShape};
    ///
    /// let causal = LlmShape::VICUNA_7B;
    /// let full = LlmShape { attention: AttentionCount::Full, ..causal };
    /// assert_eq!(causal.attention_flops_per_token_pair(), 6.0 * 32.0 * 4096.0);
    /// assert_eq!(full.attention_flops_per_token_pair(), 2.0 * causal.attention_flops_per_token_pair());
    /// ```
    #[must_use]
    pub fn attention_flops_per_token_pair(&self) -> f64 {
        let full = 12.0 * f64::from(self.layers) * f64::from(self.hidden);
        match self.attention {
            AttentionCount::Full => full,
            AttentionCount::Causal => full / 2.0,
        }
    }

    /// Training FLOPs (forward and backward) of one document of `tokens`
    /// tokens.
    ///
    /// # Examples
    ///
    /// ```
    /// use microbatch::cost::LlmShape;
    ///
    /// let llm = LlmShape::VICUNA_7B;
    /// let (linear, attention) = (llm.linear_flops_per_token(), llm.attention_flops_per_token_pair());
    /// assert_eq!(llm.training_flops(1000), 1000.0 * linear + 1e6 * attention);
    /// assert!(llm.training_flops(2000) > 2.0 * llm.training_flops(1000)); // superlinear
    /// ```
    #[must_use]
    pub fn training_flops(&self, tokens: u64) -> f64 {
        let t = tokens as f64;
        self.linear_flops_per_token() * t + self.attention_flops_per_token_pair() * t * t
    }

    /// The LLM's cost model in FLOPs: [`Tokens`] for the linear part plus
    /// [`DocumentAttention`] (each sample is one document of its packed
    /// sequence), in the language phase.
    ///
    /// # Errors
    ///
    /// [`Error::Invalid`] at a [setting](crate::Locator::Setting) if
    /// [`check`](LlmShape::check) fails.
    ///
    /// # Examples
    ///
    /// ```
    /// use microbatch::cost::{CostModel, LlmShape, Sample};
    ///
    /// let llm = LlmShape::QWEN2_7B;
    /// let model = llm.cost_model()?;
    /// assert_eq!(model.cost(&[&Sample::text_only(4096)]).language, llm.training_flops(4096));
    /// assert!(LlmShape { heads: 0, ..llm }.cost_model().is_err());
    /// # Ok::<(), microbatch::Error>(())
    /// ```
    pub fn cost_model(&self) -> Result<Sum<Tokens, DocumentAttention>, Error> {
        self.check()?;
        Ok(self.model())
    }

    /// The cost model without [`check`](LlmShape::check). Its coefficients
    /// are products of `u32` fields, so always finite and non-negative; the
    /// shape checks only guard the meaning of the heads.
    fn model(&self) -> Sum<Tokens, DocumentAttention> {
        let tokens = Tokens {
            per_token: self.linear_flops_per_token(),
        };
        tokens.plus(DocumentAttention {
            per_token_pair: self.attention_flops_per_token_pair(),
        })
    }
}

/// What a vision encoder's attention spans, and how its tokens relate to the
/// LLM's.
///
/// # Examples
///
/// ```
/// use microbatch::cost::{VitScope, VitShape};
///
/// assert_eq!(
///     VitShape::INTERNVIT_300M.scope,
///     VitScope::Tile { tokens_per_tile: 1025, llm_tokens_per_tile: 256 }
/// );
/// ```
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[cfg_attr(feature = "serde", derive(serde::Serialize, serde::Deserialize))]
pub enum VitScope {
    /// Attention within fixed tiles (CLIP, SigLIP, InternViT): the cost is
    /// linear in tiles.
    Tile {
        /// ViT tokens per tile, class token included (577 for CLIP-L/14 at
        /// 336px, 1025 for InternViT at 448px).
        tokens_per_tile: u32,
        /// LLM tokens per tile (576 for LLaVA-1.5; 256 for InternVL after
        /// its 2x2 pixel shuffle).
        llm_tokens_per_tile: u32,
    },
    /// Full attention over each image or frame group (Qwen2-VL).
    Image {
        /// ViT patches per LLM token (4: a 2x2 merger).
        patches_per_token: u32,
    },
    /// Windowed attention with full attention in some layers (Qwen2.5-VL).
    Windowed {
        /// Patches per window (64: 112px / 14px = 8 patches a side).
        window: u32,
        /// Layers with full attention over the image (4 of 32).
        full_layers: u32,
        /// ViT patches per LLM token (4: a 2x2 merger).
        patches_per_token: u32,
    },
}

/// The shape of a vision transformer, for its FLOPs.
///
/// # Formula
///
/// For `L` layers, hidden size `h`, MLP size `m`, the forward pass over one
/// attention unit of `n` tokens (full, bidirectional attention) costs
///
/// ```text
/// forward = L * n * (8 h^2 + m' * 2hm) + L * 4 h n^2        (m' = 3 with SwiGLU, 2 without)
/// ```
///
/// Windowed layers replace `n^2` by `sum(w_i^2)` over their windows
/// ([`Windowed`]). The patch embedding and the projector (merger MLP) are not
/// counted (about 2% of the encoder for Qwen2.5-VL). A frozen encoder pays
/// the forward pass once, a trained one three times ([`Training`]). The
/// shapes are from the models' published configurations:
/// `openai/clip-vit-large-patch14-336`, `Qwen/Qwen2.5-VL-7B-Instruct` and
/// `Qwen/Qwen2-VL-7B-Instruct` (`vision_config`),
/// `OpenGVLab/InternViT-300M-448px`.
///
/// # Examples
///
/// ```
/// use microbatch::cost::{CostModel, Image, Sample, Training, VitShape};
///
/// let clip = VitShape::CLIP_L_14_336;
/// let tile = clip.forward_flops(577);
/// let h = 1024.0;
/// assert_eq!(tile, 24.0 * (577.0 * (8.0 * h * h + 4.0 * h * 4096.0) + 4.0 * h * 577.0 * 577.0));
///
/// let model = clip.cost_model(Training::Frozen)?;
/// assert_eq!(model.cost(&[&Sample::new(30, [Image::new(576)])]).vision, tile);
/// # Ok::<(), microbatch::Error>(())
/// ```
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[cfg_attr(feature = "serde", derive(serde::Serialize, serde::Deserialize))]
pub struct VitShape {
    /// Transformer layers.
    pub layers: u32,
    /// Hidden size.
    pub hidden: u32,
    /// MLP (intermediate) size.
    pub mlp: u32,
    /// Gated MLP (SwiGLU: three matrices) or plain (two matrices).
    pub swiglu: bool,
    /// What attention spans.
    pub scope: VitScope,
}

impl VitShape {
    /// CLIP ViT-L/14 at 336px (LLaVA-1.5): 24x24 patches + a class token,
    /// one tile per image, 576 LLM tokens.
    ///
    /// # Examples
    ///
    /// ```
    /// use microbatch::cost::{Preset, VitScope, VitShape};
    ///
    /// let clip = VitShape::CLIP_L_14_336;
    /// assert_eq!(clip.scope, VitScope::Tile { tokens_per_tile: 577, llm_tokens_per_tile: 576 });
    /// assert_eq!(Preset::Llava15_7b.vit(), clip);
    /// # Ok::<(), microbatch::Error>(())
    /// ```
    pub const CLIP_L_14_336: VitShape = VitShape {
        layers: 24,
        hidden: 1024,
        mlp: 4096,
        swiglu: false,
        scope: VitScope::Tile {
            tokens_per_tile: 577,
            llm_tokens_per_tile: 576,
        },
    };

    /// InternViT-300M at 448px (InternVL2.5-8B): 32x32 patches + a class
    /// token per tile, 256 LLM tokens per tile.
    ///
    /// # Examples
    ///
    /// ```
    /// use microbatch::cost::{CostModel, Image, Sample, Training, VitShape};
    ///
    /// // 6 tiles + a thumbnail, 256 LLM tokens each: 7 tiles of 1025 ViT tokens.
    /// let vit = VitShape::INTERNVIT_300M;
    /// let cost = vit.cost_model(Training::Frozen)?.cost(&[&Sample::new(0, [Image::new(7 * 256)])]);
    /// assert_eq!(cost.vision, 7.0 * vit.forward_flops(1025));
    /// # Ok::<(), microbatch::Error>(())
    /// ```
    pub const INTERNVIT_300M: VitShape = VitShape {
        layers: 24,
        hidden: 1024,
        mlp: 4096,
        swiglu: false,
        scope: VitScope::Tile {
            tokens_per_tile: 1025,
            llm_tokens_per_tile: 256,
        },
    };

    /// The Qwen2-VL vision encoder: full attention per image, plain MLP of
    /// 4 x 1280, 4 patches per LLM token.
    ///
    /// # Examples
    ///
    /// ```
    /// use microbatch::cost::{CostModel, Image, Sample, Training, VitShape};
    ///
    /// // 100 LLM tokens come from 400 ViT patches.
    /// let vit = VitShape::QWEN2_VL;
    /// let cost = vit.cost_model(Training::Frozen)?.cost(&[&Sample::new(0, [Image::new(100)])]);
    /// assert_eq!(cost.vision, vit.forward_flops(400));
    /// # Ok::<(), microbatch::Error>(())
    /// ```
    pub const QWEN2_VL: VitShape = VitShape {
        layers: 32,
        hidden: 1280,
        mlp: 5120,
        swiglu: false,
        scope: VitScope::Image {
            patches_per_token: 4,
        },
    };

    /// The Qwen2.5-VL vision encoder: SwiGLU MLP of 3420, 64-patch windows,
    /// full attention in 4 of 32 layers, 4 patches per LLM token.
    ///
    /// # Examples
    ///
    /// ```
    /// use microbatch::cost::{Preset, VitScope, VitShape};
    ///
    /// let vit = VitShape::QWEN2_5_VL;
    /// assert!(matches!(vit.scope, VitScope::Windowed { window: 64, full_layers: 4, .. }));
    /// assert_eq!(Preset::Qwen25Vl7b.vit(), vit);
    /// # Ok::<(), microbatch::Error>(())
    /// ```
    pub const QWEN2_5_VL: VitShape = VitShape {
        layers: 32,
        hidden: 1280,
        mlp: 3420,
        swiglu: true,
        scope: VitScope::Windowed {
            window: 64,
            full_layers: 4,
            patches_per_token: 4,
        },
    };

    /// Forward FLOPs per ViT token of the linear part, all layers:
    /// `L * (8 h^2 + m' * 2hm)`.
    ///
    /// # Examples
    ///
    /// ```
    /// use microbatch::cost::VitShape;
    ///
    /// // CLIP-L: 24 layers, h = 1024, plain MLP of 4096.
    /// let h = 1024.0;
    /// assert_eq!(VitShape::CLIP_L_14_336.linear_flops_per_token(), 24.0 * (8.0 * h * h + 4.0 * h * 4096.0));
    /// ```
    #[must_use]
    pub fn linear_flops_per_token(&self) -> f64 {
        let h = f64::from(self.hidden);
        let mats = if self.swiglu { 3.0 } else { 2.0 };
        f64::from(self.layers) * (8.0 * h * h + mats * 2.0 * h * f64::from(self.mlp))
    }

    /// Forward FLOPs of attention per squared token count, per layer: `4 h`.
    ///
    /// # Examples
    ///
    /// ```
    /// use microbatch::cost::VitShape;
    ///
    /// assert_eq!(VitShape::QWEN2_VL.attention_flops_per_token_pair(), 4.0 * 1280.0);
    /// ```
    #[must_use]
    pub fn attention_flops_per_token_pair(&self) -> f64 {
        4.0 * f64::from(self.hidden)
    }

    /// Forward FLOPs of one attention unit (a tile, an image, a frame group)
    /// of `tokens` ViT tokens.
    ///
    /// # Examples
    ///
    /// ```
    /// use microbatch::cost::{VitScope, VitShape};
    ///
    /// let windowed = VitShape::QWEN2_5_VL;
    /// let full = VitShape { scope: VitScope::Image { patches_per_token: 4 }, ..windowed };
    /// assert_eq!(windowed.forward_flops(64), full.forward_flops(64)); // one window: the same
    /// assert!(windowed.forward_flops(6400) < full.forward_flops(6400));
    /// ```
    #[must_use]
    pub fn forward_flops(&self, tokens: u64) -> f64 {
        let n = tokens as f64;
        let attn = self.attention_flops_per_token_pair();
        let linear = self.linear_flops_per_token() * n;
        match self.scope {
            VitScope::Tile { .. } | VitScope::Image { .. } => {
                linear + f64::from(self.layers) * attn * n * n
            }
            VitScope::Windowed {
                window,
                full_layers,
                ..
            } => {
                // In `u128`: `full * w * w <= tokens * w < 2^96`, `rest^2 < 2^64`.
                let w = u128::from(window.max(1));
                let t = u128::from(tokens);
                let (full, rest) = (t / w, t % w);
                let windows = f(full * w * w + rest * rest);
                let windowed_layers = f64::from(self.layers.saturating_sub(full_layers));
                linear
                    + windowed_layers * attn * windows
                    + f64::from(full_layers.min(self.layers)) * attn * n * n
            }
        }
    }

    /// The encoder's cost model in FLOPs, in the vision phase: [`PerTile`],
    /// [`PerImage`] or [`Windowed`] by [`scope`](VitShape::scope), paying the
    /// forward pass once if frozen and three times if trained.
    ///
    /// # Errors
    ///
    /// [`Error::Invalid`] at a [setting](crate::Locator::Setting) if a count of
    /// the scope is zero or `full_layers` exceeds `layers`.
    ///
    /// # Examples
    ///
    /// ```
    /// use microbatch::cost::{CostModel, Image, Sample, Training, VitScope, VitShape};
    ///
    /// let group = [&Sample::new(0, [Image::new(576)])];
    /// let frozen = VitShape::CLIP_L_14_336.cost_model(Training::Frozen)?.cost(&group);
    /// let trained = VitShape::CLIP_L_14_336.cost_model(Training::Trained)?.cost(&group);
    /// assert_eq!(trained.vision, 3.0 * frozen.vision);
    /// let scope = VitScope::Windowed { window: 64, full_layers: 33, patches_per_token: 4 };
    /// let bad = VitShape { scope, ..VitShape::QWEN2_5_VL }; // 33 full layers of 32
    /// assert!(bad.cost_model(Training::Frozen).is_err());
    /// # Ok::<(), microbatch::Error>(())
    /// ```
    pub fn cost_model(&self, training: Training) -> Result<Vision, Error> {
        match self.scope {
            VitScope::Tile {
                llm_tokens_per_tile,
                ..
            } => at_least_one("llm_tokens_per_tile", llm_tokens_per_tile)?,
            VitScope::Image { patches_per_token } => {
                at_least_one("patches_per_token", patches_per_token)?
            }
            VitScope::Windowed {
                window,
                full_layers,
                patches_per_token,
            } => {
                if full_layers > self.layers {
                    return Err(Error::setting(
                        "full_layers",
                        u64::from(full_layers),
                        "at most layers",
                    ));
                }
                at_least_one("window", window)?;
                at_least_one("patches_per_token", patches_per_token)?
            }
        };
        Ok(self.model(training))
    }

    /// The cost model without the checks of
    /// [`cost_model`](VitShape::cost_model). Its coefficients are products of
    /// `u32` fields, so always finite and non-negative; the checks guard the
    /// counts the models divide by.
    fn model(&self, training: Training) -> Vision {
        let linear = self.linear_flops_per_token();
        let attn = self.attention_flops_per_token_pair();
        let layers = f64::from(self.layers);
        match self.scope {
            VitScope::Tile {
                tokens_per_tile,
                llm_tokens_per_tile,
            } => Vision::PerTile(PerTile {
                per_tile: self.forward_flops(u64::from(tokens_per_tile)),
                tokens_per_tile: llm_tokens_per_tile,
                training,
            }),
            VitScope::Image { patches_per_token } => Vision::PerImage(PerImage {
                per_patch: linear,
                per_patch_pair: layers * attn,
                patches_per_token,
                training,
            }),
            VitScope::Windowed {
                window,
                full_layers,
                patches_per_token,
            } => Vision::Windowed(Windowed {
                per_patch: linear,
                per_window_pair: f64::from(self.layers.saturating_sub(full_layers)) * attn,
                window,
                per_patch_pair: f64::from(full_layers) * attn,
                patches_per_token,
                training,
            }),
        }
    }
}

/// The names of the presets, in the order of [`Preset::ALL`].
const NAMES: [&str; 3] = ["llava-1.5-7b", "qwen2.5-vl-7b", "internvl2.5-8b"];

/// A named vision-language model pair: its encoder, whether the encoder is
/// trained, and its LLM.
///
/// | preset | name | vision encoder | LLM |
/// |---|---|---|---|
/// | [`Llava15_7b`](Preset::Llava15_7b) | `llava-1.5-7b` | CLIP-L/14-336, frozen | Vicuna-7B |
/// | [`Qwen25Vl7b`](Preset::Qwen25Vl7b) | `qwen2.5-vl-7b` | Qwen2.5-VL ViT, trained | Qwen2-7B |
/// | [`InternVl25_8b`](Preset::InternVl25_8b) | `internvl2.5-8b` | InternViT-300M, trained | InternLM2.5-7B |
///
/// Attention is counted causally ([`AttentionCount::Causal`]). `Display`
/// and [`FromStr`](core::str::FromStr) use the names; the enum is
/// `#[non_exhaustive]`, so more presets may come in minor releases.
///
/// # Examples
///
/// ```
/// use microbatch::cost::{CostModel, Image, LlmShape, Preset, Sample, Training, VitShape};
///
/// let p: Preset = "internvl2.5-8b".parse()?;
/// assert_eq!(p, Preset::InternVl25_8b);
/// assert_eq!(p.to_string(), "internvl2.5-8b");
/// assert_eq!((p.llm(), p.vit(), p.vit_training()), (LlmShape::INTERNLM2_5_7B, VitShape::INTERNVIT_300M, Training::Trained));
/// let cost = p.cost_model().cost(&[&Sample::new(100, [Image::new(256)])]);
/// assert!(cost.vision > 0.0 && cost.language > cost.vision);
/// # Ok::<(), microbatch::Error>(())
/// ```
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
#[non_exhaustive]
pub enum Preset {
    /// `llava-1.5-7b`: CLIP ViT-L/14 at 336px, frozen, and Vicuna-7B v1.5.
    Llava15_7b,
    /// `qwen2.5-vl-7b`: the Qwen2.5-VL vision encoder, trained, and Qwen2-7B.
    Qwen25Vl7b,
    /// `internvl2.5-8b`: InternViT-300M at 448px, trained, and
    /// InternLM2.5-7B.
    InternVl25_8b,
}

/// The model of a [`Preset`]: the encoder in the vision phase plus the LLM's
/// linear and document-masked attention terms in the language phase, in
/// FLOPs.
///
/// # Examples
///
/// ```
/// use microbatch::cost::{CostModel, Phases, Preset, PresetModel, Sample};
///
/// let model: PresetModel = Preset::Llava15_7b.cost_model();
/// let (vision, llm) = model.terms();
/// let text = [&Sample::text_only(100)];
/// assert_eq!(vision.cost(&text), Phases::ZERO);
/// assert_eq!(llm.cost(&text), model.cost(&text));
/// ```
pub type PresetModel = Sum<Vision, Sum<Tokens, DocumentAttention>>;

impl Preset {
    /// Every preset, in order.
    ///
    /// # Examples
    ///
    /// ```
    /// use microbatch::cost::Preset;
    ///
    /// for preset in Preset::ALL {
    ///     assert_eq!(preset.name().parse::<Preset>()?, preset);
    /// }
    /// # Ok::<(), microbatch::Error>(())
    /// ```
    pub const ALL: [Preset; 3] = [
        Preset::Llava15_7b,
        Preset::Qwen25Vl7b,
        Preset::InternVl25_8b,
    ];

    /// The name of every preset, in the order of [`Preset::ALL`]: the names
    /// [`FromStr`](core::str::FromStr) reads and an unknown name's error
    /// lists.
    ///
    /// # Examples
    ///
    /// ```
    /// use microbatch::cost::Preset;
    ///
    /// assert_eq!(Preset::NAMES, ["llava-1.5-7b", "qwen2.5-vl-7b", "internvl2.5-8b"]);
    /// for (name, preset) in Preset::NAMES.iter().zip(Preset::ALL) {
    ///     assert_eq!(name.parse::<Preset>()?, preset);
    /// }
    /// # Ok::<(), microbatch::Error>(())
    /// ```
    pub const NAMES: [&'static str; 3] = NAMES;

    /// The preset's name: `llava-1.5-7b`, `qwen2.5-vl-7b` or `internvl2.5-8b`.
    ///
    /// # Examples
    ///
    /// ```
    /// use microbatch::cost::Preset;
    ///
    /// assert_eq!(Preset::Qwen25Vl7b.name(), "qwen2.5-vl-7b");
    /// assert_eq!(Preset::Qwen25Vl7b.to_string(), "qwen2.5-vl-7b");
    /// ```
    #[must_use]
    pub const fn name(self) -> &'static str {
        match self {
            Preset::Llava15_7b => NAMES[0],
            Preset::Qwen25Vl7b => NAMES[1],
            Preset::InternVl25_8b => NAMES[2],
        }
    }

    /// The vision encoder's shape.
    ///
    /// # Examples
    ///
    /// ```
    /// use microbatch::cost::{Preset, VitShape};
    ///
    /// assert_eq!(Preset::Llava15_7b.vit(), VitShape::CLIP_L_14_336);
    /// ```
    #[must_use]
    pub const fn vit(self) -> VitShape {
        match self {
            Preset::Llava15_7b => VitShape::CLIP_L_14_336,
            Preset::Qwen25Vl7b => VitShape::QWEN2_5_VL,
            Preset::InternVl25_8b => VitShape::INTERNVIT_300M,
        }
    }

    /// Whether the vision encoder is trained.
    ///
    /// # Examples
    ///
    /// ```
    /// use microbatch::cost::{Preset, Training};
    ///
    /// assert_eq!(Preset::Llava15_7b.vit_training(), Training::Frozen);
    /// assert_eq!(Preset::Qwen25Vl7b.vit_training(), Training::Trained);
    /// ```
    #[must_use]
    pub const fn vit_training(self) -> Training {
        match self {
            Preset::Llava15_7b => Training::Frozen,
            Preset::Qwen25Vl7b | Preset::InternVl25_8b => Training::Trained,
        }
    }

    /// The LLM's shape.
    ///
    /// # Examples
    ///
    /// ```
    /// use microbatch::cost::{LlmShape, Preset};
    ///
    /// assert_eq!(Preset::Qwen25Vl7b.llm(), LlmShape::QWEN2_7B);
    /// ```
    #[must_use]
    pub const fn llm(self) -> LlmShape {
        match self {
            Preset::Llava15_7b => LlmShape::VICUNA_7B,
            Preset::Qwen25Vl7b => LlmShape::QWEN2_7B,
            Preset::InternVl25_8b => LlmShape::INTERNLM2_5_7B,
        }
    }

    /// The training FLOPs model of the pair: that of
    /// [`VitShape::cost_model`] plus [`LlmShape::cost_model`], which cannot
    /// fail for the presets' constant shapes (a test checks it).
    ///
    /// # Examples
    ///
    /// ```
    /// use microbatch::cost::{CostModel, Image, Preset, Sample};
    ///
    /// let model = Preset::Qwen25Vl7b.cost_model();
    /// let cost = model.cost(&[&Sample::new(180, [Image::new(1024)])]);
    /// let share = cost.vision / cost.total();
    /// assert!(share > 0.2 && share < 0.3, "{share}");
    /// ```
    pub fn cost_model(self) -> PresetModel {
        self.vit()
            .model(self.vit_training())
            .plus(self.llm().model())
    }
}

crate::error::impl_named!(Preset, "cost model preset", &NAMES);
