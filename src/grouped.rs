//! Items grouped with offsets: the one result layout of packings and
//! partitions (and of anything else that lists items by group), with the
//! checks that a document read from outside must pass before it becomes one.

use alloc::vec::Vec;
use core::fmt;

/// Groups of items stored flat: group `g` is `items[offsets[g]..offsets[g + 1]]`.
///
/// The layout holds when the value exists: `offsets` starts at 0, never
/// decreases and ends at `items.len()`. Constructors either keep it by
/// construction or check it ([`Grouped::from_offsets`]).
#[derive(Clone, PartialEq, Eq)]
pub(crate) struct Grouped<T> {
    items: Vec<T>,
    offsets: Vec<usize>,
}

impl<T> Grouped<T> {
    /// Groups from a flat list and offsets that the caller built to satisfy
    /// the layout (checked in debug builds only).
    pub(crate) fn from_trusted(items: Vec<T>, offsets: Vec<usize>) -> Self {
        debug_assert_eq!(offsets.first(), Some(&0));
        debug_assert_eq!(offsets.last(), Some(&items.len()));
        debug_assert!(offsets.windows(2).all(|w| w[0] <= w[1]));
        Grouped { items, offsets }
    }

    /// Groups from a flat list and offsets read from outside: the offsets
    /// must start at 0, never decrease and end at the number of items.
    #[cfg(feature = "serde")]
    pub(crate) fn from_offsets(
        items: Vec<T>,
        offsets: Vec<usize>,
        group: &'static str,
    ) -> Result<Self, Invalid> {
        match offsets.first() {
            Some(0) => {}
            first => {
                return Err(Invalid::FirstOffset {
                    found: first.copied(),
                })
            }
        }
        if let Some(g) = offsets.windows(2).position(|w| w[0] > w[1]) {
            return Err(Invalid::Decreasing {
                group,
                index: g,
                start: offsets[g],
                end: offsets[g + 1],
            });
        }
        let last = offsets[offsets.len() - 1];
        if last != items.len() {
            return Err(Invalid::LastOffset {
                last,
                items: items.len(),
            });
        }
        Ok(Grouped { items, offsets })
    }

    /// Groups from a list of lists (always a valid layout).
    #[cfg(feature = "serde")]
    pub(crate) fn from_nested(groups: Vec<Vec<T>>) -> Self {
        let mut offsets = Vec::with_capacity(groups.len() + 1);
        offsets.push(0);
        let total = groups.iter().map(Vec::len).sum();
        let mut items = Vec::with_capacity(total);
        for g in groups {
            items.extend(g);
            offsets.push(items.len());
        }
        Grouped { items, offsets }
    }

    /// The number of groups.
    #[inline]
    pub(crate) fn len(&self) -> usize {
        self.offsets.len() - 1
    }

    /// The number of items over all groups.
    #[inline]
    pub(crate) fn item_count(&self) -> usize {
        self.items.len()
    }

    /// Group `g`, or `None` when out of range.
    #[inline]
    pub(crate) fn get(&self, g: usize) -> Option<&[T]> {
        self.span(g, g.checked_add(1)?)
    }

    /// The items of groups `first..last`, one group after the other, or
    /// `None` when out of range.
    #[inline]
    pub(crate) fn span(&self, first: usize, last: usize) -> Option<&[T]> {
        let start = *self.offsets.get(first)?;
        let end = *self.offsets.get(last)?;
        self.items.get(start..end)
    }

    /// The groups in order.
    pub(crate) fn iter(&self) -> impl ExactSizeIterator<Item = &[T]> + '_ {
        self.offsets
            .windows(2)
            .map(move |w| &self.items[w[0]..w[1]])
    }

    /// All items, group after group.
    #[cfg(any(test, feature = "serde"))]
    pub(crate) fn items(&self) -> &[T] {
        &self.items
    }

    /// The offsets, one more than there are groups.
    #[cfg(any(test, feature = "serde"))]
    pub(crate) fn offsets(&self) -> &[usize] {
        &self.offsets
    }

    /// The items and the offsets.
    pub(crate) fn into_flat(self) -> (Vec<T>, Vec<usize>) {
        (self.items, self.offsets)
    }
}

impl<T: Copy + Default> Grouped<T> {
    /// Groups items by key in one counting pass and one scatter: `counts[g]`
    /// is the number of items of group `g` and `keyed` yields every item with
    /// its group (`counts.len()` groups); each group keeps the order of
    /// `keyed`. O(n + groups) time, no space beyond the result.
    ///
    /// `keyed` must yield exactly `counts[g]` items of each group `g` (the
    /// callers count them from the same data).
    pub(crate) fn scatter(counts: Vec<usize>, keyed: impl Iterator<Item = (usize, T)>) -> Self {
        let (mut items, offsets, mut next) = Self::layout(counts);
        for (g, x) in keyed {
            items[next[g]] = x;
            next[g] += 1;
        }
        Grouped { items, offsets }
    }

