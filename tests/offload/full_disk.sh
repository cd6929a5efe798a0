#!/usr/bin/env bash
# liboffload's NVMe tier on a full disk: a 512 KiB tmpfs where one can be
# mounted, else tests/lua/fullfs.c's LD_PRELOAD budget of the same size
# (it counts the tier's unlinked file too).
set -u
BUILD=${BUILD:-build}
disk=$(mktemp -d /tmp/strata-offload-disk-XXXXXX)
mounted=""
trap '[ -n "$mounted" ] && umount "$disk" 2>/dev/null; rm -rf "$disk"' EXIT
if mount -t tmpfs -o size=512k tmpfs "$disk" 2>/dev/null; then
  mounted=1
  "$BUILD/bin/offload_full_disk" "$disk" reuse
else
  echo "no tmpfs here (mount refused): fullfs.so with a 512 KiB budget"
  env LD_PRELOAD="$(cd "$BUILD/lib" && pwd)/test_fullfs.so" FULLFS_DIR="$disk" FULLFS_BYTES=$((512 << 10)) \
    "$BUILD/bin/offload_full_disk" "$disk"
fi
