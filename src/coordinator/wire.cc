#include "coordinator/wire.h"

#include <algorithm>
#include <string>

#include "hora/errors.h"
#include "net/codec.h"

namespace hora {
namespace {

constexpr uint16_t kMagic = 0x5248;  // "HR"
constexpr uint32_t kMaxString = kMaxWireString;
constexpr uint32_t kMaxCount = 1 << 22;
constexpr uint32_t kMaxDims = 64;

using Writer = net::ByteWriter;

// The shared reader with this format's subject and limits.
class Reader : public net::ByteReader {
 public:
  explicit Reader(const std::vector<uint8_t>& bytes) : ByteReader(bytes, "control message") {}

  std::string get_string(const char* what) { return ByteReader::get_string(what, kMaxString); }
  template <typename T>
  std::vector<T> get_vector(const char* what, uint32_t max_count = kMaxCount) {
    return ByteReader::get_vector<T>(what, max_count);
  }
  [[noreturn]] void fail(const char* what, const std::string& why) const {
    ByteReader::fail(std::string(what) + ": " + why);
  }
};

void put_header(Writer& w, ControlKind kind) {
  w.put<uint16_t>(kMagic);
  w.put<uint8_t>(kWireVersion);
  w.put<uint8_t>(static_cast<uint8_t>(kind));
}

ControlKind read_header(Reader& r) {
  if (r.get<uint16_t>("magic") != kMagic) r.fail("magic", "not a hora control message");
  uint8_t version = r.get<uint8_t>("version");
  if (version != kWireVersion)
    r.fail("version", "got " + std::to_string(version) + ", expected " + std::to_string(kWireVersion));
  uint8_t kind = r.get<uint8_t>("kind");
  if (kind < static_cast<uint8_t>(ControlKind::kMember) || kind > static_cast<uint8_t>(ControlKind::kAgreement))
    r.fail("kind", "unknown message kind " + std::to_string(kind));
  return static_cast<ControlKind>(kind);
}

void check_header(Reader& r, ControlKind kind) {
  if (read_header(r) != kind) r.fail("kind", "unexpected message kind");
}

void put_request(Writer& w, const Request& q) {
  w.put_string(q.name);
  w.put<uint8_t>(static_cast<uint8_t>(q.op));
  w.put<uint8_t>(static_cast<uint8_t>(q.dtype));
  w.put<uint8_t>(static_cast<uint8_t>(q.reduce_op));
  w.put<int32_t>(q.root);
  w.put<double>(q.prescale);
  w.put<double>(q.postscale);
  w.put_vector(q.shape);
  w.put_vector(q.splits);
}

Request get_request(Reader& r) {
  Request q;
  q.name = r.get_string("request name");
  uint8_t op = r.get<uint8_t>("op type");
  if (op >= kNumOpTypes) r.fail("op type", "unknown value " + std::to_string(op));
  q.op = static_cast<OpType>(op);
  uint8_t dtype = r.get<uint8_t>("dtype");
  if (!is_valid_dtype(dtype)) r.fail("dtype", "unknown value " + std::to_string(dtype));
  q.dtype = static_cast<DataType>(dtype);
  uint8_t reduce_op = r.get<uint8_t>("reduce op");
  if (!is_valid_reduce_op(reduce_op)) r.fail("reduce op", "unknown value " + std::to_string(reduce_op));
  q.reduce_op = static_cast<ReduceOp>(reduce_op);
  q.root = r.get<int32_t>("root");
  q.prescale = r.get<double>("prescale");
  q.postscale = r.get<double>("postscale");
  q.shape = r.get_vector<int64_t>("shape", kMaxDims);
  for (int64_t d : q.shape)
    if (d < 0) r.fail("shape", "negative dimension");
  q.splits = r.get_vector<int64_t>("splits");
  return q;
}

void put_response(Writer& w, const Response& s) {
  w.put<uint8_t>(static_cast<uint8_t>(s.op));
  w.put<uint32_t>(static_cast<uint32_t>(s.names.size()));
  for (size_t i = 0; i < s.names.size(); ++i) {
    int32_t slot = i < s.slots.size() ? s.slots[i] : -1;
    w.put<int32_t>(slot);
    if (slot < 0) w.put_string(s.names[i]);
  }
  w.put_string(s.error.size() > kMaxString ? s.error.substr(0, kMaxString) : s.error);
  w.put_vector(s.sizes);
  w.put_vector(s.cache);
  w.put<uint32_t>(static_cast<uint32_t>(s.requests.size()));
  for (const Request& q : s.requests) put_request(w, q);
}

Response get_response(Reader& r) {
  Response s;
  uint8_t op = r.get<uint8_t>("response op type");
  if (op >= kNumOpTypes) r.fail("response op type", "unknown value " + std::to_string(op));
  s.op = static_cast<OpType>(op);
  uint32_t n = r.get<uint32_t>("response name count");
  if (n == 0 || n > kMaxCount) r.fail("response name count", "invalid count " + std::to_string(n));
  for (uint32_t i = 0; i < n; ++i) {
    int32_t slot = r.get<int32_t>("response slot");
    s.slots.push_back(slot);
    s.names.push_back(slot < 0 ? r.get_string("response name") : std::string());
  }
  s.error = r.get_string("response error");
  s.sizes = r.get_vector<int64_t>("response sizes");
  s.cache = r.get_vector<uint8_t>("response cache flags");
  if (s.cache.size() != n) r.fail("response cache flags", "count differs from name count");
  uint32_t described = r.get<uint32_t>("response request count");
  if (described != 0 && described != n)
    r.fail("response request count", std::to_string(described) + " requests for " + std::to_string(n) + " names");
  for (uint32_t i = 0; i < described; ++i) s.requests.push_back(get_request(r));
  return s;
}

}  // namespace

ControlKind control_kind(const std::vector<uint8_t>& bytes) {
  Reader r(bytes);
  return read_header(r);
}

std::vector<uint8_t> encode(const MemberMessage& message) {
  Writer w;
  put_header(w, ControlKind::kMember);
  w.put<uint32_t>(static_cast<uint32_t>(message.requests.size()));
  for (const Request& q : message.requests) put_request(w, q);
  // Cached slots travel as a bit vector.
  uint32_t bits = 0;
  for (uint32_t slot : message.cached_slots) bits = std::max(bits, slot + 1);
  std::vector<uint8_t> mask((bits + 7) / 8, 0);
  for (uint32_t slot : message.cached_slots) mask[slot / 8] |= static_cast<uint8_t>(1u << (slot % 8));
  w.put_vector(mask);
  return w.take();
}

MemberMessage decode_member_message(const std::vector<uint8_t>& bytes) {
  Reader r(bytes);
  check_header(r, ControlKind::kMember);
  MemberMessage m;
  uint32_t n = r.get<uint32_t>("request count");
  if (n > kMaxCount) r.fail("request count", "invalid count " + std::to_string(n));
  for (uint32_t i = 0; i < n; ++i) m.requests.push_back(get_request(r));
  std::vector<uint8_t> mask = r.get_vector<uint8_t>("cache bits");
  for (uint32_t byte = 0; byte < mask.size(); ++byte)
    for (uint32_t bit = 0; bit < 8; ++bit)
      if (mask[byte] & (1u << bit)) m.cached_slots.push_back(byte * 8 + bit);
  r.expect_end();
  return m;
}

std::vector<uint8_t> encode(const CoordinatorMessage& message) {
  Writer w;
  put_header(w, ControlKind::kCoordinator);
  w.put<uint32_t>(static_cast<uint32_t>(message.responses.size()));
  for (const Response& s : message.responses) put_response(w, s);
  return w.take();
}

CoordinatorMessage decode_coordinator_message(const std::vector<uint8_t>& bytes) {
  Reader r(bytes);
  check_header(r, ControlKind::kCoordinator);
  CoordinatorMessage m;
  uint32_t n = r.get<uint32_t>("response count");
  if (n > kMaxCount) r.fail("response count", "invalid count " + std::to_string(n));
  for (uint32_t i = 0; i < n; ++i) m.responses.push_back(get_response(r));
  r.expect_end();
  return m;
}

std::vector<uint8_t> encode(const FailureMessage& message) {
  Writer w;
  put_header(w, ControlKind::kFailure);
  w.put<uint8_t>(static_cast<uint8_t>(message.stage));
  w.put_vector(message.missing);
  w.put_string(message.reason.size() > kMaxString ? message.reason.substr(0, kMaxString) : message.reason);
  w.put<uint64_t>(message.ran);
  return w.take();
}

FailureMessage decode_failure_message(const std::vector<uint8_t>& bytes) {
  Reader r(bytes);
  check_header(r, ControlKind::kFailure);
  FailureMessage m;
  uint8_t stage = r.get<uint8_t>("failure stage");
  if (stage < static_cast<uint8_t>(FailureMessage::Stage::kProbe) ||
      stage > static_cast<uint8_t>(FailureMessage::Stage::kClosed))
    r.fail("failure stage", "unknown value " + std::to_string(stage));
  m.stage = static_cast<FailureMessage::Stage>(stage);
  m.missing = r.get_vector<int32_t>("missing ranks");
  for (int32_t rank : m.missing)
    if (rank < 0) r.fail("missing ranks", "negative rank " + std::to_string(rank));
  m.reason = r.get_string("failure reason");
  m.ran = r.get<uint64_t>("entries run");
  r.expect_end();
  return m;
}

std::vector<uint8_t> encode(const AgreementMessage& message) {
  Writer w;
  put_header(w, ControlKind::kAgreement);
  w.put<uint8_t>(static_cast<uint8_t>(message.kind));
  w.put<uint32_t>(message.slot);
  w.put<uint32_t>(message.instance);
  w.put<int32_t>(message.member);
  w.put_vector(message.data);
  return w.take();
}

AgreementMessage decode_agreement_message(const std::vector<uint8_t>& bytes) {
  Reader r(bytes);
  check_header(r, ControlKind::kAgreement);
  AgreementMessage m;
  const uint8_t kind = r.get<uint8_t>("agreement message kind");
  if (kind < static_cast<uint8_t>(AgreementMessage::Kind::kRecord) ||
      kind > static_cast<uint8_t>(AgreementMessage::Kind::kUndivertAck))
    r.fail("agreement message kind", "unknown value " + std::to_string(kind));
  m.kind = static_cast<AgreementMessage::Kind>(kind);
  m.slot = r.get<uint32_t>("agreement slot");
  m.instance = r.get<uint32_t>("agreement instance");
  if (m.instance == 0) r.fail("agreement instance", "0 (instances count from 1)");
  m.member = r.get<int32_t>("agreement member");
  if (m.member < 0) r.fail("agreement member", "negative rank " + std::to_string(m.member));
  m.data = r.get_vector<uint8_t>("agreement data", kMaxCarriedBytes);
  if (!m.data.empty() && m.kind != AgreementMessage::Kind::kRecord)
    r.fail("agreement data", "only a record carries data");
  r.expect_end();
  return m;
}

}  // namespace hora
