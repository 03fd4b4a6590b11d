#include "transport/gloo/store_adapter.h"

namespace hora::gloo_transport {

GlooStoreAdapter::GlooStoreAdapter(std::shared_ptr<hora::Store> store,
                                   std::chrono::milliseconds timeout)
    : store_(std::move(store)), timeout_(timeout) {}

void GlooStoreAdapter::set(const std::string& key, const std::vector<char>& data) {
  store_->set(key, std::vector<uint8_t>(data.begin(), data.end()));
}

std::vector<char> GlooStoreAdapter::get(const std::string& key) {
  const std::vector<uint8_t> value = store_->get(key, timeout_);
  return std::vector<char>(value.begin(), value.end());
}

void GlooStoreAdapter::wait(const std::vector<std::string>& keys) { store_->wait(keys, timeout_); }

void GlooStoreAdapter::wait(const std::vector<std::string>& keys,
                            const std::chrono::milliseconds& timeout) {
  // Gloo passes its context's timeout; zero is Gloo's "no timeout".
  store_->wait(keys, timeout.count() > 0 ? timeout : timeout_);
}

}  // namespace hora::gloo_transport
