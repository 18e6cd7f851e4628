//! A key's word: the eight bytes an inline table slot keeps in place of the key, for key
//! types whose `Hash` writes them injectively.
//!
//! Lookups take a borrowed `&Q`, not the owned `&K`, and `Q` need not be `'static`, so a
//! word is not read from the key's memory: it is what the key's `Hash` writes, captured by
//! [`Capture`]. The `Borrow` contract makes a borrowed key hash as its owner does, so a key
//! and every borrowed form of it give the same word. Whether a type's writes are injective
//! is a property of the type, not of `Hash`'s contract (which allows collisions), so only
//! the types listed in [`Encoding::of`] qualify, recognised by `TypeId` (`KeyedLimiter`
//! already requires `K: 'static`); every other key type keeps the store.

use core::any::TypeId;
use core::hash::{Hash, Hasher};
use std::net::Ipv4Addr;

/// How a key type's `Hash` writes become its word.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Encoding {
    /// Exactly this many bytes (at most eight): the word, zero-extended.
    Bytes(usize),
    /// Four bytes, possibly after a `usize` length prefix of 4: the four are the word.
    /// `Ipv4Addr`, which the standard library hashes as its octets (a slice: prefix and
    /// bytes) or, in later versions, as the `u32` of its bits.
    Ipv4,
}

impl Encoding {
    /// The encoding of key type `K`, if its `Hash` writes at most eight bytes that tell its
    /// values apart: the integers up to 64 bits, `char`, `bool` and `Ipv4Addr`.
    pub(crate) fn of<K: ?Sized + 'static>() -> Option<Encoding> {
        let t = TypeId::of::<K>();
        let is = |other: TypeId| t == other;
        let bytes = if is(TypeId::of::<u8>()) || is(TypeId::of::<i8>()) || is(TypeId::of::<bool>())
        {
            1
        } else if is(TypeId::of::<u16>()) || is(TypeId::of::<i16>()) {
            2
        } else if is(TypeId::of::<u32>()) || is(TypeId::of::<i32>()) || is(TypeId::of::<char>()) {
            4
        } else if is(TypeId::of::<u64>()) || is(TypeId::of::<i64>()) {
            8
        } else if is(TypeId::of::<usize>()) || is(TypeId::of::<isize>()) {
            size_of::<usize>()
        } else if is(TypeId::of::<Ipv4Addr>()) {
            return Some(Encoding::Ipv4);
        } else {
            return None;
        };
        Some(Encoding::Bytes(bytes))
    }

    /// The word of `key`, a key of the type this encoding is of or a borrowed form of one;
    /// `None` if its `Hash` wrote something else (a borrowed form that breaks the `Borrow`
    /// contract, which a `HashMap` would not find either).
    #[inline]
    pub(crate) fn word<Q: Hash + ?Sized>(self, key: &Q) -> Option<u64> {
        let mut capture = Capture::default();
        key.hash(&mut capture);
        // The bytes past those written are zero: the first eight are the written ones,
        // zero-extended (whole-array reads, so no copy of a variable length).
        let first = capture.first();
        match self {
            Encoding::Bytes(n) if capture.len == n => Some(first),
            Encoding::Ipv4 if capture.len == 4 => Some(first),
            Encoding::Ipv4
                if capture.len == size_of::<usize>() + 4
                    && capture.bytes[..size_of::<usize>()] == 4usize.to_ne_bytes() =>
            {
                // The four octets after the prefix, zero-extended.
                let at = size_of::<usize>();
                Some(u64::from_ne_bytes(zero_extended(
                    &capture.bytes[at..at + 4],
                )))
            }
            _ => None,
        }
    }
}

/// `bytes` (at most eight), zero-extended to eight.
fn zero_extended(bytes: &[u8]) -> [u8; 8] {
    let mut word = [0; 8];
    word[..bytes.len()].copy_from_slice(bytes);
    word
}

/// A `Hasher` that keeps the bytes written to it (up to sixteen), to read a key's word.
/// More than sixteen make its length [`OVERFLOW`], which no encoding accepts.
#[derive(Default)]
struct Capture {
    bytes: [u8; 16],
    len: usize,
}

/// The length of a capture that was written more than sixteen bytes.
const OVERFLOW: usize = usize::MAX;

impl Capture {
    /// The first eight bytes as a word.
    #[inline]
    fn first(&self) -> u64 {
        let [a, b, c, d, e, f, g, h, ..] = self.bytes;
        u64::from_ne_bytes([a, b, c, d, e, f, g, h])
    }

    /// Appends a fixed number of bytes: a copy of a constant length, which the integer
    /// writes of a key's `Hash` take.
    #[inline]
    fn put<const N: usize>(&mut self, bytes: [u8; N]) {
        match self.bytes.get_mut(self.len..self.len.saturating_add(N)) {
            Some(room) => {
                room.copy_from_slice(&bytes);
                self.len += N;
            }
            None => self.len = OVERFLOW,
        }
    }
}

impl Hasher for Capture {
    fn write(&mut self, bytes: &[u8]) {
        match self
            .bytes
            .get_mut(self.len..self.len.saturating_add(bytes.len()))
        {
            Some(room) => {
                room.copy_from_slice(bytes);
                self.len += bytes.len();
            }
            None => self.len = OVERFLOW,
        }
    }

    #[inline]
    fn write_u8(&mut self, i: u8) {
        self.put(i.to_ne_bytes());
    }

    #[inline]
    fn write_u16(&mut self, i: u16) {
        self.put(i.to_ne_bytes());
    }

    #[inline]
    fn write_u32(&mut self, i: u32) {
        self.put(i.to_ne_bytes());
    }

    #[inline]
    fn write_u64(&mut self, i: u64) {
        self.put(i.to_ne_bytes());
    }

    #[inline]
    fn write_usize(&mut self, i: usize) {
        self.put(i.to_ne_bytes());
    }

    /// Not a hash: the word is read from the bytes ([`Encoding::word`]).
    fn finish(&self) -> u64 {
        0
    }
}

#[cfg(test)]
mod tests;
