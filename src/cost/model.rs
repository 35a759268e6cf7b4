//! The [`CostModel`] and [`Incremental`] traits, and the helpers that cost
//! a group or one sample through a model's state.

use core::fmt;

use crate::error::Error;

use super::{BoxCostModel, GroupFloor, InPhase, Max, Phase, Phases, Sample, Scale, Sum};

/// A cost model: the cost of a group of samples, per phase.
///
/// One required method, [`cost`](CostModel::cost), over a group of
/// *borrowed* samples (`&[&Sample]`), so that costing a group held by
/// reference (a packed sequence's samples picked out of a batch) never
/// clones a sample. The provided methods are adapters that build bigger
/// models from smaller ones. O(1) updates of a group's cost are the
/// separate trait [`Incremental`], which the planner needs.
///
/// The trait is implemented for references and boxes of models, for tuples
/// of models (which sum their members), and is object safe:
/// `&dyn CostModel` and `Box<dyn CostModel>` are models too.
///
/// # Examples
///
/// A model of your own, composed with built-in terms:
///
/// ```
/// use microbatch::cost::{CostModel, Image, Phases, Sample, Tokens};
///
/// /// One second per image, in the vision phase.
/// #[derive(Debug)]
/// struct PerImageSecond;
///
/// impl CostModel for PerImageSecond {
///     fn cost(&self, group: &[&Sample]) -> Phases {
///         let images: usize = group.iter().map(|s| s.images().len()).sum();
///         Phases::new(images as f64, 0.0)
///     }
/// }
///
/// let model = PerImageSecond.plus(Tokens::new(1e-3)?);
/// let batch = vec![Sample::new(1000, [Image::new(24)]), Sample::text_only(5)];
/// // Cost the first sample of the batch, borrowed.
/// assert_eq!(model.cost(&[&batch[0]]), Phases::new(1.0, 1.024));
/// let all: Vec<&Sample> = batch.iter().collect();
/// assert_eq!(model.cost(&all), Phases::new(1.0, 1.029));
/// assert_eq!(format!("{model:?}"), "PerImageSecond + Tokens { per_token: 0.001 }");
/// # Ok::<(), microbatch::Error>(())
/// ```
pub trait CostModel {
    /// The cost of a group of samples (a packed sequence or a micro-batch),
    /// borrowed. The empty group costs zero for every built-in model.
    ///
    /// # Complexity
    ///
    /// O(group length + images) for every built-in model.
    fn cost(&self, group: &[&Sample]) -> Phases;

    /// A per-phase *floor* of `sample`'s share of any group's cost: for every
    /// group `g`, `cost(g) >= sum of floor(s) over s in g`, phase by phase
    /// (up to floating-point rounding). This is what the
    /// [`Planner`](crate::plan::Planner)'s lower bound
    /// ([`Report::lower_bound`](crate::plan::Report::lower_bound)) sums, so
    /// that it is a bound for every model, not only for additive ones.
    ///
    /// | model | floor |
    /// |---|---|
    /// | [`Tokens`], [`PerSample`], [`DocumentAttention`], the vision encoders, [`sample_fn`] (additive) | the sample's own cost |
    /// | [`FullAttention`] (superadditive: `(a + b)^2 >= a^2 + b^2`) | the sample's own cost |
    /// | [`PerGroup`] (a fixed cost per group), [`cost_fn`], [`Zero`] | zero |
    /// | [`CostModel::plus`], tuples | the sum of the members' floors |
    /// | [`CostModel::scale`] | the inner floor times the factor |
    /// | [`CostModel::in_phase`] | the inner floor's total, in the phase |
    /// | [`CostModel::max`] | the floor of `self` (the first operand: write the dominant model first) |
    ///
    /// [`DocumentAttention`]: super::DocumentAttention
    /// [`FullAttention`]: super::FullAttention
    /// [`PerGroup`]: super::PerGroup
    /// [`PerSample`]: super::PerSample
    /// [`Tokens`]: super::Tokens
    /// [`Zero`]: super::Zero
    /// [`cost_fn`]: super::cost_fn
    /// [`sample_fn`]: super::sample_fn
    ///
    /// The default is zero, which is valid for every model with
    /// non-negative costs; implement it for a model of your own to get a
    /// useful bound. A floor must be finite, non-negative and at most the
    /// sample's cost alone (`floor(s) <= cost(&[s])`, the law for the group
    /// of one); the planner checks that and reports
    /// [`Error::Invalid`] at a [floor](crate::Locator::Floor) otherwise.
    ///
    /// # Complexity
    ///
    /// O(images of the sample) for every built-in model.
    ///
    /// # Examples
    ///
    /// ```
    /// use microbatch::cost::{CostModel, PerGroup, Phases, Sample, Tokens};
    ///
    /// let (a, b) = (Sample::text_only(10), Sample::text_only(20));
    /// let model = Tokens::new(1.0)? + PerGroup::new(5.0)?;
    /// // The per-group overhead is paid once per group, not once per sample:
    /// // it has no share in the floor.
    /// assert_eq!(model.floor(&a), Phases::new(0.0, 10.0));
    /// let floors = model.floor(&a) + model.floor(&b);
    /// assert!(model.cost(&[&a, &b]).language >= floors.language); // 35 >= 30
    /// # Ok::<(), microbatch::Error>(())
    /// ```
    fn floor(&self, sample: &Sample) -> Phases {
        let _ = sample;
        Phases::ZERO
    }

