// Control: the planner links sgemm_common and may include its vocabulary.
#include "common/gemm_types.h"
int main() { return sgemm::GemmShape{1, 1, 1}.m == 1 ? 0 : 1; }
