//! A [`Partition`] (the parts, their sums, the objective and a lower
//! bound), the sum type [`TotalOf`], and its serde form.

use alloc::vec::Vec;
use core::fmt;

use crate::grouped::Grouped;
use crate::num::{Item, Size, Total};

use super::instance;

/// The sum type of an item's sizes: `u128` for integers, `f64` for floats.
///
/// # Examples
///
/// ```
/// use microbatch::partition::{lower_bound, TotalOf};
///
/// // Sums of `u32` sizes are `u128`: they never overflow.
/// let total: TotalOf<u32> = lower_bound(&[u32::MAX, u32::MAX], 1)?;
/// assert_eq!(total, 2 * u128::from(u32::MAX));
/// # Ok::<(), microbatch::Error>(())
/// ```
pub type TotalOf<I> = <<I as Item>::Size as Size>::Total;

/// A partition of items into parts, with its part sums, objective value and
/// a lower bound on the optimum.
///
/// Created by [`lpt`](super::lpt), [`karmarkar_karp`](super::karmarkar_karp),
/// [`refine`](super::refine), [`exact`](super::exact) and
/// [`Partitioner`](super::Partitioner). Each part lists input indices,
/// heaviest item first (ties by id, then index).
///
/// # Examples
///
/// ```
/// use microbatch::partition::lpt;
///
/// let p = lpt(&[5u32, 1, 4, 2, 3], 2)?;
/// assert_eq!(p.len(), 2);
/// assert_eq!(p.part(0), &[0, 3]); // 5 + 2
/// assert_eq!(p.part(1), &[2, 4, 1]); // 4 + 3 + 1
/// assert_eq!(p.sum(0), &[7]);
/// assert_eq!(p.assignment(), vec![0, 1, 1, 0, 1]);
/// assert_eq!(p.objective(), 8);
/// assert_eq!(p.lower_bound(), 8);
/// assert!(p.proven_optimal()); // it meets the lower bound
/// # Ok::<(), microbatch::Error>(())
/// ```
#[derive(Clone, PartialEq)]
#[cfg_attr(
    feature = "serde",
    derive(serde::Deserialize),
    serde(
        try_from = "wire::Partition<T>",
        bound = "T: Total + serde::Deserialize<'de>"
    )
)]
pub struct Partition<T> {
    /// The input indices of each part.
    parts: Grouped<usize>,
    dims: usize,
    sums: Vec<T>,
    objective: T,
    lower_bound: T,
    proven_optimal: bool,
}

impl<T: Total> Partition<T> {
    /// The number of parts.
    ///
    /// # Examples
    ///
    /// ```
    /// use microbatch::partition::lpt;
    ///
    /// assert_eq!(lpt(&[5u32, 1, 4, 2, 3], 3)?.len(), 3);
    /// # Ok::<(), microbatch::Error>(())
    /// ```
    #[must_use]
    pub fn len(&self) -> usize {
        self.parts.len()
    }

    /// Whether there is no part (never the case for a result of this crate).
    ///
    /// # Examples
    ///
    /// ```
    /// use microbatch::partition::Partitioner;
    ///
    /// // Even without items, a result has its parts.
    /// let p = Partitioner::new(2).allow_empty(true).partition(&[] as &[u32])?;
    /// assert!(!p.is_empty());
    /// assert_eq!(p.len(), 2);
    /// # Ok::<(), microbatch::Error>(())
    /// ```
    #[must_use]
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// The input indices of part `i`, heaviest item first.
    ///
    /// # Panics
    ///
    /// If `i >= self.len()`.
    ///
    /// # Examples
    ///
    /// ```
    /// use microbatch::partition::lpt;
    ///
    /// let p = lpt(&[5u32, 1, 4, 2, 3], 2)?;
    /// assert_eq!(p.part(1), &[2, 4, 1]); // 4 + 3 + 1, heaviest first
    /// # Ok::<(), microbatch::Error>(())
    /// ```
    #[must_use]
    pub fn part(&self, i: usize) -> &[usize] {
        match self.parts.get(i) {
            Some(part) => part,
            None => panic!("part {i} out of range: there are {} parts", self.len()),
        }
    }

