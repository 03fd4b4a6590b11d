#include "transport/gloo/connection_names.h"

#include <gloo/context.h>
#include <gloo/transport/address.h>
#include <gloo/transport/pair.h>
#include <gloo/transport/tcp/address.h>

#include <chrono>

#include "transport/gloo/store_adapter.h"

namespace hora::gloo_transport {
namespace {

constexpr std::chrono::milliseconds kLookupTimeout(200);

std::string key_of(int rank) { return "gloo_connections/" + std::to_string(rank); }

std::vector<uint8_t> lookup(Store& store, const std::string& key) {
  try {
    return store.get(key, kLookupTimeout);
  } catch (const std::exception&) {
    return {};  // the store is gone too, or the peer never got this far
  }
}

// The addresses `peer` published for its connections, one per other member
// in set-rank order (empty if they cannot be read).
std::vector<std::string> published_addresses(Store& store, int peer) {
  const std::vector<uint8_t> published = lookup(store, key_of(peer));
  const std::string text(published.begin(), published.end());
  std::vector<std::string> lines;
  size_t begin = 0;
  for (size_t end; (end = text.find('\n', begin)) != std::string::npos; begin = end + 1) {
    lines.push_back(text.substr(begin, end - begin));
  }
  return lines;
}

// Every address by which `peer`'s end of a connection may appear in a Gloo
// error. Gloo names the peer by its connected socket address, except when
// the peer connected before this side's connectFullMesh reached the pair:
// then it names the peer's listening address, from Gloo's rendezvous key.
std::vector<std::string> addresses_of(Store& store, int peer, int size) {
  std::vector<std::string> addresses = published_addresses(store, peer);
  const std::vector<uint8_t> listening = lookup(store, std::string(kGlooKeyPrefix) + "/" + std::to_string(peer));
  const size_t each = size > 1 ? listening.size() / (size - 1) : 0;
  for (size_t offset = 0; each > 0 && offset + each <= listening.size(); offset += each) {
    const std::vector<char> bytes(listening.begin() + offset, listening.begin() + offset + each);
    try {
      addresses.push_back(::gloo::transport::tcp::Address(bytes).str());
    } catch (const std::exception&) {
      // not an address of this Gloo version; ignore
    }
  }
  return addresses;
}

}  // namespace

void publish_connection_addresses(Store& store, ::gloo::Context& context) {
  std::string addresses;  // one per line
  for (int peer = 0; peer < context.size; ++peer) {
    if (peer == context.rank) continue;
    addresses += context.getPair(peer)->address().str() + "\n";
  }
  store.set(key_of(context.rank), std::vector<uint8_t>(addresses.begin(), addresses.end()));
}

std::vector<std::string> remote_connection_addresses(Store& store, int rank, int size) {
  std::vector<std::string> remote(size);
  for (int peer = 0; peer < size; ++peer) {
    if (peer == rank) continue;
    // The peer lists its connections in set-rank order, skipping itself.
    const std::vector<std::string> lines = published_addresses(store, peer);
    const size_t line = rank < peer ? rank : rank - 1;
    if (line < lines.size()) remote[peer] = lines[line];
  }
  return remote;
}

std::vector<int> global_ranks_named_in(Store& store, const std::vector<int>& global_ranks,
                                       int rank, const std::string& message) {
  const int size = static_cast<int>(global_ranks.size());
  std::vector<int> named;
  if (message.find("]:") == std::string::npos) return named;  // names no "[host]:port"
  for (int peer = 0; peer < size; ++peer) {
    if (peer == rank) continue;
    for (const std::string& address : addresses_of(store, peer, size)) {
      if (!address.empty() && message.find(address) != std::string::npos) {
        named.push_back(global_ranks[peer]);
        break;
      }
    }
  }
  return named;
}

}  // namespace hora::gloo_transport
