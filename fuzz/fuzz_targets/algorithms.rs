//! Every algorithm — direct, keyed with a tiny `max_keys`, and through `check_all` — against
//! the reference model on arbitrary sequences of clock steps and operations (see
//! `slidegate_fuzz::differential`).
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| slidegate_fuzz::differential::run(data));
