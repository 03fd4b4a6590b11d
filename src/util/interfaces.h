// This host's network interfaces, as the configuration names them
// (horovodrun --network-interfaces).
#pragma once

#include <string>
#include <vector>

namespace hora {

// The address of the first of `interfaces` (network interface names, in
// order of preference) that this host has with an IPv4 address, else its
// IPv6 one; throws InvalidArgument naming the interfaces asked for and
// those the host has when none is usable.
std::string interface_address(const std::vector<std::string>& interfaces);

}  // namespace hora
