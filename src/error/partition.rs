//! The messages of the partitioning errors: part counts, caps and the
//! partitions handed in for refinement.

use core::fmt;

use super::*;

/// The message of `err`, one of this module's variants (called by
/// `Display for Error` for those only).
pub(super) fn fmt(err: &Error, f: &mut fmt::Formatter<'_>) -> fmt::Result {
    match err {
        Error::UnequalCounts {
            part,
            items,
            fewest,
        } => write!(
            f,
            "part {part} of the partition to refine has {items} item(s), but equal counts \
                 allow {fewest} or {} per part; start from a partition with equal counts (a \
                 `Partitioner` with `equal_count(true)`) or refine without equal counts",
            fewest + 1
        ),
        Error::ZeroParts => {
            f.write_str("a partition into 0 parts was asked for; ask for at least 1 part")
        }
        Error::TooManyParts { parts, items } => write!(
            f,
            "{parts} parts for {items} item(s) would leave a part empty; ask for at most \
                 {items} parts, or allow empty parts"
        ),
        Error::CapExceeded {
            parts,
            dim,
            cap,
            best,
            proven,
            parts_needed,
        } => {
            if *proven {
                write!(
                        f,
                        "no partition into {parts} parts keeps every part within the cap {cap} in dimension {dim}"
                    )?;
            } else {
                write!(
                    f,
                    "found no partition into {parts} parts within the cap {cap} in dimension {dim}"
                )?;
            }
            write!(f, " (the best found has a part of {best})")?;
            if let Some(needed) = parts_needed {
                write!(f, "; {needed} parts would work")?;
            }
            Ok(())
        }
        Error::NotAPartition {
            items,
            index,
            times,
        } => {
            write!(f, "not a partition of {items} item(s): ")?;
            if *items == 0 {
                write!(f, "it lists index {index}, but there are no items")
            } else if index >= items {
                write!(
                    f,
                    "it lists index {index}, out of range (the items are numbered 0 to {}); \
                         refine a partition of these items",
                    items.saturating_sub(1)
                )
            } else if *times == 0 {
                write!(
                    f,
                    "item {index} is in no part; every item must be in exactly one part"
                )
            } else {
                write!(
                    f,
                    "item {index} is listed {times} times; every item must be in exactly \
                         one part"
                )
            }
        }
        // Not a variant of this module: nothing (never called so).
        _ => Ok(()),
    }
}
