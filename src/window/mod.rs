//! Storage for sliding windows: atomics laid out so that any number of threads can check one
//! window without a lock.

pub(crate) mod ring;
