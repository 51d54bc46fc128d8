#!/usr/bin/env bash
# Builds OUT_DIR/kube-nftproxy-<version>-1.x86_64.rpm (default OUT_DIR: dist/) from the
# static binary with rpmbuild (Debian's `rpm` package, installed if missing): the same files
# as the .deb (packaging/layout.sh), the unit in /usr/lib/systemd/system, the configuration
# and its environment file as %config(noreplace), and the same install and removal steps
# (packaging/maintainer.sh). VERSION overrides the version.
#   packaging/build-rpm.sh [OUT_DIR]
set -euo pipefail
cd "$(dirname "$0")/.."
out=${1:-dist}
if ! command -v rpmbuild >/dev/null 2>&1; then
  export DEBIAN_FRONTEND=noninteractive
  # As in build-static.sh: builds run at once take turns at apt-get.
  flock -w 300 "${TMPDIR:-/tmp}/kube-nftproxy-apt.lock" \
    sh -c 'apt-get update -qq && apt-get install -y -qq --no-install-recommends rpm >/dev/null' 
fi
packaging/build-static.sh "$out" >/dev/null
. packaging/layout.sh
version=$(package_version)
top=$(mktemp -d)
trap 'rm -rf "$top"' EXIT
root="$top/root"
layout "$out/kube-nftproxy" "$root" /usr/lib/systemd/system /usr/share/zsh/site-functions
maintainer=$(cat packaging/maintainer.sh)
cat > "$top/kube-nftproxy.spec" <<SPEC
Name: kube-nftproxy
Version: ${version//-/~}
Release: 1
Summary: Kubernetes service proxy on nftables, a drop-in for kube-proxy
License: Apache-2.0
BuildArch: x86_64
AutoReqProv: no

%description
One static binary that watches the API server and keeps this node's nftables rules for
Services: kube-proxy's nftables mode, its flags and configuration file, faster to sync.
Write the cluster's kubeconfig to /etc/kube-nftproxy/kubeconfig, then
systemctl start kube-nftproxy.

%install
cp -a "$root/." "%{buildroot}/"

%post
$maintainer
if [ "\$1" -eq 1 ]; then knp_installed; else knp_upgraded; fi

%preun
$maintainer
if [ "\$1" -eq 0 ]; then knp_removing; fi

%postun
$maintainer
if [ "\$1" -eq 0 ]; then knp_removed; fi

%files
/usr/bin/kube-nftproxy
/usr/lib/systemd/system/kube-nftproxy.service
%dir %attr(0700, root, root) /etc/kube-nftproxy
%config(noreplace) /etc/kube-nftproxy/config.conf
%config(noreplace) /etc/default/kube-nftproxy
/usr/share/man/man8/kube-nftproxy.8.gz
/usr/share/bash-completion/completions/kube-nftproxy
/usr/share/zsh/site-functions/_kube-nftproxy
/usr/share/fish/vendor_completions.d/kube-nftproxy.fish
SPEC
rpmbuild --quiet -bb --define "_topdir $top/build" --define "_rpmdir $top/rpms" \
  --define "_build_id_links none" --define "__os_install_post %{nil}" "$top/kube-nftproxy.spec"
mkdir -p "$out"
rpm=$(find "$top/rpms" -name '*.rpm' | head -1)
cp "$rpm" "$out/"
echo "$out/$(basename "$rpm")"
