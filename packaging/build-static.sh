#!/usr/bin/env bash
# Builds the static musl binary that is shipped: target/x86_64-unknown-linux-musl/release/kube-nftproxy.
set -euo pipefail
cd "$(dirname "$0")/.."
rustup target add x86_64-unknown-linux-musl >/dev/null
cargo build --release --locked --target x86_64-unknown-linux-musl
bin=target/x86_64-unknown-linux-musl/release/kube-nftproxy
file "$bin" 2>/dev/null || true
ls -l "$bin"
