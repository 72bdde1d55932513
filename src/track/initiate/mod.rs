//! Initiation: new tracks from what no confirmed track explains. [`multilat`]: runs of agreeing
//! multilateration fixes of the frame's unexplained peaks; [`births`]: whether a fix is a new
//! source; [`mirror`]: a turning line array's twin hypothesis across its axis, kept until the
//! turn decides, and [`twins`], how the tracker keeps them.

pub mod births;
pub mod curves;
pub mod mirror;
pub mod multilat;
pub mod twins;
