#include "server/service/request_phase.h"

#include <gtest/gtest.h>

#include <set>
#include <utility>

namespace sgemm {
namespace {

using P = RequestPhase;
constexpr P kAll[] = {P::kHeader, P::kQueued,    P::kReceiving, P::kWaitMemory,
                      P::kEarly,  P::kComputing, P::kSending,   P::kDone};

TEST(RequestPhase, LegalMovesAreExactlyTheDocumentedOnes) {
  const std::set<std::pair<P, P>> legal = {
      {P::kHeader, P::kReceiving},     {P::kHeader, P::kQueued},    {P::kReceiving, P::kWaitMemory},
      {P::kWaitMemory, P::kReceiving}, {P::kReceiving, P::kQueued}, {P::kReceiving, P::kEarly},
      {P::kReceiving, P::kSending},    {P::kEarly, P::kComputing},  {P::kEarly, P::kReceiving},
      {P::kEarly, P::kSending},        {P::kQueued, P::kComputing}, {P::kComputing, P::kQueued},
      {P::kComputing, P::kSending},
  };
  for (P from : kAll) {
    for (P to : kAll) {
      const bool expect = legal.count({from, to}) > 0 || (to == P::kDone && from != P::kDone);
      EXPECT_EQ(legal_move(from, to), expect) << phase_name(from) << " -> " << phase_name(to);
      EXPECT_EQ(check_move(from, to).ok(), expect);
    }
  }
}

TEST(RequestPhase, AnIllegalMoveIsInternalAndNamesBothPhases) {
  const Status st = check_move(P::kSending, P::kReceiving);
  EXPECT_EQ(st.code(), StatusCode::kInternal);
  EXPECT_NE(st.message().find("sending C"), std::string::npos) << st.message();
  EXPECT_NE(st.message().find("receiving the matrices"), std::string::npos) << st.message();
  EXPECT_EQ(check_move(P::kDone, P::kDone).code(), StatusCode::kInternal) << "a request is answered once";
}

TEST(RequestPhase, EveryPhaseHasAName) {
  for (P p : kAll) EXPECT_STRNE(phase_name(p), "?");
  EXPECT_STREQ(phase_name(P::kEarly), phase_name(P::kComputing)) << "the client sees one computing phase";
}

}  // namespace
}  // namespace sgemm
