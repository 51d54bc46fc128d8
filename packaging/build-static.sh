#!/usr/bin/env bash
# Builds the static binary that is shipped (x86_64-unknown-linux-musl, the dist profile: the
# release one with fat LTO in one codegen unit)
# and copies it to OUT_DIR/kube-nftproxy (default: dist/). The Containerfile runs it, and so
# does tests/kernel/packaging_image.rs (PROFILE=dev there: the same target and linking, built faster).
#   packaging/build-static.sh [OUT_DIR]
set -euo pipefail
cd "$(dirname "$0")/.."
target=x86_64-unknown-linux-musl
out=${1:-dist}
profile=${PROFILE:-dist}

rustup target list --installed | grep -qx "$target" || rustup target add "$target"
# ring and jemalloc (the static build's allocator) compile C for the target: musl's compiler
# wrapper (Debian's musl-tools) does that, and jemalloc's build runs make.
need=()
command -v musl-gcc >/dev/null 2>&1 || need+=(musl-tools)
command -v make >/dev/null 2>&1 || need+=(make)
if [ ${#need[@]} -gt 0 ]; then
  if ! command -v apt-get >/dev/null 2>&1; then
    echo "build-static.sh: needs musl-gcc and make (Debian/Ubuntu: ${need[*]})" >&2
    exit 1
  fi
  export DEBIAN_FRONTEND=noninteractive
  # Builds run at once (the tests build the deb, the rpm and the image together) take turns:
  # apt-get fails at once on a lock another holds.
  flock -w 300 "${TMPDIR:-/tmp}/kube-nftproxy-apt.lock" \
    sh -c 'apt-get update -qq && apt-get install -y -qq --no-install-recommends "$@" >/dev/null' sh "${need[@]}"
fi
export CC_x86_64_unknown_linux_musl=musl-gcc

cargo build --locked --profile "$profile" --target "$target" --bin kube-nftproxy
case "$profile" in dev | test) dir=debug ;; bench) dir=release ;; *) dir=$profile ;; esac
mkdir -p "$out"
cp "${CARGO_TARGET_DIR:-target}/$target/$dir/kube-nftproxy" "$out/kube-nftproxy"
ls -l "$out/kube-nftproxy"