    /// What every non-empty group costs beyond its samples'
    /// [floors](CostModel::floor), per phase ([`GroupFloor`]): a constant
    /// `per_group`, and `per_token_pair` times `T^2 - sum of t^2` for
    /// samples of `t_1, ..., t_m` tokens ([`Sample::tokens`]) and `T` their
    /// sum. The law, for every non-empty group `g`, phase by phase (up to
    /// floating-point rounding):
    ///
    /// `cost(g) >= sum of floor(s) over s in g + per_group +
    /// per_token_pair * (T^2 - sum of t^2)`.
    ///
    /// The [`Planner`](crate::plan::Planner)'s lower bound
    /// ([`Report::lower_bound`](crate::plan::Report::lower_bound)) adds it
    /// to the sum of the floors for the fewest groups and the most even
    /// split of the tokens that any plan can have, so that a cost per
    /// packed sequence or dense attention over the packed row counts in
    /// the bound.
    ///
    /// | model | group floor |
    /// |---|---|
    /// | [`PerGroup`] | its cost, `per_group` (its floor is zero) |
    /// | [`FullAttention`] | its coefficient, `per_token_pair` (its floor is `c * t^2`, a row costs `c * T^2`) |
    /// | [`Linear`] | `per_group` from [`Groups`](super::Term::Groups) (language) and [`VisionGroups`](super::Term::VisionGroups) (vision), `per_token_pair` from [`RowAttention`](super::Term::RowAttention) |
    /// | every other built-in term, [`Given`](super::Given), [`cost_fn`], [`sample_fn`], [`Zero`] | zero |
    /// | [`CostModel::plus`], tuples | the sum of the members' |
    /// | [`CostModel::scale`] | the inner one times the factor |
    /// | [`CostModel::in_phase`] | the inner one's totals, in the phase |
    /// | [`CostModel::max`] | that of `self` (the first operand, as for the floor) |
    ///
    /// [`FullAttention`]: super::FullAttention
    /// [`Linear`]: super::Linear
    /// [`PerGroup`]: super::PerGroup
    /// [`Zero`]: super::Zero
    /// [`cost_fn`]: super::cost_fn
    /// [`sample_fn`]: super::sample_fn
    ///
    /// The default is [`GroupFloor::ZERO`], which is valid for every model
    /// whose floors obey their law; implement it for a model of your own
    /// with a cost per group to get a useful bound. Both parts must be
    /// finite and non-negative in every phase; the planner checks that and
    /// reports [`Error::Invalid`] at a
    /// [group floor](crate::Locator::GroupFloor) otherwise. A group floor
    /// that breaks its law makes the bound exceed the plans' step times.
    ///
    /// # Complexity
    ///
    /// O(1) for every built-in model (O(terms) for [`Linear`], O(members)
    /// for a composition). The planner asks once a plan.
    ///
    /// # Examples
    ///
    /// ```
    /// use microbatch::cost::{CostModel, GroupFloor, PerGroup, Phases, Sample, Tokens};
    ///
    /// let model = Tokens::new(1.0)? + PerGroup::new(5.0)?;
    /// // The floors leave the per-group 5 out; the group floor has it.
    /// assert_eq!(model.group_floor(), GroupFloor::new(Phases::new(0.0, 5.0), Phases::ZERO));
    /// let (a, b) = (Sample::text_only(10), Sample::text_only(20));
    /// let floors = model.floor(&a) + model.floor(&b);
    /// let beyond = model.group_floor().beyond(30, 10 * 10 + 20 * 20);
    /// assert!(model.cost(&[&a, &b]).language >= floors.language + beyond.language); // 35 >= 35
    ///
    /// // A model of your own: a fixed 2 seconds of vision per group (its
    /// // floor is zero, the default).
    /// #[derive(Debug)]
    /// struct TowerCall;
    /// impl CostModel for TowerCall {
    ///     fn cost(&self, group: &[&Sample]) -> Phases {
    ///         Phases::new(if group.is_empty() { 0.0 } else { 2.0 }, 0.0)
    ///     }
    ///     fn group_floor(&self) -> GroupFloor {
    ///         GroupFloor::new(Phases::new(2.0, 0.0), Phases::ZERO)
    ///     }
    /// }
    /// assert_eq!(TowerCall.scale(0.5)?.group_floor().per_group, Phases::new(1.0, 0.0));
    /// # Ok::<(), microbatch::Error>(())
    /// ```
    fn group_floor(&self) -> GroupFloor {
        GroupFloor::ZERO
    }

