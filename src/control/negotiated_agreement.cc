#include "control/negotiated_agreement.h"

#include <string>

#include "hora/errors.h"

namespace hora::control {

Agreement::Outcome NegotiatedAgreement::submit(uint32_t slot) {
  throw Internal("cache slot " + std::to_string(slot) + " was submitted for agreement, but this set negotiates every op");
}

std::optional<Agreement::Entry> NegotiatedAgreement::entry(uint64_t index) const {
  if (index >= appended_) return std::nullopt;
  return Entry{true, 0, nullptr};
}

}  // namespace hora::control
