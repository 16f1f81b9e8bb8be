// Violation: the service sees the Engine interface, never the CUDA engine.
#include "server/engine/cuda/cuda_engine.h"
int main() { return 0; }
