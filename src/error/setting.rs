//! The messages of the errors about settings and names: a setting out of
//! its range, a name that is not known.

use core::fmt;

use super::*;

/// The message of `err`, one of this module's variants (called by
/// `Display for Error` for those only).
pub(super) fn fmt(err: &Error, f: &mut fmt::Formatter<'_>) -> fmt::Result {
    match err {
        Error::UnknownName { kind, name, known } => {
            write!(f, "unknown {kind} {name:?}; known: ")?;
            for (i, k) in known.iter().enumerate() {
                if i > 0 {
                    f.write_str(", ")?;
                }
                f.write_str(k)?;
            }
            Ok(())
        }
        // Not a variant of this module: nothing (never called so).
        _ => Ok(()),
    }
}

/// The message of [`Error::Invalid`] at a setting.
pub(super) fn invalid(
    at: Locator,
    value: Scalar,
    _reason: InvalidReason,
    f: &mut fmt::Formatter<'_>,
) -> fmt::Result {
    match at {
        Locator::Setting { name, requirement } => write!(
            f,
            "the setting `{name}` is {value}; it must be {requirement}"
        ),
        // Not a locator of this module: nothing (never called so).
        _ => Ok(()),
    }
}
