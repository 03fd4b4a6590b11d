// How a process set is cut into hosts, and how one member makes the parts
// of its hierarchical backend.
#include <algorithm>
#include <map>

#include "hora/errors.h"
#include "transport/hierarchical/hierarchical_backend.h"

namespace hora::hierarchical {

HostLayout plan_hosts(const std::vector<std::string>& identities) {
  HostLayout layout;
  std::map<std::string, int> host_by_identity;
  for (size_t r = 0; r < identities.size(); ++r) {
    // Set ranks ascend, so hosts are numbered by their lowest member.
    auto [it, is_new] = host_by_identity.emplace(identities[r], static_cast<int>(layout.hosts.size()));
    if (is_new) layout.hosts.emplace_back();
    layout.host_of.push_back(it->second);
    layout.local_rank_of.push_back(static_cast<int>(layout.hosts[it->second].size()));
    layout.hosts[it->second].push_back(static_cast<int>(r));
  }
  layout.contiguous = true;
  int next = 0;
  for (const std::vector<int>& members : layout.hosts) {
    for (int r : members) layout.contiguous = layout.contiguous && r == next++;
  }
  return layout;
}

bool worth_composing(const HostLayout& layout) {
  if (layout.hosts.size() < 2) return false;
  return std::any_of(layout.hosts.begin(), layout.hosts.end(),
                     [](const std::vector<int>& members) { return members.size() >= 2; });
}

std::unique_ptr<Backend> make_hierarchical_backend(const std::vector<int>& global_ranks, int rank, HostLayout layout,
                                                   const std::shared_ptr<Store>& set_store,
                                                   const PartFactory& make_local, const PartFactory& make_network) {
  if (layout.host_of.size() != global_ranks.size() || rank < 0 || rank >= static_cast<int>(global_ranks.size()))
    throw Internal("hierarchical backend: host layout does not match the process set");
  const int my_global_rank = global_ranks[rank];
  const int host = layout.host_of[rank];
  auto global_ranks_of = [&](const std::vector<int>& set_ranks) {
    std::vector<int> out;
    for (int r : set_ranks) out.push_back(global_ranks[r]);
    return out;
  };
  // Every member makes its parts in this order, so a part's creation
  // waits only for members that have finished the parts before it.
  Parts parts;
  if (layout.hosts[host].size() > 1) {
    parts.local = make_local(global_ranks_of(layout.hosts[host]), my_global_rank,
                             make_prefix_store("hierarchical/host." + std::to_string(host), set_store));
  }
  if (layout.is_leader(rank)) {
    std::vector<int> leaders;
    for (const std::vector<int>& members : layout.hosts) leaders.push_back(members.front());
    parts.leaders = make_network(global_ranks_of(leaders), my_global_rank,
                                 make_prefix_store("hierarchical/leaders", set_store));
  }
  parts.whole = make_network(global_ranks, my_global_rank, make_prefix_store("hierarchical/whole", set_store));
  return std::make_unique<HierarchicalBackend>(global_ranks, rank, std::move(layout), std::move(parts));
}

bool is_hierarchical_backend(const Backend& backend) {
  return dynamic_cast<const HierarchicalBackend*>(&backend) != nullptr;
}

}  // namespace hora::hierarchical
