#!/usr/bin/env bash
# bundle-runtime.sh DEST BINARY...
# Copies binaries into DEST/bin and the shared libraries they need that a CUDA
# host may lack (gRPC, protobuf, abseil, spdlog, fmt, OpenBLAS, ...) into
# DEST/lib. glibc, libstdc++ and the CUDA/NVIDIA libraries (cudart, cuBLAS,
# NCCL, the driver) are left to the host. Used by the Dockerfile's runtime
# stage and to carry test builds to the GPU machines:
#   LD_LIBRARY_PATH=DEST/lib DEST/bin/sgemm-server ...
set -euo pipefail
[ $# -ge 2 ] || { echo "usage: $0 DEST BINARY..." >&2; exit 2; }
dest=$1; shift
mkdir -p "$dest/bin" "$dest/lib"
skip='/(ld-linux[^/]*|libc|libm|libdl|libpthread|librt|libutil|libresolv|libstdc\+\+|libgcc_s|libcuda|libcudart|libcublas|libcublasLt|libnccl|libnvidia[^/]*|libnvrtc[^/]*)\.so'
for bin in "$@"; do
  cp -L "$bin" "$dest/bin/"
  ldd "$bin" | awk '/=> \// {print $3}' | { grep -Ev "$skip" || true; } | while read -r lib; do
    cp -Lu "$lib" "$dest/lib/"
  done
done
echo "bundled $(ls "$dest/bin" | wc -l) binaries and $(ls "$dest/lib" | wc -l) libraries into $dest ($(du -sh "$dest" | cut -f1))"
