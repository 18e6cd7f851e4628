//! shuttle schedules of slidegate: the tests are in `tests/`, built only with
//! `RUSTFLAGS="--cfg slidegate_shuttle"` (see `.ci/shuttle`).
