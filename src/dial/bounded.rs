//! A list of at most `N` items kept inline: a dial's plan and the attempts it started fit in one,
//! so a dial allocates no vector for them. Owns only what `schedule` and the race need (push,
//! remove the first, retain, and a slice view); not a general container.

use std::fmt;
use std::ops::{Deref, DerefMut};

/// Up to `N` items in an array; the slots past `len` hold `T::default()` and are never seen.
#[derive(Clone, Copy)]
pub struct Bounded<T, const N: usize> {
    items: [T; N],
    len: usize,
}

impl<T: Copy + Default, const N: usize> Bounded<T, N> {
    /// An empty list.
    pub fn new() -> Self {
        Bounded {
            items: [T::default(); N],
            len: 0,
        }
    }

    /// Appends `item`; false (and the list unchanged) when it already holds `N`.
    pub fn try_push(&mut self, item: T) -> bool {
        let Some(slot) = self.items.get_mut(self.len) else {
            return false;
        };
        *slot = item;
        self.len += 1;
        true
    }

    /// Removes and returns the first item, shifting the rest forward.
    pub fn remove_first(&mut self) -> Option<T> {
        let first = *self.first()?;
        self.items[..self.len].rotate_left(1);
        self.len -= 1;
        Some(first)
    }

    /// Keeps the items for which `keep` is true, in order.
    pub fn retain(&mut self, mut keep: impl FnMut(&T) -> bool) {
        let mut kept = 0;
        for i in 0..self.len {
            let item = self.items[i];
            if keep(&item) {
                self.items[kept] = item;
                kept += 1;
            }
        }
        self.len = kept;
    }
}

impl<T: Copy + Default, const N: usize> Default for Bounded<T, N> {
    fn default() -> Self {
        Self::new()
    }
}

impl<T, const N: usize> Deref for Bounded<T, N> {
    type Target = [T];

    fn deref(&self) -> &[T] {
        &self.items[..self.len]
    }
}

impl<T, const N: usize> DerefMut for Bounded<T, N> {
    fn deref_mut(&mut self) -> &mut [T] {
        &mut self.items[..self.len]
    }
}

impl<T: fmt::Debug, const N: usize> fmt::Debug for Bounded<T, N> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_list().entries(self.iter()).finish()
    }
}

impl<T: PartialEq, const N: usize> PartialEq for Bounded<T, N> {
    fn eq(&self, other: &Self) -> bool {
        **self == **other
    }
}

impl<T: Eq, const N: usize> Eq for Bounded<T, N> {}

impl<T: PartialEq, const N: usize, const M: usize> PartialEq<[T; M]> for Bounded<T, N> {
    fn eq(&self, other: &[T; M]) -> bool {
        **self == other[..]
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A bound of 3 filled with 1, 2, 3.
    fn full() -> Bounded<u8, 3> {
        let mut b = Bounded::<u8, 3>::new();
        assert!(b.try_push(1) && b.try_push(2) && b.try_push(3));
        b
    }

    #[test]
    fn holds_at_most_n() {
        let mut b = full();
        assert!(!b.try_push(4), "full");
        assert_eq!(b, [1, 2, 3]);
    }

    #[test]
    fn removals_keep_the_order() {
        let mut b = full();
        assert_eq!(b.remove_first(), Some(1));
        assert_eq!(b, [2, 3]);
        assert!(b.try_push(4));
        b.retain(|&x| x != 3);
        assert_eq!(b, [2, 4]);
        assert_eq!(format!("{b:?}"), "[2, 4]");
        b.retain(|_| false);
        assert_eq!(b.remove_first(), None);
        assert_eq!(b, []);
    }
}
