//! Maths shared by several stages: branch-free f32 approximations ([`fastmath`]), f64 exp and
//! ln that both backends evaluate alike ([`fastmath64`]), band-limited
//! interpolation ([`interp`]: GCC peaks and the simulator's delays), assignment solvers
//! ([`assign`]; with dummies and over S lists, [`sd_assign`]), small linear algebra ([`linalg`]) and georeferencing ([`geo`]).

pub mod assign;
pub mod fastmath;
pub mod fastmath64;
pub mod geo;
pub mod interp;
pub mod linalg;
pub mod sd_assign;
