#!/bin/bash
# Runs inside L1 (chrooted onto this machine's / over 9p): loads soft-RoCE, creates rxe0 on eth0
# (10.0.2.15/24), runs the real-device test binary, then the soft-RoCE interop cases
# (l1-rxe.sh), leaves their output and exit statuses in $WORK/out, and powers L1 off.
. "$(dirname "$0")/l1-env"
export HOME=/tmp PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin
ts() { echo "L1-TS $(cut -d' ' -f1 /proc/uptime) $*"; }
finish() { sync; echo o > /proc/sysrq-trigger 2>/dev/null; poweroff -f 2>/dev/null || echo b > /proc/sysrq-trigger; }
ts "stage2 start, kernel $(uname -r)"
MP="modprobe -d $WORK/kroot"
echo "$WORK/modprobe-wrap" > /proc/sys/kernel/modprobe
$MP crc32_generic 2>/dev/null; $MP crc32_pclmul 2>/dev/null
ts "crc32 loaded"
$MP virtio_net && $MP rdma_rxe && $MP ib_uverbs || { ts "modprobe failed"; finish; }
ts "virtio_net, rdma_rxe, ib_uverbs loaded"
ip link set lo up
ip link set eth0 up && ip addr add 10.0.2.15/24 dev eth0
rdma link add rxe0 type rxe netdev eth0 || { ts "rdma link add failed"; dmesg | tail -20; finish; }
for i in $(seq 1 50); do [ -e /sys/class/infiniband/rxe0 ] && break; sleep 0.1; done
[ -e /sys/class/infiniband/rxe0 ] || { ts "no rxe0"; finish; }
ts "rxe0 ready"
cd /tmp
t0=$(date +%s.%N)
args=(--ignored --test-threads="$TEST_THREADS")
[ -n "$TEST_FILTER" ] && args+=("$TEST_FILTER")
if [ "${RXE_ONLY:-0}" = 1 ]; then
  echo "RXE_ONLY=1: the real-device tests were not run" > "$WORK/out/tests.log"; rc=0
else
  PVRDMA_IBDEV=rxe0 PVRDMA_NETDEV=eth0 PVRDMA_GID_IPV4=10.0.2.15 PVRDMA_QEMU_OUT=$WORK/out/qemu PVRDMA_QEMU_PACKAGE=$QEMU_PKG \
    RUST_BACKTRACE=1 "$TESTBIN" "${args[@]}" > "$WORK/out/tests.log" 2>&1
  rc=$?
fi
ts "tests done after $(echo "$(date +%s.%N) $t0" | awk '{printf "%.1f", $1 - $2}') s, exit $rc"
echo "$rc" > "$WORK/out/tests.rc"
t0=$(date +%s.%N)
timeout --kill-after=5 "${RXE_TIMEOUT:-420}" bash "$WORK/l1-rxe.sh" > "$WORK/out/rxe-run.log" 2>&1
rc=$?
ts "rxe interop done after $(echo "$(date +%s.%N) $t0" | awk '{printf "%.1f", $1 - $2}') s, exit $rc"
echo "$rc" > "$WORK/out/rxe.rc"
finish
