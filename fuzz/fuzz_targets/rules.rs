//! The rules readers of `slidegate serve` (TOML and Envoy's YAML) on arbitrary text: never a
//! panic, and every error names a line of the file (see `slidegate_fuzz::rules`).
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| slidegate_fuzz::rules(data));
