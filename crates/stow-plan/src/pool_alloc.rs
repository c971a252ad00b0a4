//! An online first-fit allocator for memory that cannot be planned ahead
//! (M3): run-time-sized tensors, several models sharing one arena.
//!
//! The pool is a doubly linked list of blocks in address order; each block
//! knows its offset, size, neighbours and whether it is free. Allocation is
//! first fit from the head: the first free block that holds the request is
//! split, the remainder becoming a new free block. Freeing a block merges it
//! with free neighbours, so no two free blocks are ever adjacent. Every
//! offset and size is a whole multiple of the *unit* (the minimum
//! allocation unit, 64 bytes by default in Stowage).
//!
//! Allocation costs O(blocks); freeing costs O(1) plus a hash lookup.

use std::collections::HashMap;
use std::fmt;
use thiserror::Error;

const NIL: u32 = u32::MAX;

#[derive(Clone, Copy, Debug)]
struct Node {
    offset: u64,
    size: u64,
    free: bool,
    prev: u32,
    next: u32,
}

/// A first-fit pool with splitting and coalescing.
///
/// Invariants: blocks tile `[0, capacity)` in address order without gaps;
/// no two free blocks are adjacent; every block's offset and size are
/// multiples of the unit.
#[derive(Clone)]
pub struct FirstFitPool {
    unit: u64,
    capacity: u64,
    nodes: Vec<Node>,
    spare: Vec<u32>,
    head: u32,
    allocated: HashMap<u64, u32>,
    in_use: u64,
    high_water: u64,
}

/// One allocation handed out by [`FirstFitPool::alloc`].
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Allocation {
    /// Offset in the pool, a multiple of the unit and of the requested
    /// alignment.
    pub offset: u64,
    /// Bytes reserved: the request rounded up to the unit (at least one unit).
    pub size: u64,
}

/// Why a pool operation failed.
#[derive(Clone, Debug, Error, PartialEq, Eq)]
pub enum PoolError {
    /// No free block holds the request.
    #[error(
        "out of pool memory: {requested} bytes requested, largest free block {largest_free} bytes"
    )]
    OutOfMemory {
        /// Bytes requested (rounded to the unit).
        requested: u64,
        /// The largest free block.
        largest_free: u64,
    },
    /// `free` was given an offset that is not the start of an allocation.
    #[error("offset {0} is not the start of a live allocation")]
    NotAllocated(u64),
    /// A unit or alignment was zero or not a power of two.
    #[error("{0} is not a power of two")]
    BadAlignment(u64),
    /// `reserve` asked for bytes that are not all free, or are past the end.
    #[error("bytes [{offset}, {end}) are not all free")]
    NotFree {
        /// Start of the range.
        offset: u64,
        /// End of the range.
        end: u64,
    },
}

impl FirstFitPool {
    /// A pool of `capacity` bytes (rounded down to the unit) handing out
    /// multiples of `unit`, a power of two.
    pub fn new(capacity: u64, unit: u64) -> Result<Self, PoolError> {
        if unit == 0 || !unit.is_power_of_two() {
            return Err(PoolError::BadAlignment(unit));
        }
        let capacity = capacity & !(unit - 1);
        let mut pool = FirstFitPool {
            unit,
            capacity,
            nodes: Vec::new(),
            spare: Vec::new(),
            head: NIL,
            allocated: HashMap::new(),
            in_use: 0,
            high_water: 0,
        };
        if capacity > 0 {
            pool.head = pool.node(Node {
                offset: 0,
                size: capacity,
                free: true,
                prev: NIL,
                next: NIL,
            });
        }
        Ok(pool)
    }

    /// A pool with no practical capacity: it records how high allocations
    /// reach ([`FirstFitPool::high_water`]).
    pub fn unbounded(unit: u64) -> Result<Self, PoolError> {
        FirstFitPool::new(u64::MAX / 2, unit)
    }

    /// The minimum allocation unit.
    pub fn unit(&self) -> u64 {
        self.unit
    }

    /// Total bytes the pool manages.
    pub fn capacity(&self) -> u64 {
        self.capacity
    }

    /// Bytes currently allocated.
    pub fn in_use(&self) -> u64 {
        self.in_use
    }

