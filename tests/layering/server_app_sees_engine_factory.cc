// Violation: the Server is handed its engine; only main() picks one through the factory.
#include "server/engine/engine_factory.h"
int main() { return 0; }
