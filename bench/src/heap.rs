//! The heap that each part of a benchmark holds, exactly: a global
//! allocator that tags every block with the part that allocated it.
//!
//! A thread carries a tag (a small number, [`OTHER`] unless set:
//! [`set_tag`], [`tagged`]); every block allocated on it is counted under
//! that tag for as long as it lives, wherever it is freed or grown. So
//! [`live`] of a tag is the heap held now by what that part allocated:
//! the requested bytes of its live blocks, not the allocator's own
//! overhead nor pages it keeps cached. The tag is written in a header
//! before the block (`max(8, align)` bytes: the block keeps its
//! alignment), read back when it is freed or grown; a grown block keeps
//! its first tag. The cost: that header (8 bytes for most blocks; with
//! glibc's 16-byte steps, one step more for about half of them), a
//! thread-local read and two relaxed atomic additions per allocation and
//! per free.
//!
//! Installed by a binary as its global allocator (`compare`):
//!
//! ```ignore
//! #[global_allocator]
//! static HEAP: human_plus_bench::heap::TaggedHeap = human_plus_bench::heap::TaggedHeap;
//! ```
//!
//! Without it every count stays zero ([`installed`] is `false`).
//!
//! This module is the bench crate's one use of `unsafe`: a global
//! allocator cannot be written without it. The workspace forbids
//! `unsafe`; this crate denies it, and allows it here only
//! (DECISIONS, "Kept legs by default, bounded (issue 43), continued").
#![allow(unsafe_code)]

use std::alloc::{GlobalAlloc, Layout, System};
use std::cell::Cell;
use std::sync::atomic::{AtomicIsize, Ordering};

/// How many tags there are (`0..TAGS`); a larger tag counts as the last.
pub const TAGS: usize = 8;

/// The tag of every thread that set none.
pub const OTHER: usize = 0;

/// The header's least size and alignment: room for the tag, aligned for
/// it.
const HEADER: usize = size_of::<usize>();

thread_local! {
    /// This thread's tag. Constant-initialised and without a destructor:
    /// reading it never allocates, so the allocator may.
    static TAG: Cell<usize> = const { Cell::new(OTHER) };
}

/// One tag's counts, on a cache line of its own.
#[repr(align(64))]
struct Counts {
    bytes: AtomicIsize,
    blocks: AtomicIsize,
}

static COUNTS: [Counts; TAGS] = [const {
    Counts {
        bytes: AtomicIsize::new(0),
        blocks: AtomicIsize::new(0),
    }
}; TAGS];

/// The heap a tag holds now.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Live {
    /// The requested bytes of its live blocks.
    pub bytes: usize,
    /// Its live blocks.
    pub blocks: usize,
}

/// What `tag` holds now (zero when [`TaggedHeap`] is not the global
/// allocator).
#[must_use]
pub fn live(tag: usize) -> Live {
    let c = &COUNTS[tag.min(TAGS - 1)];
    Live {
        bytes: c.bytes.load(Ordering::Relaxed).max(0).cast_unsigned(),
        blocks: c.blocks.load(Ordering::Relaxed).max(0).cast_unsigned(),
    }
}

/// Whether [`TaggedHeap`] is the global allocator (it has counted a
/// block).
#[must_use]
pub fn installed() -> bool {
    COUNTS.iter().any(|c| c.blocks.load(Ordering::Relaxed) > 0)
}

/// Sets this thread's tag and returns the one it had.
pub fn set_tag(tag: usize) -> usize {
    TAG.with(|t| t.replace(tag.min(TAGS - 1)))
}

/// This thread's tag until the guard drops (then the one it had).
#[must_use = "the tag is put back when the guard drops"]
pub fn tagged(tag: usize) -> TagGuard {
    TagGuard {
        before: set_tag(tag),
        _thread: std::marker::PhantomData,
    }
}

/// Puts a thread's tag back when dropped ([`tagged`]).
#[derive(Debug)]
pub struct TagGuard {
    before: usize,
    /// Not `Send`: it puts back the tag of the thread it was made on.
    _thread: std::marker::PhantomData<*const ()>,
}

impl Drop for TagGuard {
    fn drop(&mut self) {
        set_tag(self.before);
    }
}

/// The global allocator that counts each block under its thread's tag
/// (see the module). Blocks come from [`System`], each with a header
/// before it.
#[derive(Debug, Clone, Copy, Default)]
pub struct TaggedHeap;