    /// The sum of `self` and `other`, phase by phase. Also written `self + other`.
    ///
    /// # Examples
    ///
    /// ```
    /// use microbatch::cost::{CostModel, PerSample, Sample, Tokens};
    ///
    /// let model = Tokens::new(1.0)?.plus(PerSample::new(10.0)?);
    /// assert_eq!(model.cost(&[&Sample::text_only(5)]).total(), 15.0);
    /// # Ok::<(), microbatch::Error>(())
    /// ```
    fn plus<B: CostModel>(self, other: B) -> Sum<Self, B>
    where
        Self: Sized,
    {
        Sum::new(self, other)
    }

    /// `self` with every cost multiplied by `factor` (finite, non-negative).
    ///
    /// # Errors
    ///
    /// [`Error::Invalid`] at a [coefficient](crate::Locator::Coefficient)
    /// naming `factor` if it is NaN, infinite or negative.
    ///
    /// # Examples
    ///
    /// ```
    /// use microbatch::cost::{CostModel, Sample, Tokens};
    ///
    /// let model = Tokens::new(2.0)?.scale(0.5)?;
    /// assert_eq!(model.cost(&[&Sample::text_only(8)]).language, 8.0);
    /// assert!(Tokens::new(2.0)?.scale(-1.0).is_err());
    /// # Ok::<(), microbatch::Error>(())
    /// ```
    fn scale(self, factor: f64) -> Result<Scale<Self>, Error>
    where
        Self: Sized,
    {
        Scale::new(self, factor)
    }

    /// `self` with its whole cost ([`Phases::total`]) placed in `phase`.
    ///
    /// # Examples
    ///
    /// ```
    /// use microbatch::cost::{CostModel, Phase, Phases, Sample, Tokens};
    ///
    /// // The projector runs per image token, next to the ViT.
    /// let projector = Tokens::new(1.0)?.in_phase(Phase::Vision);
    /// assert_eq!(projector.cost(&[&Sample::text_only(3)]), Phases::new(3.0, 0.0));
    /// # Ok::<(), microbatch::Error>(())
    /// ```
    fn in_phase(self, phase: Phase) -> InPhase<Self>
    where
        Self: Sized,
    {
        InPhase::new(self, phase)
    }

    /// The phase-wise maximum of `self` and `other`: two pieces of work that
    /// overlap in time (say, two CUDA streams) cost as much as the longer.
    ///
    /// # Examples
    ///
    /// ```
    /// use microbatch::cost::{CostModel, PerSample, Sample, Tokens};
    ///
    /// // Data loading overlaps the language model's compute.
    /// let loading = PerSample::new(0.5)?;
    /// let model = Tokens::new(0.01)?.max(loading);
    /// let group = [&Sample::text_only(100), &Sample::text_only(20)];
    /// assert_eq!(model.cost(&group).language, 1.2); // max(1.2, 1.0)
    /// # Ok::<(), microbatch::Error>(())
    /// ```
    fn max<B: CostModel>(self, other: B) -> Max<Self, B>
    where
        Self: Sized,
    {
        Max::new(self, other)
    }
}

