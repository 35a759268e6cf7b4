//! Attention terms of the language model: document-masked (`sum T^2` over
//! the samples of a group) and full attention over the packed length
//! (`L^2`).

use super::{coefficient, f, impl_summed, GroupFloor, Phases, Sample};
use crate::error::Error;

/// The attention kernel a training run uses on packed sequences, which
/// decides what a packed row's attention costs:
///
/// | kernel | pick it for | cost of a row of documents `T_1..T_k` |
/// |---|---|---|
/// | [`Varlen`](AttentionKernel::Varlen) | FlashAttention varlen (`flash_attn_varlen_func`, `cu_seqlens`; transformers' `flash_attention_2` / `flash_attention_3` with packed `position_ids`), xFormers' block-diagonal mask, FlexAttention with a document mask | `sum T_i^2` ([`Term::DocumentAttention`](super::Term::DocumentAttention)) |
/// | [`Dense`](AttentionKernel::Dense) | `sdpa` and `eager` attention on packed rows (a 4-D block mask, or none): the kernel computes every pair of the row and masks afterwards | `(sum T_i)^2` ([`Term::RowAttention`](super::Term::RowAttention)) |
///
/// Under a dense kernel a packed row costs more than its documents run
/// one by one, so a varlen model under-predicts packed rows and balances
/// them wrongly. [`Linear::preset_with`](super::Linear::preset_with)
/// writes a preset for either.
///
/// # Examples
///
/// ```
/// use microbatch::cost::AttentionKernel;
///
/// assert_eq!(AttentionKernel::default(), AttentionKernel::Varlen);
/// assert_eq!("dense".parse::<AttentionKernel>()?, AttentionKernel::Dense);
/// assert_eq!(AttentionKernel::Varlen.to_string(), "varlen");
/// assert!("flash".parse::<AttentionKernel>().is_err());
/// # Ok::<(), microbatch::Error>(())
/// ```
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Default)]
#[cfg_attr(feature = "serde", derive(serde::Serialize, serde::Deserialize))]
#[cfg_attr(feature = "serde", serde(rename_all = "lowercase"))]
#[non_exhaustive]
pub enum AttentionKernel {
    /// Attention within each document only (a varlen kernel): `sum T^2`.
    #[default]
    Varlen,
    /// Attention over the whole packed row, masked afterwards (sdpa,
    /// eager): `(sum T)^2`.
    Dense,
}

impl AttentionKernel {
    /// Every kernel, in order.
    pub const ALL: [AttentionKernel; 2] = [AttentionKernel::Varlen, AttentionKernel::Dense];

    /// The kernel's name, as [`Display`](core::fmt::Display) writes it and
    /// [`FromStr`](core::str::FromStr) reads it: `varlen` or `dense`.
    ///
    /// # Examples
    ///
    /// ```
    /// use microbatch::cost::AttentionKernel;
    ///
    /// assert_eq!(AttentionKernel::Dense.name(), "dense");
    /// ```
    #[must_use]
    pub const fn name(&self) -> &'static str {
        match self {
            AttentionKernel::Varlen => "varlen",
            AttentionKernel::Dense => "dense",
        }
    }
}

crate::error::impl_named!(AttentionKernel, "attention kernel", &["varlen", "dense"]);

/// `per_token_pair * sum(T^2)`, in the language phase: attention under a
/// document mask (FlashAttention varlen, `cu_seqlens`), where each sample
/// attends only within itself.
///
/// For a causal transformer of `L` layers and hidden size `d` trained
/// forward and backward, the attention FLOPs are `6 * L * d * T^2` (causal,
/// half the score matrix) or `12 * L * d * T^2` (counting the full matrix, as
/// Megatron-LM's classic formula does); see [`LlmShape`](super::LlmShape).
/// For 7B models this term equals the linear one near `T` = 50k-65k tokens;
/// verl uses `24576 * T + T^2`.
///
/// [`Incremental`](super::Incremental) (state: `sum T^2`, exact in `u128`).
///
/// # Examples
///
/// ```
/// use microbatch::cost::{CostModel, DocumentAttention, Sample};
///
/// let model = DocumentAttention::new(1.0)?;
/// let group = [&Sample::text_only(3), &Sample::text_only(4)];
/// assert_eq!(model.cost(&group).language, 25.0); // 9 + 16, not 7^2
/// # Ok::<(), microbatch::Error>(())
/// ```
#[derive(Clone, Copy, Debug, PartialEq)]
#[must_use = "cost models do nothing unless evaluated"]
pub struct DocumentAttention {
    pub(super) per_token_pair: f64,
}

