//! `slidegate serve`.
#[allow(unused)]
mod proto;
#[allow(unused)]
mod rules;
