#!/usr/bin/env bash
# pack-device-deps.sh — the GPU machine has OpenBLAS but neither cJSON nor a network; this packs
# this machine's OpenBLAS (OpenMP) and cJSON headers and libraries (Debian packages
# libopenblas-openmp-dev, libcjson-dev) into .devdeps/deps.tar.xz, which a device call carries
# (carry: [".devdeps"]) and bench/run-device.sh unpacks when the plain configure fails.
# .devdeps/ is kept out of git by .gitignore.
set -euo pipefail
cd "$(dirname "$0")/.."
bash tools/install-deps.sh
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
mkdir -p "$tmp/include/cjson" "$tmp/lib" .devdeps
inc=$(dirname "$(find /usr/include -path '*openblas-openmp*' -name cblas.h | head -1)")
cp "$inc/cblas.h" "$inc/openblas_config.h" "$tmp/include/"
cp /usr/include/cjson/cJSON.h "$tmp/include/cjson/"
lib=/usr/lib/x86_64-linux-gnu
cp -L "$lib"/openblas-openmp/libopenblas.so.0 "$tmp/lib/"
ln -s libopenblas.so.0 "$tmp/lib/libopenblas.so"
cp -L "$lib"/libcjson.so.1 "$tmp/lib/"
ln -s libcjson.so.1 "$tmp/lib/libcjson.so"
cp -L "$lib"/libgfortran.so.5 "$lib"/libquadmath.so.0 "$tmp/lib/"
tar cJf .devdeps/deps.tar.xz -C "$tmp" include lib
echo "wrote .devdeps/deps.tar.xz ($(du -h .devdeps/deps.tar.xz | cut -f1))"
