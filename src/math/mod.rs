//! Maths shared by several stages: branch-free f32 approximations ([`fastmath`]), band-limited
//! interpolation ([`interp`]: GCC peaks and the simulator's delays), assignment solvers
//! ([`assign`]; with dummies and over S lists, [`sd_assign`]), small linear algebra ([`linalg`]) and georeferencing ([`geo`]).

pub mod assign;
pub mod fastmath;
pub mod geo;
pub mod interp;
pub mod linalg;
pub mod sd_assign;