impl DocumentAttention {
    /// A cost of `per_token_pair` per squared token of each sample.
    ///
    /// # Errors
    ///
    /// [`Error::Invalid`] at a [coefficient](crate::Locator::Coefficient)
    /// naming `per_token_pair` if it is NaN, infinite or negative.
    ///
    /// # Examples
    ///
    /// ```
    /// use microbatch::cost::{CostModel, DocumentAttention, Sample};
    ///
    /// let model = DocumentAttention::new(2.0)?;
    /// assert_eq!(model.cost(&[&Sample::text_only(10)]).language, 200.0);
    /// assert!(DocumentAttention::new(-2.0).is_err());
    /// # Ok::<(), microbatch::Error>(())
    /// ```
    pub fn new(per_token_pair: f64) -> Result<Self, Error> {
        Ok(DocumentAttention {
            per_token_pair: coefficient("per_token_pair", per_token_pair)?,
        })
    }

    /// The cost per squared token.
    ///
    /// # Examples
    ///
    /// ```
    /// use microbatch::cost::DocumentAttention;
    ///
    /// assert_eq!(DocumentAttention::new(1e-3)?.per_token_pair(), 1e-3);
    /// # Ok::<(), microbatch::Error>(())
    /// ```
    #[must_use]
    pub fn per_token_pair(&self) -> f64 {
        self.per_token_pair
    }
}

#[inline]
fn square(sample: &Sample) -> u128 {
    let t = u128::from(sample.tokens());
    t * t
}

// State: `sum T^2` over the group, exact in `u128`.
// Floor: additive, the cost alone.
impl_summed!(
    DocumentAttention,
    u128,
    |_, s| square(s),
    |m, &squares| Phases::new(0.0, m.per_token_pair * f(squares)),
    alone
);

/// `per_token_pair * L^2`, in the language phase, where `L = sum T` is the
/// packed length of the group: attention without a document mask, where
/// every token of a packed sequence attends to every earlier one.
///
/// Evaluate it on groups that are one packed sequence each.
/// [`Incremental`](super::Incremental) (state: `L`, exact in `u64`).
///
/// # Examples
///
/// ```
/// use microbatch::cost::{CostModel, FullAttention, Sample};
///
/// let model = FullAttention::new(1.0)?;
/// let group = [&Sample::text_only(3), &Sample::text_only(4)];
/// assert_eq!(model.cost(&group).language, 49.0); // (3 + 4)^2
/// # Ok::<(), microbatch::Error>(())
/// ```
#[derive(Clone, Copy, Debug, PartialEq)]
#[must_use = "cost models do nothing unless evaluated"]
pub struct FullAttention {
    pub(super) per_token_pair: f64,
}

impl FullAttention {
    /// A cost of `per_token_pair` per squared token of the packed length.
    ///
    /// # Errors
    ///
    /// [`Error::Invalid`] at a [coefficient](crate::Locator::Coefficient)
    /// naming `per_token_pair` if it is NaN, infinite or negative.
    ///
    /// # Examples
    ///
    /// ```
    /// use microbatch::cost::{CostModel, FullAttention, Sample};
    ///
    /// let model = FullAttention::new(2.0)?;
    /// assert_eq!(model.cost(&[&Sample::text_only(6), &Sample::text_only(4)]).language, 200.0);
    /// assert!(FullAttention::new(f64::NAN).is_err());
    /// # Ok::<(), microbatch::Error>(())
    /// ```
    pub fn new(per_token_pair: f64) -> Result<Self, Error> {
        Ok(FullAttention {
            per_token_pair: coefficient("per_token_pair", per_token_pair)?,
        })
    }

    /// The cost per squared token.
    ///
    /// # Examples
    ///
    /// ```
    /// use microbatch::cost::FullAttention;
    ///
    /// assert_eq!(FullAttention::new(1e-3)?.per_token_pair(), 1e-3);
    /// # Ok::<(), microbatch::Error>(())
    /// ```
    #[must_use]
    pub fn per_token_pair(&self) -> f64 {
        self.per_token_pair
    }
}

// State: the packed length `L = sum T`, exact in `u64`.
// Floor: the cost alone, as `(a + b)^2 >= a^2 + b^2` (superadditive).
// Group floor: the coefficient on `L^2 - sum T^2`, exactly what a group
// costs beyond its samples' own squares.
impl_summed!(
    FullAttention,
    u64,
    |_, s| s.tokens(),
    |m, &l| {
        let l = u128::from(l);
        Phases::new(0.0, m.per_token_pair * f(l * l))
    },
    alone,
    group_floor: |m| GroupFloor::new(Phases::ZERO, Phases::new(0.0, m.per_token_pair))
);
