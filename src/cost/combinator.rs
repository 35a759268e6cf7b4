//! Combinators of cost models: the [`CostModel`] and [`Incremental`] impls
//! of the adapters [`Sum`], [`Scale`], [`InPhase`] and [`Max`] (defined in
//! `adapter.rs`), the closure adapters, the identity [`Zero`], tuples,
//! references and boxes.
//!
//! Every combinator of incremental models evaluates "the group plus one
//! sample" ([`Incremental::evaluate_with`]) through its members' own
//! `evaluate_with`, without cloning its state: the same value, bit for bit,
//! as inserting into a copy (the members' law), and no allocation per sample
//! for a composition of [`BoxCostModel`](super::BoxCostModel)s.

use alloc::boxed::Box;
use core::fmt;

use super::{CostModel, GroupFloor, InPhase, Incremental, Max, Phases, Sample, Scale, Sum};

/// Implements `+` (building a [`Sum`]) for a cost model type: operator sugar
/// on top of [`CostModel::plus`].
macro_rules! impl_add {
    ($ty:ident $(<$($g:ident),*>)?) => {
        impl<$($($g,)*)? Rhs> core::ops::Add<Rhs> for $ty$(<$($g),*>)?
        where
            Self: $crate::cost::CostModel,
            Rhs: $crate::cost::CostModel,
        {
            type Output = $crate::cost::Sum<Self, Rhs>;
            #[inline]
            fn add(self, rhs: Rhs) -> Self::Output {
                $crate::cost::CostModel::plus(self, rhs)
            }
        }
    };
}
pub(crate) use impl_add;

/// Implements `CostModel`, `Incremental` and `+` for a combinator of two
/// models `a` and `b` whose costs are joined by `$join(Phases, Phases)`
/// and whose floors by `$floor(Phases, Phases)`; the state is the pair of
/// the two states.
macro_rules! impl_pair {
    ($ty:ident, $join:expr, $floor:expr) => {
        impl<A: CostModel, B: CostModel> CostModel for $ty<A, B> {
            #[inline]
            fn cost(&self, group: &[&Sample]) -> Phases {
                let join: fn(Phases, Phases) -> Phases = $join;
                join(self.a.cost(group), self.b.cost(group))
            }
            #[inline]
            fn floor(&self, sample: &Sample) -> Phases {
                let floor: fn(Phases, Phases) -> Phases = $floor;
                floor(self.a.floor(sample), self.b.floor(sample))
            }
            /// Joined part by part as the floors are.
            #[inline]
            fn group_floor(&self) -> GroupFloor {
                let floor: fn(Phases, Phases) -> Phases = $floor;
                let (a, b) = (self.a.group_floor(), self.b.group_floor());
                GroupFloor::new(
                    floor(a.per_group, b.per_group),
                    floor(a.per_token_pair, b.per_token_pair),
                )
            }
        }

        impl<A: Incremental, B: Incremental> Incremental for $ty<A, B> {
            type State = (A::State, B::State);
            #[inline]
            fn empty(&self) -> Self::State {
                (self.a.empty(), self.b.empty())
            }
            #[inline]
            fn insert(&self, state: &mut Self::State, sample: &Sample) {
                self.a.insert(&mut state.0, sample);
                self.b.insert(&mut state.1, sample);
            }
            #[inline]
            fn evaluate(&self, state: &Self::State) -> Phases {
                let join: fn(Phases, Phases) -> Phases = $join;
                join(self.a.evaluate(&state.0), self.b.evaluate(&state.1))
            }
            /// Each side's own `evaluate_with`: no clone of the state.
            #[inline]
            fn evaluate_with(&self, state: &Self::State, sample: &Sample) -> Phases {
                let join: fn(Phases, Phases) -> Phases = $join;
                join(
                    self.a.evaluate_with(&state.0, sample),
                    self.b.evaluate_with(&state.1, sample),
                )
            }
            /// Each member's own `cost_and_floor`, joined as `evaluate_with`
            /// and `floor` join them.
            #[inline]
            fn cost_and_floor(&self, sample: &Sample) -> (Phases, Phases) {
                let (join, floor): (fn(Phases, Phases) -> Phases, fn(Phases, Phases) -> Phases) =
                    ($join, $floor);
                let (ca, fa) = self.a.cost_and_floor(sample);
                let (cb, fb) = self.b.cost_and_floor(sample);
                (join(ca, cb), floor(fa, fb))
            }
        }

        impl_add!($ty<A, B>);
    };
}