    /// As [`Grouped::scatter`], for items that come in runs of one group:
    /// `runs` yields `(group, len)`, and the next `len` items (`item(k)` for
    /// the `k`-th item overall) all go to that group.
    pub(crate) fn scatter_runs(
        counts: Vec<usize>,
        runs: impl Iterator<Item = (usize, usize)>,
        item: impl Fn(usize) -> T,
    ) -> Self {
        let (mut items, offsets, mut next) = Self::layout(counts);
        let mut k = 0;
        for (g, len) in runs {
            let start = next[g];
            next[g] += len;
            if len == 1 {
                // Most runs are one item: a plain store.
                items[start] = item(k);
            } else {
                for (x, k) in items[start..start + len].iter_mut().zip(k..) {
                    *x = item(k);
                }
            }
            k += len;
        }
        Grouped { items, offsets }
    }

    /// The items (to be filled), the offsets, and where each group starts.
    fn layout(counts: Vec<usize>) -> (Vec<T>, Vec<usize>, Vec<usize>) {
        let mut offsets = Vec::with_capacity(counts.len() + 1);
        offsets.push(0);
        let mut total = 0usize;
        for &c in &counts {
            total += c;
            offsets.push(total);
        }
        let mut next = counts;
        next.copy_from_slice(&offsets[..offsets.len() - 1]);
        (alloc::vec![T::default(); total], offsets, next)
    }
}

impl Grouped<usize> {
    /// Checks that the items are indices `0..item_count()`, each exactly once.
    #[cfg(feature = "serde")]
    pub(crate) fn check_indices(&self, group: &'static str) -> Result<(), Invalid> {
        let n = self.items.len();
        // Group (plus one) of each index seen; 0 while unseen.
        let mut seen = alloc::vec![0usize; n];
        let mut beyond = None;
        for (g, items) in self.iter().enumerate() {
            for (position, &item) in items.iter().enumerate() {
                match seen.get_mut(item) {
                    None => {
                        beyond.get_or_insert((g, position, item));
                    }
                    Some(&mut first) if first != 0 => {
                        return Err(Invalid::Repeated {
                            group,
                            first: first - 1,
                            again: g,
                            item: item as u64,
                        });
                    }
                    Some(slot) => *slot = g + 1,
                }
            }
        }
        // With n items and none repeated, an index is in no group exactly
        // when one is out of range; the error says both.
        match beyond {
            Some((index, position, item)) => Err(Invalid::OutOfRange {
                group,
                index,
                position,
                item,
                items: n,
                missing: seen.iter().position(|&s| s == 0),
            }),
            None => Ok(()),
        }
    }

    /// The group of every index: `group_of()[i]` is the group holding `i`
    /// (indices out of range are skipped; 0 for an index in no group).
    pub(crate) fn group_of(&self) -> Vec<usize> {
        let mut group_of = alloc::vec![0; self.items.len()];
        for (g, items) in self.iter().enumerate() {
            for &i in items {
                if let Some(slot) = group_of.get_mut(i) {
                    *slot = g;
                }
            }
        }
        group_of
    }
}

#[cfg(feature = "serde")]
impl Grouped<u64> {
    /// Checks that no id appears twice. O(n log n) time, O(n) space.
    pub(crate) fn check_unique(&self, group: &'static str) -> Result<(), Invalid> {
        let mut keyed: Vec<(u64, usize)> = self.items.iter().copied().zip(0..).collect();
        keyed.sort_unstable();
        match keyed.windows(2).find(|w| w[0].0 == w[1].0) {
            Some(w) => Err(Invalid::Repeated {
                group,
                first: self.group_at(w[0].1),
                again: self.group_at(w[1].1),
                item: w[0].0,
            }),
            None => Ok(()),
        }
    }
}

impl<T> Grouped<T> {
    /// The group holding flat position `p` (the last non-empty group
    /// starting at or before it).
    #[cfg(feature = "serde")]
    fn group_at(&self, p: usize) -> usize {
        self.offsets.partition_point(|&o| o <= p).saturating_sub(1)
    }
}

impl<T: fmt::Debug> fmt::Debug for Grouped<T> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_list().entries(self.iter()).finish()
    }
}

