// Violation: devices sit below the engine (no back-edge).
#include "server/engine/engine.h"
int main() { return 0; }
