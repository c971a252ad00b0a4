//! Large index arrays in memory the kernel is asked to back with huge pages.
//!
//! A greedy plan of a million buffers queries its index in an order that
//! jumps around in time, so nearly every query touches pages no recent
//! query touched. With 4 KiB pages each of those is a TLB miss besides a
//! cache miss; 2 MiB pages remove most of the former (measured in
//! BENCHMARKS.md, Planner, "Scale"). Where the kernel offers no huge pages,
//! or the array is small, this is an ordinary heap array.

use bytemuck::Pod;
use std::ops::{Deref, DerefMut};

/// Arrays smaller than one huge page stay on the heap.
const HUGE_PAGE: usize = 2 << 20;

pub(crate) struct HugeArray<T: Pod> {
    storage: Storage<T>,
}

enum Storage<T> {
    Heap(Vec<T>),
    Mapped { map: memmap2::MmapMut, len: usize },
}

impl<T: Pod> HugeArray<T> {
    /// `len` zeroed records.
    pub fn zeroed(len: usize) -> Self {
        let bytes = len.saturating_mul(std::mem::size_of::<T>());
        if bytes >= HUGE_PAGE && std::mem::align_of::<T>() <= 4096 {
            if let Some(map) = huge_mapping(bytes) {
                return HugeArray {
                    storage: Storage::Mapped { map, len },
                };
            }
        }
        HugeArray {
            storage: Storage::Heap(vec![T::zeroed(); len]),
        }
    }
}

#[cfg(test)]
impl<T: Pod> HugeArray<T> {
    pub fn is_mapped(&self) -> bool {
        matches!(self.storage, Storage::Mapped { .. })
    }
}

/// An anonymous mapping (zeroed, page-aligned) advised to use huge pages;
/// `None` where either is refused.
fn huge_mapping(bytes: usize) -> Option<memmap2::MmapMut> {
    #[cfg(target_os = "linux")]
    {
        let map = memmap2::MmapMut::map_anon(bytes).ok()?;
        map.advise(memmap2::Advice::HugePage).ok()?;
        Some(map)
    }
    #[cfg(not(target_os = "linux"))]
    {
        let _ = bytes;
        None
    }
}

impl<T: Pod> Deref for HugeArray<T> {
    type Target = [T];

    fn deref(&self) -> &[T] {
        match &self.storage {
            Storage::Heap(v) => v,
            Storage::Mapped { map, len } => {
                bytemuck::cast_slice(&map[..len * std::mem::size_of::<T>()])
            }
        }
    }
}

impl<T: Pod> DerefMut for HugeArray<T> {
    fn deref_mut(&mut self) -> &mut [T] {
        match &mut self.storage {
            Storage::Heap(v) => v,
            Storage::Mapped { map, len } => {
                bytemuck::cast_slice_mut(&mut map[..*len * std::mem::size_of::<T>()])
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn large_and_small_arrays_read_back_what_was_written() {
        for len in [0usize, 3, (HUGE_PAGE / 8) + 5] {
            let mut a = HugeArray::<u64>::zeroed(len);
            assert_eq!(a.len(), len);
            assert_eq!(a.is_mapped(), len > 5 && cfg!(target_os = "linux"));
            assert!(a.iter().all(|&x| x == 0));
            for (i, x) in a.iter_mut().enumerate() {
                *x = i as u64 * 3;
            }
            assert!(a.iter().enumerate().all(|(i, &x)| x == i as u64 * 3));
        }
    }
}
