//! Association: which track each sensor pair's peaks go to. [`gnn`]: global nearest neighbour
//! frame by frame (the default); [`mfa`]: multi-frame assignment over a sliding window of frames
//! (`tracker.association = "mfa"`).

pub mod gnn;
pub mod mfa;
