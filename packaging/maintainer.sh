# Sourced by the packages' scripts (the .deb's postinst, prerm and postrm, the RPM's %post,
# %preun and %postun): what installing, upgrading and removing do with systemd, written once.
# A first install enables the unit but cannot start it before the configuration names a
# cluster: the unit runs only once /etc/kube-nftproxy/kubeconfig exists
# (ConditionPathExists), so a `systemctl start kube-nftproxy` after writing it is all that is
# left. An upgrade keeps whether it is enabled and restarts it if it runs.
knp_installed() {
  [ -d /run/systemd/system ] || return 0
  systemctl daemon-reload || true
  systemctl enable kube-nftproxy.service || true
}
knp_upgraded() {
  [ -d /run/systemd/system ] || return 0
  systemctl daemon-reload || true
  systemctl try-restart kube-nftproxy.service || true
}
# Removing stops the daemon. Its rules stay in the kernel, so traffic to Services keeps
# flowing until they are removed.
knp_removing() {
  if [ -d /run/systemd/system ]; then
    systemctl disable --now kube-nftproxy.service || true
  fi
  echo "kube-nftproxy: stopped; its nftables rules stay in the kernel (traffic keeps flowing)." >&2
  echo "kube-nftproxy: to remove them: nft delete table ip kube-nftproxy; nft delete table ip6 kube-nftproxy" >&2
  echo "kube-nftproxy: (or, with the package installed and the daemon stopped: kube-nftproxy --cleanup)" >&2
}
knp_removed() {
  [ -d /run/systemd/system ] || return 0
  systemctl daemon-reload || true
}
