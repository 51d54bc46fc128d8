# Sourced by packaging/build-deb.sh and build-rpm.sh: lays out under $root what a package
# installs, from the static binary at $bin (which generates its own man page and completions),
# each file once: the binary, the unit (run from /usr/bin), the configuration and its
# environment file, kube-nftproxy(8), and the bash, zsh and fish completions.
#   layout "$bin" "$root" "$unit_dir" "$zsh_dir"   (the system's unit and zsh function directories)
layout() {
  local bin=$1 root=$2 unit_dir=$3 zsh_dir=$4
  install -d -m 0755 "$root"
  install -D -m 0755 "$bin" "$root/usr/bin/kube-nftproxy"
  install -d -m 0700 "$root/etc/kube-nftproxy"   # the kubeconfig goes there: credentials
  install -d "$root$unit_dir" "$root/usr/share/man/man8" \
    "$root/usr/share/bash-completion/completions" "$root$zsh_dir" \
    "$root/usr/share/fish/vendor_completions.d"
  sed 's|/usr/local/bin/kube-nftproxy|/usr/bin/kube-nftproxy|' packaging/kube-nftproxy.service \
    > "$root$unit_dir/kube-nftproxy.service"
  chmod 0644 "$root$unit_dir/kube-nftproxy.service"
  install -m 0644 packaging/config.conf "$root/etc/kube-nftproxy/config.conf"
  install -D -m 0644 packaging/default "$root/etc/default/kube-nftproxy"
  "$bin" --generate man | gzip -9n > "$root/usr/share/man/man8/kube-nftproxy.8.gz"
  "$bin" --generate bash > "$root/usr/share/bash-completion/completions/kube-nftproxy"
  "$bin" --generate zsh > "$root$zsh_dir/_kube-nftproxy"
  "$bin" --generate fish > "$root/usr/share/fish/vendor_completions.d/kube-nftproxy.fish"
  chmod 0644 "$root"/usr/share/*/*/* "$root"/usr/share/man/man8/*
}

# The version packages carry: VERSION, else the crate's.
package_version() {
  echo "${VERSION:-$(sed -n 's/^version = "\(.*\)"/\1/p' Cargo.toml | head -1)}"
}
