// Presents a hora::Store to Gloo's rendezvous (connectFullMesh).
#pragma once

#include <gloo/rendezvous/store.h>

#include <atomic>
#include <chrono>
#include <memory>
#include <string>

#include "hora/store.h"

namespace hora::gloo_transport {

// Gloo's own rendezvous keys live under this prefix of the set's store.
inline constexpr char kGlooKeyPrefix[] = "gloo";

// Forwards Gloo's store calls to a hora::Store. Gloo's get() takes no
// timeout, so the adapter applies the one it was built with; waits without
// a timeout use it too. Blocking calls give up once `cancelled` is set
// (InvalidArgument); hora::Timeout passes through. `cancelled` must outlive
// the adapter.
class GlooStoreAdapter final : public ::gloo::rendezvous::Store {
 public:
  GlooStoreAdapter(std::shared_ptr<hora::Store> store, std::chrono::milliseconds timeout,
                   const std::atomic<bool>& cancelled);

  void set(const std::string& key, const std::vector<char>& data) override;
  std::vector<char> get(const std::string& key) override;
  void wait(const std::vector<std::string>& keys) override;
  void wait(const std::vector<std::string>& keys,
            const std::chrono::milliseconds& timeout) override;

 private:
  const std::shared_ptr<hora::Store> store_;
  const std::chrono::milliseconds timeout_;
  const std::atomic<bool>& cancelled_;
};

}  // namespace hora::gloo_transport