/// A [`CostModel`] that keeps a small state of sufficient statistics per
/// group, so that adding a sample and re-evaluating the group's cost take
/// O(1) (per image of the sample).
///
/// This is what the [`Planner`](crate::plan::Planner) requires of its model.
/// It evaluates every sample's own cost once, as
/// [`evaluate_with`](Incremental::evaluate_with) on the
/// [`empty`](Incremental::empty) state, and balances packed sequences and
/// ranks by sums of those; then it evaluates every packed sequence and
/// micro-batch of the plan as a group, by [`insert`](Incremental::insert)ing
/// its samples into a fresh state and calling
/// [`evaluate`](Incremental::evaluate), so that non-additive terms (full
/// attention over the packed length, a cost per group) are reported exactly
/// without collecting the group into a slice.
///
/// Laws, for every group `g` and sample `s`:
///
/// - inserting the samples of `g` into [`empty`](Incremental::empty) and
///   evaluating gives [`CostModel::cost`] of `g`;
/// - [`evaluate_with`](Incremental::evaluate_with)`(state, s)` equals
///   inserting `s` into a copy of `state` and evaluating it;
/// - the state does not depend on the order of insertion (for built-in
///   models: their states are integer sums).
///
/// Every built-in model and every adapter over incremental models is
/// incremental, except the closure adapter [`cost_fn`](super::cost_fn), which needs the
/// whole group.
///
/// # Examples
///
/// ```
/// use microbatch::cost::{CostModel, FullAttention, Incremental, PerGroup, Sample, Tokens};
///
/// // Not a sum of per-sample costs: L^2 over the packed length, and a fixed
/// // cost per group.
/// let model = Tokens::new(1.0)? + FullAttention::new(0.01)? + PerGroup::new(5.0)?;
/// let (a, b) = (Sample::text_only(10), Sample::text_only(20));
/// let mut pack = model.empty();
/// assert_eq!(model.evaluate(&pack).total(), 0.0);
///
/// model.insert(&mut pack, &a);
/// // "pack + one more sample", without changing `pack`:
/// let with = model.evaluate_with(&pack, &b);
/// assert_eq!(with.total(), 30.0 + 0.01 * 900.0 + 5.0);
/// assert_eq!(with, model.cost(&[&a, &b]));
/// // One sample's own cost, as the planner evaluates it:
/// assert_eq!(model.evaluate_with(&model.empty(), &b).total(), 20.0 + 4.0 + 5.0);
/// # Ok::<(), microbatch::Error>(())
/// ```
pub trait Incremental: CostModel {
    /// The sufficient statistics of a group (token sums, squared sums,
    /// counts, ...). Small and cheap to clone for every built-in model.
    type State: Clone + fmt::Debug;

    /// The state of the empty group.
    ///
    /// # Examples
    ///
    /// ```
    /// use microbatch::cost::{Incremental, Phases, Tokens};
    ///
    /// let model = Tokens::new(1.0)?;
    /// assert_eq!(model.evaluate(&model.empty()), Phases::ZERO);
    /// # Ok::<(), microbatch::Error>(())
    /// ```
    fn empty(&self) -> Self::State;

    /// Adds `sample` to the group of `state`.
    ///
    /// # Examples
    ///
    /// ```
    /// use microbatch::cost::{Incremental, Sample, Tokens};
    ///
    /// let model = Tokens::new(2.0)?;
    /// let mut state = model.empty();
    /// model.insert(&mut state, &Sample::text_only(3));
    /// model.insert(&mut state, &Sample::text_only(4));
    /// assert_eq!(model.evaluate(&state).language, 14.0);
    /// # Ok::<(), microbatch::Error>(())
    /// ```
    fn insert(&self, state: &mut Self::State, sample: &Sample);

    /// The cost of the group of `state`; equal to [`CostModel::cost`] of the
    /// group.
    ///
    /// # Examples
    ///
    /// ```
    /// use microbatch::cost::{CostModel, FullAttention, Incremental, Sample};
    ///
    /// let model = FullAttention::new(1.0)?;
    /// let (a, b) = (Sample::text_only(3), Sample::text_only(4));
    /// let mut state = model.empty();
    /// model.insert(&mut state, &a);
    /// model.insert(&mut state, &b);
    /// assert_eq!(model.evaluate(&state), model.cost(&[&a, &b])); // (3 + 4)^2
    /// # Ok::<(), microbatch::Error>(())
    /// ```
    fn evaluate(&self, state: &Self::State) -> Phases;

