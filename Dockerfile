# sgemm-server in two stages: build in the CUDA 13 development image with the
# same scripts/setup.sh a developer runs, then run in the CUDA runtime image
# (which has cudart, cuBLAS and NCCL) with the binaries and their few
# non-CUDA shared libraries bundled by scripts/bundle-runtime.sh.
#
#   docker build -t sgemm-server .
#   docker run --gpus all -p 50051:50051 sgemm-server
ARG CUDA_VERSION=13.0.0
ARG UBUNTU=ubuntu24.04

FROM nvidia/cuda:${CUDA_VERSION}-devel-${UBUNTU} AS build
WORKDIR /src
COPY . .
RUN scripts/setup.sh \
 && ctest --preset default -L unit --output-on-failure \
 && scripts/bundle-runtime.sh /opt/sgemm build/bin/sgemm-server build/bin/sgemm-client

FROM nvidia/cuda:${CUDA_VERSION}-runtime-${UBUNTU}
COPY --from=build /opt/sgemm /opt/sgemm
ENV PATH=/opt/sgemm/bin:$PATH \
    LD_LIBRARY_PATH=/opt/sgemm/lib \
    NCCL_NVLS_ENABLE=0
RUN useradd --system --uid 10001 --create-home sgemm \
 && mkdir -p /var/log/sgemm && chown sgemm /var/log/sgemm
USER sgemm
EXPOSE 50051 9090
HEALTHCHECK --interval=15s --timeout=5s --start-period=30s --retries=3 \
  CMD ["sgemm-client", "health", "--server", "127.0.0.1:50051"]
ENTRYPOINT ["sgemm-server", "--listen", "0.0.0.0:50051", "--log-dir", "/var/log/sgemm", "--metrics-listen", "0.0.0.0:9090"]
