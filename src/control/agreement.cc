#include "control/agreement.h"

#include <string>

#include "hora/errors.h"

namespace hora::control {

void Agreement::received(int from, const std::vector<uint8_t>&) {
  throw Internal("an agreement message from set rank " + std::to_string(from) +
                 " reached a set whose agreement sends none");
}

}  // namespace hora::control
