//! The ring's tests, run on each slot encoding (`wide` and `compact`).

use super::*;

/// The ring's tests on slots of encoding `Enc`.
macro_rules! ring_tests {
    () => {

        /// The words of a fresh packed ring of `buckets` buckets.
        fn owned(buckets: u64) -> Box<[AtomicU64]> {
            (0..Ring::<Enc>::words(buckets))
                .map(|i| AtomicU64::new(Ring::<Enc>::initial(buckets, i)))
                .collect()
        }

        /// The ring of `buckets` buckets packed in `words` (from [`owned`]).
        fn on(words: &[AtomicU64], buckets: u64) -> Ring<'_, Enc> {
            Ring::from_parts(packed(words), buckets)
        }

        /// Charges `n` at `t` (granularity 10) if the window's tail allows `limit` (Strict).
        fn charge_n(ring: &Ring<'_, Enc>, t: u64, n: u64, limit: u64) -> bool {
            let read = ring.read(10, || t, true, |r| r.tail(0) + n <= limit);
            read.is_some_and(|(ok, reading)| ok && ring.try_charge(reading, n))
        }

        /// The fast path reads only when the clock is in bucket `front` and the oldest snapshot
        /// is current; it then agrees with the general read, and its charge fails once anything
        /// was admitted since. Otherwise it hands over exactly the loads the general read makes.
        #[test]
        fn fast_read_takes_only_the_common_case() {
            // N = 2 buckets of 10 ns: 3 units at t = 5, 2 at t = 15 (a new bucket: the fast read
            // declines until it is established).
            let words = owned(2);
            let ring = on(&words, 2);
            assert!(charge_n(&ring, 5, 3, 10));
            let sum = |t: u64| ring.fast_read(10, || t).map(|f| (f.sum, f.offset)).ok();
            assert_eq!(sum(9), Some((3, 9)));
            assert_eq!(sum(10), None, "bucket 1 is not established yet");
            let loads = ring.fast_read(10, || 10).err().expect("declined");
            let load = ring.load(10);
            assert_eq!(
                (loads.t, loads.front, loads.cum, loads.oldest),
                (load.t, load.front, load.cum, load.oldest)
            );
            assert!(charge_n(&ring, 15, 2, 10));
            assert_eq!(sum(15), Some((5, 5)));
            assert_eq!(tails(&ring, 15)[0], 5, "the general read agrees");
            // Weighted's second snapshot: bucket 0's 3 units leave at bucket 2.
            let fast = ring.fast_read(10, || 15).expect("common case");
            assert_eq!(fast.rest(), Some(tails(&ring, 15)[1]));
            // A charge judged on a reading fails once anything was admitted since.
            assert!(charge_n(&ring, 16, 1, 10));
            assert!(!fast.charge(1));
            assert_eq!(tails(&ring, 16)[0], 6, "the failed charge wrote nothing");
            // A retired ring is never read fast.
            assert!(ring.retire_now());
            assert_eq!(sum(16), None);
        }

        /// The fast read's second and current snapshots, found from the index of bucket `front`'s
        /// slot without a division, are the general read's `tail(1)` and `tail(N)`, wherever
        /// `front` lies in the ring (every slot, over more than one lap).
        #[test]
        fn fast_rest_and_current_are_the_second_and_newest_tails() {
            for n in 1..=5u64 {
                let words = owned(n);
                let ring = on(&words, n);
                for bucket in 0..3 * (n + 1) {
                    let t = bucket * 10 + 3;
                    assert!(charge_n(&ring, t, 1 + bucket % 3, u64::from(u32::MAX)));
                    let fast = ring.fast_read(10, || t).expect("common case");
                    let at = fast.front_index();
                    let tails = tails(&ring, t);
                    assert_eq!(fast.rest_at(at), Some(tails[1]), "N = {n}, bucket {bucket}");
                    assert_eq!(fast.rest(), Some(tails[1]), "N = {n}, bucket {bucket}");
                    assert_eq!(
                        fast.current_at(at),
                        Some(tails[n as usize]),
                        "N = {n}, bucket {bucket}"
                    );
                }
            }
        }

        /// The tails `tail(0 ..= N)` at `t` (granularity 10), read without writing.
        fn tails(ring: &Ring<'_, Enc>, t: u64) -> Vec<u64> {
            let n = ring.buckets();
            ring.read(10, || t, false, |r| (0..=n).map(|j| r.tail(j)).collect())
                .map(|(v, _)| v)
                .expect("live ring")
        }

        #[test]
        fn refund_expires_the_oldest_units_first() {
            // N = 2 buckets of 10 ns, L = 10: 3 units in bucket 0, 2 in bucket 1, 1 in bucket 2.
            let words = owned(2);
            let ring = on(&words, 2);
            for (t, n) in [(0, 3), (10, 2), (25, 1)] {
                assert!(charge_n(&ring, t, n, 10));
            }
            assert_eq!(tails(&ring, 25), [6, 3, 1]);
            // Refunding 4 expires bucket 0's 3 and one of bucket 1's.
            assert_eq!(ring.refund(10, || 25, 4, |_| 0), Some(4));
            assert_eq!(tails(&ring, 25), [2, 2, 1]);
            // The next bucket's window keeps what is left, not the refunded units.
            assert_eq!(tails(&ring, 35), [2, 1, 0]);
            assert_eq!(ring.admitted(), 6, "a refund never lowers the count");
        }

        #[test]
        fn refund_is_partial_when_the_window_holds_less() {
            let words = owned(2);
            let ring = on(&words, 2);
            assert!(charge_n(&ring, 0, 2, 5));
            assert_eq!(ring.refund(10, || 5, 7, |_| 0), Some(2));
            assert_eq!(tails(&ring, 5), [0, 0, 0]);
            assert_eq!(ring.refund(10, || 5, 1, |_| 0), Some(0));
            // Room is back: the full limit fits again.
            assert!(charge_n(&ring, 5, 5, 5));
        }

        #[test]
        fn refund_after_a_fill_moves_the_ring_first() {
            // Units at bucket 0; a refund at bucket 3 (a window later) has nothing to free.
            let words = owned(2);
            let ring = on(&words, 2);
            assert!(charge_n(&ring, 0, 3, 5));
            assert_eq!(ring.refund(10, || 35, 3, |_| 0), Some(0));
            // Units across buckets 3 and 4, refunded at 4 after the fill to it.
            assert!(charge_n(&ring, 35, 2, 5));
            assert!(charge_n(&ring, 45, 2, 5));
            assert_eq!(ring.refund(10, || 45, 3, |_| 0), Some(3));
            assert_eq!(tails(&ring, 45), [1, 1, 1]);
            assert_eq!(tails(&ring, 55), [1, 1, 0]);
        }

        #[test]
        fn refund_leaves_pending_reservations_alone_and_does_nothing_when_retired() {
            let words = owned(1);
            let ring = on(&words, 1);
            assert!(charge_n(&ring, 0, 1, 3));
            assert!(reserve(&ring, 0, 2, 3));
            assert_eq!(ring.refund(10, || 0, 3, |_| 0), Some(1));
            assert_eq!(tails(&ring, 0), [2, 2]);
            ring.release(2);
            assert!(ring.retire_now());
            assert_eq!(ring.refund(10, || 0, 1, |_| 0), None);
        }

        #[test]
        fn a_reader_whose_count_is_older_than_a_raise_is_torn_not_negative() {
            let words = owned(1);
            let ring = on(&words, 1);
            assert!(charge_n(&ring, 0, 2, 5));
            let fields = |r: &Reading<'_, Enc>| (r.front, r.bucket, r.offset, r.cum, r.oldest);
            let (front, bucket, offset, cum, oldest) = ring.read(10, || 0, true, fields).expect("live").0;
            let stale = Reading {
                ring: &ring,
                front,
                bucket,
                offset,
                lag: 0,
                cum,
                oldest,
                torn: Cell::new(false),
            };
            assert!(charge_n(&ring, 0, 2, 5));
            // Raises both snapshots to 3, past the stale reading's count of 2; `tail(1)` loads
            // the newest slot afresh (`tail(0)` uses the oldest as `read` loaded it).
            assert_eq!(ring.refund(10, || 0, 3, |_| 0), Some(3));
            assert_eq!(stale.tail(0), 2);
            assert!(!stale.torn.get());
            assert_eq!(stale.tail(1), 0);
            assert!(stale.torn.get());
        }

        /// The sequential model of a refund: per-bucket counts, the oldest removed first.
        #[derive(Default)]
        struct Buckets(std::collections::BTreeMap<u64, u64>);

        impl Buckets {
            fn tail(&self, b: u64, n: u64, j: u64) -> u64 {
                let from = (b + j).saturating_sub(n);
                self.0.range(from..=b).map(|(_, c)| c).sum()
            }

            fn refund(&mut self, b: u64, n: u64, mut left: u64) -> u64 {
                let from = b.saturating_sub(n);
                let mut freed = 0;
                for (_, c) in self.0.range_mut(from..=b) {
                    let take = left.min(*c);
                    *c -= take;
                    (left, freed) = (left - take, freed + take);
                }
                freed
            }
        }

        proptest::proptest! {
            #![proptest_config(proptest::prelude::ProptestConfig::with_cases(512))]

            /// Charges and refunds at steps of time equal a per-bucket model that removes the
            /// oldest counted units: every tail, every refund's count, the count itself.
            #[test]
            fn refunds_equal_the_oldest_first_model(
                buckets in 1u64..=4,
                limit in 1u64..=6,
                steps in proptest::collection::vec((0u64..=25, 0u64..=7, proptest::bool::ANY), 1..40),
            ) {
                let words = owned(buckets);
            let ring = on(&words, buckets);
                let mut model = Buckets::default();
                let (mut t, mut admitted) = (0, 0);
                for (dt, n, refund) in steps {
                    t += dt;
                    let b = t / 10;
                    if refund {
                        let freed = ring.refund(10, || t, n, |_| 0);
                        proptest::prop_assert_eq!(freed, Some(model.refund(b, buckets, n)));
                    } else if n > 0 {
                        let ok = charge_n(&ring, t, n, limit);
                        proptest::prop_assert_eq!(ok, model.tail(b, buckets, 0) + n <= limit);
                        if ok {
                            *model.0.entry(b).or_default() += n;
                            admitted += n;
                        }
                    }
                    let want: Vec<u64> = (0..=buckets).map(|j| model.tail(b, buckets, j)).collect();
                    proptest::prop_assert_eq!(tails(&ring, t), want, "at {}", t);
                    proptest::prop_assert_eq!(ring.admitted(), admitted);
                }
            }
        }

        #[test]
        fn goal_jumps_straight_unless_tags_would_alias() {
            let goal_for = goal_for::<Enc>;
            assert_eq!(goal_for(100, 103, 10), 103);
            assert_eq!(goal_for(100, 150, 10), 150);
            // Tags are the bucket index mod 2^TAG_BITS.
            let (space, half) = (1u64 << Enc::TAG_BITS, 1u64 << (Enc::TAG_BITS - 1));
            let far = 100 + space + 3;
            assert_eq!(goal_for(100, far, 10), 100 + half);
            // From half-way the rest of the jump is safe.
            assert_eq!(goal_for(100 + half, far, 10), far);
            let near = 100 + space - 5;
            assert_eq!(goal_for(100, near, 10), 100 + half);
            assert_eq!(goal_for(100, 100 + space + 20, 10), 100 + space + 20);
            assert_eq!(
                goal_for(100, 100 + (1u64 << 32) + 20, 10),
                100 + (1u64 << 32) + 20
            );
        }

        #[test]
        fn later_follows_wrapping_order() {
            assert_eq!(Enc::later(5, 9), 9);
            assert_eq!(Enc::later(9, 5), 9);
            assert_eq!(Enc::later(Enc::SNAPSHOT_MASK - 1, 3), 3);
            assert_eq!(Enc::later(3, Enc::SNAPSHOT_MASK - 1), 3);
        }

        /// Snapshots hold the count mod 2^SNAPSHOT_BITS: tails and refunds across the wrap are
        /// exact, while the count itself wraps at 2³².
        #[test]
        fn snapshots_wrap_with_their_width() {
            let words = owned(2);
            let ring = on(&words, 2);
            let below = u64::from(Enc::SNAPSHOT_MASK) - 1;
            ring.cum.store(below, Ordering::Relaxed);
            // A jump past the whole window establishes every snapshot at the count.
            assert!(charge_n(&ring, 100, 1, 10));
            assert!(charge_n(&ring, 110, 3, 10));
            assert_eq!(tails(&ring, 110), [4, 4, 3]);
            assert_eq!(ring.refund(10, || 110, 2, |_| 0), Some(2));
            assert_eq!(tails(&ring, 110), [2, 2, 2]);
            assert_eq!(tails(&ring, 125), [2, 2, 0]);
            assert_eq!(ring.admitted(), (below + 4) & COUNT);
        }

        /// Charges cost 1 at `t` (ns, granularity 10).
        fn charge(ring: &Ring<'_, Enc>, t: u64) -> bool {
            let read = ring.read(10, || t, true, |_| ());
            read.is_some_and(|((), reading)| ring.try_charge(reading, 1))
        }

        #[test]
        fn retire_idle_waits_until_the_window_is_empty() {
            // N = 2 buckets of 10 ns: an admission at t = 5 (bucket 0) counts until bucket 3.
            let words = owned(2);
            let ring = on(&words, 2);
            assert!(charge(&ring, 5));
            for t in [5, 20, 29] {
                assert!(
                    !ring.retire_idle(10, t),
                    "retired at {t} with bucket 0 in the window"
                );
            }
            assert!(ring.retire_idle(10, 30));
            assert!(ring.is_retired());
            assert!(!ring.retire_idle(10, 30), "retired twice");
            assert!(!ring.retire_now(), "retired twice");
            // A retired ring gives no reading and takes no charge.
            assert!(ring.read(10, || 30, true, |_| ()).is_none());
            assert!(!charge(&ring, 30));
            assert_eq!(ring.admitted(), 1);
        }

        #[test]
        fn a_reading_taken_before_retirement_cannot_charge() {
            let words = owned(2);
            let ring = on(&words, 2);
            let Some(((), reading)) = ring.read(10, || 0, true, |_| ()) else {
                panic!("a live ring reads");
            };
            assert!(ring.retire_now());
            assert!(!ring.try_charge(reading, 1));
            assert_eq!(ring.admitted(), 0);
        }

        #[test]
        fn counts_wrap_below_the_pending_field() {
            let words = owned(1);
            let ring = on(&words, 1);
            ring.cum.store(COUNT, Ordering::Relaxed);
            assert!(charge(&ring, 0));
            assert_eq!(ring.admitted(), 0);
            assert!(!ring.is_retired());
            assert_eq!(pending_of(ring.cum.load(Ordering::Relaxed)), 0);
            // A commit across the wrap leaves pending exact too.
            ring.cum.store(COUNT, Ordering::Relaxed);
            let read = ring.read(10, || 0, true, |_| ());
            assert!(read.is_some_and(|((), r)| ring.try_reserve(r, 2)));
            assert!(ring.commit(2));
            assert_eq!(ring.cum.load(Ordering::Relaxed), 1);
        }

        /// Reserves `cost` at `t` (ns, granularity 10) if the ring's tail sum allows `limit`.
        fn reserve(ring: &Ring<'_, Enc>, t: u64, cost: u64, limit: u64) -> bool {
            let read = ring.read(10, || t, true, |r| r.tail(0) + cost <= limit);
            read.is_some_and(|(ok, reading)| ok && ring.try_reserve(reading, cost))
        }

        #[test]
        fn pending_counts_in_every_tail_and_release_leaves_no_trace() {
            // N = 2 buckets of 10 ns.
            let words = owned(2);
            let ring = on(&words, 2);
            assert!(charge(&ring, 0));
            assert!(reserve(&ring, 0, 2, 3));
            assert!(
                !reserve(&ring, 0, 1, 3),
                "the reservation's room was taken again"
            );
            // A fill while reserved snapshots the count only.
            let tails = ring.read(
                10,
                || 15,
                true,
                |r| [r.tail(0), r.tail(1), r.tail(2), r.tail(3)],
            );
            assert_eq!(tails.map(|(t, _)| t), Some([3, 3, 2, 0]));
            ring.release(2);
            assert_eq!(ring.admitted(), 1);
            let tails = ring.read(10, || 15, true, |r| [r.tail(0), r.tail(1), r.tail(2)]);
            assert_eq!(tails.map(|(t, _)| t), Some([1, 1, 0]));
            // A peek beyond `front` still sees pending in the bucket judged.
            assert!(reserve(&ring, 15, 1, 3));
            let tails = ring.read(10, || 45, false, |r| [r.tail(0), r.tail(2), r.tail(3)]);
            assert_eq!(tails.map(|(t, _)| t), Some([1, 1, 0]));
            assert!(ring.commit(1));
            assert_eq!(ring.admitted(), 2);
            assert_eq!(pending_of(ring.cum.load(Ordering::Relaxed)), 0);
        }

        #[test]
        fn retirement_and_reservations() {
            let words = owned(1);
            let ring = on(&words, 1);
            assert!(reserve(&ring, 0, 1, 1));
            // Idle in time, but a reservation may yet be committed: not retired.
            assert!(!ring.retire_idle(10, 100));
            ring.release(1);
            assert!(ring.retire_idle(10, 100));
            // A forced retirement makes a pending commit fail, writing nothing.
            let words = owned(1);
            let ring = on(&words, 1);
            assert!(reserve(&ring, 0, 1, 1));
            assert!(ring.retire_now());
            assert!(!ring.commit(1));
            ring.release(1);
            assert_eq!(ring.admitted(), 0);
            assert!(ring.is_retired());
        }

        #[test]
        fn a_fill_establishes_every_bucket_of_the_goal_window() {
            let words = owned(3);
            let ring = on(&words, 3);
            ring.advance(4 + 2);
            assert_eq!(ring.front.load(Ordering::Relaxed), 6);
            for k in 3..=6 {
                assert_eq!(Enc::tag_of(ring.slot(k).load(Ordering::Relaxed)), Enc::tag(k));
            }
            ring.advance(6 + 100);
            for k in 103..=106 {
                assert_eq!(Enc::tag_of(ring.slot(k).load(Ordering::Relaxed)), Enc::tag(k));
            }
        }
    };
}

mod wide {
    use super::*;

    type Enc = Wide;

    ring_tests!();
}

mod compact {
    use super::*;

    type Enc = Compact;

    ring_tests!();
}
