//! User contexts (CREATE_UC / DESTROY_UC): each owns one UAR page of BAR2, the page whose pfn the
//! command carries. Doorbells on that page are honoured only for the context's own QPs and CQs.

use crate::budget::Charge;

/// A user context.
#[derive(Debug)]
pub struct Uctx {
    /// Index of its UAR page in BAR2 (never 0, the kernel's page).
    pub page: u32,
    pub(crate) _charge: Charge,
}
