//! The shared code of slidegate's fuzz targets (`fuzz_targets/`, run with cargo-fuzz; see
//! TESTING.md).
//!
//! The targets call the command's own readers (the `slidegate-cli` and `slidegate-serve`
//! crates' hidden items), so they fuzz exactly the code `slidegate` runs; the reference model
//! is the one the property tests use (`slidegate-testkit`).

// The simulator's trace reader (`slidegate simulate --trace`).
use slidegate_cli::simulate::trace;

// The rules readers of `slidegate serve`.
use slidegate_serve::rules;

// The reference model the property tests use.
use slidegate_testkit::model;

pub mod differential;

use std::io::Cursor;

/// The trace reader on `data`: the first byte picks the quota's limit and whether bad lines
/// are skipped, the rest is the file. Panics (a crash for the fuzzer) if reading panics or
/// if an accepted trace breaks the format's promises: times in order and within
/// `MAX_SPAN` of the first, costs from 1 to the limit, keys non-empty, without
/// commas or surrounding spaces, and interned once; a strict read that succeeds reads the
/// same requests as a lenient one, with no bad lines.
pub fn trace(data: &[u8]) {
    let Some((&first, file)) = data.split_first() else {
        return;
    };
    // The command reads a trace only for a valid quota, so the limit is at most MAX_LIMIT.
    let limit = [1, 2, 10, 100, 1 << 20, slidegate::MAX_LIMIT][usize::from(first) % 6];
    let lenient =
        trace::read(Cursor::new(file), limit, true).expect("a lenient read fails only on I/O");
    let strict = trace::read(Cursor::new(file), limit, false);
    if let Ok(strict) = &strict {
        assert!(strict.bad_lines.is_empty());
        assert_eq!(strict.requests, lenient.requests);
        assert_eq!(strict.keys, lenient.keys);
    } else {
        assert!(
            !lenient.bad_lines.is_empty(),
            "a strict read failed on a file with no bad line"
        );
    }
    let t = &lenient;
    for pair in t.requests.windows(2) {
        assert!(pair[0].at <= pair[1].at, "requests out of order: {pair:?}");
    }
    if let (Some(a), Some(b)) = (t.requests.first(), t.requests.last()) {
        assert!(b.at - a.at <= trace::MAX_SPAN);
        assert!(b.at <= trace::MAX_NANOS);
    }
    for r in &t.requests {
        assert!(
            r.cost >= 1 && u64::from(r.cost) <= limit,
            "cost {} for limit {limit}",
            r.cost
        );
        assert!((r.key as usize) < t.keys.len());
    }
    let mut seen = std::collections::HashSet::new();
    for k in &t.keys {
        assert!(
            !k.is_empty() && !k.contains(',') && k.trim() == k,
            "key {k:?}"
        );
        assert!(seen.insert(k), "key {k:?} interned twice");
    }
    for pair in t.bad_lines.windows(2) {
        assert!(pair[0].line < pair[1].line);
    }
    for bad in &t.bad_lines {
        assert!(!bad.to_string().is_empty());
    }
}

/// The rules readers on `data`: the first byte picks the format (even: TOML, odd: Envoy's
/// YAML), the rest is the file, which must be UTF-8 (the server reads it as a string).
/// Panics if reading panics, or if an error names a line the file does not have or has no
/// message.
pub fn rules(data: &[u8]) {
    let Some((&first, file)) = data.split_first() else {
        return;
    };
    let Ok(text) = std::str::from_utf8(file) else {
        return;
    };
    let path = if first & 1 == 0 {
        "rules.toml"
    } else {
        "rules.yaml"
    };
    if let Err(e) = rules::load(std::path::Path::new(path), text) {
        // Lines as YAML counts them: a break is CR LF, LF or a lone CR (TOML's LF only).
        let lines = text
            .replace("\r\n", "\n")
            .replace('\r', "\n")
            .lines()
            .count()
            .max(1);
        if let Some(line) = e.line {
            // A parser may point just past the last line (an unterminated value at the end).
            assert!(
                line >= 1 && line <= lines + 1,
                "line {line} of {lines}: {e}"
            );
        }
        assert!(!e.message.is_empty(), "an error without a message: {e:?}");
    }
}
