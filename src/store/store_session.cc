#include "store/store_session.h"

#include <charconv>

#include "net/codec.h"

namespace hora::store_protocol {
namespace {

// A decimal integer, surrounding whitespace allowed.
int64_t parse_integer(const std::vector<uint8_t>& bytes, const char* what) {
  std::string text(bytes.begin(), bytes.end());
  const size_t first = text.find_first_not_of(" \t\r\n");
  const size_t last = text.find_last_not_of(" \t\r\n");
  text = first == std::string::npos ? "" : text.substr(first, last - first + 1);
  if (!text.empty() && text[0] == '+') text.erase(0, 1);
  int64_t value = 0;
  const auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), value);
  if (text.empty() || ec != std::errc() || end != text.data() + text.size()) {
    throw Refusal{Status::kBadRequest, std::string(what) + " '" + text.substr(0, 40) + "' is not a 64-bit decimal integer"};
  }
  return value;
}

}  // namespace

ServerSession::ServerSession(const std::string& secret, const net::Nonce& nonce)
    : secret_(secret), nonce_(nonce), challenge_(encode_challenge(nonce)) {}

std::span<uint8_t> ServerSession::space() {
  switch (phase_) {
    case Phase::kProof:
      return std::span<uint8_t>(proof_).subspan(got_);
    case Phase::kLength:
      return std::span<uint8_t>(length_).subspan(got_);
    case Phase::kPayload:
      return std::span<uint8_t>(payload_).subspan(got_);
    case Phase::kClosed:
      break;
  }
  return std::span<uint8_t>(length_).subspan(0, 1);  // read and ignored
}

ServerSession::Event ServerSession::received(size_t n) {
  got_ += n;
  switch (phase_) {
    case Phase::kProof: {
      if (got_ < proof_.size()) return Event::kNone;
      got_ = 0;
      net::Nonce client_nonce;
      if (!check_proof(proof_, secret_, nonce_, client_nonce)) {
        const auto answer = encode_answer(Status::kBadSecret, secret_, nonce_, client_nonce);
        output_.assign(answer.begin(), answer.end());
        phase_ = Phase::kClosed;
        return Event::kRefused;
      }
      const auto answer = encode_answer(Status::kOk, secret_, nonce_, client_nonce);
      output_.assign(answer.begin(), answer.end());
      phase_ = Phase::kLength;
      return Event::kAuthenticated;
    }
    case Phase::kLength: {
      if (got_ < length_.size()) return Event::kNone;
      got_ = 0;
      const uint32_t length = net::load_u32_le(length_.data());
      if (length > kMaxFrameBytes) {
        return refuse(Status::kBadRequest, "frame of " + std::to_string(length) + " bytes exceeds " +
                                               std::to_string(kMaxFrameBytes) + " bytes");
      }
      payload_.resize(length);
      phase_ = Phase::kPayload;
      if (length > 0) return Event::kNone;
      [[fallthrough]];
    }
    case Phase::kPayload: {
      if (got_ < payload_.size()) return Event::kNone;
      got_ = 0;
      phase_ = Phase::kLength;
      try {
        request_ = decode_request(payload_);
      } catch (const Refusal& refusal) {
        return refuse(refusal.status, refusal.message);
      }
      payload_.clear();
      payload_.shrink_to_fit();  // an idle connection keeps no large buffer
      return Event::kRequest;
    }
    case Phase::kClosed:
      break;
  }
  got_ = 0;
  return Event::kNone;
}

ServerSession::Event ServerSession::refuse(Status status, const std::string& message) {
  output_ = reply_frame({status, {message.begin(), message.end()}});
  phase_ = Phase::kClosed;
  payload_ = {};
  return Event::kRefused;
}

std::vector<uint8_t> reply_frame(const Reply& reply) {
  const std::vector<uint8_t> payload = encode_reply(reply);
  std::vector<uint8_t> frame(4);
  net::store_u32_le(frame.data(), static_cast<uint32_t>(payload.size()));
  frame.insert(frame.end(), payload.begin(), payload.end());
  return frame;
}

std::optional<Reply> StoreData::execute(const Request& request) {
  const std::string key = request.keys.empty() ? "" : request.keys[0];
  std::lock_guard<std::mutex> lock(mutex_);
  switch (request.command) {
    case Command::kPing:
      return Reply{Status::kOk, {}};
    case Command::kSet:
      data_[key] = request.value;
      return Reply{Status::kOk, {}};
    case Command::kAdd: {
      const int64_t delta = parse_integer(request.value, "ADD delta");
      auto it = data_.find(key);
      const int64_t current = it == data_.end() ? 0 : parse_integer(it->second, "value of the key");
      int64_t sum = 0;
      if (__builtin_add_overflow(current, delta, &sum)) {
        throw Refusal{Status::kBadRequest, "ADD of " + std::to_string(delta) + " to " + std::to_string(current) +
                                               " overflows a 64-bit integer"};
      }
      const std::string text = std::to_string(sum);
      data_[key] = std::vector<uint8_t>(text.begin(), text.end());
      return Reply{Status::kOk, data_[key]};
    }
    case Command::kGet: {
      auto it = data_.find(key);
      if (it != data_.end()) return Reply{Status::kOk, it->second};
      if (request.timeout_ms == 0) return Reply{Status::kNotFound, {}};
      return std::nullopt;
    }
    case Command::kWait: {
      const std::vector<std::string> missing = missing_locked(request.keys);
      if (missing.empty()) return Reply{Status::kOk, {}};
      if (request.timeout_ms == 0) return Reply{Status::kTimeout, encode_keys(missing)};
      return std::nullopt;
    }
  }
  return Reply{Status::kBadRequest, {}};
}

Reply StoreData::expired(const Request& request) {
  if (request.command == Command::kGet) return {Status::kTimeout, {}};
  std::lock_guard<std::mutex> lock(mutex_);
  return {Status::kTimeout, encode_keys(missing_locked(request.keys))};
}

std::optional<std::string> StoreData::first_missing(const std::vector<std::string>& keys) const {
  std::lock_guard<std::mutex> lock(mutex_);
  for (const std::string& key : keys) {
    if (data_.count(key) == 0) return key;
  }
  return std::nullopt;
}

std::vector<std::string> StoreData::missing_locked(const std::vector<std::string>& keys) const {
  std::vector<std::string> missing;
  for (const std::string& key : keys) {
    if (data_.count(key) == 0) missing.push_back(key);
  }
  return missing;
}

void StoreData::set(const std::string& key, std::vector<uint8_t> value) {
  std::lock_guard<std::mutex> lock(mutex_);
  data_[key] = std::move(value);
}

std::vector<std::pair<std::string, std::vector<uint8_t>>> StoreData::items_with_prefix(const std::string& prefix) const {
  std::lock_guard<std::mutex> lock(mutex_);
  std::vector<std::pair<std::string, std::vector<uint8_t>>> items;
  for (auto it = data_.lower_bound(prefix); it != data_.end() && it->first.rfind(prefix, 0) == 0; ++it)
    items.emplace_back(it->first, it->second);
  return items;
}

}  // namespace hora::store_protocol