/// Implements `CostModel`, `Incremental` and `+` for a wrapper of one model
/// `inner` whose cost (and floor) it maps by `$map(&Self, Phases)`, a map
/// that keeps `>=` and sums (linear, non-negative); the state is the inner
/// model's.
macro_rules! impl_map {
    ($ty:ident, $map:expr) => {
        impl<C: CostModel> CostModel for $ty<C> {
            #[inline]
            fn cost(&self, group: &[&Sample]) -> Phases {
                let map: fn(&Self, Phases) -> Phases = $map;
                map(self, self.inner.cost(group))
            }
            #[inline]
            fn floor(&self, sample: &Sample) -> Phases {
                let map: fn(&Self, Phases) -> Phases = $map;
                map(self, self.inner.floor(sample))
            }
            /// Both parts mapped as the floor is.
            #[inline]
            fn group_floor(&self) -> GroupFloor {
                let map: fn(&Self, Phases) -> Phases = $map;
                self.inner.group_floor().map(|p| map(self, p))
            }
        }

        impl<C: Incremental> Incremental for $ty<C> {
            type State = C::State;
            #[inline]
            fn empty(&self) -> Self::State {
                self.inner.empty()
            }
            #[inline]
            fn insert(&self, state: &mut Self::State, sample: &Sample) {
                self.inner.insert(state, sample);
            }
            #[inline]
            fn evaluate(&self, state: &Self::State) -> Phases {
                let map: fn(&Self, Phases) -> Phases = $map;
                map(self, self.inner.evaluate(state))
            }
            /// The inner model's own `evaluate_with`: no clone of the state.
            #[inline]
            fn evaluate_with(&self, state: &Self::State, sample: &Sample) -> Phases {
                let map: fn(&Self, Phases) -> Phases = $map;
                map(self, self.inner.evaluate_with(state, sample))
            }
            #[inline]
            fn cost_and_floor(&self, sample: &Sample) -> (Phases, Phases) {
                let map: fn(&Self, Phases) -> Phases = $map;
                let (cost, floor) = self.inner.cost_and_floor(sample);
                (map(self, cost), map(self, floor))
            }
        }

        impl_add!($ty<C>);
    };
}

/// Implements `CostModel` and `Incremental` for a pointer to a model
/// (`&C`, `Box<C>`) by forwarding to the model, like rand's `impl
/// Distribution for &D`.
macro_rules! impl_forward {
    ($($ptr:tt)+) => {
        impl<C: CostModel + ?Sized> CostModel for $($ptr)+ {
            #[inline]
            fn cost(&self, group: &[&Sample]) -> Phases {
                (**self).cost(group)
            }
            #[inline]
            fn floor(&self, sample: &Sample) -> Phases {
                (**self).floor(sample)
            }
            #[inline]
            fn group_floor(&self) -> GroupFloor {
                (**self).group_floor()
            }
        }

        impl<C: Incremental + ?Sized> Incremental for $($ptr)+ {
            type State = C::State;
            #[inline]
            fn empty(&self) -> Self::State {
                (**self).empty()
            }
            #[inline]
            fn insert(&self, state: &mut Self::State, sample: &Sample) {
                (**self).insert(state, sample);
            }
            #[inline]
            fn evaluate(&self, state: &Self::State) -> Phases {
                (**self).evaluate(state)
            }
            #[inline]
            fn evaluate_with(&self, state: &Self::State, sample: &Sample) -> Phases {
                (**self).evaluate_with(state, sample)
            }
            #[inline]
            fn cost_and_floor(&self, sample: &Sample) -> (Phases, Phases) {
                (**self).cost_and_floor(sample)
            }
        }
    };
}