/// Why a document is not a valid grouped result. Every variant names what
/// is wrong (the group by its number, the item by its value), so a
/// hand-edited or corrupted document can be fixed.
#[cfg(feature = "serde")]
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) enum Invalid {
    /// The offsets do not start at 0 (`None`: there are none).
    FirstOffset { found: Option<usize> },
    /// Group `index` ends before it starts.
    Decreasing {
        group: &'static str,
        index: usize,
        start: usize,
        end: usize,
    },
    /// The last offset is not the number of items.
    LastOffset { last: usize, items: usize },
    /// An index at or beyond the number of items.
    OutOfRange {
        group: &'static str,
        index: usize,
        position: usize,
        item: usize,
        items: usize,
        /// The smallest index in no group.
        missing: Option<usize>,
    },
    /// An item listed twice: in group `first` and again in group `again`.
    Repeated {
        group: &'static str,
        first: usize,
        again: usize,
        item: u64,
    },
    /// Anything else about the document, said in full.
    Other(alloc::string::String),
}

#[cfg(feature = "serde")]
impl fmt::Display for Invalid {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Invalid::FirstOffset { found: None } => {
                f.write_str("the offsets are empty: they must start at 0")
            }
            Invalid::FirstOffset { found: Some(x) } => {
                write!(f, "the offsets must start at 0, not {x}")
            }
            Invalid::Decreasing {
                group,
                index,
                start,
                end,
            } => write!(
                f,
                "the offsets of {group} {index} decrease: it would start at {start} and end at {end}"
            ),
            Invalid::LastOffset { last, items } => write!(
                f,
                "the last offset is {last} but there are {items} items: they must agree"
            ),
            Invalid::OutOfRange {
                group,
                index,
                position,
                item,
                items,
                missing,
            } => {
                write!(
                    f,
                    "{group} {index} lists item {item} (at position {position}), \
                     but there are only {items} items"
                )?;
                match missing {
                    Some(m) => write!(f, ", and item {m} is in no {group}"),
                    None => Ok(()),
                }
            }
            Invalid::Repeated {
                group,
                first,
                again,
                item,
            } if first == again => write!(f, "{group} {first} lists item {item} twice"),
            Invalid::Repeated {
                group,
                first,
                again,
                item,
            } => write!(
                f,
                "item {item} is listed in {group} {first} and again in {group} {again}"
            ),
            Invalid::Other(message) => f.write_str(message),
        }
    }
}

/// Builds an [`Invalid::Other`] from format arguments.
#[cfg(feature = "serde")]
macro_rules! invalid {
    ($($arg:tt)*) => {
        $crate::grouped::Invalid::Other(::alloc::format!($($arg)*))
    };
}
#[cfg(feature = "serde")]
pub(crate) use invalid;

/// What every item of a document must be, checked when it is read.
#[cfg(feature = "serde")]
pub(crate) trait Member: Sized {
    /// Checks the items of `groups` (named `group` in errors).
    fn check(groups: &Grouped<Self>, group: &'static str) -> Result<(), Invalid>;
}

/// Input indices: `0..n`, each exactly once.
#[cfg(feature = "serde")]
impl Member for usize {
    fn check(groups: &Grouped<Self>, group: &'static str) -> Result<(), Invalid> {
        groups.check_indices(group)
    }
}

/// Ids: no id twice.
#[cfg(feature = "serde")]
impl Member for u64 {
    fn check(groups: &Grouped<Self>, group: &'static str) -> Result<(), Invalid> {
        groups.check_unique(group)
    }
}

/// The groups of a document as read, before any check: flat (items and
/// offsets) or a list of lists, and the name of a group for the errors.
///
/// `Grouped::try_from` is the one checked path from a document to the
/// layout: the offsets (flat form), then the items (see [`Member`]).
#[cfg(feature = "serde")]
pub(crate) struct Raw<T> {
    groups: RawGroups<T>,
    group: &'static str,
}

#[cfg(feature = "serde")]
enum RawGroups<T> {
    Flat { items: Vec<T>, offsets: Vec<usize> },
    Nested(Vec<Vec<T>>),
}

#[cfg(feature = "serde")]
impl<T> Raw<T> {
    /// Flat groups: `items` with `offsets`.
    pub(crate) fn flat(items: Vec<T>, offsets: Vec<usize>, group: &'static str) -> Self {
        Raw {
            groups: RawGroups::Flat { items, offsets },
            group,
        }
    }

    /// A list of lists.
    pub(crate) fn nested(groups: Vec<Vec<T>>, group: &'static str) -> Self {
        Raw {
            groups: RawGroups::Nested(groups),
            group,
        }
    }
}

#[cfg(feature = "serde")]
impl<T: Member> TryFrom<Raw<T>> for Grouped<T> {
    type Error = Invalid;

