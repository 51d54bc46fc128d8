#!/bin/sh
# Copies `nft` and every shared library it loads, with the dynamic loader, under ROOT at the
# same paths: what kube-nftproxy runs besides itself, and nothing else (no shell, no package
# manager). The Containerfile runs it in a Debian stage; tests/packaging_image.rs runs it on
# the test machine and runs the daemon chrooted into the result.
#   packaging/nft-rootfs.sh ROOT
set -eu
root=${1:?usage: nft-rootfs.sh ROOT}
nft=$(command -v nft)
# ldd names each library by path (`libx.so => /lib/…/libx.so (0x…)`, the loader alone);
# the kernel's vDSO has no path and is skipped.
for file in "$nft" $(ldd "$nft" | grep -o '/[^ ]*'); do
  mkdir -p "$root$(dirname "$file")"
  cp -L "$file" "$root$file"
done
