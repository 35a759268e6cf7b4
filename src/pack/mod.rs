//! Bin packing (work in progress).
