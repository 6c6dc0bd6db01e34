//! Typed object handles: what a doorbell names. A handle fits the doorbell's 24 bits and carries
//! its owner, so a page can tell its own objects from another context's.

use crate::DoorbellError;
use pvrdma_abi::uar::UAR_HANDLE_MASK;

/// Who owns an object, and so which UAR pages may ring its doorbells: the kernel's page rings
/// any object; a user context's page only the context's own (design decision 5; Linux's
/// pvrdma gives each context its own page for that reason).
///
/// The owner a handle carries is its creator's word: the driver builds it from the CREATE_*
/// response for the context it created the object for. This crate checks pages against owners;
/// it cannot check the device's own table of which handle is whose. The device does that — the
/// model refuses and counts a foreign doorbell; QEMU 7.2 does not check.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Owner {
    /// An object the kernel side created.
    Kernel,
    /// An object of one user context (only [`crate::ContextUar::owner`] makes one).
    Context(ContextId),
}

/// A user context's identity for doorbell ownership: unique to one allocation of a UAR page, in
/// every table, so neither a context that reuses a page nor another device's context is the
/// same owner.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct ContextId(u64);

impl ContextId {
    pub(crate) fn new(id: u64) -> Self {
        Self(id)
    }
}

macro_rules! handle {
    ($(#[$doc:meta])* $name:ident) => {
        $(#[$doc])*
        #[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
        pub struct $name {
            raw: u32,
            owner: Owner,
        }

        impl $name {
            /// The handle the device gave (CREATE_* response), owned by `owner`.
            ///
            /// Errors: [`DoorbellError::HandleTooWide`] beyond 24 bits: a doorbell carries 24
            /// bits, so such a handle would ring another object.
            pub fn new(raw: u32, owner: Owner) -> Result<Self, DoorbellError> {
                if raw > UAR_HANDLE_MASK {
                    return Err(DoorbellError::HandleTooWide(raw));
                }
                Ok(Self { raw, owner })
            }

            /// The device's handle.
            pub fn raw(&self) -> u32 {
                self.raw
            }

            /// The object's owner.
            pub fn owner(&self) -> Owner {
                self.owner
            }
        }
    };
}

handle!(
    /// A QP handle (its QPN), for the QP doorbell.
    QpHandle
);
handle!(
    /// A CQ handle, for the CQ doorbell (arm, poll).
    CqHandle
);
handle!(
    /// An SRQ handle, for the SRQ doorbell.
    SrqHandle
);
