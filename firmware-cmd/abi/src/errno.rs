//! The command error codes: the positive errno values (as Linux's `include/uapi/asm-generic/errno-base.h`
//! and `errno.h` define them) a failed command's response carries in `err` (QEMU 7.2's
//! `hw/rdma/vmw/pvrdma_cmd.c` stores them there, and the negated value in `REG_ERR`). The device
//! model answers with them and the driver decodes them, from this one table.

/// Operation not permitted: the object belongs to another context.
pub const EPERM: u8 = 1;
/// No such entry (a GID slot that is empty, no such object).
pub const ENOENT: u8 = 2;
/// The device failed internally.
pub const EIO: u8 = 5;
/// Out of resources: a table is full (handles, keys, UAR pages) or the host budget is spent.
pub const ENOMEM: u8 = 12;
/// Permission denied (decoded as [`EPERM`]).
pub const EACCES: u8 = 13;
/// A device address outside guest memory.
pub const EFAULT: u8 = 14;
/// The object is still in use (a PD with QPs or MRs, a CQ with QPs, a context with objects).
pub const EBUSY: u8 = 16;
/// Anything else malformed: bad handle, size, state, flag or opcode.
pub const EINVAL: u8 = 22;
/// The command is not implemented.
pub const ENOSYS: u8 = 38;
/// The command or mode is not supported.
pub const EOPNOTSUPP: u8 = 95;

/// The value `REG_ERR` holds after a command that failed with `errno` (QEMU stores the negated
/// errno; 0 after a success).
pub const fn reg_value(errno: u8) -> u32 {
    (-(errno as i32)) as u32
}
