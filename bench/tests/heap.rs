//! The tagged global allocator (`human_plus_bench::heap`), installed in
//! this test binary as `compare` installs it: what a tag holds is what its
//! threads allocated and has not been freed, wherever it is freed or
//! grown. Each test counts under a tag of its own (the tests run in
//! parallel, each on its own thread).
#![allow(clippy::unwrap_used, unsafe_code)]

use std::alloc::{GlobalAlloc, Layout};

use human_plus_bench::heap::{self, TaggedHeap};

#[global_allocator]
static HEAP: TaggedHeap = TaggedHeap;

#[test]
fn a_tag_holds_what_its_thread_allocated_until_it_is_freed_elsewhere() {
    const TAG: usize = 1;
    assert!(heap::installed());
    let before = heap::live(TAG);
    let block = {
        let _t = heap::tagged(TAG);
        vec![7u8; 100_000]
    };
    assert_eq!(heap::live(TAG).bytes - before.bytes, 100_000);
    assert_eq!(heap::live(TAG).blocks - before.blocks, 1);
    // Freed on another thread, whose tag is another: taken off this one.
    std::thread::spawn(move || drop(block)).join().unwrap();
    assert_eq!(heap::live(TAG), before);
}

#[test]
fn a_grown_block_keeps_its_first_tag() {
    const TAG: usize = 2;
    let before = heap::live(TAG);
    let mut v: Vec<u64> = {
        let _t = heap::tagged(TAG);
        Vec::with_capacity(4)
    };
    v.extend(0..10_000u64);
    let grown = heap::live(TAG).bytes - before.bytes;
    assert_eq!(grown, v.capacity() * 8);
    v.shrink_to(10_000);
    assert_eq!(heap::live(TAG).bytes - before.bytes, v.capacity() * 8);
    assert!(v.iter().copied().eq(0..10_000u64));
    drop(v);
    assert_eq!(heap::live(TAG), before);
}

#[test]
fn blocks_keep_their_alignment_and_zeroing() {
    const TAG: usize = 3;
    let before = heap::live(TAG);
    let t = heap::tagged(TAG);
    for align in [1, 8, 16, 32, 64, 4096, 1 << 16] {
        for size in [1, 7, 16, 100, 5000] {
            let layout = Layout::from_size_align(size, align).unwrap();
            // SAFETY: a non-zero size; the block is freed with its layout.
            unsafe {
                let p = HEAP.alloc_zeroed(layout);
                assert!(!p.is_null());
                assert_eq!(p as usize % align, 0, "align {align}");
                assert!(std::slice::from_raw_parts(p, size).iter().all(|b| *b == 0));
                p.write_bytes(0xa5, size);
                let q = HEAP.realloc(p, layout, size * 3);
                assert!(!q.is_null());
                assert_eq!(q as usize % align, 0, "align {align} grown");
                assert!(
                    std::slice::from_raw_parts(q, size)
                        .iter()
                        .all(|b| *b == 0xa5)
                );
                HEAP.dealloc(q, Layout::from_size_align(size * 3, align).unwrap());
            }
        }
    }
    drop(t);
    assert_eq!(heap::live(TAG), before);
}

#[test]
fn the_tag_is_put_back_when_the_guard_drops() {
    let outer = heap::tagged(4);
    {
        let _inner = heap::tagged(5);
        assert_eq!(heap::set_tag(5), 5);
    }
    assert_eq!(heap::set_tag(4), 4);
    drop(outer);
    assert_eq!(heap::set_tag(heap::OTHER), heap::OTHER);
}