/// The block with its header for `layout`, and where the caller's part
/// starts in it: `max(HEADER, align)` bytes in (a power of two, so a
/// multiple of the alignment) in a block aligned to that: the caller's
/// part is aligned as asked, and the block's first word, the tag, is
/// aligned for a `usize`. `None` on overflow.
fn wrapped(layout: Layout) -> Option<(Layout, usize)> {
    let offset = layout.align().max(HEADER);
    let size = layout.size().checked_add(offset)?;
    Layout::from_size_align(size, offset)
        .ok()
        .map(|l| (l, offset))
}

fn count(tag: usize, bytes: isize, blocks: isize) {
    let c = &COUNTS[tag.min(TAGS - 1)];
    c.bytes.fetch_add(bytes, Ordering::Relaxed);
    c.blocks.fetch_add(blocks, Ordering::Relaxed);
}

fn this_thread() -> usize {
    TAG.try_with(Cell::get).unwrap_or(OTHER)
}

impl TaggedHeap {
    /// Writes the tag into a fresh block's header, counts it, and returns
    /// the caller's part.
    ///
    /// # Safety
    /// `base` is null or a block of [`System`] for `wrapped(layout)`,
    /// whose part starts `offset` bytes in.
    unsafe fn start(base: *mut u8, layout: Layout, offset: usize) -> *mut u8 {
        if base.is_null() {
            return base;
        }
        let tag = this_thread();
        // SAFETY: `base` is aligned to `offset` (at least HEADER), enough
        // for a `usize`, and the block has `offset` >= HEADER bytes before
        // the caller's part.
        unsafe { base.cast::<usize>().write(tag) };
        count(tag, layout.size().cast_signed(), 1);
        // SAFETY: `offset` is within the block (its size is the
        // layout's plus `offset`).
        unsafe { base.add(offset) }
    }
}

// SAFETY: every block handed out is `offset` bytes into a block of
// `System` allocated for the wrapped layout, `offset` a multiple of the
// caller's alignment, with the caller's size after it; `dealloc` and
// `realloc` recompute the same `offset` and wrapped layout from the
// caller's layout (which `GlobalAlloc` requires to be the one the block
// was allocated with) and hand `System` back its own pointer.
unsafe impl GlobalAlloc for TaggedHeap {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        let Some((outer, offset)) = wrapped(layout) else {
            return std::ptr::null_mut();
        };
        // SAFETY: `outer` has a non-zero size (at least HEADER).
        unsafe { Self::start(System.alloc(outer), layout, offset) }
    }

    unsafe fn alloc_zeroed(&self, layout: Layout) -> *mut u8 {
        let Some((outer, offset)) = wrapped(layout) else {
            return std::ptr::null_mut();
        };
        // SAFETY: as `alloc`.
        unsafe { Self::start(System.alloc_zeroed(outer), layout, offset) }
    }

    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        // The layout was accepted when the block was allocated.
        let Some((outer, offset)) = wrapped(layout) else {
            return;
        };
        // SAFETY: `ptr` is `offset` bytes into the block `System` gave
        // for `outer` (see the impl), whose first word is the tag.
        unsafe {
            let base = ptr.sub(offset);
            let tag = base.cast::<usize>().read();
            count(tag, -layout.size().cast_signed(), -1);
            System.dealloc(base, outer);
        }
    }

    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        let Some((outer, offset)) = wrapped(layout) else {
            return std::ptr::null_mut();
        };
        let Some(new_outer) = new_size
            .checked_add(offset)
            .and_then(|size| Layout::from_size_align(size, offset).ok())
        else {
            return std::ptr::null_mut();
        };
        // SAFETY: as `dealloc` for `ptr`; `new_outer` is a valid layout
        // of the same alignment, non-zero. `System.realloc` keeps the
        // header's bytes (the tag) and the alignment; on failure the old
        // block is untouched and still counted.
        unsafe {
            let base = ptr.sub(offset);
            let tag = base.cast::<usize>().read();
            let grown = System.realloc(base, outer, new_outer.size());
            if grown.is_null() {
                return grown;
            }
            count(tag, new_size.cast_signed() - layout.size().cast_signed(), 0);
            grown.add(offset)
        }
    }
}
