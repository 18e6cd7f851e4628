//! Key words: which key types have one, and that it tells keys apart exactly as `Eq` does,
//! for owned and borrowed keys alike.

use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};

use proptest::prelude::*;

use super::*;

/// The word of an owned key of type `K`.
fn word<K: Hash + 'static>(key: &K) -> Option<u64> {
    Encoding::of::<K>()?.word(key)
}

#[test]
fn only_types_that_hash_to_at_most_eight_telling_bytes_have_a_word() {
    assert_eq!(Encoding::of::<u8>(), Some(Encoding::Bytes(1)));
    assert_eq!(Encoding::of::<bool>(), Some(Encoding::Bytes(1)));
    assert_eq!(Encoding::of::<i16>(), Some(Encoding::Bytes(2)));
    assert_eq!(Encoding::of::<char>(), Some(Encoding::Bytes(4)));
    assert_eq!(Encoding::of::<u64>(), Some(Encoding::Bytes(8)));
    assert_eq!(Encoding::of::<Ipv4Addr>(), Some(Encoding::Ipv4));
    // Too wide, or not known to be injective: the store.
    assert_eq!(Encoding::of::<u128>(), None);
    assert_eq!(Encoding::of::<String>(), None);
    assert_eq!(Encoding::of::<str>(), None);
    assert_eq!(Encoding::of::<(u32, u32)>(), None);
    assert_eq!(Encoding::of::<IpAddr>(), None);
    assert_eq!(Encoding::of::<Ipv6Addr>(), None);
    assert_eq!(Encoding::of::<[u8; 4]>(), None);
}

#[test]
fn words_are_the_values_themselves() {
    assert_eq!(word(&0x0123_4567_89ab_cdefu64), Some(0x0123_4567_89ab_cdef));
    assert_eq!(word(&-1i8), Some(0xff));
    assert_eq!(word(&true), Some(1));
    assert_eq!(word(&'é'), Some(u64::from(u32::from('é'))));
    // An address's four bytes, in the order the standard library hashes them.
    let ip = word(&Ipv4Addr::new(10, 0, 0, 1)).unwrap();
    assert!(ip < 1 << 32 && [10, 1].iter().all(|b| ip.to_ne_bytes().contains(b)));
}

#[test]
fn a_key_that_writes_other_bytes_than_its_type_has_no_word() {
    let u32s = Encoding::of::<u32>().unwrap();
    assert_eq!(
        u32s.word(&7u64),
        None,
        "eight bytes where four are expected"
    );
    assert_eq!(u32s.word("a string"), None);
    assert_eq!(Encoding::Ipv4.word(&7u64), None);
    // More than the capture holds.
    assert_eq!(u32s.word(&[1u64, 2, 3]), None);
}

/// A borrowed form of `u64` keys (a user may implement `Borrow<Id> for u64`): it hashes as a
/// `u64` does, as the `Borrow` contract requires.
#[derive(PartialEq, Eq, Hash)]
struct Id(u64);

#[test]
fn a_borrowed_key_has_its_owners_word() {
    // `Id` hashes its `u64` as the `u64` does: a lookup by `&Id` finds the key `n`.
    let u64s = Encoding::of::<u64>().unwrap();
    for n in [0, 1, u64::MAX, 0x8000_0000] {
        assert_eq!(u64s.word(&Id(n)), word(&n));
    }
}

proptest! {
    /// Two keys have one word exactly when they are equal: the word stands for the key.
    #[test]
    fn words_tell_keys_apart_as_eq_does(
        a in any::<u64>(), b in any::<u64>(),
        c in any::<i16>(), d in any::<i16>(),
        e in any::<char>(), f in any::<char>(),
        g in any::<[u8; 4]>(), h in any::<[u8; 4]>(),
    ) {
        prop_assert_eq!(word(&a) == word(&b), a == b);
        prop_assert_eq!(word(&c) == word(&d), c == d);
        prop_assert_eq!(word(&e) == word(&f), e == f);
        let (g, h) = (Ipv4Addr::from(g), Ipv4Addr::from(h));
        prop_assert_eq!(word(&g) == word(&h), g == h);
        prop_assert!(word(&a).is_some() && word(&c).is_some() && word(&e).is_some());
        prop_assert!(word(&g).is_some());
    }
}
