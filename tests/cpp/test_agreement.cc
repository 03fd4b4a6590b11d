// NegotiatedAgreement: the log of a set whose ops are all negotiated holds
// the coordinator's responses, in the order they arrived or were sent, and
// nothing else.
#include <gtest/gtest.h>

#include "control/negotiated_agreement.h"
#include "hora/errors.h"

namespace hora::control {
namespace {

TEST(NegotiatedAgreement, TheLogHoldsTheResponsesInOrder) {
  NegotiatedAgreement agreement;
  EXPECT_EQ(agreement.rows(), 0u);
  EXPECT_FALSE(agreement.entry(0));
  EXPECT_FALSE(agreement.entry_waiting());
  agreement.response_received();
  agreement.response_received();
  ASSERT_TRUE(agreement.entry(1));
  EXPECT_TRUE(agreement.entry(1)->response);
  EXPECT_FALSE(agreement.entry(2));
  agreement.set_consumed(1);
  EXPECT_TRUE(agreement.entry_waiting());
  agreement.set_consumed(2);
  EXPECT_FALSE(agreement.entry_waiting());
}

TEST(NegotiatedAgreement, NoSlotIsAgreedWithoutTheCoordinator) {
  NegotiatedAgreement agreement;
  EXPECT_THROW(agreement.submit(0), Internal);
  EXPECT_TRUE(agreement.divert(0).empty());
  EXPECT_TRUE(agreement.row_state(0).submitted.empty());
  EXPECT_FALSE(agreement.take_drain_request());
}

}  // namespace
}  // namespace hora::control
