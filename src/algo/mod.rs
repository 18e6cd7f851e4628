//! The admission rules, as pure maths on `(state, now, cost)`.
//!
//! Nothing here touches an atomic: storage (the lock-free ring in [`crate::window`]) reads its
//! state, hands the numbers to a rule, and owns the compare-and-swap.

pub(crate) mod sliding_counter;
