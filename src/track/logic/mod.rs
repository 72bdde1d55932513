//! Track logic: confirmation and deletion. [`judge`]: each frame's hit or miss through the
//! rules, and the checks on a track's estimate; [`m_of_n`]: M-of-N over scans and the miss
//! window; [`edge`]: a track pinned to the search volume's edge by its own peaks;
//! [`duplicates`]: a track that follows an older track's source.

pub mod duplicates;
pub mod edge;
pub mod existence;
pub mod judge;
pub mod m_of_n;