    /// The highest end of any allocation so far.
    pub fn high_water(&self) -> u64 {
        self.high_water
    }

    /// The largest free block.
    pub fn largest_free(&self) -> u64 {
        self.blocks()
            .filter(|b| b.free)
            .map(|b| b.size)
            .max()
            .unwrap_or(0)
    }

    /// Blocks in address order.
    pub fn blocks(&self) -> impl Iterator<Item = Block> + '_ {
        let mut at = self.head;
        std::iter::from_fn(move || {
            if at == NIL {
                return None;
            }
            let n = self.nodes[at as usize];
            at = n.next;
            Some(Block {
                offset: n.offset,
                size: n.size,
                free: n.free,
            })
        })
    }

    /// Allocates `size` bytes (rounded up to the unit, at least one unit).
    pub fn alloc(&mut self, size: u64) -> Result<Allocation, PoolError> {
        self.alloc_aligned(size, self.unit)
    }

    /// Allocates `size` bytes at an offset that is a multiple of `align`
    /// (a power of two; the unit if smaller). Padding in front of the
    /// allocation stays a free block.
    pub fn alloc_aligned(&mut self, size: u64, align: u64) -> Result<Allocation, PoolError> {
        if align == 0 || !align.is_power_of_two() {
            return Err(PoolError::BadAlignment(align));
        }
        let align = align.max(self.unit);
        let size = self.round(size.max(1));
        let mut at = self.head;
        while at != NIL {
            let n = self.nodes[at as usize];
            if n.free {
                let start = (n.offset + (align - 1)) & !(align - 1);
                let end = n.offset + n.size;
                if start < end && end - start >= size {
                    return Ok(self.take(at, start, size));
                }
            }
            at = n.next;
        }
        Err(PoolError::OutOfMemory {
            requested: size,
            largest_free: self.largest_free(),
        })
    }

    /// Marks `[offset, offset + size)` allocated (for buffers pinned at a
    /// fixed place). The range is rounded out to the unit and must be free.
    pub fn reserve(&mut self, offset: u64, size: u64) -> Result<Allocation, PoolError> {
        let start = offset & !(self.unit - 1);
        let end = offset
            .checked_add(size.max(1))
            .map(|e| self.round(e))
            .ok_or(PoolError::NotFree {
                offset,
                end: u64::MAX,
            })?;
        let mut at = self.head;
        while at != NIL {
            let n = self.nodes[at as usize];
            if n.offset <= start && start < n.offset + n.size {
                if n.free && end <= n.offset + n.size {
                    return Ok(self.take(at, start, end - start));
                }
                break;
            }
            at = n.next;
        }
        Err(PoolError::NotFree { offset, end })
    }

    /// Frees the allocation starting at `offset`, merging it with free
    /// neighbours.
    pub fn free(&mut self, offset: u64) -> Result<(), PoolError> {
        let at = self
            .allocated
            .remove(&offset)
            .ok_or(PoolError::NotAllocated(offset))?;
        let mut node = self.nodes[at as usize];
        self.in_use -= node.size;
        node.free = true;
        self.nodes[at as usize] = node;
        let mut at = at;
        // Merge with the previous block.
        let prev = node.prev;
        if prev != NIL && self.nodes[prev as usize].free {
            self.absorb_next(prev);
            at = prev;
        }
        // Merge with the next block.
        let next = self.nodes[at as usize].next;
        if next != NIL && self.nodes[next as usize].free {
            self.absorb_next(at);
        }
        Ok(())
    }

    fn round(&self, v: u64) -> u64 {
        v.checked_add(self.unit - 1)
            .map_or(!(self.unit - 1), |x| x & !(self.unit - 1))
    }

    fn node(&mut self, n: Node) -> u32 {
        if let Some(i) = self.spare.pop() {
            self.nodes[i as usize] = n;
            i
        } else {
            self.nodes.push(n);
            (self.nodes.len() - 1) as u32
        }
    }

    /// Splits free block `at` so that `[start, start + size)` becomes an
    /// allocated block of its own.
    fn take(&mut self, at: u32, start: u64, size: u64) -> Allocation {
        let n = self.nodes[at as usize];
        let end = n.offset + n.size;
        let mut cur = at;
        if start > n.offset {
            // Leading padding stays free as its own block.
            let new = self.node(Node {
                offset: start,
                size: end - start,
                free: true,
                prev: at,
                next: n.next,
            });
            if n.next != NIL {
                self.nodes[n.next as usize].prev = new;
            }
            let head = &mut self.nodes[at as usize];
            head.size = start - n.offset;
            head.next = new;
            cur = new;
        }
        let c = self.nodes[cur as usize];
        if c.offset + c.size > start + size {
            let rest = self.node(Node {
                offset: start + size,
                size: c.offset + c.size - (start + size),
                free: true,
                prev: cur,
                next: c.next,
            });
            if c.next != NIL {
                self.nodes[c.next as usize].prev = rest;
            }
            let cn = &mut self.nodes[cur as usize];
            cn.size = size;
            cn.next = rest;
        }
        self.nodes[cur as usize].free = false;
        self.allocated.insert(start, cur);
        self.in_use += size;
        self.high_water = self.high_water.max(start + size);
        Allocation {
            offset: start,
            size,
        }
    }

    /// Merges block `at` with the block after it.
    fn absorb_next(&mut self, at: u32) {
        let next = self.nodes[at as usize].next;
        let nn = self.nodes[next as usize];
        let a = &mut self.nodes[at as usize];
        a.size += nn.size;
        a.next = nn.next;
        if nn.next != NIL {
            self.nodes[nn.next as usize].prev = at;
        }
        self.spare.push(next);
    }
}