// The adapters of `adapter.rs`, as models: sum, scale, placement in a
// phase, maximum.

// Floor: `a(g) + b(g) >= sum floor_a + sum floor_b`; group floor: the
// two laws added.
impl_pair!(Sum, |a, b| a + b, |a, b| a + b);

// A zero factor is zero even on an inner cost that overflowed (inf * 0 is
// NaN).
impl_map!(Scale, |m, cost| if m.factor == 0.0 {
    Phases::ZERO
} else {
    cost * m.factor
});

impl_map!(InPhase, |m, cost| Phases::only(m.phase, cost.total()));

// Floor and group floor: the first operand's, as `max(a(g), b(g)) >=
// a(g)`. (The larger of
// the two floors per sample would not be one: `max(sum a, sum b)` can be
// below `sum max(a, b)`.)
impl_pair!(Max, Phases::max, |a, _| a);

/// The zero cost model: the identity of [`CostModel::plus`].
///
/// # Examples
///
/// ```
/// use microbatch::cost::{CostModel, Phases, Sample, Tokens, Zero};
///
/// let group = [&Sample::text_only(7)];
/// assert_eq!(Zero.cost(&group), Phases::ZERO);
/// let model = Tokens::new(1.0)?;
/// assert_eq!(model.plus(Zero).cost(&group), model.cost(&group));
/// # Ok::<(), microbatch::Error>(())
/// ```
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
#[must_use = "cost models do nothing unless evaluated"]
pub struct Zero;

impl CostModel for Zero {
    #[inline]
    fn cost(&self, _group: &[&Sample]) -> Phases {
        Phases::ZERO
    }
}

impl Incremental for Zero {
    type State = ();
    #[inline]
    fn empty(&self) {}
    #[inline]
    fn insert(&self, _state: &mut (), _sample: &Sample) {}
    #[inline]
    fn evaluate(&self, _state: &()) -> Phases {
        Phases::ZERO
    }
}

impl_add!(Zero);

/// A cost model from a closure over the whole group.
///
/// This `struct` is created by [`cost_fn`]. `Debug` prints `cost_fn`. Not
/// [`Incremental`]: the closure sees the whole group, so the planner cannot
/// use it; it serves [`fit_terms`](super::fit_terms) and your own
/// evaluations. Prefer [`sample_fn`] when the cost is a sum over samples.
///
/// The closure's results are not checked: it should return finite,
/// non-negative costs.
///
/// # Examples
///
/// ```
/// use microbatch::cost::{cost_fn, CostFn, CostModel, Phases, Sample};
///
/// // A named return type for a closure model: the longest sample of the group.
/// fn longest() -> CostFn<impl Fn(&[&Sample]) -> Phases> {
///     cost_fn(|group: &[&Sample]| {
///         let longest = group.iter().map(|s| s.tokens()).max().unwrap_or(0);
///         Phases::new(0.0, longest as f64)
///     })
/// }
/// assert_eq!(longest().cost(&[&Sample::text_only(3), &Sample::text_only(9)]).language, 9.0);
/// assert_eq!(format!("{:?}", longest()), "cost_fn");
/// ```
#[derive(Clone, Copy)]
#[must_use = "cost models do nothing unless evaluated"]
pub struct CostFn<F> {
    f: F,
}

