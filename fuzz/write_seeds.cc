// Writes the starting corpus of the fuzz targets: one file per sample
// message, so that fuzzing starts from valid encodings rather than from
// nothing. Usage: write_seeds <control_wire dir> <store_protocol dir> <segment_header dir>
#include <fstream>
#include <iostream>
#include <string>
#include <vector>

#include "coordinator/wire.h"
#include "store/store_protocol.h"
#include "transport/shm/segment.h"

namespace {

void write(const std::string& dir, const std::string& name, const std::vector<uint8_t>& bytes) {
  std::ofstream out(dir + "/" + name, std::ios::binary);
  out.write(reinterpret_cast<const char*>(bytes.data()), static_cast<std::streamsize>(bytes.size()));
}

hora::Request request(std::string name, hora::OpType op, std::vector<int64_t> shape) {
  hora::Request q;
  q.name = std::move(name);
  q.op = op;
  q.shape = std::move(shape);
  return q;
}

// A request's payload as the store fuzzer's server sees it (the frame
// without its length prefix), with the fuzzer's secret.
std::vector<uint8_t> payload_of(const hora::store_protocol::Request& request) {
  const std::vector<uint8_t> frame = hora::store_protocol::encode_request("fuzz", request);
  return {frame.begin() + 4, frame.end()};
}

}  // namespace

int main(int argc, char** argv) {
  if (argc != 4) {
    std::cerr << "usage: write_seeds <control_wire dir> <store_protocol dir> <segment_header dir>\n";
    return 2;
  }
  using namespace hora;
  const std::string wire = argv[1], store = argv[2];
  MemberMessage member;
  member.requests.push_back(request("grad/w", OpType::kAllreduce, {16, 4}));
  hora::Request a2a = request("a2a", OpType::kAlltoall, {6});
  a2a.splits = {1, 2, 3};
  member.requests.push_back(a2a);
  member.requests.push_back(request(kJoinName, OpType::kJoin, {}));
  member.cached_slots = {0, 3, 9};
  write(wire, "member", encode(member));
  write(wire, "member_empty", encode(MemberMessage{}));
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
  write(wire, "coordinator", encode(coordinator));
  write(wire, "verdict", encode(FailureMessage{FailureMessage::Stage::kVerdict, {1, 3}, "rank 1 died"}));
  write(wire, "probe", encode(FailureMessage{FailureMessage::Stage::kProbe, {}, "why"}));

  using namespace hora::store_protocol;
  write(store, "request_set", payload_of(store_protocol::Request{store_protocol::Command::kSet, 0, {"k"}, {'v'}}));
  write(store, "request_wait", payload_of(store_protocol::Request{store_protocol::Command::kWait, 500, {"a", "bc"}, {}}));
  write(store, "request_ping", payload_of(store_protocol::Request{store_protocol::Command::kPing, 0, {}, {}}));
  write(store, "reply_ok", encode_reply(Reply{Status::kOk, {'4', '2'}}));
  write(store, "reply_refusal", encode_reply(Reply{Status::kBadRequest, {'n', 'o'}}));
  write(store, "keys", encode_keys({"process_set.1/gloo/0", "", "k"}));

  // A segment header: 8 bytes of mapping size, then the header line.
  for (uint32_t ranks : {2u, 4u}) {
    const shm::SegmentLayout layout = shm::plan_layout(ranks, 1 << 20, 1 << 16);
    std::vector<uint8_t> seed(8 + shm::kLine, 0);
    for (int i = 0; i < 8; ++i) seed[i] = static_cast<uint8_t>(layout.total_bytes >> (8 * i));
    shm::write_header(seed.data() + 8, layout);
    write(argv[3], "header_" + std::to_string(ranks), seed);
  }
  return 0;
}
