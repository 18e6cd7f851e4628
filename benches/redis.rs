//! The Redis backend against the naive design and PING (written in the bench milestone).
fn main() {}
