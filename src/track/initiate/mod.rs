//! Initiation: new tracks from what no confirmed track explains. [`multilat`]: runs of agreeing
//! multilateration fixes of the frame's unexplained peaks; [`mirror`]: a turning line array's
//! twin hypothesis across its axis, kept until the turn decides.

pub mod mirror;
pub mod multilat;
