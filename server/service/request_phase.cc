#include "server/service/request_phase.h"

#include <string>

namespace sgemm {

const char* phase_name(RequestPhase phase) {
  switch (phase) {
    case RequestPhase::kHeader:
      return "reading the header";
    case RequestPhase::kReceiving:
      return "receiving the matrices";
    case RequestPhase::kWaitMemory:
      return "waiting for host memory";
    case RequestPhase::kQueued:
      return "queued for a compute slot";
    case RequestPhase::kEarly:  // the client sees one "computing", however it started
    case RequestPhase::kComputing:
      return "computing";
    case RequestPhase::kSending:
      return "sending C";
    case RequestPhase::kDone:
      return "done";
  }
  return "?";
}

bool legal_move(RequestPhase from, RequestPhase to) {
  using P = RequestPhase;
  if (to == P::kDone) return from != P::kDone;
  switch (from) {
    case P::kHeader:
      return to == P::kReceiving || to == P::kQueued;
    case P::kReceiving:
      return to == P::kWaitMemory || to == P::kQueued || to == P::kEarly || to == P::kSending;
    case P::kWaitMemory:
      return to == P::kReceiving;
    case P::kEarly:
      return to == P::kComputing || to == P::kReceiving || to == P::kSending;
    case P::kQueued:
      return to == P::kComputing;
    case P::kComputing:
      return to == P::kQueued || to == P::kSending;
    case P::kSending:
    case P::kDone:
      return false;
  }
  return false;
}

Status check_move(RequestPhase from, RequestPhase to) {
  if (legal_move(from, to)) return Status::Ok();
  return Internal(std::string("illegal request phase move from \"") + phase_name(from) + "\" (" +
                  std::to_string(static_cast<int>(from)) + ") to \"" + phase_name(to) + "\" (" +
                  std::to_string(static_cast<int>(to)) + ")");
}

}  // namespace sgemm
