#include "server/service/stripe_group.h"

#include <gtest/gtest.h>

namespace sgemm {
namespace {

TEST(StripeGroupMail, RowsArriveInPostedOrderAndTheEndShowsOnlyOnceEveryRowIsTaken) {
  int released = 0;
  {
    GemmRequest request;
    request.shape = {10, 3, 2};
    StripeGroup group("token", 3, 2, request, nullptr, nullptr, [&] { ++released; });
    EXPECT_FALSE(group.end_of(1));
    group.post_rows(1, {2, 4, nullptr, nullptr});
    group.post_rows(2, {4, 6, nullptr, nullptr});
    group.post_rows(1, {8, 10, nullptr, nullptr});
    group.post_end(1, Status::Ok());
    EXPECT_FALSE(group.end_of(1)) << "two rows still wait: the stripe must send them before it ends";
    StripeGroup::Mail mail = group.take_mail(1);
    ASSERT_EQ(mail.rows.size(), 2u);
    EXPECT_EQ(mail.rows[0].begin, 2);
    EXPECT_EQ(mail.rows[1].begin, 8);
    ASSERT_TRUE(mail.end);
    EXPECT_TRUE(mail.end->ok());
    ASSERT_TRUE(group.end_of(1));
    EXPECT_TRUE(group.take_mail(1).rows.empty()) << "taken once";
    EXPECT_EQ(group.take_mail(2).rows.size(), 1u) << "each stripe has its own mail";

    group.post_end(2, Status(StatusCode::kAborted, "stripe 1 failed"));
    group.post_end(2, Status::Ok());
    ASSERT_TRUE(group.end_of(2));
    EXPECT_EQ(group.end_of(2)->code(), StatusCode::kAborted) << "the first end posted stands";
  }
  EXPECT_EQ(released, 1);
}

}  // namespace
}  // namespace sgemm