    fn try_from(raw: Raw<T>) -> Result<Self, Invalid> {
        let groups = match raw.groups {
            RawGroups::Flat { items, offsets } => Grouped::from_offsets(items, offsets, raw.group)?,
            RawGroups::Nested(groups) => Grouped::from_nested(groups),
        };
        T::check(&groups, raw.group)?;
        Ok(groups)
    }
}

/// Checks per-group values stored `dims` a group (loads, sums) against the
/// groups: one value per group and dimension, and zero for an empty group.
/// `what` names the values in errors ("load", "sum").
#[cfg(feature = "serde")]
pub(crate) fn check_per_group<T: Copy + PartialEq + fmt::Debug, X>(
    groups: &Grouped<X>,
    values: &[T],
    dims: usize,
    zero: T,
    group: &'static str,
    what: &'static str,
) -> Result<(), Invalid> {
    if dims == 0 {
        return Err(invalid!("there must be at least one dimension, not 0"));
    }
    let expected = groups.len().saturating_mul(dims);
    if values.len() != expected {
        return Err(invalid!(
            "there must be one {what} per {group} and dimension, {} x {dims} = {expected}, \
             not {}",
            groups.len(),
            values.len()
        ));
    }
    for (g, (items, row)) in groups.iter().zip(values.chunks_exact(dims)).enumerate() {
        if let (true, Some(d)) = (items.is_empty(), row.iter().position(|&v| v != zero)) {
            return Err(invalid!(
                "{group} {g} has no items but a {what} of {:?} in dimension {d}",
                row[d]
            ));
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    #[cfg(feature = "serde")]
    use alloc::string::ToString;
    use alloc::vec;

    #[test]
    fn scatter_keeps_order_within_groups() {
        let g = Grouped::scatter(
            vec![2, 0, 3],
            [(2, 10), (0, 11), (2, 12), (0, 13), (2, 14)].into_iter(),
        );
        assert_eq!(g.offsets(), &[0, 2, 2, 5]);
        assert_eq!(g.items(), &[11, 13, 10, 12, 14]);
        assert_eq!(g.get(1), Some(&[][..]));
        assert_eq!(g.get(3), None);
    }

    #[cfg(feature = "serde")]
    #[test]
    fn offsets_are_checked() {
        let bad = |items: Vec<usize>, offsets: Vec<usize>| {
            Grouped::from_offsets(items, offsets, "bin")
                .unwrap_err()
                .to_string()
        };
        assert_eq!(
            bad(vec![0], vec![]),
            "the offsets are empty: they must start at 0"
        );
        assert_eq!(
            bad(vec![0], vec![1, 1]),
            "the offsets must start at 0, not 1"
        );
        assert_eq!(
            bad(vec![0, 1], vec![0, 2, 1, 2]),
            "the offsets of bin 1 decrease: it would start at 2 and end at 1"
        );
        assert_eq!(
            bad(vec![0, 1], vec![0, 1]),
            "the last offset is 1 but there are 2 items: they must agree"
        );
        assert!(Grouped::from_offsets(vec![1usize, 0], vec![0, 0, 2], "bin").is_ok());
    }

    #[cfg(feature = "serde")]
    #[test]
    fn indices_are_checked() {
        let check = |groups: Vec<Vec<usize>>| {
            Grouped::from_nested(groups)
                .check_indices("part")
                .map_err(|e| e.to_string())
        };
        assert_eq!(check(vec![vec![1], vec![], vec![0, 2]]), Ok(()));
        assert_eq!(
            check(vec![vec![1], vec![0, 3]]),
            Err(
                "part 1 lists item 3 (at position 1), but there are only 3 items, \
                 and item 2 is in no part"
                    .into()
            )
        );
        assert_eq!(
            check(vec![vec![1, 0], vec![1]]),
            Err("item 1 is listed in part 0 and again in part 1".into())
        );
        assert_eq!(
            check(vec![vec![0, 0]]),
            Err("part 0 lists item 0 twice".into())
        );
    }

    #[cfg(feature = "serde")]
    #[test]
    fn ids_are_checked() {
        let g = Grouped::from_nested(vec![vec![7u64, 3], vec![], vec![9, 3]]);
        assert_eq!(
            g.check_unique("sequence").unwrap_err().to_string(),
            "item 3 is listed in sequence 0 and again in sequence 2"
        );
        let g = Grouped::from_nested(vec![vec![7u64, 3], vec![], vec![9, 4]]);
        assert_eq!(g.check_unique("sequence"), Ok(()));
        assert_eq!(g.group_at(2), 2);
    }
}
