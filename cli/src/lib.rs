//! The `slidegate` command as a library: the simulator (`simulate`) and how a run fails
//! ([`Failure`]); `main.rs` is the command line over them, and `slidegate serve` is the
//! `slidegate-serve` crate's. The simulator's modules are public but hidden so that the fuzz
//! targets reach its trace reader; they are no stable API.

mod failure;
#[doc(hidden)]
pub mod simulate;

pub use failure::Failure;
