// Checks a front end's op against the process set it targets, before
// anything is queued, and turns it into the Request the members negotiate.
#pragma once

#include "coordinator/request.h"
#include "hora/process_set.h"
#include "hora/runtime.h"

namespace hora {

// Throws InvalidArgument naming what is wrong: a non-member, a root outside
// the set, splits that do not match, an output of the wrong size, scale
// factors on bool tensors, ... Fills defaulted fields of `args` (even splits).
Request make_request(const ProcessSet& set, OpArgs& args);

}  // namespace hora
