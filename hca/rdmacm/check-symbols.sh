#!/usr/bin/env bash
# After build.sh: checks that our librdmacm.so.1 defines every symbol@RDMACM_* that Debian's
# rdma-core 44 programs and libraries import, with that version (prints the missing ones), and
# that the dynamic loader can bind each program against it and our libibverbs.so.1
# (hca/symbols.sh). Exit 1 if anything is missing.
set -uo pipefail
# shellcheck source=hca/symbols.sh
. "$(dirname "${BASH_SOURCE[0]}")/../symbols.sh"

lib=/usr/lib/x86_64-linux-gnu
programs=(/usr/bin/rping /usr/bin/ucmatose /usr/bin/udaddy /usr/bin/mckey /usr/bin/rdma_server /usr/bin/rdma_client
    /usr/bin/rdma_xserver /usr/bin/rdma_xclient /usr/bin/rcopy /usr/bin/rstream /usr/bin/riostream /usr/bin/udpong
    /usr/bin/cmtime /usr/bin/ib_* /usr/bin/qperf)
libraries=("$lib"/libfabric/*.so "$lib/libfabric.so.1" "$lib"/ucx/libuct_rdmacm*.so*)
mapfile -t files < <(existing "${programs[@]}" "${libraries[@]}")

check_versions "$libdir/librdmacm.so.1" RDMACM "${files[@]}"
load_programs librdmacm "${programs[@]}"
# Libraries (libfabric, UCX's rdmacm transport): loaded with dlopen(RTLD_NOW) by python3's ctypes.
for l in "${libraries[@]}"; do
    [[ -e "$l" ]] || continue
    load_check "$l" "$(LD_LIBRARY_PATH="$libdir" timeout 30 /usr/bin/python3 -c "import ctypes, os; ctypes.CDLL('$l', mode=os.RTLD_NOW)" 2>&1)"
done
[[ $status == 0 ]] && echo "all imports defined with their versions; every program loads"
exit $status