    /// The cost of the group of `state` with `sample` added, leaving `state`
    /// as it is.
    ///
    /// # Complexity
    ///
    /// One clone of the state, one insertion, one evaluation: O(1) per image
    /// of the sample for the built-in models.
    ///
    /// # Examples
    ///
    /// ```
    /// use microbatch::cost::{Incremental, PerGroup, Sample};
    ///
    /// let model = PerGroup::new(5.0)?;
    /// let state = model.empty();
    /// assert_eq!(model.evaluate_with(&state, &Sample::text_only(1)).language, 5.0);
    /// assert_eq!(model.evaluate(&state).language, 0.0); // unchanged
    /// # Ok::<(), microbatch::Error>(())
    /// ```
    fn evaluate_with(&self, state: &Self::State, sample: &Sample) -> Phases {
        let mut s = state.clone();
        self.insert(&mut s, sample);
        self.evaluate(&s)
    }

    /// The cost of `sample` alone and its [`floor`](CostModel::floor),
    /// together: [`evaluate_with`](Incremental::evaluate_with) on the
    /// [`empty`](Incremental::empty) state, and the floor, bit for bit.
    ///
    /// The [`Planner`](crate::plan::Planner) asks for both once per sample.
    /// The default evaluates them apart; every built-in model whose floor is
    /// its cost alone (the additive terms, the vision encoders, and sums,
    /// scales and tuples of them) evaluates the sample once, and
    /// [`Linear`](super::Linear) inserts it into a state once.
    ///
    /// # Complexity
    ///
    /// That of [`evaluate_with`](Incremental::evaluate_with) and
    /// [`floor`](CostModel::floor) together, at most; one of them for the
    /// built-in models above.
    ///
    /// # Examples
    ///
    /// ```
    /// use microbatch::cost::{CostModel, Incremental, PerGroup, Sample, Tokens};
    ///
    /// let model = Tokens::new(1.0)? + PerGroup::new(5.0)?;
    /// let s = Sample::text_only(10);
    /// let (cost, floor) = model.cost_and_floor(&s);
    /// assert_eq!(cost, model.evaluate_with(&model.empty(), &s)); // 10 + 5
    /// assert_eq!(floor, model.floor(&s)); // the per-group 5 is no sample's share
    /// assert_eq!((cost.language, floor.language), (15.0, 10.0));
    /// # Ok::<(), microbatch::Error>(())
    /// ```
    fn cost_and_floor(&self, sample: &Sample) -> (Phases, Phases) {
        (
            self.evaluate_with(&self.empty(), sample),
            self.floor(sample),
        )
    }

    /// `self` behind one type-erased model, [`BoxCostModel`], whose state is
    /// a [`BoxState`](super::BoxState): for a model chosen or composed at run time. It gives
    /// the same costs, floors and states as `self`, bit for bit, and
    /// composes like any model; boxing a [`BoxCostModel`] returns it as it
    /// is.
    ///
    /// # Complexity
    ///
    /// O(1): one allocation. Evaluating through the box costs one virtual
    /// call and one downcast of the state per method.
    ///
    /// # Examples
    ///
    /// ```
    /// use microbatch::cost::{BoxCostModel, CostModel, Incremental, Preset, Sample, Tokens};
    ///
    /// // Two model types, one variable.
    /// let models: Vec<BoxCostModel> =
    ///     vec![Tokens::new(1.0)?.boxed(), Preset::Llava15_7b.cost_model().boxed()];
    /// let group = [&Sample::text_only(100)];
    /// assert_eq!(models[0].cost(&group).language, 100.0);
    /// assert_eq!(models[1].cost(&group), Preset::Llava15_7b.cost_model().cost(&group));
    /// # Ok::<(), microbatch::Error>(())
    /// ```
    fn boxed(self) -> BoxCostModel
    where
        Self: Sized + fmt::Debug + Send + Sync + 'static,
        Self::State: Send + Sync + 'static,
    {
        BoxCostModel::new(self)
    }
}

/// The cost of a group through an incremental model's state: the one
/// [`CostModel::cost`] of every built-in model.
#[inline]
pub(crate) fn cost_by_state<M: Incremental + ?Sized>(model: &M, group: &[&Sample]) -> Phases {
    let mut state = model.empty();
    for sample in group {
        model.insert(&mut state, sample);
    }
    model.evaluate(&state)
}

