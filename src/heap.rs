//! How the host's C library keeps freed memory.
//!
//! glibc gives the top of its heap back to the kernel whenever more than
//! 128 KiB of it is free (`M_TRIM_THRESHOLD`), and the link decodes each
//! data frame into a payload of up to 127 KiB that is freed as soon as it
//! is written on: so nearly every frame of a bulk transfer grew the heap,
//! faulted fresh zeroed pages in and shrank it again. Measured on a 1 GiB
//! download through a forwarded port: 3,400 `brk` calls and 56,000 page
//! faults in the forwarder (docs/performance.md, "Relay and forwards").
//! Keeping [`KEPT`] of freed heap ends that churn for a few MiB of memory
//! that a transfer has used anyway.

/// Free heap glibc keeps rather than returns: the link's outgoing queue and
/// a stream's largest window of payloads, with room to spare.
const KEPT: usize = 16 * 1024 * 1024;

/// Sets the allocator up for the link's traffic; call first thing in `main`,
/// before any other thread exists.
pub fn tune() {
    #[cfg(target_env = "gnu")]
    {
        // SAFETY: mallopt only sets a parameter of glibc's allocator; it is
        // called before any other thread exists, so nothing allocates
        // meanwhile. A refusal (0) leaves glibc's default, which works.
        unsafe {
            libc::mallopt(libc::M_TRIM_THRESHOLD, KEPT as libc::c_int);
        }
    }
}