    /// The parts in order.
    ///
    /// # Examples
    ///
    /// ```
    /// use microbatch::partition::lpt;
    ///
    /// let p = lpt(&[5u32, 1, 4, 2, 3], 2)?;
    /// let counts: Vec<usize> = p.parts().map(|part| part.len()).collect();
    /// assert_eq!(counts, [2, 3]);
    /// # Ok::<(), microbatch::Error>(())
    /// ```
    pub fn parts(&self) -> impl ExactSizeIterator<Item = &[usize]> + '_ {
        self.parts.iter()
    }

    /// The number of dimensions of the items.
    ///
    /// # Examples
    ///
    /// ```
    /// use microbatch::partition::lpt;
    ///
    /// assert_eq!(lpt(&[5u32, 4], 2)?.dims(), 1);
    /// assert_eq!(lpt(&[[5u32, 1], [4, 0]], 2)?.dims(), 2);
    /// # Ok::<(), microbatch::Error>(())
    /// ```
    #[must_use]
    pub fn dims(&self) -> usize {
        self.dims
    }

    /// The sums of part `i`, one per dimension.
    ///
    /// # Panics
    ///
    /// If `i >= self.len()`.
    ///
    /// # Examples
    ///
    /// ```
    /// use microbatch::partition::lpt;
    ///
    /// // Combined weights 6, 4, 5: the 4 joins the 5.
    /// let p = lpt(&[[5u32, 1], [4, 0], [3, 2]], 2)?;
    /// assert_eq!((p.sum(0), p.sum(1)), (&[5, 1][..], &[7, 2][..]));
    /// # Ok::<(), microbatch::Error>(())
    /// ```
    #[must_use]
    pub fn sum(&self, i: usize) -> &[T] {
        &self.sums[i * self.dims..(i + 1) * self.dims]
    }

    /// The largest part sum in dimension `dim` (zero for no parts).
    ///
    /// # Panics
    ///
    /// If `dim >= self.dims()`.
    ///
    /// # Examples
    ///
    /// ```
    /// use microbatch::partition::lpt;
    ///
    /// let p = lpt(&[[5u32, 1], [4, 0], [3, 2]], 2)?; // sums (5, 1) and (7, 2)
    /// assert_eq!((p.max_sum(0), p.max_sum(1)), (7, 2));
    /// # Ok::<(), microbatch::Error>(())
    /// ```
    #[must_use]
    pub fn max_sum(&self, dim: usize) -> T {
        assert!(dim < self.dims, "dimension {dim} out of range");
        (0..self.len()).fold(T::ZERO, |acc, p| {
            instance::max(acc, self.sums[p * self.dims + dim])
        })
    }

    /// The smallest part sum in dimension `dim` (zero for no parts).
    ///
    /// # Panics
    ///
    /// If `dim >= self.dims()`.
    ///
    /// # Examples
    ///
    /// ```
    /// use microbatch::partition::lpt;
    ///
    /// let p = lpt(&[[5u32, 1], [4, 0], [3, 2]], 2)?; // sums (5, 1) and (7, 2)
    /// assert_eq!((p.min_sum(0), p.min_sum(1)), (5, 1));
    /// # Ok::<(), microbatch::Error>(())
    /// ```
    #[must_use]
    pub fn min_sum(&self, dim: usize) -> T {
        assert!(dim < self.dims, "dimension {dim} out of range");
        (0..self.len())
            .map(|p| self.sums[p * self.dims + dim])
            .reduce(instance::min)
            .unwrap_or(T::ZERO)
    }

    /// The objective value the partition was built for (by default the
    /// largest part sum; see [`Objective`](super::Objective) and [`Dims`](super::Dims)).
    ///
    /// # Examples
    ///
    /// ```
    /// use microbatch::partition::{lpt, Objective, Partitioner};
    ///
    /// let items = [5u32, 1, 4, 2, 3];
    /// let p = lpt(&items, 2)?;
    /// assert_eq!(p.objective(), p.max_sum(0)); // the makespan by default
    /// let spread = Partitioner::new(2).objective(Objective::Spread).partition(&items)?;
    /// assert_eq!(spread.objective(), spread.max_sum(0) - spread.min_sum(0));
    /// # Ok::<(), microbatch::Error>(())
    /// ```
    #[must_use]
    pub fn objective(&self) -> T {
        self.objective
    }

    /// A lower bound on the objective of every partition of the same items
    /// under the same constraints (see [`lower_bound`](super::lower_bound)).
    ///
    /// # Examples
    ///
    /// ```
    /// use microbatch::partition::{lower_bound, lpt};
    ///
    /// // No partition beats the largest item.
    /// let items = [9u32, 1, 1, 1];
    /// let p = lpt(&items, 2)?;
    /// assert_eq!(p.lower_bound(), 9);
    /// assert_eq!(p.lower_bound(), lower_bound(&items, 2)?);
    /// # Ok::<(), microbatch::Error>(())
    /// ```
    #[must_use]
    pub fn lower_bound(&self) -> T {
        self.lower_bound
    }

    /// The objective over its lower bound (1.0 is perfect; the makespan
    /// ratio for [`Objective::MaxPart`](super::Objective::MaxPart)). `1.0` when both are zero.
    ///
    /// # Examples
    ///
    /// ```
    /// use microbatch::partition::lpt;
    ///
    /// // LPT: {3, 2, 2} and {3, 2}; the optimum is 6.
    /// let p = lpt(&[3u32, 3, 2, 2, 2], 2)?;
    /// assert_eq!((p.objective(), p.lower_bound()), (7, 6));
    /// assert_eq!(p.ratio(), 7.0 / 6.0);
    /// # Ok::<(), microbatch::Error>(())
    /// ```
    #[must_use]
    pub fn ratio(&self) -> f64 {
        let lb = self.lower_bound.to_f64();
        if lb > 0.0 {
            self.objective.to_f64() / lb
        } else if self.objective.to_f64() > 0.0 {
            f64::INFINITY
        } else {
            1.0
        }
    }

    /// Whether the partition is proven optimal: it meets the lower bound, or
    /// an exact search finished.
    ///
    /// # Examples
    ///
    /// ```
    /// use microbatch::partition::{lpt, Algorithm, Partitioner};
    ///
    /// let items = [3u32, 3, 2, 2, 2];
    /// assert!(!lpt(&items, 2)?.proven_optimal()); // 7 above the bound 6
    /// let p = Partitioner::new(2).algorithm(Algorithm::Exact).partition(&items)?;
    /// assert!(p.proven_optimal() && p.objective() == 6);
    /// # Ok::<(), microbatch::Error>(())
    /// ```
    #[must_use]
    pub fn proven_optimal(&self) -> bool {
        self.proven_optimal
    }

    /// The part of each item, by input index.
    ///
    /// # Examples
    ///
    /// ```
    /// use microbatch::partition::lpt;
    ///
    /// let p = lpt(&[5u32, 1, 4, 2, 3], 2)?;
    /// assert_eq!(p.assignment(), vec![0, 1, 1, 0, 1]);
    /// # Ok::<(), microbatch::Error>(())
    /// ```
    #[must_use]
    pub fn assignment(&self) -> Vec<usize> {
        self.parts.group_of()
    }

    /// The parts as lists of input indices.
    ///
    /// # Examples
    ///
    /// ```
    /// use microbatch::partition::lpt;
    ///
    /// let p = lpt(&[5u32, 1, 4, 2, 3], 2)?;
    /// assert_eq!(p.into_parts(), vec![vec![0, 3], vec![2, 4, 1]]);
    /// # Ok::<(), microbatch::Error>(())
    /// ```
    #[must_use]
    pub fn into_parts(self) -> Vec<Vec<usize>> {
        self.parts().map(<[usize]>::to_vec).collect()
    }

    /// A partition from its parts (flat, as in the fields), sums and
    /// bounds.
    pub(crate) fn from_flat(
        items: Vec<usize>,
        offsets: Vec<usize>,
        dims: usize,
        sums: Vec<T>,
        objective: T,
        lower_bound: T,
        proven_optimal: bool,
    ) -> Self {
        let parts = Grouped::from_trusted(items, offsets);
        debug_assert_eq!(sums.len(), parts.len() * dims);
        Partition {
            parts,
            dims,
            sums,
            objective,
            lower_bound,
            proven_optimal,
        }
    }
}

