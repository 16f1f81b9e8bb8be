# sgemm-server in two stages: build in the CUDA 13 development image with the
# same scripts/setup.sh a developer runs, then run in the CUDA runtime image
# (which has cudart, cuBLAS and NCCL) with the binaries and their few
# non-CUDA shared libraries bundled by scripts/bundle-runtime.sh.
#
#   docker build --build-arg SGEMM_COMMIT=$(git rev-parse --short=12 HEAD) -t sgemm-server .
#   docker run --gpus all -p 50051:50051 -p 9090:9090 sgemm-server
#   docker run --gpus all -p 50051:50051 sgemm-server --listen 0.0.0.0:50051 --backend cuda   (flags replace CMD)
#
# The ENTRYPOINT is the binary alone: the default flags are the CMD, and
# `docker run IMAGE FLAGS...` or Compose's `command:` replaces them. Logs go
# to stdout (docker logs); --log-dir on a writable volume adds rotating files
# and timings.jsonl (docs/operations.md). The HEALTHCHECK asks whatever port
# the server bound: it writes it to $SGEMM_PORT_FILE.
ARG CUDA_VERSION=13.0.0
ARG UBUNTU=ubuntu24.04

FROM nvidia/cuda:${CUDA_VERSION}-devel-${UBUNTU} AS build
# .git is not copied (.dockerignore): the commit sgemm_build_info reports comes from here.
ARG SGEMM_COMMIT=unknown
WORKDIR /src
COPY . .
RUN SGEMM_COMMIT=${SGEMM_COMMIT} scripts/setup.sh \
 && ctest --preset default -L unit --output-on-failure \
 && scripts/bundle-runtime.sh /opt/sgemm build/bin/sgemm-server build/bin/sgemm-client

FROM nvidia/cuda:${CUDA_VERSION}-runtime-${UBUNTU}
COPY --from=build /opt/sgemm /opt/sgemm
# Appended to, never replacing, the base image's library path (the driver's libraries are found through it).
ENV PATH=/opt/sgemm/bin:$PATH \
    LD_LIBRARY_PATH=/opt/sgemm/lib${LD_LIBRARY_PATH:+:${LD_LIBRARY_PATH}} \
    NCCL_NVLS_ENABLE=0 \
    SGEMM_PORT_FILE=/tmp/sgemm-server.port
RUN useradd --system --uid 10001 --create-home sgemm \
 && mkdir -p /var/log/sgemm && chown sgemm /var/log/sgemm
USER sgemm
EXPOSE 50051 9090
HEALTHCHECK --interval=15s --timeout=5s --start-period=60s --retries=3 \
  CMD sgemm-client health --server "127.0.0.1:$(cat "$SGEMM_PORT_FILE")" || exit 1
ENTRYPOINT ["sgemm-server"]
CMD ["--listen", "0.0.0.0:50051", "--metrics-listen", "0.0.0.0:9090"]
