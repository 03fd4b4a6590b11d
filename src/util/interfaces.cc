#include "util/interfaces.h"

#include <arpa/inet.h>
#include <ifaddrs.h>
#include <netinet/in.h>

#include <cerrno>
#include <cstring>
#include <map>

#include "hora/errors.h"

namespace hora {

std::string interface_address(const std::vector<std::string>& interfaces) {
  ifaddrs* list = nullptr;
  if (getifaddrs(&list) != 0) throw Internal(std::string("getifaddrs: ") + std::strerror(errno));
  std::map<std::string, std::pair<std::string, std::string>> found;  // name -> (IPv4, IPv6)
  for (const ifaddrs* a = list; a != nullptr; a = a->ifa_next) {
    if (a->ifa_name == nullptr) continue;
    auto& [v4, v6] = found[a->ifa_name];
    if (a->ifa_addr == nullptr) continue;
    char text[INET6_ADDRSTRLEN] = {};
    if (a->ifa_addr->sa_family == AF_INET && v4.empty()) {
      inet_ntop(AF_INET, &reinterpret_cast<const sockaddr_in*>(a->ifa_addr)->sin_addr, text, sizeof text);
      v4 = text;
    } else if (a->ifa_addr->sa_family == AF_INET6 && v6.empty()) {
      const auto* v6_address = reinterpret_cast<const sockaddr_in6*>(a->ifa_addr);
      if (IN6_IS_ADDR_LINKLOCAL(&v6_address->sin6_addr)) continue;  // needs a scope id to be reached
      inet_ntop(AF_INET6, &v6_address->sin6_addr, text, sizeof text);
      v6 = text;
    }
  }
  freeifaddrs(list);
  for (const std::string& name : interfaces) {
    auto it = found.find(name);
    if (it == found.end()) continue;
    if (!it->second.first.empty()) return it->second.first;
    if (!it->second.second.empty()) return it->second.second;
  }
  std::string asked, has;
  for (const std::string& name : interfaces) asked += (asked.empty() ? "" : ", ") + name;
  for (const auto& [name, addresses] : found)
    has += (has.empty() ? "" : ", ") + name + (addresses.first.empty() && addresses.second.empty() ? " (no address)" : "");
  throw InvalidArgument("none of the network interfaces " + asked + " has an address on this host; it has " +
                        (has.empty() ? std::string("none") : has));
}

}  // namespace hora
