#!/usr/bin/env bash
# After build.sh: checks that our libibverbs.so.1 defines every symbol@IBVERBS_* that Debian's
# rdma-core 44 programs and libraries import, with that version (prints the missing ones), and
# that the dynamic loader can bind each program against it (hca/symbols.sh). Exit 1 if anything
# is missing.
set -uo pipefail
# shellcheck source=hca/symbols.sh
. "$(dirname "${BASH_SOURCE[0]}")/../symbols.sh"

lib=/usr/lib/x86_64-linux-gnu
programs=(/usr/bin/ibv_* /usr/bin/ib_* /usr/bin/rping /usr/bin/cmtime /usr/bin/mckey /usr/bin/rdma_client
    /usr/bin/rdma_server /usr/bin/rdma_xclient /usr/bin/rdma_xserver /usr/bin/riostream /usr/bin/rstream
    /usr/bin/ucmatose /usr/bin/udaddy /usr/bin/udpong)
libraries=("$lib/librdmacm.so.1" "$lib/libmlx5.so.1" "$lib/libmlx4.so.1" "$lib/libefa.so.1" "$lib"/libibverbs/*.so)
mapfile -t pyverbs < <(dpkg -L python3-pyverbs 2>/dev/null | grep '\.so$')
mapfile -t files < <(existing "${programs[@]}" "${libraries[@]}" "${pyverbs[@]}")

check_versions "$libdir/libibverbs.so.1" IBVERBS "${files[@]}"
load_programs libibverbs "${programs[@]}"
# pyverbs: importing its modules loads its .so files (and libmlx5/libefa through them).
modules="pyverbs.device, pyverbs.pd, pyverbs.cq, pyverbs.qp, pyverbs.mr, pyverbs.providers.mlx5.mlx5dv, pyverbs.providers.efa.efadv"
load_check pyverbs "$(LD_BIND_NOW=1 LD_LIBRARY_PATH="$libdir" timeout 30 /usr/bin/python3 -c "import $modules" 2>&1)"
[[ $status == 0 ]] && echo "all imports defined with their versions; every program loads"
exit $status
