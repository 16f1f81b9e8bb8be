// Violation: the client knows the wire API and the vocabulary, not the server.
#include "server/planner/plan.h"
int main() { return 0; }
