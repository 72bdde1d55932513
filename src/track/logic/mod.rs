//! Track logic: confirmation and deletion. [`m_of_n`]: M-of-N over scans and the miss window;
//! [`edge`]: a track pinned to the search volume's edge by its own peaks.

pub mod edge;
pub mod m_of_n;
