//! A send WQE's opcode-dependent parts (Linux `pvrdma_post_send`): the opcode, immediate data,
//! `wr.rdma` and `wr.atomic`; and the SGE list's totals.

use super::ud;
use ib_core::{Error, Result, Sge, WcOpcode, WrOpcode};
use pvrdma_abi::wqe::{wr_opcode, SqWqeHdr, WrAtomic, WrRdma};
use zerocopy::{FromZeros, IntoBytes};

/// Fills a send WQE's opcode, `ex` (immediate data), `wr.rdma` (remote address and key) or
/// `wr.atomic` (remote address, compare/add, swap, key) for `op`, as Linux's `pvrdma_post_send`
/// does; returns the opcode of its successful completion. An atomic's SGEs and remote address
/// are the device's to check (neither Linux's driver nor rdma-core's provider checks them: the
/// device completes a wrong one with an error).
pub(super) fn set_opcode(hdr: &mut SqWqeHdr, op: WrOpcode) -> WcOpcode {
    let rdma = |hdr: &mut SqWqeHdr, remote_addr: u64, rkey: u32| {
        let mut wr = WrRdma::new_zeroed();
        wr.remote_addr.set(remote_addr);
        wr.rkey.set(rkey);
        hdr.wr.copy_from_slice(wr.as_bytes());
    };
    let atomic = |hdr: &mut SqWqeHdr, remote_addr: u64, rkey: u32, compare_add: u64, swap: u64| {
        let mut wr = WrAtomic::new_zeroed();
        wr.remote_addr.set(remote_addr);
        wr.compare_add.set(compare_add);
        wr.swap.set(swap);
        wr.rkey.set(rkey);
        hdr.wr.copy_from_slice(wr.as_bytes());
    };
    let (code, completes) = match op {
        WrOpcode::Send => (wr_opcode::SEND, WcOpcode::Send),
        WrOpcode::SendWithImm(imm) => {
            hdr.ex.set(imm);
            (wr_opcode::SEND_WITH_IMM, WcOpcode::Send)
        }
        WrOpcode::RdmaWrite { remote_addr, rkey } => {
            rdma(hdr, remote_addr, rkey);
            (wr_opcode::RDMA_WRITE, WcOpcode::RdmaWrite)
        }
        WrOpcode::RdmaWriteWithImm { remote_addr, rkey, imm } => {
            rdma(hdr, remote_addr, rkey);
            hdr.ex.set(imm);
            (wr_opcode::RDMA_WRITE_WITH_IMM, WcOpcode::RdmaWrite)
        }
        WrOpcode::RdmaRead { remote_addr, rkey } => {
            rdma(hdr, remote_addr, rkey);
            (wr_opcode::RDMA_READ, WcOpcode::RdmaRead)
        }
        WrOpcode::UdSend { dest, imm } => ud::set_wr_ud(hdr, &dest, imm),
        WrOpcode::AtomicCmpSwp { remote_addr, rkey, compare, swap } => {
            atomic(hdr, remote_addr, rkey, compare, swap);
            (wr_opcode::ATOMIC_CMP_AND_SWP, WcOpcode::CompSwap)
        }
        WrOpcode::AtomicFetchAdd { remote_addr, rkey, add } => {
            atomic(hdr, remote_addr, rkey, add, 0);
            (wr_opcode::ATOMIC_FETCH_AND_ADD, WcOpcode::FetchAdd)
        }
        // rdma-core's `ibv_wr_opcode_to_pvrdma` is the identity; a UD work request carries its
        // address whatever its opcode. The device completes what it cannot do with an error (an
        // error CQE is matched to its WQE by `wr_id` alone); QEMU 7.2 sends it as a SEND.
        WrOpcode::Raw { opcode, ud } => {
            if let Some(dest) = ud {
                ud::set_wr_ud(hdr, &dest, None);
            }
            (opcode, WcOpcode::Send)
        }
    };
    hdr.opcode.set(code);
    completes
}

/// (number of SGEs, total bytes) of an SGE list of at most `max_sge` entries.
pub(super) fn sg_totals(sg: &[Sge], max_sge: u32) -> Result<(u32, u32)> {
    let n = u32::try_from(sg.len()).map_err(|_| Error::InvalidArgument("too many SGEs"))?;
    if n > max_sge {
        return Err(Error::InvalidArgument("more SGEs than the QP was created for"));
    }
    let total = sg.iter().try_fold(0u32, |t, s| t.checked_add(s.length));
    Ok((n, total.ok_or(Error::InvalidArgument("total length beyond 32 bits"))?))
}

#[cfg(test)]
mod tests {
    use super::*;
    use pvrdma_abi::wqe::{wr_opcode, SqWqeHdr, WrAtomic};

    #[test]
    fn sge_totals() {
        let s = |l| Sge { addr: 0, length: l, lkey: 1 };
        assert_eq!(sg_totals(&[s(10), s(20)], 2), Ok((2, 30)));
        assert!(sg_totals(&[s(10), s(20)], 1).is_err());
        assert!(sg_totals(&[s(u32::MAX), s(1)], 2).is_err());
    }

    #[test]
    fn an_atomic_fills_wr_atomic_as_linux_does_and_opcodes_are_checked_for_kernel_qps_only() {
        use zerocopy::FromBytes;
        let mut hdr = SqWqeHdr::default();
        let op = WrOpcode::AtomicCmpSwp { remote_addr: 0x7f00_0000_1008, rkey: 0x55, compare: 3, swap: 4 };
        assert_eq!(set_opcode(&mut hdr, op), WcOpcode::CompSwap);
        let a = WrAtomic::read_from_bytes(&hdr.wr[..]).unwrap();
        assert_eq!(hdr.opcode.get(), wr_opcode::ATOMIC_CMP_AND_SWP);
        assert_eq!(
            (a.remote_addr.get(), a.compare_add.get(), a.swap.get(), a.rkey.get()),
            (0x7f00_0000_1008, 3, 4, 0x55)
        );
        let mut hdr = SqWqeHdr::default();
        let op = WrOpcode::AtomicFetchAdd { remote_addr: 0x1000, rkey: 9, add: 7 };
        assert_eq!(set_opcode(&mut hdr, op), WcOpcode::FetchAdd);
        let a = WrAtomic::read_from_bytes(&hdr.wr[..]).unwrap();
        assert_eq!((hdr.opcode.get(), a.compare_add.get(), a.swap.get()), (wr_opcode::ATOMIC_FETCH_AND_ADD, 7, 0));
        // Issue 21 §3: an atomic's SGEs and alignment are the device's to check (neither Linux's
        // driver nor rdma-core's provider checks them).
        let mut hdr = SqWqeHdr::default();
        let op = WrOpcode::Raw { opcode: 99, ud: None };
        assert_eq!(set_opcode(&mut hdr, op), WcOpcode::Send, "an opcode passed as it is");
        assert_eq!(hdr.opcode.get(), 99);
        for (ud, kernel, op, ok) in [
            (true, true, WrOpcode::Raw { opcode: 0, ud: None }, false),
            (true, true, WrOpcode::Raw { opcode: 2, ud: None }, true),
            (true, false, WrOpcode::Raw { opcode: 0, ud: None }, true),
            (true, true, WrOpcode::Send, false),
            (false, false, WrOpcode::Send, true),
        ] {
            assert_eq!(ud::check_opcode(ud, kernel, &op).is_ok(), ok, "{ud} {kernel} {op:?}");
        }
    }
}