impl<T: Total> fmt::Debug for Partition<T> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        struct Parts<'a, T>(&'a Partition<T>);
        impl<T: Total> fmt::Debug for Parts<'_, T> {
            fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.debug_list().entries(self.0.parts()).finish()
            }
        }
        f.debug_struct("Partition")
            .field("parts", &Parts(self))
            .field("dims", &self.dims)
            .field("sums", &self.sums)
            .field("objective", &self.objective)
            .field("lower_bound", &self.lower_bound)
            .field("proven_optimal", &self.proven_optimal)
            .finish()
    }
}

/// The fields of a [`Partition`] as serialized: the parts as lists of
/// input indices.
#[cfg(feature = "serde")]
mod wire {
    use alloc::vec::Vec;

    use core::cmp::Ordering;

    use serde::ser::{SerializeStruct, Serializer};
    use serde::Serialize;

    use crate::grouped::{check_per_group, invalid, Grouped, Invalid, Raw};
    use crate::num::Total;

    /// A partition as read, checked before it becomes one, so that a
    /// malformed document is an error rather than a later panic.
    #[derive(serde::Deserialize)]
    pub(super) struct Partition<T> {
        parts: Vec<Vec<usize>>,
        dims: usize,
        sums: Vec<T>,
        objective: T,
        lower_bound: T,
        proven_optimal: bool,
    }

