// Store view that puts every key under `prefix/` of a shared base store, so
// that process sets and subsystems never see each other's keys.
#include "hora/errors.h"
#include "hora/store.h"

namespace hora {
namespace {

class PrefixStore final : public Store {
 public:
  PrefixStore(std::string prefix, std::shared_ptr<Store> base)
      : prefix_(std::move(prefix) + "/"), base_(std::move(base)) {}

  void set(const std::string& key, const std::vector<uint8_t>& value) override {
    base_->set(prefix_ + key, value);
  }
  void post(const std::string& key, const std::vector<uint8_t>& value) override {
    base_->post(prefix_ + key, value);
  }

  std::vector<uint8_t> get(const std::string& key, std::chrono::milliseconds timeout) override {
    return base_->get(prefix_ + key, timeout);
  }

  int64_t add(const std::string& key, int64_t delta) override {
    return base_->add(prefix_ + key, delta);
  }

  void wait(const std::vector<std::string>& keys, std::chrono::milliseconds timeout) override {
    std::vector<std::string> full;
    full.reserve(keys.size());
    for (const auto& key : keys) full.push_back(prefix_ + key);
    base_->wait(full, timeout);
  }

 private:
  const std::string prefix_;
  const std::shared_ptr<Store> base_;
};

}  // namespace

std::shared_ptr<Store> make_prefix_store(std::string prefix, std::shared_ptr<Store> base) {
  if (!base) throw InvalidArgument("make_prefix_store: base store is null");
  return std::make_shared<PrefixStore>(std::move(prefix), std::move(base));
}

}  // namespace hora
