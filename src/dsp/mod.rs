//! Pure signal processing and geometry: slices in, values out. No I/O, no CUDA types.
pub mod coherence;
pub mod crosstalk;
pub mod gcc;
pub mod geometry;
pub mod health;
pub mod multilat;
