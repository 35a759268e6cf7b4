//! [`GroupFloor`]: what every non-empty group (a packed sequence) costs
//! beyond its samples' floors, as [`CostModel::group_floor`] states it.

use core::ops::Add;

use super::Phases;

#[cfg(doc)]
use super::{CostModel, Sample};

/// What every non-empty group costs beyond the [floors](CostModel::floor)
/// of its samples, per phase: a constant `per_group`, and `per_token_pair`
/// times the cross pairs of the group's tokens, `T^2 - sum of t^2` for
/// samples of `t_1, ..., t_m` tokens ([`Sample::tokens`]) and `T` their
/// sum (zero for a group of one).
///
/// The law, for every non-empty group `g`, phase by phase (up to
/// floating-point rounding):
///
/// `cost(g) >= sum of floor(s) over s in g + per_group + per_token_pair *
/// (T^2 - sum of t^2)`.
///
/// This is what [`CostModel::group_floor`] returns; the
/// [`Planner`](crate::plan::Planner)'s lower bound adds it, for the fewest
/// groups and the most even split of the tokens any plan can have, to the
/// sum of the floors. Both parts are finite and non-negative for every
/// built-in model.
///
/// # Examples
///
/// ```
/// use microbatch::cost::{CostModel, FullAttention, GroupFloor, PerGroup, Phases, Sample};
///
/// let model = PerGroup::new(5.0)? + FullAttention::new(1.0)?;
/// let g = model.group_floor();
/// assert_eq!(g, GroupFloor::new(Phases::new(0.0, 5.0), Phases::new(0.0, 1.0)));
/// let (a, b) = (Sample::text_only(3), Sample::text_only(4));
/// let floors = model.floor(&a) + model.floor(&b); // 9 + 16
/// // 5 + (3 + 4)^2 = 54 = 25 + 5 + (49 - 25)
/// assert_eq!(model.cost(&[&a, &b]).language, floors.language + g.beyond(7, 25).language);
/// # Ok::<(), microbatch::Error>(())
/// ```
#[derive(Clone, Copy, Debug, Default, PartialEq)]
#[non_exhaustive]
pub struct GroupFloor {
    /// The constant every non-empty group costs beyond its samples' floors
    /// (a cost per packed sequence).
    pub per_group: Phases,
    /// The cost of each pair of tokens of two different samples of the
    /// group, counted twice (`T^2 - sum of t^2`): the coefficient of dense
    /// attention over the packed row.
    pub per_token_pair: Phases,
}

impl GroupFloor {
    /// Nothing beyond the floors: valid for every model, the default of
    /// [`CostModel::group_floor`].
    ///
    /// # Examples
    ///
    /// ```
    /// use microbatch::cost::{CostModel, GroupFloor, Tokens};
    ///
    /// assert_eq!(Tokens::new(1.0)?.group_floor(), GroupFloor::ZERO);
    /// # Ok::<(), microbatch::Error>(())
    /// ```
    pub const ZERO: GroupFloor = GroupFloor::new(Phases::ZERO, Phases::ZERO);

    /// A constant `per_group` and a coefficient `per_token_pair` on `T^2 -
    /// sum of t^2`, per phase.
    ///
    /// # Examples
    ///
    /// ```
    /// use microbatch::cost::{GroupFloor, Phases};
    ///
    /// let g = GroupFloor::new(Phases::new(0.5, 1.0), Phases::ZERO);
    /// assert_eq!(g.per_group.total(), 1.5);
    /// ```
    #[must_use]
    pub const fn new(per_group: Phases, per_token_pair: Phases) -> Self {
        GroupFloor {
            per_group,
            per_token_pair,
        }
    }

    /// What a non-empty group of `tokens` tokens in all, whose samples'
    /// tokens square to `squares` in all, costs beyond its samples' floors
    /// by this law: `per_group + per_token_pair * (tokens^2 - squares)`
    /// (the difference taken as zero if `squares` exceeds `tokens^2`).
    ///
    /// # Examples
    ///
    /// ```
    /// use microbatch::cost::{GroupFloor, Phases};
    ///
    /// let g = GroupFloor::new(Phases::new(1.0, 0.0), Phases::new(0.0, 2.0));
    /// // Samples of 3 and 4 tokens: 49 - 25 = 24 cross pairs.
    /// assert_eq!(g.beyond(7, 25), Phases::new(1.0, 48.0));
    /// ```
    #[must_use]
    pub fn beyond(&self, tokens: u64, squares: u128) -> Phases {
        let t = u128::from(tokens);
        let pairs = t.saturating_mul(t).saturating_sub(squares);
        let pairs = super::f(pairs);
        let part = |c: f64| if pairs == 0.0 { 0.0 } else { c * pairs };
        Phases::new(
            self.per_group.vision + part(self.per_token_pair.vision),
            self.per_group.language + part(self.per_token_pair.language),
        )
    }

    /// Both parts mapped by `map` (a map that keeps sums and `>=`: a
    /// non-negative factor, a placement in a phase).
    #[inline]
    pub(crate) fn map(self, map: impl Fn(Phases) -> Phases) -> Self {
        GroupFloor::new(map(self.per_group), map(self.per_token_pair))
    }
}

impl Add for GroupFloor {
    type Output = GroupFloor;

    /// Part by part: the law of a sum of models, whose costs and floors
    /// add.
    #[inline]
    fn add(self, rhs: GroupFloor) -> GroupFloor {
        GroupFloor::new(
            self.per_group + rhs.per_group,
            self.per_token_pair + rhs.per_token_pair,
        )
    }
}
