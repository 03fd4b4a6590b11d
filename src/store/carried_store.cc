#include "store/carried_store.h"

#include "hora/errors.h"
#include "net/codec.h"

namespace hora {
namespace {

constexpr char kSubject[] = "carried store entries";
constexpr uint32_t kMaxEntries = 1024;
constexpr uint32_t kMaxBytes = 1u << 20;

}  // namespace

CarriedStore::CarriedStore(std::shared_ptr<Store> base) : base_(std::move(base)) {
  if (!base_) throw InvalidArgument("CarriedStore: the base store is null");
}

std::vector<uint8_t>* CarriedStore::find(const std::string& key) {
  for (auto& [k, v] : kept_)
    if (k == key) return &v;
  return nullptr;
}

void CarriedStore::keep_written(const std::string& key, const std::vector<uint8_t>& value) {
  if (std::vector<uint8_t>* held = find(key))
    *held = value;
  else
    kept_.emplace_back(key, value);
  if (recording_) written_.emplace_back(key, value);
}

void CarriedStore::set(const std::string& key, const std::vector<uint8_t>& value) {
  base_->set(key, value);
  std::lock_guard<std::mutex> lock(mutex_);
  keep_written(key, value);
}

void CarriedStore::post(const std::string& key, const std::vector<uint8_t>& value) {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    const std::vector<uint8_t>* held = find(key);
    if (held && *held == value) return;
  }
  base_->post(key, value);
  std::lock_guard<std::mutex> lock(mutex_);
  keep_written(key, value);
}

std::vector<uint8_t> CarriedStore::get(const std::string& key, std::chrono::milliseconds timeout) {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    if (const std::vector<uint8_t>* held = find(key)) return *held;
  }
  return base_->get(key, timeout);
}

void CarriedStore::wait(const std::vector<std::string>& keys, std::chrono::milliseconds timeout) {
  std::vector<std::string> missing;
  {
    std::lock_guard<std::mutex> lock(mutex_);
    for (const std::string& key : keys)
      if (!find(key)) missing.push_back(key);
  }
  if (!missing.empty()) base_->wait(missing, timeout);
}

std::optional<std::vector<uint8_t>> CarriedStore::held(const std::string& key) {
  std::lock_guard<std::mutex> lock(mutex_);
  if (const std::vector<uint8_t>* value = find(key)) return *value;
  return std::nullopt;
}

int64_t CarriedStore::add(const std::string& key, int64_t delta) { return base_->add(key, delta); }

StoreEntries CarriedStore::take_written() {
  std::lock_guard<std::mutex> lock(mutex_);
  recording_ = false;
  return std::move(written_);
}

void CarriedStore::keep(const StoreEntries& entries) {
  std::lock_guard<std::mutex> lock(mutex_);
  for (const auto& [key, value] : entries)
    if (!find(key)) kept_.emplace_back(key, value);
}

std::vector<uint8_t> encode_store_entries(const StoreEntries& entries) {
  net::ByteWriter out;
  out.put<uint32_t>(static_cast<uint32_t>(entries.size()));
  for (const auto& [key, value] : entries) {
    out.put_string(key);
    out.put_bytes(value.data(), value.size());
  }
  return out.take();
}

StoreEntries decode_store_entries(const std::vector<uint8_t>& bytes) {
  net::ByteReader in(bytes, kSubject);
  const uint32_t count = in.get<uint32_t>("entry count");
  if (count > kMaxEntries)
    in.fail("entry count " + std::to_string(count) + " exceeds " + std::to_string(kMaxEntries));
  StoreEntries entries;
  for (uint32_t i = 0; i < count; ++i) {
    std::string key = in.get_string("key", kMaxBytes);
    entries.emplace_back(std::move(key), in.get_bytes("value", kMaxBytes));
  }
  in.expect_end();
  return entries;
}

}  // namespace hora
