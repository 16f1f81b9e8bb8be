// Control: the service links the Engine interface and may include it.
#include "server/engine/engine.h"
int main() { return 0; }
