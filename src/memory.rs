//! Giving freed memory back to the system after a burst of work (a sync of a whole cluster's
//! changes, a re-read of its manifests): glibc's malloc keeps what such a burst freed in its
//! arenas, so without this the daemon's resident memory stays at its highest ever.

/// How many set and map elements a sync must have sent for its memory to be given back: a
/// small sync frees too little to matter, and giving back walks the allocator's free lists.
pub const AFTER_ELEMENTS: usize = 10_000;

/// Gives the memory the allocator holds free back to the system. glibc's malloc returns
/// only the top of its main heap by itself, and nothing from the middle of a heap nor from
/// the other threads' arenas; the static build's jemalloc returns freed pages by itself (after
/// its decay time), so there this does nothing.
pub fn give_back() {
    #[cfg(target_env = "gnu")]
    crate::nft::netlink::sock::trim_heap();
}

/// Gives memory back after a sync that sent (or tried to send) `elements` elements, if that
/// is many.
pub fn after_sync(elements: usize) {
    if elements >= AFTER_ELEMENTS {
        give_back();
    }
}
