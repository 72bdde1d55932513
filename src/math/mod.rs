//! Maths shared by several stages: branch-free f32 approximations ([`fastmath`]), assignment
//! solvers ([`assign`]) and small linear algebra ([`linalg`]).

pub mod assign;
pub mod fastmath;
pub mod linalg;