impl fmt::Debug for FirstFitPool {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("FirstFitPool")
            .field("unit", &self.unit)
            .field("capacity", &self.capacity)
            .field("in_use", &self.in_use)
            .field("blocks", &self.blocks().collect::<Vec<_>>())
            .finish()
    }
}

/// One block of a [`FirstFitPool`], as seen by [`FirstFitPool::blocks`].
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Block {
    /// Start offset.
    pub offset: u64,
    /// Length in bytes.
    pub size: u64,
    /// True when not allocated.
    pub free: bool,
}

#[cfg(test)]
mod tests {
    use super::*;

    fn shape(p: &FirstFitPool) -> Vec<(u64, u64, bool)> {
        p.blocks().map(|b| (b.offset, b.size, b.free)).collect()
    }

    #[test]
    fn first_fit_splits_and_coalesces() {
        let mut p = FirstFitPool::new(1024, 64).unwrap();
        let a = p.alloc(100).unwrap();
        let b = p.alloc(64).unwrap();
        let c = p.alloc(1).unwrap();
        assert_eq!((a.offset, a.size), (0, 128));
        assert_eq!((b.offset, c.offset), (128, 192));
        p.free(b.offset).unwrap();
        // The hole left by b is found first.
        assert_eq!(p.alloc(10).unwrap().offset, 128);
        p.free(128).unwrap();
        p.free(a.offset).unwrap();
        assert_eq!(
            shape(&p),
            vec![(0, 192, true), (192, 64, false), (256, 768, true)]
        );
        p.free(c.offset).unwrap();
        assert_eq!(shape(&p), vec![(0, 1024, true)]);
        assert_eq!(p.in_use(), 0);
        assert_eq!(p.high_water(), 256);
    }

    #[test]
    fn errors_and_alignment() {
        let mut p = FirstFitPool::new(256, 16).unwrap();
        assert_eq!(p.free(0), Err(PoolError::NotAllocated(0)));
        let a = p.alloc(16).unwrap();
        let b = p.alloc_aligned(16, 128).unwrap();
        assert_eq!(b.offset, 128);
        assert_eq!(
            shape(&p),
            vec![
                (0, 16, false),
                (16, 112, true),
                (128, 16, false),
                (144, 112, true)
            ]
        );
        assert!(matches!(
            p.alloc(200),
            Err(PoolError::OutOfMemory {
                requested: 208,
                largest_free: 112
            })
        ));
        assert!(p.reserve(100, 40).is_err());
        assert_eq!(p.reserve(32, 40).unwrap().offset, 32);
        p.free(a.offset).unwrap();
        assert!(FirstFitPool::new(10, 3).is_err());
    }
}
