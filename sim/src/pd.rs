//! Protection domains (CREATE_PD / DESTROY_PD). A PD belongs to a context (0 = the kernel); a QP
//! and an MR belong to the context of their PD.

use crate::budget::Charge;

/// A protection domain.
#[derive(Debug)]
pub struct Pd {
    /// Handle (1 ..).
    pub handle: u32,
    /// Owning context handle, 0 for the kernel.
    pub ctx: u32,
    pub(crate) _charge: Charge,
}
