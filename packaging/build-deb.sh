#!/usr/bin/env bash
# Builds OUT_DIR/kube-nftproxy_<version>_amd64.deb (default OUT_DIR: dist/) from the static
# binary (packaging/build-static.sh; PROFILE as there) with Debian's dpkg-deb: the binary in
# /usr/bin, the hardened unit in /lib/systemd/system, /etc/kube-nftproxy/config.conf and
# /etc/default/kube-nftproxy as conffiles (upgrades keep your edits), kube-nftproxy(8), and
# the bash, zsh and fish completions (packaging/layout.sh). A first install enables the
# unit, which starts once /etc/kube-nftproxy/kubeconfig exists; an upgrade restarts it if it
# runs; removing stops it and leaves its rules in the kernel (packaging/maintainer.sh). VERSION overrides the version;
# DEB_COMPRESSION dpkg-deb's compressor (xz; the tests' unoptimised binary goes uncompressed).
#   packaging/build-deb.sh [OUT_DIR]
set -euo pipefail
cd "$(dirname "$0")/.."
out=${1:-dist}
packaging/build-static.sh "$out" >/dev/null
. packaging/layout.sh
version=$(package_version)
root=$(mktemp -d)
trap 'rm -rf "$root"' EXIT
layout "$out/kube-nftproxy" "$root" /lib/systemd/system /usr/share/zsh/vendor-completions
mkdir -p "$root/DEBIAN"
size=$(du -sk --exclude=DEBIAN "$root" | cut -f1)
cat > "$root/DEBIAN/control" <<CONTROL
Package: kube-nftproxy
Version: $version
Architecture: amd64
Maintainer: kube-nftproxy developers <kube-nftproxy@localhost>
Installed-Size: $size
Section: net
Priority: optional
Homepage: https://kubernetes.io/docs/reference/networking/virtual-ips/
Description: Kubernetes service proxy on nftables, a drop-in for kube-proxy
 One static binary that watches the API server and keeps this node's nftables rules for
 Services: kube-proxy's nftables mode, its flags and configuration file, faster to sync.
 Write the cluster's kubeconfig to /etc/kube-nftproxy/kubeconfig, then
 systemctl start kube-nftproxy.
CONTROL
printf '/etc/kube-nftproxy/config.conf\n/etc/default/kube-nftproxy\n' > "$root/DEBIAN/conffiles"
script() { # name, then what it runs: a case over the script's arguments
  { echo '#!/bin/sh'; echo 'set -e'; cat packaging/maintainer.sh; echo "$2"; } > "$root/DEBIAN/$1"
  chmod 0755 "$root/DEBIAN/$1"
}
# postinst configure: $2 is the version replaced, empty on a first install.
script postinst 'case "$1" in configure) if [ -z "$2" ]; then knp_installed; else knp_upgraded; fi ;; esac'
script prerm 'case "$1" in remove) knp_removing ;; esac'
script postrm 'case "$1" in remove|purge) knp_removed ;; esac'
mkdir -p "$out"
deb="$out/kube-nftproxy_${version}_amd64.deb"
dpkg-deb --root-owner-group -Z"${DEB_COMPRESSION:-xz}" --build "$root" "$deb" >/dev/null
echo "$deb"