/// The cost of `sample` alone through an incremental model's state: the
/// floor of every additive or superadditive built-in model (computed as the
/// planner computes the cost alone, so that `floor(s) <= cost(&[s])` holds
/// exactly).
#[inline]
pub(crate) fn alone<M: Incremental + ?Sized>(model: &M, sample: &Sample) -> Phases {
    model.evaluate_with(&model.empty(), sample)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::cost::{
        sample_fn, AttentionKernel, DocumentAttention, FullAttention, Given, Image, Linear,
        PerGroup, PerImage, PerSample, PerTile, Preset, Term, Tokens, Training, Windowed, Zero,
    };
    use alloc::boxed::Box;
    use alloc::vec::Vec;
    use core::num::NonZeroU32;

    fn bits(p: Phases) -> (u64, u64) {
        (p.vision.to_bits(), p.language.to_bits())
    }

    /// `cost_and_floor` is `evaluate_with` on the empty state and `floor`,
    /// bit for bit.
    fn check<M: Incremental + fmt::Debug>(model: &M, samples: &[Sample]) {
        for s in samples {
            let (cost, floor) = model.cost_and_floor(s);
            let want = (model.evaluate_with(&model.empty(), s), model.floor(s));
            assert_eq!(bits(cost), bits(want.0), "cost of {model:?} on {s:?}");
            assert_eq!(bits(floor), bits(want.1), "floor of {model:?} on {s:?}");
        }
    }

    #[test]
    fn cost_and_floor_are_evaluate_with_and_floor() {
        let units = NonZeroU32::new(3).unwrap();
        let samples: Vec<Sample> = [
            Sample::text_only(1),
            Sample::text_only(u32::MAX),
            Sample::new(17, [Image::new(1000)]),
            Sample::new(3, [Image::with_units(1001, units), Image::new(64)]),
            Sample::new(u32::MAX, [Image::new(u32::MAX); 3]),
        ]
        .into_iter()
        .chain([Sample::text_only(5)
            .with_cost(Phases::new(1.5, -0.0))
            .unwrap()])
        .collect();
        let t = Tokens::new(1e-3).unwrap();
        let g = PerGroup::new(7.0).unwrap();
        let w = Windowed::new(1.0, 2.0, 64, 3.0, 4, Training::Trained).unwrap();
        check(&t, &samples);
        check(&g, &samples);
        check(&PerSample::new(0.5).unwrap(), &samples);
        check(&DocumentAttention::new(1e-9).unwrap(), &samples);
        check(&FullAttention::new(1e-9).unwrap(), &samples);
        check(&PerTile::new(2.0, 256, Training::Frozen).unwrap(), &samples);
        check(
            &PerImage::new(2.0, 0.1, 4, Training::Frozen).unwrap(),
            &samples,
        );
        check(&w, &samples);
        check(&Zero, &samples);
        check(&Given, &samples);
        check(
            &sample_fn(|s: &Sample| Phases::new(0.0, -0.0 * f64::from(s.text()))),
            &samples,
        );
        check(&t.plus(g), &samples);
        check(&w.plus(t.plus(g)).scale(0.5).unwrap(), &samples);
        check(&t.scale(0.0).unwrap(), &samples);
        check(&g.max(t), &samples);
        check(&t.max(g).in_phase(Phase::Vision), &samples);
        check(&(t, g, w), &samples);
        check(&&(t, w), &samples);
        check(&Box::new(t.plus(g)), &samples);
        check(&t.plus(g).boxed(), &samples);
        check(&t.plus(g).boxed().plus(w.boxed()).boxed(), &samples);
        for preset in Preset::ALL {
            check(&preset.cost_model(), &samples);
            check(&preset.cost_model().boxed(), &samples);
            for kernel in AttentionKernel::ALL {
                check(&Linear::preset_with(preset, kernel), &samples);
            }
        }
        let terms = [
            (Term::Groups, 3.0),
            (Term::VisionGroups, 2.0),
            (Term::RowAttention, 1e-9),
            (Term::Tokens, 1.0),
            (Term::UnitAttention, 0.25),
        ];
        check(&Linear::new(terms).unwrap(), &samples);
    }
}
