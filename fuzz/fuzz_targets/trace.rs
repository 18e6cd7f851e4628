//! The command's CSV trace reader (`slidegate simulate --trace`) on arbitrary bytes: never a
//! panic, and every trace it accepts keeps the format's promises (see `slidegate_fuzz::trace`).
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| slidegate_fuzz::trace(data));
