// How many 2-CTA clusters of a kernel shaped like fp32x3's cluster variant (384 threads,
// 168 registers, 197,680 bytes of dynamic shared memory) the H100 admits at once.
#include <cstdio>
#include <cuda_runtime.h>
__global__ void __launch_bounds__(384, 1) probe(float* p) { extern __shared__ float s[]; if (p) p[threadIdx.x] = s[threadIdx.x]; }
int main() {
  for (int smem : {197680, 148528, 99376, 50000}) {
    cudaFuncSetAttribute(probe, cudaFuncAttributeMaxDynamicSharedMemorySize, smem);
    for (int cl : {1, 2, 4}) {
      cudaLaunchConfig_t cfg{};
      cudaLaunchAttribute attr{};
      attr.id = cudaLaunchAttributeClusterDimension;
      attr.val.clusterDim.x = cl; attr.val.clusterDim.y = 1; attr.val.clusterDim.z = 1;
      cfg.blockDim = dim3(384); cfg.dynamicSmemBytes = smem; cfg.attrs = &attr; cfg.numAttrs = 1;
      cfg.gridDim = dim3(132 / cl * cl);
      int clusters = -1;
      cudaError_t e = cudaOccupancyMaxActiveClusters(&clusters, probe, &cfg);
      std::printf("smem %6d cluster %d: max active clusters %d (%d CTAs) %s\n", smem, cl, clusters, clusters * cl, cudaGetErrorString(e));
    }
  }
}
