// The phases of one Multiply request and its legal moves: the one place that
// says what state a request is in. A stream's own transport state (a read or
// a write outstanding) is not a phase; neither is what the request computes
// from (its input sources).
//
//   kHeader -> kReceiving        a header that waits for chunks (or a stripe attached)
//   kHeader -> kQueued           nothing to receive (every operand in regions)
//   kReceiving -> kWaitMemory    the first data found the budget full
//   kWaitMemory -> kReceiving    the memory was granted
//   kReceiving -> kQueued        the upload is complete: a compute slot next
//   kReceiving -> kEarly         computing starts before the upload ends
//   kReceiving -> kSending       (a stripe's stream) its share is in, its rows of C follow
//   kEarly -> kComputing         the upload completed while computing
//   kEarly -> kReceiving         computing yielded its slot; the upload goes on
//   kEarly -> kSending           computing ended (with A complete)
//   kQueued -> kComputing        a compute thread took the request
//   kComputing -> kQueued        a yielded run, the upload complete since: computed again
//   kComputing -> kSending       the engine returned
//   any but kDone -> kDone       answered (a status went out)
//
// Threads: pure functions.
#pragma once

#include "common/status.h"

namespace sgemm {

enum class RequestPhase {
  kHeader,      // waiting for the first message
  kReceiving,   // chunks arrive; nothing computes
  kWaitMemory,  // the first data waits for the host-memory budget (reading stopped)
  kEarly,       // computing while the rest of A arrives (the slot may be yielded)
  kQueued,      // every input is in; waiting for a compute slot
  kComputing,   // every input is in; the engine runs
  kSending,     // the engine returned: C (or the error) goes out
  kDone,        // the status was sent
};

// What the logs and statuses call the phase ("computing", "sending C", ...).
const char* phase_name(RequestPhase phase);

// Whether `from` -> `to` is one of the moves above.
bool legal_move(RequestPhase from, RequestPhase to);

// OK for a legal move; INTERNAL naming both phases for any other (a bug in
// the service, never the client's doing).
Status check_move(RequestPhase from, RequestPhase to);

}  // namespace sgemm
