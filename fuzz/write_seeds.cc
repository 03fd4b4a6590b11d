// Writes the starting corpus of the fuzz targets: one file per sample
// message, so that fuzzing starts from valid encodings rather than from
// nothing. Usage: write_seeds <corpus dir>; each target's seeds go to
// <corpus dir>/<target>/ (the folder must exist). A new target adds one
// function below and one row to kTargets.
#include <cstdint>
#include <fstream>
#include <iostream>
#include <span>
#include <string>
#include <vector>

#include "net/hello.h"
#include "coordinator/wire.h"
#include "net/frames.h"
#include "store/store_protocol.h"
#include "transport/shm/segment.h"

namespace {

using Bytes = std::vector<uint8_t>;

void write(const std::string& dir, const std::string& name, const std::vector<uint8_t>& bytes) {
  std::ofstream out(dir + "/" + name, std::ios::binary);
  out.write(reinterpret_cast<const char*>(bytes.data()), static_cast<std::streamsize>(bytes.size()));
}

Bytes bytes_of(const std::string& text) { return {text.begin(), text.end()}; }

hora::Request request(std::string name, hora::OpType op, std::vector<int64_t> shape) {
  hora::Request q;
  q.name = std::move(name);
  q.op = op;
  q.shape = std::move(shape);
  return q;
}

// A request's payload as the store fuzzer's server sees it (the frame
// without its length prefix).
std::vector<uint8_t> payload_of(const hora::store_protocol::Request& request) {
  const std::vector<uint8_t> frame = hora::store_protocol::encode_request(request);
  return {frame.begin() + 4, frame.end()};
}

void control_wire_seeds(const std::string& dir) {
  using namespace hora;
  MemberMessage member;
  member.requests.push_back(request("grad/w", OpType::kAllreduce, {16, 4}));
  hora::Request a2a = request("a2a", OpType::kAlltoall, {6});
  a2a.splits = {1, 2, 3};
  member.requests.push_back(a2a);
  member.requests.push_back(request(kJoinName, OpType::kJoin, {}));
  member.cached_slots = {0, 3, 9};
  write(dir, "member", encode(member));
  write(dir, "member_empty", encode(MemberMessage{}));
  CoordinatorMessage coordinator;
  Response fused;
  fused.op = OpType::kAllreduce;
  fused.names = {"a", ""};
  fused.slots = {-1, 2};
  fused.cache = {1, 0};
  coordinator.responses.push_back(fused);
  Response gather;
  gather.op = OpType::kAllgather;
  gather.names = {"g"};
  gather.slots = {-1};
  gather.cache = {0};
  gather.sizes = {1, 2};
  gather.error = "mismatch";
  coordinator.responses.push_back(gather);
  Response described;  // while a member has joined
  described.op = OpType::kAllreduce;
  described.names = {"j"};
  described.slots = {-1};
  described.cache = {1};
  described.requests = {request("j", OpType::kAllreduce, {4})};
  coordinator.responses.push_back(described);
  Response join;
  join.op = OpType::kJoin;
  join.names = {kJoinName};
  join.slots = {-1};
  join.cache = {0};
  join.sizes = {2};
  coordinator.responses.push_back(join);
  write(dir, "coordinator", encode(coordinator));
  write(dir, "verdict", encode(FailureMessage{FailureMessage::Stage::kVerdict, {1, 3}, "rank 1 died"}));
  write(dir, "probe", encode(FailureMessage{FailureMessage::Stage::kProbe, {}, "why"}));
  write(dir, "goodbye", encode(FailureMessage{FailureMessage::Stage::kGoodbye, {}, ""}));
  write(dir, "closed", encode(FailureMessage{FailureMessage::Stage::kClosed, {2}, "rank 2 left"}));
  write(dir, "agreement_record", encode(AgreementMessage{AgreementMessage::Kind::kRecord, 3, 7, 2}));
  write(dir, "agreement_drain", encode(AgreementMessage{AgreementMessage::Kind::kDrain, 0, 1, 0}));
  write(dir, "agreement_handed", encode(AgreementMessage{AgreementMessage::Kind::kHanded, 4, 2, 3}));
  write(dir, "agreement_undivert_ack", encode(AgreementMessage{AgreementMessage::Kind::kUndivertAck, 4, 2, 2}));
}

void store_protocol_seeds(const std::string& dir) {
  using namespace hora;
  using namespace hora::store_protocol;
  write(dir, "request_set", payload_of(store_protocol::Request{store_protocol::Command::kSet, 0, {"k"}, {'v'}}));
  write(dir, "request_wait", payload_of(store_protocol::Request{store_protocol::Command::kWait, 500, {"a", "bc"}, {}}));
  write(dir, "request_ping", payload_of(store_protocol::Request{store_protocol::Command::kPing, 0, {}, {}}));
  write(dir, "reply_ok", encode_reply(Reply{Status::kOk, {'4', '2'}}));
  write(dir, "reply_refusal", encode_reply(Reply{Status::kBadRequest, {'n', 'o'}}));
  write(dir, "keys", encode_keys({"process_set.1/gloo/0", "", "k"}));
}

void segment_header_seeds(const std::string& dir) {
  using namespace hora;
  // A segment header: 8 bytes of mapping size, then the header line.
  for (uint32_t ranks : {2u, 4u}) {
    const shm::SegmentLayout layout = shm::plan_layout(ranks, 1 << 20, 1 << 16);
    std::vector<uint8_t> seed(8 + shm::kLine, 0);
    for (int i = 0; i < 8; ++i) seed[i] = static_cast<uint8_t>(layout.total_bytes >> (8 * i));
    shm::write_header(seed.data() + 8, layout);
    write(dir, "header_" + std::to_string(ranks), seed);
  }
}

void segment_record_seeds(const std::string& dir) {
  const std::string name = hora::shm::random_segment_name();
  write(dir, "record", bytes_of(hora::shm::format_segment_record({name, 1 << 22})));
  write(dir, "record_largest", bytes_of(hora::shm::format_segment_record({name, UINT64_MAX})));
  write(dir, "refusal", bytes_of("-no room in /dev/shm"));
}

// Frames as a control link carries them: the first byte picks how the
// fuzzer splits the rest into reads.
void control_frames_seeds(const std::string& dir) {
  Bytes stream = {3};
  for (const Bytes& body : {Bytes{1, 2, 3}, Bytes{}, Bytes(70, 9)}) {
    const auto header = hora::net::frame_header(body.size());
    stream.insert(stream.end(), header.begin(), header.end());
    stream.insert(stream.end(), body.begin(), body.end());
  }
  write(dir, "three_frames", stream);
  write(dir, "partial", Bytes{0, 10, 0, 0, 0, 1, 2});
  write(dir, "too_long", Bytes{7, 1, 0, 0, 0x40});
}

// With the hello fuzzer's fixed key, nonce and set (fuzz/control_hello_fuzzer.cc);
// the first byte is the set's size.
void control_hello_seeds(const std::string& dir) {
  using namespace hora::net;
  const HelloKey key = {1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16};
  const hora::net::Nonce nonce = {16, 15, 14, 13, 12, 11, 10, 9, 8, 7, 6, 5, 4, 3, 2, 1};
  auto seed = [](std::span<const uint8_t> bytes) {
    Bytes out = {3};
    out.insert(out.end(), bytes.begin(), bytes.end());
    return out;
  };
  write(dir, "answer_1", seed(encode_answer(key, "process set [0, 1, 2]", 1, nonce)));
  write(dir, "answer_2", seed(encode_answer(key, "process set [0, 1, 2]", 2, nonce)));
  write(dir, "challenge", seed(encode_challenge(nonce)));
  write(dir, "address_record", seed(encode_address_record({key, "127.0.0.1:29500"})));
}

// A ring: log2 of its capacity, head, tail, its bytes, then bytes to write.
void shm_ring_seeds(const std::string& dir) {
  auto ring = [](uint8_t log2_capacity, uint64_t head, uint64_t tail, const Bytes& contents) {
    Bytes seed = {log2_capacity};
    for (const uint64_t counter : {head, tail})
      for (int i = 0; i < 8; ++i) seed.push_back(static_cast<uint8_t>(counter >> (8 * i)));
    seed.insert(seed.end(), contents.begin(), contents.end());
    return seed;
  };
  Bytes frames = {2, 0, 0, 0, 'h', 'i', 0, 0, 0, 0};
  frames.resize(16, 0);
  write(dir, "two_frames", ring(4, 10, 0, frames));
  write(dir, "wrapped", ring(4, 20, 12, frames));
  write(dir, "corrupt", ring(4, 17, 0, frames));
  write(dir, "counters_wrap", ring(4, 8, UINT64_MAX - 7, frames));
  Bytes then_write = frames;
  then_write.insert(then_write.end(), {5, 0, 0, 0, 'h', 'e', 'l', 'l', 'o'});
  write(dir, "then_write", ring(4, 0, 0, then_write));
}

// The store server fuzzer's first byte: bit 0 puts a valid proof of the
// secret first, the rest says how many bytes each read takes (here 128).
void store_server_seeds(const std::string& dir) {
  using namespace hora::store_protocol;
  const auto session = [](uint8_t first, const std::vector<Request>& requests) {
    std::vector<uint8_t> bytes = {first};
    for (const Request& request : requests) {
      const std::vector<uint8_t> frame = encode_request(request);
      bytes.insert(bytes.end(), frame.begin(), frame.end());
    }
    return bytes;
  };
  write(dir, "set_get", session(0xff, {{Command::kSet, 0, {"k"}, {'v'}}, {Command::kGet, 0, {"k"}, {}}}));
  write(dir, "add_wait", session(0x03, {{Command::kAdd, 0, {"n"}, {'-', '2'}}, {Command::kWait, 5, {"n", "m"}, {}}}));
  write(dir, "get_missing_ping", session(0x11, {{Command::kGet, 100, {"absent"}, {}}, {Command::kPing, 0, {}, {}}}));
  write(dir, "no_proof", session(0xfe, {{Command::kSet, 0, {"k"}, {'v'}}}));
}

struct Target {
  const char* name;
  void (*write_seeds)(const std::string& dir);
};

const Target kTargets[] = {
    {"control_wire_fuzzer", control_wire_seeds},
    {"store_protocol_fuzzer", store_protocol_seeds},
    {"store_server_fuzzer", store_server_seeds},
    {"segment_header_fuzzer", segment_header_seeds},
    {"segment_record_fuzzer", segment_record_seeds},
    {"control_frames_fuzzer", control_frames_seeds},
    {"control_hello_fuzzer", control_hello_seeds},
    {"shm_ring_fuzzer", shm_ring_seeds},
};

}  // namespace

int main(int argc, char** argv) {
  if (argc != 2) {
    std::cerr << "usage: write_seeds <corpus dir>\n";
    return 2;
  }
  for (const Target& target : kTargets) target.write_seeds(std::string(argv[1]) + "/" + target.name);
  return 0;
}
