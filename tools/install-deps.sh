#!/usr/bin/env bash
# install-deps.sh — makes sure the Debian packages tlm builds with are present.
# As root it installs what is missing with apt-get; otherwise it names the packages and fails.
set -euo pipefail

need=()
have_header() { [ -n "$(find /usr/include "$@" -name "$1" -print -quit 2>/dev/null)" ]; }
command -v cmake >/dev/null 2>&1 || need+=(cmake)
command -v cc >/dev/null 2>&1 || need+=(gcc)
command -v make >/dev/null 2>&1 || need+=(make)
[ -n "$(find /usr/include -path '*openblas*' -name cblas.h -print -quit 2>/dev/null)" ] || need+=(libopenblas-openmp-dev)
[ -f /usr/include/cjson/cJSON.h ] || need+=(libcjson-dev)

if [ ${#need[@]} -eq 0 ]; then
  exit 0
fi
if [ "$(id -u)" -eq 0 ] && command -v apt-get >/dev/null 2>&1; then
  echo "tlm: installing missing Debian packages: ${need[*]}"
  export DEBIAN_FRONTEND=noninteractive
  apt-get update -qq
  apt-get install -y -qq --no-install-recommends "${need[@]}"
else
  echo "tlm: missing Debian packages: ${need[*]}" >&2
  echo "tlm: install them with: sudo apt-get install ${need[*]}" >&2
  exit 1
fi