/// Wraps a closure `Fn(&[&Sample]) -> Phases` as a [`CostModel`].
///
/// # Examples
///
/// ```
/// use microbatch::cost::{cost_fn, CostModel, Phases, Sample, Tokens};
///
/// // Padding: every sample of the micro-batch is padded to the longest.
/// let padded = cost_fn(|group: &[&Sample]| {
///     let longest = group.iter().map(|s| s.tokens()).max().unwrap_or(0);
///     Phases::new(0.0, (longest * group.len() as u64) as f64)
/// });
/// let (a, b) = (Sample::text_only(10), Sample::text_only(4));
/// assert_eq!(padded.cost(&[&a, &b]).language, 20.0);
/// let model = padded + Tokens::new(0.0)?;
/// assert_eq!(format!("{model:?}"), "cost_fn + Tokens { per_token: 0.0 }");
/// # Ok::<(), microbatch::Error>(())
/// ```
pub fn cost_fn<F>(f: F) -> CostFn<F>
where
    F: Fn(&[&Sample]) -> Phases,
{
    CostFn { f }
}

impl<F> fmt::Debug for CostFn<F> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("cost_fn")
    }
}

impl<F: Fn(&[&Sample]) -> Phases> CostModel for CostFn<F> {
    #[inline]
    fn cost(&self, group: &[&Sample]) -> Phases {
        (self.f)(group)
    }
}

impl_add!(CostFn<F>);

/// A cost model from a closure over one sample: the group's cost is the sum
/// of its samples' costs.
///
/// This `struct` is created by [`sample_fn`]. `Debug` prints `sample_fn`.
/// [`Incremental`], so the planner can use it; its state is the running sum
/// of the closure's results.
///
/// The closure's results are not checked: it should return finite,
/// non-negative costs.
///
/// # Examples
///
/// ```
/// use microbatch::cost::{sample_fn, CostModel, Image, Phases, Sample, SampleFn};
///
/// // A named return type for a closure model: a cost per image.
/// fn per_image(cost: f64) -> SampleFn<impl Fn(&Sample) -> Phases> {
///     sample_fn(move |s: &Sample| Phases::new(cost * s.images().len() as f64, 0.0))
/// }
/// let s = Sample::new(10, [Image::new(64), Image::new(64)]);
/// assert_eq!(per_image(0.5).cost(&[&s]).vision, 1.0);
/// assert_eq!(format!("{:?}", per_image(0.5)), "sample_fn");
/// ```
#[derive(Clone, Copy)]
#[must_use = "cost models do nothing unless evaluated"]
pub struct SampleFn<F> {
    f: F,
}

/// Wraps a closure `Fn(&Sample) -> Phases`, one sample's cost, as an
/// [`Incremental`] cost model that sums it over the group.
///
/// # Examples
///
/// ```
/// use microbatch::cost::{sample_fn, CostModel, Image, Incremental, Phases, Sample};
///
/// // A fixed preprocessing cost per image, in the vision phase.
/// let decode = sample_fn(|s: &Sample| Phases::new(0.002 * s.images().len() as f64, 0.0));
/// let s = Sample::new(10, [Image::new(64), Image::new(64)]);
/// assert_eq!(decode.evaluate_with(&decode.empty(), &s).vision, 0.004);
/// assert_eq!(decode.cost(&[&s, &s]).vision, 0.008);
/// ```
pub fn sample_fn<F>(f: F) -> SampleFn<F>
where
    F: Fn(&Sample) -> Phases,
{
    SampleFn { f }
}

impl<F> fmt::Debug for SampleFn<F> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("sample_fn")
    }
}

impl<F: Fn(&Sample) -> Phases> CostModel for SampleFn<F> {
    #[inline]
    fn cost(&self, group: &[&Sample]) -> Phases {
        group.iter().map(|s| (self.f)(s)).sum()
    }
    /// Additive: the closure's value.
    #[inline]
    fn floor(&self, sample: &Sample) -> Phases {
        (self.f)(sample)
    }
}

impl<F: Fn(&Sample) -> Phases> Incremental for SampleFn<F> {
    /// The running sum of the closure's results.
    type State = Phases;
    #[inline]
    fn empty(&self) -> Phases {
        Phases::ZERO
    }
    #[inline]
    fn insert(&self, state: &mut Phases, sample: &Sample) {
        *state += (self.f)(sample);
    }
    #[inline]
    fn evaluate(&self, state: &Phases) -> Phases {
        *state
    }
}

