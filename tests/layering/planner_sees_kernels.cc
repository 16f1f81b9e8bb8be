// Violation: the planner knows nothing of CUDA; kernels/ is not in its reach.
#include "kernels/gemm_args.h"
int main() { return 0; }
