// Control: the Server object builds on the service and the Engine interface.
#include "server/app/server.h"
#include "server/service/sgemm_service.h"
int main() { return 0; }