impl_add!(SampleFn<F>);

// References and boxes of models are models, like rand's `impl Distribution
// for &D`. This also makes `&dyn CostModel` and `Box<dyn CostModel>` models.

impl_forward!(&C);
impl_forward!(Box<C>);

/// Tuples of models sum their members, like tower-layer's tuple layers.
macro_rules! impl_tuple {
    ($($name:ident $idx:tt),+) => {
        /// A tuple of cost models sums its members, phase by phase.
        impl<$($name: CostModel),+> CostModel for ($($name,)+) {
            #[inline]
            fn cost(&self, group: &[&Sample]) -> Phases {
                Phases::ZERO $(+ self.$idx.cost(group))+
            }
            #[inline]
            fn floor(&self, sample: &Sample) -> Phases {
                Phases::ZERO $(+ self.$idx.floor(sample))+
            }
            #[inline]
            fn group_floor(&self) -> GroupFloor {
                GroupFloor::ZERO $(+ self.$idx.group_floor())+
            }
        }

        impl<$($name: Incremental),+> Incremental for ($($name,)+) {
            type State = ($($name::State,)+);
            #[inline]
            fn empty(&self) -> Self::State {
                ($(self.$idx.empty(),)+)
            }
            #[inline]
            fn insert(&self, state: &mut Self::State, sample: &Sample) {
                $(self.$idx.insert(&mut state.$idx, sample);)+
            }
            #[inline]
            fn evaluate(&self, state: &Self::State) -> Phases {
                Phases::ZERO $(+ self.$idx.evaluate(&state.$idx))+
            }
            /// Each member's own `evaluate_with`: no clone of the state.
            #[inline]
            fn evaluate_with(&self, state: &Self::State, sample: &Sample) -> Phases {
                Phases::ZERO $(+ self.$idx.evaluate_with(&state.$idx, sample))+
            }
            /// Each member's own `cost_and_floor`, summed in order as
            /// `evaluate_with` and `floor` sum them.
            #[inline]
            fn cost_and_floor(&self, sample: &Sample) -> (Phases, Phases) {
                let (mut cost, mut floor) = (Phases::ZERO, Phases::ZERO);
                $(
                    let (c, f) = self.$idx.cost_and_floor(sample);
                    cost += c;
                    floor += f;
                )+
                (cost, floor)
            }
        }
    };
}

impl_tuple!(A 0);
impl_tuple!(A 0, B 1);
impl_tuple!(A 0, B 1, C 2);
impl_tuple!(A 0, B 1, C 2, D 3);
impl_tuple!(A 0, B 1, C 2, D 3, E 4);
impl_tuple!(A 0, B 1, C 2, D 3, E 4, F 5);
impl_tuple!(A 0, B 1, C 2, D 3, E 4, F 5, G 6);
impl_tuple!(A 0, B 1, C 2, D 3, E 4, F 5, G 6, H 7);

#[cfg(test)]
mod tests {
    use super::*;
    use crate::cost::{Image, Tokens};

    #[test]
    fn tuples_sum_their_members() {
        let t = Tokens::new(1.0).unwrap();
        let sample = Sample::new(3, [Image::new(2)]);
        assert_eq!((t, t, t).cost(&[&sample]).language, 15.0);
        let mut s = (t, Zero).empty();
        (t, Zero).insert(&mut s, &sample);
        assert_eq!((t, Zero).evaluate(&s).language, 5.0);
    }

    #[test]
    fn object_safe() {
        let models: [Box<dyn CostModel>; 2] = [
            Box::new(Tokens::new(1.0).unwrap()),
            Box::new(cost_fn(|g: &[&Sample]| Phases::new(g.len() as f64, 0.0))),
        ];
        let sample = Sample::text_only(4);
        let total: f64 = models.iter().map(|m| m.cost(&[&sample]).total()).sum();
        assert_eq!(total, 5.0);
    }
}
