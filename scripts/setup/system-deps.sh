#!/usr/bin/env bash
# System packages the build and tests need that a fresh machine may lack: cmake and the libcurl
# headers for the rdkafka crate's bundled librdkafka (feature cmake-build); readelf (binutils),
# and on a non-arm64 machine qemu-user with the Debian arm64 glibc, so the tests can run the arm64
# Lambda zips of `make build`. Installs only what is missing.
set -euo pipefail
missing=()
command -v cmake >/dev/null || missing+=(cmake)
dpkg -s libcurl4-openssl-dev >/dev/null 2>&1 || missing+=(libcurl4-openssl-dev)
command -v readelf >/dev/null || missing+=(binutils)
if [[ "$(uname -m)" != aarch64 ]]; then
  command -v qemu-aarch64 >/dev/null || missing+=(qemu-user)
  [[ -e /usr/aarch64-linux-gnu/lib/libc.so.6 ]] || missing+=(libc6-arm64-cross)
fi
((${#missing[@]})) || exit 0
if ! command -v apt-get >/dev/null; then
  echo "system-deps: please install ${missing[*]} (to build librdkafka and run the arm64 zips in tests)" >&2
  exit 1
fi
sudo=()
[[ $(id -u) -eq 0 ]] || sudo=(sudo)
echo "system-deps: installing ${missing[*]}"
"${sudo[@]}" apt-get update -qq
DEBIAN_FRONTEND=noninteractive "${sudo[@]}" apt-get install -y -qq "${missing[@]}"
