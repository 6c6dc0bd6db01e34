#!/usr/bin/env bash
# Builds $WORK/initrd.cpio.gz: a busybox initramfs that loads the virtio and 9p modules of the
# unpacked kernel $1 (in $WORK/kroot), mounts this machine's / read-only (9p tag "hostroot") and the
# work folder read-write (tag "work", at the same path $WORK), and chroots into it to run
# $WORK/l1-stage2.sh.
set -euo pipefail
KV=$1
: "${WORK:?}"
M=$WORK/kroot/lib/modules/$KV
IR=$WORK/initramfs
MODS="virtio_ring virtio virtio_pci_legacy_dev virtio_pci_modern_dev virtio_pci netfs fscache 9pnet 9pnet_virtio 9p"
rm -rf "$IR" && mkdir -p "$IR"/{bin,mods,proc,sys,dev,newroot}
cp /bin/busybox "$IR/bin/busybox"
for m in $MODS; do
  f=$(find "$M" -name "$m.ko" | head -1)
  if [ -n "$f" ]; then cp "$f" "$IR/mods/"; else echo "note: no module $m.ko (built in?)"; fi
done
cat > "$IR/init" <<EOI
#!/bin/busybox sh
/bin/busybox --install -s /bin
mount -t proc proc /proc; mount -t sysfs sys /sys; mount -t devtmpfs dev /dev
for m in $MODS; do [ -f /mods/\$m.ko ] && { insmod /mods/\$m.ko || echo "insmod \$m failed"; }; done
echo "L1-INIT: modules loaded at \$(cat /proc/uptime)"
mount -t 9p -o trans=virtio,version=9p2000.L,ro,msize=262144 hostroot /newroot || { echo "L1-INIT: 9p root mount failed"; poweroff -f; }
mount -t tmpfs tmpfs /newroot/tmp
mkdir -p /newroot$WORK
mount -t 9p -o trans=virtio,version=9p2000.L,msize=262144 work /newroot$WORK || { echo "L1-INIT: 9p work mount failed"; poweroff -f; }
mount -t proc proc /newroot/proc; mount -t sysfs sys /newroot/sys; mount -t devtmpfs dev /newroot/dev
mkdir -p /newroot/dev/shm /newroot/dev/pts; mount -t tmpfs tmpfs /newroot/dev/shm; mount -t devpts devpts /newroot/dev/pts
mount -t tmpfs tmpfs /newroot/run
mount -t tmpfs tmpfs /newroot/var/tmp 2>/dev/null
echo "L1-INIT: chroot at \$(cat /proc/uptime)"
exec chroot /newroot /bin/bash $WORK/l1-stage2.sh
EOI
chmod +x "$IR/init"
(cd "$IR" && find . | cpio -o -H newc 2>/dev/null | gzip -1 > "$WORK/initrd.cpio.gz")
ls -la "$WORK/initrd.cpio.gz"