    impl<T: Total> TryFrom<Partition<T>> for super::Partition<T> {
        type Error = Invalid;

        fn try_from(p: Partition<T>) -> Result<Self, Self::Error> {
            let parts = Grouped::try_from(Raw::nested(p.parts, "part"))?;
            check_per_group(&parts, &p.sums, p.dims, T::ZERO, "part", "sum")?;
            let below_zero = |x: &T| x.total_cmp(&T::ZERO) == Ordering::Less;
            if let Some(i) = p.sums.iter().position(below_zero) {
                return Err(invalid!(
                    "part {} has a negative sum {:?} in dimension {}: sums of sizes are not \
                     negative",
                    i / p.dims,
                    p.sums[i],
                    i % p.dims
                ));
            }
            if below_zero(&p.objective) || below_zero(&p.lower_bound) {
                return Err(invalid!(
                    "the objective {:?} and the lower bound {:?} must not be negative",
                    p.objective,
                    p.lower_bound
                ));
            }
            // Every objective (the largest part, per dimension or combined,
            // or the spread) is at most the sum over dimensions of the
            // largest part, folded as the objective is. Without parts that
            // sum is zero: the declared dimension count alone must drive no
            // loop (a document of 100 bytes declaring 2^64 - 1 dimensions),
            // so the dimensions are walked only when there are sums, and
            // then `dims <= sums.len()` (one sum per part and dimension).
            let walked = if p.sums.is_empty() { 0 } else { p.dims };
            let most = (0..walked).fold(T::ZERO, |acc, j| {
                let hi = p
                    .sums
                    .iter()
                    .skip(j)
                    .step_by(p.dims)
                    .fold(T::ZERO, |m, &x| {
                        if x.total_cmp(&m) == Ordering::Greater {
                            x
                        } else {
                            m
                        }
                    });
                acc.add(hi)
            });
            if p.objective.total_cmp(&most) == Ordering::Greater {
                return Err(invalid!(
                    "the objective {:?} is above what the part sums allow ({:?}, the sum over \
                     dimensions of the largest part)",
                    p.objective,
                    most
                ));
            }
            if p.lower_bound.total_cmp(&p.objective) == Ordering::Greater {
                return Err(invalid!(
                    "the lower bound {:?} is above the objective {:?}: it bounds the optimum, \
                     which is at most the objective",
                    p.lower_bound,
                    p.objective
                ));
            }
            Ok(super::Partition {
                parts,
                dims: p.dims,
                sums: p.sums,
                objective: p.objective,
                lower_bound: p.lower_bound,
                proven_optimal: p.proven_optimal,
            })
        }
    }

    /// The parts as a list of lists.
    struct Parts<'a, T>(&'a super::Partition<T>);

    impl<T: super::Total> Serialize for Parts<'_, T> {
        fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
            serializer.collect_seq(self.0.parts())
        }
    }

    impl<T: super::Total + Serialize> Serialize for super::Partition<T> {
        fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
            let mut s = serializer.serialize_struct("Partition", 6)?;
            s.serialize_field("parts", &Parts(self))?;
            s.serialize_field("dims", &self.dims)?;
            s.serialize_field("sums", &self.sums)?;
            s.serialize_field("objective", &self.objective)?;
            s.serialize_field("lower_bound", &self.lower_bound)?;
            s.serialize_field("proven_optimal", &self.proven_optimal)?;
            s.end()
        }
    }
}
