// Gloo names a failed connection only by its socket address ("[host]:port").
// These two functions map such addresses back to the members' global ranks.
#pragma once

#include <string>
#include <vector>

#include "hora/store.h"

namespace gloo {
class Context;
}

namespace hora::gloo_transport {

// Publishes, under this member's key in the set's store, the local socket
// address of each of its Gloo connections (once connectFullMesh is done).
void publish_connection_addresses(Store& store, ::gloo::Context& context);

// For each member by set rank, the address of that member's end of its
// Gloo connection to member `rank`, as published above ("" for `rank`
// itself and for members whose list cannot be read). Call once every member
// has published.
std::vector<std::string> remote_connection_addresses(Store& store, int rank, int size);

// The global ranks of the other members whose addresses (published above,
// or in Gloo's rendezvous keys) appear in `message`, a Gloo error. Reads the store with a short timeout and skips
// members it cannot read: this runs only on the failure path.
std::vector<int> global_ranks_named_in(Store& store, const std::vector<int>& global_ranks,
                                       int rank, const std::string& message);

}  // namespace hora::gloo_transport
