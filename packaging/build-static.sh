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
  apt-get update -qq
  apt-get install -y -qq -o DPkg::Lock::Timeout=300 --no-install-recommends "${need[@]}" >/dev/null
fi
export CC_x86_64_unknown_linux_musl=musl-gcc

cargo build --locked --profile "$profile" --target "$target" --bin kube-nftproxy
case "$profile" in dev | test) dir=debug ;; bench) dir=release ;; *) dir=$profile ;; esac
mkdir -p "$out"
cp "${CARGO_TARGET_DIR:-target}/$target/$dir/kube-nftproxy" "$out/kube-nftproxy"
ls -l "$out/kube-nftproxy"
