//! `slidegate serve`.
#![allow(unused)]
mod engine;
mod metrics;
mod proto;
mod rules;
