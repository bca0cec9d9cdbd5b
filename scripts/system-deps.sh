#!/usr/bin/env bash
# System packages the build needs that a fresh machine may lack: cmake and the libcurl headers
# for the rdkafka crate's bundled librdkafka (feature cmake-build). Installs only what is missing.
set -euo pipefail
missing=()
command -v cmake >/dev/null || missing+=(cmake)
dpkg -s libcurl4-openssl-dev >/dev/null 2>&1 || missing+=(libcurl4-openssl-dev)
((${#missing[@]})) || exit 0
if ! command -v apt-get >/dev/null; then
  echo "system-deps: please install ${missing[*]} (needed to build librdkafka)" >&2
  exit 1
fi
sudo=()
[[ $(id -u) -eq 0 ]] || sudo=(sudo)
echo "system-deps: installing ${missing[*]}"
"${sudo[@]}" apt-get update -qq
DEBIAN_FRONTEND=noninteractive "${sudo[@]}" apt-get install -y -qq "${missing[@]}"
