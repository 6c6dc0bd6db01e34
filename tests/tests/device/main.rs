//! The driver and the device: probe and its self-test, the ABI against the uapi header,
//! doorbells, a failing, dead or untrusted device, an untrusted driver against the model, refused
//! destroys, and the real-device bodies against the model's profiles. One test binary; each
//! module is a subject.

mod abi_header;
mod dead_device;
mod doorbells;
mod event_path;
mod fault;
mod object_faults;
mod probe;
mod qemu_model;
mod refused_destroy;
mod selftest;
mod untrusted_device;
mod untrusted_driver;
