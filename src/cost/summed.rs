//! [`SaturatingSum`] and the `impl_summed!` macro: the state and the trait
//! impls of every built-in term whose state is a per-sample statistic summed.

use core::fmt;

/// A statistic summed over a group's samples with saturating integer
/// addition: the state of every built-in term.
pub(crate) trait SaturatingSum: Copy + Default + fmt::Debug {
    /// `self + rhs`, saturating.
    fn saturating_add(self, rhs: Self) -> Self;
}

impl SaturatingSum for u64 {
    #[inline]
    fn saturating_add(self, rhs: Self) -> Self {
        u64::saturating_add(self, rhs)
    }
}

impl SaturatingSum for u128 {
    #[inline]
    fn saturating_add(self, rhs: Self) -> Self {
        u128::saturating_add(self, rhs)
    }
}

impl SaturatingSum for [u128; 3] {
    #[inline]
    fn saturating_add(mut self, rhs: Self) -> Self {
        for (s, v) in self.iter_mut().zip(rhs) {
            *s = s.saturating_add(v);
        }
        self
    }
}

/// Implements [`CostModel`] (through the state), [`Incremental`] and `+`
/// for a built-in term whose state is the saturating sum of a per-sample
/// statistic: `$stat(&self, &Sample) -> $state` is one sample's share,
/// `$value(&self, &$state) -> Phases` the group's cost, `$floor(&self,
/// &Sample) -> Phases` the floor of [`CostModel::floor`] (`alone`: the cost
/// alone), and `group_floor: $group(&self) -> GroupFloor` that of
/// [`CostModel::group_floor`] (zero when left out after `alone`).
macro_rules! impl_summed {
    // The floor is the cost alone: `cost_and_floor` evaluates the sample
    // once (the floor is `alone`, that very evaluation).
    ($ty:ident, $state:ty, $stat:expr, $value:expr, alone) => {
        $crate::cost::impl_summed!(
            $ty, $state, $stat, $value, alone, group_floor: |_| $crate::cost::GroupFloor::ZERO
        );
    };
    ($ty:ident, $state:ty, $stat:expr, $value:expr, alone, group_floor: $group:expr) => {
        $crate::cost::impl_summed!(@impl $ty, $state, $stat, $value, $crate::cost::alone, $group, {
            #[inline]
            fn cost_and_floor(
                &self,
                sample: &$crate::cost::Sample,
            ) -> ($crate::cost::Phases, $crate::cost::Phases) {
                let cost = $crate::cost::alone(self, sample);
                (cost, cost)
            }
        });
    };
    ($ty:ident, $state:ty, $stat:expr, $value:expr, $floor:expr, group_floor: $group:expr) => {
        $crate::cost::impl_summed!(@impl $ty, $state, $stat, $value, $floor, $group, {});
    };
    (
        @impl $ty:ident, $state:ty, $stat:expr, $value:expr, $floor:expr, $group:expr,
        {$($extra:tt)*}
    ) => {
        impl $crate::cost::CostModel for $ty {
            #[inline]
            fn cost(&self, group: &[&$crate::cost::Sample]) -> $crate::cost::Phases {
                $crate::cost::cost_by_state(self, group)
            }
            #[inline]
            fn floor(&self, sample: &$crate::cost::Sample) -> $crate::cost::Phases {
                let floor: fn(&$ty, &$crate::cost::Sample) -> $crate::cost::Phases = $floor;
                floor(self, sample)
            }
            #[inline]
            fn group_floor(&self) -> $crate::cost::GroupFloor {
                let group: fn(&$ty) -> $crate::cost::GroupFloor = $group;
                group(self)
            }
        }

        impl $crate::cost::Incremental for $ty {
            type State = $state;
            #[inline]
            fn empty(&self) -> $state {
                <$state>::default()
            }
            #[inline]
            fn insert(&self, state: &mut $state, sample: &$crate::cost::Sample) {
                let stat: fn(&$ty, &$crate::cost::Sample) -> $state = $stat;
                *state = $crate::cost::SaturatingSum::saturating_add(*state, stat(self, sample));
            }
            #[inline]
            fn evaluate(&self, state: &$state) -> $crate::cost::Phases {
                let value: fn(&$ty, &$state) -> $crate::cost::Phases = $value;
                value(self, state)
            }
            $($extra)*
        }

        $crate::cost::combinator::impl_add!($ty);
    };
}
pub(crate) use impl_summed;
