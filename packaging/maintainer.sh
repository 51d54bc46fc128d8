# Sourced by the packages' scripts (the .deb's postinst and prerm, the RPM's %post and
# %preun): what installing and removing do with systemd, written once.
# Installing enables the unit but cannot start it before the configuration names a cluster:
# the unit runs only once /etc/kube-nftproxy/kubeconfig exists (ConditionPathExists), so a
# `systemctl start kube-nftproxy` after writing it is all that is left.
knp_installed() {
  [ -d /run/systemd/system ] || return 0
  systemctl daemon-reload || true
  systemctl enable kube-nftproxy.service || true
  systemctl try-restart kube-nftproxy.service || true
}
# Removing stops the daemon. Its rules stay in the kernel, so traffic to Services keeps
# flowing: `kube-nftproxy --cleanup`, before the binary goes, removes them.
knp_removing() {
  if [ -d /run/systemd/system ]; then
    systemctl disable --now kube-nftproxy.service || true
  fi
  echo "kube-nftproxy: stopped; its nftables rules stay in the kernel (traffic keeps flowing)." >&2
  echo "kube-nftproxy: to remove them, run 'kube-nftproxy --cleanup' before removing the package." >&2
}
