//! Room set aside for a run's last writes. Under an address-space limit
//! (`ulimit -v`) recording how a run ended can need more than its claim
//! did (SQLite's page cache and maps, the output's tails): a limit the
//! claim just fit under then left the run `running`, to be found abandoned
//! later. So idem maps [`ROOM`] bytes, never touched, before it claims, and
//! unmaps them just before it records the outcome. A limit too low even
//! for that refuses the run before anything is claimed.

use std::ptr::NonNull;

use nix::libc;

use crate::exit::{self, Failure};

/// More than the outcome's writes were seen to need beyond the claim's.
const ROOM: usize = 4 << 20;

/// The mapped room; unmapped when dropped.
pub(super) struct Reserve(NonNull<libc::c_void>);

impl Reserve {
    /// Maps the room (address space only: no access, nothing committed).
    pub(super) fn take() -> Result<Reserve, Failure> {
        // SAFETY: an anonymous mapping at an address of the kernel's
        // choosing touches no memory of ours; the result is checked.
        let at = unsafe {
            libc::mmap(
                std::ptr::null_mut(),
                ROOM,
                libc::PROT_NONE,
                libc::MAP_PRIVATE | libc::MAP_ANONYMOUS | libc::MAP_NORESERVE,
                -1,
                0,
            )
        };
        match NonNull::new(at) {
            Some(at) if at.as_ptr() != libc::MAP_FAILED => Ok(Reserve(at)),
            _ => Err(Failure::new(
                exit::IDEM_FAILED,
                "could not set aside room for the run's last writes: out of memory (raise ulimit -v or the memory limit of the service or cgroup); nothing ran".to_owned(),
            )),
        }
    }
}

impl Drop for Reserve {
    fn drop(&mut self) {
        // SAFETY: the mapping is ours, of ROOM bytes, and nothing points
        // into it (it was never accessible).
        unsafe {
            libc::munmap(self.0.as_ptr(), ROOM);
        }
    }
}
