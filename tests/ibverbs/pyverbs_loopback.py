#!/usr/bin/python3
"""pyverbs (rdma-core's Python bindings, Debian's python3-pyverbs) over our libibverbs.so.1.

Opens vmw_pvrdma0, queries the device, the port and a GID, creates a PD, two MRs, two CQs and an
RC QP, connects the QP to itself (its own QPN, the GID at --gid-index: 0 on the default model's
loopback port, 1 with HCA_DEVICES=model,roce=ADDR), posts a receive and a send, polls both
completions and checks them and the received bytes. Exit status 0 only when every check held;
otherwise the first failed check is printed and the status is 1.

Run it with Debian's /usr/bin/python3 (pyverbs is built for it) and LD_LIBRARY_PATH pointing at
our library, e.g. `hca run -- /usr/bin/python3 tests/ibverbs/pyverbs_loopback.py`.
"""

import argparse
import sys
import time

import pyverbs.enums as e
from pyverbs.addr import AHAttr, GlobalRoute
from pyverbs.cq import CQ
from pyverbs.device import Context, get_device_list
from pyverbs.mr import MR
from pyverbs.pd import PD
from pyverbs.qp import QP, QPAttr, QPCap, QPInitAttr
from pyverbs.wr import SGE, RecvWR, SendWR

DEVICE = "vmw_pvrdma0"
PORT = 1
PSN = 0x1234
SEND_ID, RECV_ID = 0x5E4D, 0x4ECF


class Failed(Exception):
    """A check that did not hold."""


def check(cond, what):
    if not cond:
        raise Failed(what)


def poll_one(cq, what, limit_s=10.0):
    """The one completion `cq` gives within `limit_s` seconds."""
    deadline = time.monotonic() + limit_s
    while time.monotonic() < deadline:
        n, wcs = cq.poll()
        if n:
            check(n == 1, f"{what}: polled {n} completions, expected 1")
            return wcs[0]
        time.sleep(0.001)
    raise Failed(f"{what}: no completion within {limit_s} s")


def connect_to_self(qp, gid, gid_index, mtu):
    """RESET -> INIT -> RTR -> RTS, with the QP's own QPN and GID as the destination."""
    attr = QPAttr(port_num=PORT, path_mtu=mtu)
    attr.pkey_index = 0
    attr.qp_access_flags = e.IBV_ACCESS_LOCAL_WRITE
    qp.to_init(attr)
    check(qp.qp_state == e.IBV_QPS_INIT, f"state after to_init: {qp.qp_state}")
    gr = GlobalRoute(dgid=gid, sgid_index=gid_index, hop_limit=64)
    attr.ah_attr = AHAttr(is_global=1, port_num=PORT, gr=gr)
    attr.dest_qp_num = qp.qp_num
    attr.rq_psn = PSN
    attr.max_dest_rd_atomic = 1
    attr.min_rnr_timer = 12
    qp.to_rtr(attr)
    check(qp.qp_state == e.IBV_QPS_RTR, f"state after to_rtr: {qp.qp_state}")
    attr.sq_psn = PSN
    attr.timeout = 14
    attr.retry_cnt = 7
    attr.rnr_retry = 7
    attr.max_rd_atomic = 1
    qp.to_rts(attr)
    queried, _ = qp.query(e.IBV_QP_STATE | e.IBV_QP_DEST_QPN)
    check(queried.qp_state == e.IBV_QPS_RTS, f"ibv_query_qp state: {queried.qp_state}")
    check(queried.dest_qp_num == qp.qp_num, f"ibv_query_qp dest_qp_num: {queried.dest_qp_num}")


def run(gid_index, size):
    names = [d.name.decode() for d in get_device_list()]
    check(DEVICE in names, f"ibv_get_device_list: {names}")
    with Context(name=DEVICE) as ctx:
        dev = ctx.query_device()
        check((dev.vendor_id, dev.vendor_part_id) == (0x15AD, 2080), f"vendor {dev.vendor_id:#x}:{dev.vendor_part_id}")
        check(dev.phys_port_cnt == 1, f"phys_port_cnt {dev.phys_port_cnt}")
        port = ctx.query_port(PORT)
        check(port.state == e.IBV_PORT_ACTIVE, f"port state {port.state}")
        check(port.link_layer == e.IBV_LINK_LAYER_ETHERNET, f"link layer {port.link_layer}")
        check(gid_index < port.gid_tbl_len, f"GID index {gid_index} >= gid_tbl_len {port.gid_tbl_len}")
        gid = ctx.query_gid(PORT, gid_index)
        check(str(gid).replace(":", "").strip("0") != "", f"GID {gid_index} is zero: {gid}")
        pd = PD(ctx)
        send_mr = MR(pd, size, e.IBV_ACCESS_LOCAL_WRITE)
        recv_mr = MR(pd, size, e.IBV_ACCESS_LOCAL_WRITE)
        scq, rcq = CQ(ctx, 4), CQ(ctx, 4)
        cap = QPCap(max_send_wr=2, max_recv_wr=2, max_send_sge=1, max_recv_sge=1)
        qp = QP(pd, QPInitAttr(qp_type=e.IBV_QPT_RC, scq=scq, rcq=rcq, cap=cap))
        connect_to_self(qp, gid, gid_index, port.active_mtu)

        payload = bytes((i * 7 + 3) % 251 for i in range(size))
        send_mr.write(payload, size)
        recv_mr.write(b"\xee" * size, size)
        qp.post_recv(RecvWR(wr_id=RECV_ID, num_sge=1, sg=[SGE(recv_mr.buf, size, recv_mr.lkey)]))
        qp.post_send(SendWR(wr_id=SEND_ID, opcode=e.IBV_WR_SEND, num_sge=1,
                            sg=[SGE(send_mr.buf, size, send_mr.lkey)]))
        for cq, wr_id, opcode, what in [(scq, SEND_ID, e.IBV_WC_SEND, "send"), (rcq, RECV_ID, e.IBV_WC_RECV, "receive")]:
            wc = poll_one(cq, what)
            check(wc.status == e.IBV_WC_SUCCESS, f"{what}: status {wc.status}")
            check(wc.wr_id == wr_id, f"{what}: wr_id {wc.wr_id:#x}")
            check(wc.opcode == opcode, f"{what}: opcode {wc.opcode}")
            if cq is rcq:
                check(wc.byte_len == size, f"receive: byte_len {wc.byte_len}")
                check(wc.qp_num == qp.qp_num, f"receive: qp_num {wc.qp_num}")
        got = recv_mr.read(size, 0)
        bad = next((i for i in range(size) if got[i] != payload[i]), None)
        check(bad is None, f"received bytes differ from offset {bad}")
        print(f"pyverbs: {DEVICE} port {PORT} GID[{gid_index}] {gid}; RC QP {qp.qp_num:#x} to itself: "
              f"{size} bytes sent, received and checked")


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--gid-index", type=int, default=0)
    ap.add_argument("--size", type=int, default=4096)
    args = ap.parse_args()
    try:
        run(args.gid_index, args.size)
    except Failed as f:
        print(f"FAILED: {f}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
