// The control-message wire format: what is encoded decodes to the same
// messages, and truncated, corrupted or random bytes are rejected with
// hora::Internal ("malformed control message ...") instead of crashing.
#include <gtest/gtest.h>

#include <cstdint>
#include <cstring>
#include <limits>
#include <random>
#include <string>
#include <vector>

#include "coordinator/request.h"
#include "coordinator/wire.h"
#include "hora/errors.h"
#include "hora/types.h"

namespace hora {
namespace {

using Bytes = std::vector<uint8_t>;

Request make_request(std::string name, OpType op, DataType dtype, std::vector<int64_t> shape) {
  Request q;
  q.name = std::move(name);
  q.op = op;
  q.dtype = dtype;
  q.shape = std::move(shape);
  return q;
}

// One request per OpType, covering every dtype and reduce op, odd scale
// factors, scalars, empty and multi-dimensional shapes and splits.
MemberMessage sample_member_message() {
  MemberMessage m;
  Request allreduce = make_request("grad/layer1.weight", OpType::kAllreduce, DataType::kFloat32, {128, 64});
  allreduce.reduce_op = ReduceOp::kAverage;
  allreduce.prescale = 0.125;
  allreduce.postscale = -3.5e-7;
  m.requests.push_back(allreduce);

  Request allgather = make_request("gather", OpType::kAllgather, DataType::kBFloat16, {7, 3, 2});
  m.requests.push_back(allgather);

  Request broadcast = make_request("bcast", OpType::kBroadcast, DataType::kInt64, {});
  broadcast.root = 2;
  m.requests.push_back(broadcast);

  Request alltoall = make_request("a2a", OpType::kAlltoall, DataType::kUInt8, {10, 4});
  alltoall.splits = {1, 0, 4, 5};
  m.requests.push_back(alltoall);

  Request reducescatter = make_request("rs", OpType::kReducescatter, DataType::kFloat16, {0});
  reducescatter.reduce_op = ReduceOp::kProduct;
  reducescatter.prescale = std::numeric_limits<double>::max();
  reducescatter.postscale = std::numeric_limits<double>::denorm_min();
  m.requests.push_back(reducescatter);

  Request barrier = make_request("", OpType::kBarrier, DataType::kBool, {});
  m.requests.push_back(barrier);
  m.requests.push_back(make_request(kJoinName, OpType::kJoin, DataType::kFloat32, {}));

  // Every DataType (uint16 and int16 included), paired with every ReduceOp
  // (Adasum included) in turn.
  static_assert(kNumDataTypes >= kNumReduceOps);
  for (int i = 0; i < kNumDataTypes; ++i) {
    Request q = make_request("extra." + std::to_string(i), OpType::kAllreduce, static_cast<DataType>(i),
                             {1, 2, 3, int64_t{1} << 40});
    q.reduce_op = static_cast<ReduceOp>(i % kNumReduceOps);
    m.requests.push_back(q);
  }
  m.cached_slots = {0, 7, 8, 100};
  return m;
}

Response make_response(OpType op, std::vector<std::string> names, std::vector<int32_t> slots,
                       std::vector<uint8_t> cache) {
  Response r;
  r.op = op;
  r.names = std::move(names);
  r.slots = std::move(slots);
  r.cache = std::move(cache);
  return r;
}

CoordinatorMessage sample_coordinator_message() {
  CoordinatorMessage m;
  // A fused allreduce mixing names, slot references (including slot 0) and
  // cache flags.
  m.responses.push_back(
      make_response(OpType::kAllreduce, {"w1", "", "w3", ""}, {-1, 0, -1, 1023}, {1, 0, 0, 0}));
  Response gather = make_response(OpType::kAllgather, {"gather"}, {-1}, {0});
  gather.sizes = {3, 0, 5};
  m.responses.push_back(gather);
  Response a2a = make_response(OpType::kAlltoall, {"a2a"}, {-1}, {0});
  a2a.sizes = {1, 2, 3, 4, 5, 6, 7, 8, 9};
  m.responses.push_back(a2a);
  Response failed = make_response(OpType::kBroadcast, {"bcast"}, {-1}, {0});
  failed.error = "Mismatched broadcast 'bcast' on process set 3: root rank differs: 1 on ranks 1, 5; 5 on rank 3";
  m.responses.push_back(failed);
  m.responses.push_back(make_response(OpType::kBarrier, {""}, {7}, {0}));
  m.responses.push_back(make_response(OpType::kReducescatter, {"rs"}, {-1}, {1}));
  // While a member has joined: a fused allreduce that describes its
  // requests, a barrier, and the join response with the last rank.
  Response described = make_response(OpType::kAllreduce, {"j1", "j2"}, {-1, -1}, {0, 1});
  described.requests = {make_request("j1", OpType::kAllreduce, DataType::kInt16, {3}),
                        make_request("j2", OpType::kAllreduce, DataType::kFloat32, {2, 2})};
  described.requests[1].reduce_op = ReduceOp::kMax;
  described.requests[1].prescale = 0.25;
  m.responses.push_back(described);
  Response barrier = make_response(OpType::kBarrier, {"sync"}, {-1}, {1});
  barrier.requests = {make_request("sync", OpType::kBarrier, DataType::kFloat32, {})};
  m.responses.push_back(barrier);
  Response join = make_response(OpType::kJoin, {kJoinName}, {-1}, {0});
  join.sizes = {3};
  m.responses.push_back(join);
  return m;
}

// What a response looks like after the trip: names sent as slots arrive empty
// (the receiver resolves them from its response cache).
void expect_same_response(const Response& sent, const Response& got) {
  EXPECT_EQ(got.op, sent.op);
  ASSERT_EQ(got.names.size(), sent.names.size());
  ASSERT_EQ(got.slots.size(), sent.names.size());
  for (size_t i = 0; i < sent.names.size(); ++i) {
    int32_t slot = i < sent.slots.size() ? sent.slots[i] : -1;
    EXPECT_EQ(got.slots[i], slot) << "name " << i;
    EXPECT_EQ(got.names[i], slot < 0 ? sent.names[i] : std::string()) << "name " << i;
  }
  EXPECT_EQ(got.error, sent.error);
  EXPECT_EQ(got.sizes, sent.sizes);
  EXPECT_EQ(got.cache, sent.cache);
  EXPECT_EQ(got.requests, sent.requests);
}

// Runs `decode` on `bytes`; returns the hora::Internal message, or "" when
// it decoded. Any other exception fails the test.
template <typename Decode>
std::string decode_error(Decode decode, const Bytes& bytes) {
  try {
    decode(bytes);
  } catch (const Internal& e) {
    return e.what();
  }
  return "";
}

std::string member_error(const Bytes& bytes) { return decode_error(decode_member_message, bytes); }
std::string coordinator_error(const Bytes& bytes) { return decode_error(decode_coordinator_message, bytes); }

void put_u32(Bytes& bytes, size_t offset, uint32_t value) {
  ASSERT_LE(offset + 4, bytes.size());
  std::memcpy(bytes.data() + offset, &value, 4);
}

// Layout of a member message holding one request named "x":
// magic(2) version(1) kind(1) count(4) name_len(4) "x" op dtype reduce_op ...
constexpr size_t kVersionOffset = 2;
constexpr size_t kKindOffset = 3;
constexpr size_t kCountOffset = 4;
constexpr size_t kNameLenOffset = 8;
constexpr size_t kOpOffset = 13;
constexpr size_t kDtypeOffset = 14;
constexpr size_t kReduceOpOffset = 15;
// ... root(4) prescale(8) postscale(8) shape_count(4)
constexpr size_t kShapeCountOffset = 36;

Bytes single_request_message() {
  MemberMessage m;
  m.requests.push_back(make_request("x", OpType::kAllreduce, DataType::kFloat32, {4}));
  return encode(m);
}

TEST(WireTest, MemberMessageRoundTrip) {
  MemberMessage sent = sample_member_message();
  MemberMessage got = decode_member_message(encode(sent));
  ASSERT_EQ(got.requests.size(), sent.requests.size());
  for (size_t i = 0; i < sent.requests.size(); ++i) EXPECT_EQ(got.requests[i], sent.requests[i]) << "request " << i;
  EXPECT_EQ(got.cached_slots, sent.cached_slots);
}

TEST(WireTest, EmptyMemberMessageRoundTrip) {
  MemberMessage got = decode_member_message(encode(MemberMessage{}));
  EXPECT_TRUE(got.requests.empty());
  EXPECT_TRUE(got.cached_slots.empty());
}

TEST(WireTest, CachedSlotsOnlyRoundTrip) {
  for (std::vector<uint32_t> slots : {std::vector<uint32_t>{0}, std::vector<uint32_t>{7}, std::vector<uint32_t>{8},
                                      std::vector<uint32_t>{100}, std::vector<uint32_t>{0, 1, 2, 3, 4, 5, 6, 7, 8}}) {
    MemberMessage sent;
    sent.cached_slots = slots;
    EXPECT_EQ(decode_member_message(encode(sent)).cached_slots, slots);
  }
}

TEST(WireTest, CoordinatorMessageRoundTrip) {
  CoordinatorMessage sent = sample_coordinator_message();
  CoordinatorMessage got = decode_coordinator_message(encode(sent));
  ASSERT_EQ(got.responses.size(), sent.responses.size());
  for (size_t i = 0; i < sent.responses.size(); ++i) {
    SCOPED_TRACE("response " + std::to_string(i));
    expect_same_response(sent.responses[i], got.responses[i]);
  }
}

TEST(WireTest, ResponseWithoutSlotsIsSentByName) {
  CoordinatorMessage sent;
  sent.responses.push_back(make_response(OpType::kAllreduce, {"a", "b"}, {}, {0, 1}));
  Response got = decode_coordinator_message(encode(sent)).responses.at(0);
  EXPECT_EQ(got.names, (std::vector<std::string>{"a", "b"}));
  EXPECT_EQ(got.slots, (std::vector<int32_t>{-1, -1}));
  EXPECT_EQ(got.cache, (std::vector<uint8_t>{0, 1}));
}

TEST(WireTest, EmptyCoordinatorMessageRoundTrip) {
  EXPECT_TRUE(decode_coordinator_message(encode(CoordinatorMessage{})).responses.empty());
}

TEST(WireTest, TruncationAtEveryOffsetThrows) {
  const Bytes member = encode(sample_member_message());
  for (size_t n = 0; n < member.size(); ++n) {
    std::string error = member_error(Bytes(member.begin(), member.begin() + n));
    EXPECT_NE(error.find("malformed"), std::string::npos) << "member message cut to " << n << " bytes: " << error;
  }
  const Bytes coordinator = encode(sample_coordinator_message());
  for (size_t n = 0; n < coordinator.size(); ++n) {
    std::string error = coordinator_error(Bytes(coordinator.begin(), coordinator.begin() + n));
    EXPECT_NE(error.find("malformed"), std::string::npos)
        << "coordinator message cut to " << n << " bytes: " << error;
  }
}

TEST(WireTest, TrailingBytesThrow) {
  Bytes member = encode(sample_member_message());
  member.push_back(0);
  EXPECT_NE(member_error(member).find("trailing"), std::string::npos);
  Bytes coordinator = encode(sample_coordinator_message());
  coordinator.push_back(0);
  coordinator.push_back(0);
  std::string error = coordinator_error(coordinator);
  EXPECT_NE(error.find("malformed"), std::string::npos) << error;
  EXPECT_NE(error.find("2 trailing bytes"), std::string::npos) << error;
}

TEST(WireTest, WrongMagicThrows) {
  Bytes bytes = single_request_message();
  bytes[0] ^= 0xff;
  std::string error = member_error(bytes);
  EXPECT_NE(error.find("malformed"), std::string::npos) << error;
  EXPECT_NE(error.find("magic"), std::string::npos) << error;
}

TEST(WireTest, WrongVersionThrows) {
  Bytes bytes = single_request_message();
  ASSERT_EQ(bytes[kVersionOffset], kWireVersion);
  bytes[kVersionOffset] = kWireVersion + 1;
  std::string error = member_error(bytes);
  EXPECT_NE(error.find("malformed"), std::string::npos) << error;
  EXPECT_NE(error.find("version"), std::string::npos) << error;
}

TEST(WireTest, WrongKindThrows) {
  // Each decoder refuses the other direction's message.
  std::string error = coordinator_error(encode(MemberMessage{}));
  EXPECT_NE(error.find("malformed"), std::string::npos) << error;
  EXPECT_NE(error.find("kind"), std::string::npos) << error;
  error = member_error(encode(CoordinatorMessage{}));
  EXPECT_NE(error.find("malformed"), std::string::npos) << error;
  EXPECT_NE(error.find("kind"), std::string::npos) << error;

  Bytes bytes = single_request_message();
  bytes[kKindOffset] = 0;
  EXPECT_NE(member_error(bytes).find("kind"), std::string::npos);
}

TEST(WireTest, LayoutAssumedByTheseTestsHolds) {
  Bytes bytes = single_request_message();
  EXPECT_EQ(bytes[kOpOffset], static_cast<uint8_t>(OpType::kAllreduce));
  EXPECT_EQ(bytes[kDtypeOffset], static_cast<uint8_t>(DataType::kFloat32));
  EXPECT_EQ(bytes[kReduceOpOffset], static_cast<uint8_t>(ReduceOp::kSum));
  EXPECT_EQ(bytes[kShapeCountOffset], 1);
  EXPECT_EQ(decode_member_message(bytes).requests.at(0).name, "x");
}

TEST(WireTest, UnknownEnumValuesThrow) {
  struct Case {
    size_t offset;
    uint8_t value;
    const char* field;
  };
  for (const Case& c : {Case{kOpOffset, kNumOpTypes, "op type"}, Case{kOpOffset, 0xff, "op type"},
                        Case{kDtypeOffset, kNumDataTypes, "dtype"}, Case{kDtypeOffset, 0x80, "dtype"},
                        Case{kReduceOpOffset, kNumReduceOps, "reduce op"}, Case{kReduceOpOffset, 0xfe, "reduce op"}}) {
    Bytes bytes = single_request_message();
    bytes[c.offset] = c.value;
    std::string error = member_error(bytes);
    EXPECT_NE(error.find("malformed"), std::string::npos) << c.field << ": " << error;
    EXPECT_NE(error.find(c.field), std::string::npos) << error;
    EXPECT_NE(error.find("unknown value " + std::to_string(c.value)), std::string::npos) << error;
  }
  // The response op type, right after the header and the response count.
  CoordinatorMessage m;
  m.responses.push_back(make_response(OpType::kAllreduce, {"x"}, {-1}, {0}));
  Bytes bytes = encode(m);
  bytes[8] = kNumOpTypes;
  std::string error = coordinator_error(bytes);
  EXPECT_NE(error.find("malformed"), std::string::npos) << error;
  EXPECT_NE(error.find("response op type"), std::string::npos) << error;
}

TEST(WireTest, NegativeDimensionThrows) {
  Bytes bytes = single_request_message();
  put_u32(bytes, kShapeCountOffset + 4 + 4, 0xffffffff);  // high half of shape[0]
  std::string error = member_error(bytes);
  EXPECT_NE(error.find("malformed"), std::string::npos) << error;
  EXPECT_NE(error.find("shape"), std::string::npos) << error;
}

TEST(WireTest, HugeCountsAndLengthsThrow) {
  for (uint32_t huge : {0xffffffffu, 0x80000000u, 1u << 22, (1u << 22) + 1, 1u << 20}) {
    SCOPED_TRACE("declared " + std::to_string(huge));
    Bytes count = single_request_message();
    put_u32(count, kCountOffset, huge);
    EXPECT_NE(member_error(count).find("malformed"), std::string::npos);

    Bytes name = single_request_message();
    put_u32(name, kNameLenOffset, huge);
    std::string error = member_error(name);
    EXPECT_NE(error.find("malformed"), std::string::npos) << error;
    EXPECT_NE(error.find("request name"), std::string::npos) << error;

    Bytes shape = single_request_message();
    put_u32(shape, kShapeCountOffset, huge);
    error = member_error(shape);
    EXPECT_NE(error.find("malformed"), std::string::npos) << error;
    EXPECT_NE(error.find("shape"), std::string::npos) << error;

    Bytes responses = encode(CoordinatorMessage{});
    put_u32(responses, kCountOffset, huge);
    EXPECT_NE(coordinator_error(responses).find("malformed"), std::string::npos);

    // Response: header(4) count(4) op(1) name_count(4) slot(4) name_len(4) ...
    CoordinatorMessage m;
    m.responses.push_back(make_response(OpType::kAllreduce, {"x"}, {-1}, {0}));
    Bytes names = encode(m);
    put_u32(names, 9, huge);
    EXPECT_NE(coordinator_error(names).find("malformed"), std::string::npos);
    Bytes response_name = encode(m);
    put_u32(response_name, 17, huge);
    EXPECT_NE(coordinator_error(response_name).find("malformed"), std::string::npos);
  }
  // The one string length that is checked before anything is read.
  Bytes name = single_request_message();
  put_u32(name, kNameLenOffset, 0xffffffff);
  EXPECT_NE(member_error(name).find("request name of 4294967295 bytes exceeds 65536 bytes"), std::string::npos);
}

TEST(WireTest, ResponseWithoutNamesOrWithWrongCacheFlagCountThrows) {
  CoordinatorMessage m;
  m.responses.push_back(make_response(OpType::kBarrier, {}, {}, {}));
  EXPECT_NE(coordinator_error(encode(m)).find("malformed"), std::string::npos);
  m.responses = {make_response(OpType::kAllreduce, {"a", "b"}, {-1, -1}, {1})};
  EXPECT_NE(coordinator_error(encode(m)).find("cache flags"), std::string::npos);
}

TEST(WireTest, ResponseDescribingSomeButNotAllNamesThrows) {
  CoordinatorMessage m;
  m.responses = {make_response(OpType::kAllreduce, {"a", "b"}, {-1, -1}, {0, 0})};
  m.responses[0].requests = {make_request("a", OpType::kAllreduce, DataType::kFloat32, {1})};
  const std::string error = coordinator_error(encode(m));
  EXPECT_NE(error.find("response request count: 1 requests for 2 names"), std::string::npos) << error;
}

// Decodes `bytes` with both decoders; whatever decodes must re-encode to a
// message that decodes to the same bytes again.
void decode_anything(const Bytes& bytes) {
  try {
    Bytes again = encode(decode_member_message(bytes));
    EXPECT_EQ(encode(decode_member_message(again)), again);
  } catch (const Internal& e) {
    EXPECT_NE(std::string(e.what()).find("malformed"), std::string::npos) << e.what();
  }
  try {
    Bytes again = encode(decode_coordinator_message(bytes));
    EXPECT_EQ(encode(decode_coordinator_message(again)), again);
  } catch (const Internal& e) {
    EXPECT_NE(std::string(e.what()).find("malformed"), std::string::npos) << e.what();
  }
  try {
    Bytes again = encode(decode_failure_message(bytes));
    EXPECT_EQ(again, bytes);  // the failure encoding has one form per message
  } catch (const Internal& e) {
    EXPECT_NE(std::string(e.what()).find("malformed"), std::string::npos) << e.what();
  }
  try {
    control_kind(bytes);
  } catch (const Internal& e) {
    EXPECT_NE(std::string(e.what()).find("malformed"), std::string::npos) << e.what();
  }
}

TEST(WireTest, RandomBuffersNeverCrash) {
  std::mt19937 rng(20240611);
  const Bytes headers[] = {{}, {0x48, 0x52, kWireVersion, 1}, {0x48, 0x52, kWireVersion, 2},
                           {0x48, 0x52, kWireVersion, 3}};
  for (int i = 0; i < 4000; ++i) {
    // Most buffers start with a valid header so decoding gets past it.
    Bytes bytes = headers[i % 4];
    size_t n = rng() % 96;
    for (size_t k = 0; k < n; ++k) {
      // Small values make plausible counts and enum values.
      bytes.push_back(static_cast<uint8_t>(rng() % 4 == 0 ? rng() : rng() % 4));
    }
    decode_anything(bytes);
    if (HasFailure()) FAIL() << "random buffer " << i;
  }
}

TEST(WireTest, MutatedMessagesNeverCrash) {
  std::mt19937 rng(7);
  const Bytes originals[] = {encode(sample_member_message()), encode(sample_coordinator_message()),
                             single_request_message(),
                             encode(FailureMessage{FailureMessage::Stage::kVerdict, {1, 30}, "rank 1 died"})};
  int decoded = 0;
  for (int i = 0; i < 8000; ++i) {
    Bytes bytes = originals[i % 4];
    int edits = 1 + static_cast<int>(rng() % 4);
    for (int e = 0; e < edits && !bytes.empty(); ++e) {
      size_t at = rng() % bytes.size();
      switch (rng() % 5) {
        case 0: bytes[at] = static_cast<uint8_t>(rng()); break;              // replace a byte
        case 1: bytes[at] ^= static_cast<uint8_t>(1u << (rng() % 8)); break;  // flip a bit
        case 2: bytes.insert(bytes.begin() + at, static_cast<uint8_t>(rng())); break;
        case 3: bytes.erase(bytes.begin() + at); break;
        case 4: bytes.resize(at); break;                                      // truncate
      }
    }
    try {
      decode_member_message(bytes);
      ++decoded;
    } catch (const Internal&) {
    }
    decode_anything(bytes);
    if (HasFailure()) FAIL() << "mutation " << i;
  }
  // Some bit flips (in a name, a scale factor) leave a valid message.
  EXPECT_GT(decoded, 0);
}

// ------------------------------------------------------- failure messages

TEST(WireTest, FailureMessagesRoundTripInEveryStage) {
  using Stage = FailureMessage::Stage;
  for (Stage stage : {Stage::kProbe, Stage::kReport, Stage::kVerdict, Stage::kGoodbye, Stage::kClosed}) {
    FailureMessage sent{stage, {0, 7, 123456}, "process set 2 [0, 7] is broken: global rank 7 left"};
    Bytes bytes = encode(sent);
    EXPECT_EQ(control_kind(bytes), ControlKind::kFailure);
    FailureMessage got = decode_failure_message(bytes);
    EXPECT_EQ(got.stage, stage);
    EXPECT_EQ(got.missing, sent.missing);
    EXPECT_EQ(got.reason, sent.reason);
  }
  FailureMessage empty = decode_failure_message(encode(FailureMessage{}));
  EXPECT_TRUE(empty.missing.empty());
  EXPECT_TRUE(empty.reason.empty());
}

TEST(WireTest, ControlKindNamesEveryMessageAndRefusesBadHeaders) {
  EXPECT_EQ(control_kind(encode(MemberMessage{})), ControlKind::kMember);
  EXPECT_EQ(control_kind(encode(CoordinatorMessage{})), ControlKind::kCoordinator);
  EXPECT_EQ(control_kind(encode(FailureMessage{})), ControlKind::kFailure);
  EXPECT_NE(decode_error(control_kind, Bytes{0x48, 0x52, kWireVersion}).find("truncated"), std::string::npos);
  EXPECT_EQ(control_kind(encode(AgreementMessage{})), ControlKind::kAgreement);
  EXPECT_NE(decode_error(control_kind, Bytes{0x48, 0x52, kWireVersion, 5}).find("unknown message kind 5"),
            std::string::npos);
  EXPECT_NE(decode_error(control_kind, Bytes{0x48, 0x52, kWireVersion, 0}).find("kind"), std::string::npos);
  // A version 1 peer (before failure messages existed) is refused by name.
  std::string error = decode_error(control_kind, Bytes{0x48, 0x52, 1, 1});
  EXPECT_NE(error.find("version"), std::string::npos) << error;
  EXPECT_NE(error.find("got 1, expected " + std::to_string(kWireVersion)), std::string::npos) << error;
}

TEST(WireTest, MalformedFailureMessagesThrow) {
  auto failure_error = [](const Bytes& bytes) { return decode_error(decode_failure_message, bytes); };
  const Bytes good = encode(FailureMessage{FailureMessage::Stage::kReport, {3}, "why"});
  // Layout: header(4) stage(1) missing_count(4) missing(4 each) reason_len(4) reason.
  for (size_t n = 0; n < good.size(); ++n)
    EXPECT_NE(failure_error(Bytes(good.begin(), good.begin() + n)).find("malformed"), std::string::npos) << n;
  Bytes trailing = good;
  trailing.push_back(1);
  EXPECT_NE(failure_error(trailing).find("trailing"), std::string::npos);
  for (uint8_t stage : {0, 6, 0xff}) {
    Bytes bad_stage = good;
    bad_stage[4] = stage;
    EXPECT_NE(failure_error(bad_stage).find("failure stage"), std::string::npos) << int(stage);
  }
  Bytes negative = good;
  put_u32(negative, 9, 0xfffffffe);
  EXPECT_NE(failure_error(negative).find("negative rank -2"), std::string::npos);
  Bytes huge_count = good;
  put_u32(huge_count, 5, 0xffffffff);
  EXPECT_NE(failure_error(huge_count).find("missing ranks"), std::string::npos);
  Bytes huge_reason = good;
  put_u32(huge_reason, 13, 0xffffffff);
  EXPECT_NE(failure_error(huge_reason).find("failure reason of 4294967295 bytes exceeds 65536 bytes"), std::string::npos);
  // Each decoder refuses the others' kinds.
  EXPECT_NE(failure_error(encode(MemberMessage{})).find("kind"), std::string::npos);
  EXPECT_NE(member_error(good).find("kind"), std::string::npos);
  EXPECT_NE(coordinator_error(good).find("kind"), std::string::npos);
}

TEST(WireTest, OverlongTextIsCutSoThatTheMessageStillDecodes) {
  FailureMessage sent{FailureMessage::Stage::kVerdict, {1}, std::string(kMaxWireString + 100, 'x')};
  EXPECT_EQ(decode_failure_message(encode(sent)).reason.size(), kMaxWireString);
  CoordinatorMessage m;
  m.responses.push_back(make_response(OpType::kAllreduce, {"x"}, {-1}, {0}));
  m.responses.back().error = std::string(kMaxWireString * 2, 'e');
  EXPECT_EQ(decode_coordinator_message(encode(m)).responses.at(0).error.size(), kMaxWireString);
}

}  // namespace
}  // namespace hora
