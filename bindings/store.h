// The rendezvous store's part of hora._core (store.cc).
#pragma once

#include <nanobind/nanobind.h>

namespace hora::bindings {

// Adds StoreServer, StoreClient, their error types and the protocol's
// encoding to the module.
void register_store(nanobind::module_& m);

}  // namespace hora::bindings
