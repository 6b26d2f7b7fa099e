//! The library part of the `hprm` command: what its subcommands use that
//! is worth calling (and testing) on its own.
//!
//! - [`systemd`]: the systemd units and configuration that run a program
//!   as services (`hprm deploy --systemd`). It lived in `hprm-node`, which
//!   no program needs it from: only the command line deploys.

pub mod systemd;
