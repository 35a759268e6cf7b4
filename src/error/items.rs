//! The messages of the errors about items and capacities (packing and
//! partitioning): dimensions, capacities, sizes, oversize items, size sums.

use core::fmt;

use super::*;

/// The message of `err`, one of this module's variants (called by
/// `Display for Error` for those only).
pub(super) fn fmt(err: &Error, f: &mut fmt::Formatter<'_>) -> fmt::Result {
    match err {
            Error::NoDimensions => f.write_str(
                "an item or the capacity (or cap) has no dimension; every item and capacity \
                 needs at least one size",
            ),
            Error::ZeroCapacity { dim } => write!(
                f,
                "the capacity is zero in dimension {dim}; every dimension of a capacity must be positive"
            ),
            Error::DimensionMismatch {
                index,
                expected,
                found,
            } => write!(
                f,
                "item {index} has {found} dimension(s) but the capacity has {expected}; \
                 give every item one size per dimension of the capacity"
            ),
            Error::Oversize { items } => {
                if items.iter().all(|o| o.id.is_some()) && !items.is_empty() {
                    write!(f, "{} sample(s) fit no packed sequence:", items.len())?;
                } else {
                    write!(f, "{} item(s) larger than the capacity:", items.len())?;
                }
                for o in items.iter().take(LISTED) {
                    match o.id {
                        Some(id) => write!(f, " sample {id} has ")?,
                        None => write!(f, " item {} has ", o.index)?,
                    }
                    match o.name {
                        Some(name) => write!(f, "{} {name} > {};", o.size, o.capacity)?,
                        None => write!(
                            f,
                            "size {} > {} in dimension {};",
                            o.size, o.capacity, o.dim
                        )?,
                    }
                }
                if items.len() > LISTED {
                    write!(f, " and {} more", items.len() - LISTED)?;
                }
                Ok(())
            }
            Error::SizeOverflow { dim } => {
                f.write_str("the sizes sum beyond f64::MAX (about 1.8e308)")?;
                match dim {
                    Some(dim) => write!(f, " in dimension {dim}")?,
                    None => f.write_str(" over all dimensions")?,
                }
                f.write_str("; express them in a larger unit (divide every size by the same factor)")
            }
        // Not a variant of this module: nothing (never called so).
        _ => Ok(()),
    }
}

/// The message of [`Error::Invalid`] at a capacity or an item's size.
pub(super) fn invalid(
    at: Locator,
    value: Scalar,
    reason: InvalidReason,
    f: &mut fmt::Formatter<'_>,
) -> fmt::Result {
    match at {
        Locator::Capacity { dim } => write!(
            f,
            "the capacity {value} in dimension {dim} is invalid: {reason}; \
             a capacity must be finite and positive"
        ),
        Locator::Size { index, dim } => write!(
            f,
            "item {index} has size {value} in dimension {dim}: {reason}; \
             sizes must be finite and non-negative"
        ),
        // Not a locator of this module: nothing (never called so).
        _ => Ok(()),
    }
}
