//! The driver's path to BAR2: [`UarMmio`] over the platform, for the doorbells of every UAR page
//! (the kernel's and each user context's). A doorbell is only an MMIO write here: the driver's
//! arm state lives in the verbs core, which rings the CQ arm doorbell itself (one route).

use crate::platform::Platform;
use doorbell::UarMmio;
use std::sync::Arc;

/// BAR2 writes straight to the platform.
pub struct UarDirect(pub Arc<dyn Platform>);

impl UarMmio for UarDirect {
    fn uar_write32(&self, offset: u64, value: u32) {
        self.0.uar_write(offset, value);
    }
}
