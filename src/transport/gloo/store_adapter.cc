#include "transport/gloo/store_adapter.h"

#include "store/cancellable_wait.h"
#include "transport/backend.h"

namespace hora::gloo_transport {

GlooStoreAdapter::GlooStoreAdapter(std::shared_ptr<hora::Store> store,
                                   std::chrono::milliseconds timeout,
                                   const std::atomic<bool>& cancelled)
    : store_(std::move(store)), timeout_(timeout), cancelled_(cancelled) {}

void GlooStoreAdapter::set(const std::string& key, const std::vector<char>& data) {
  store_->set(key, std::vector<uint8_t>(data.begin(), data.end()));
}

std::vector<char> GlooStoreAdapter::get(const std::string& key) {
  const std::vector<uint8_t> value = get_unless_cancelled(
      *store_, key, timeout_, cancelled_, BackendFactory::kCancelPoll, "");
  return std::vector<char>(value.begin(), value.end());
}

void GlooStoreAdapter::wait(const std::vector<std::string>& keys) { wait(keys, timeout_); }

void GlooStoreAdapter::wait(const std::vector<std::string>& keys,
                            const std::chrono::milliseconds& timeout) {
  // Gloo passes its context's timeout; zero is Gloo's "no timeout".
  wait_unless_cancelled(*store_, keys, timeout.count() > 0 ? timeout : timeout_, cancelled_,
                        BackendFactory::kCancelPoll, "");
}

}  // namespace hora::gloo_transport
