#include "transport/shm/attachment.h"

#include "hora/errors.h"
#include "transport/backend.h"

namespace hora::shm {
namespace {

template <typename T>
std::atomic_ref<T> shared(const Segment& segment, uint64_t offset) {
  return std::atomic_ref<T>(*segment.field_at<T>(offset));
}

std::vector<pid_t> member_pids(const Segment& segment, const std::string& set_name) {
  std::vector<pid_t> pids;
  for (uint32_t r = 0; r < segment.layout().ranks; ++r) {
    const int32_t pid =
        shared<int32_t>(segment, segment.layout().member_offset(r) + field::kPid).load(std::memory_order_acquire);
    if (pid <= 0) throw Internal(set_name + ": member " + std::to_string(r) + " published no process id");
    pids.push_back(pid);
  }
  return pids;
}

Segment checked(Segment segment, size_t members, const std::string& set_name) {
  if (segment.layout().ranks != members) throw Internal(set_name + ": segment for the wrong number of members");
  return segment;
}

}  // namespace

Attachment::Attachment(std::vector<int> global_ranks_in, int rank_in, Segment segment_in,
                       std::chrono::milliseconds timeout_in, ShmTuning tuning_in)
    : global_ranks(std::move(global_ranks_in)),
      rank(rank_in),
      set_name(describe_set(global_ranks)),
      segment(checked(std::move(segment_in), global_ranks.size(), set_name)),
      timeout(timeout_in),
      tuning(tuning_in),
      seats(member_seats(segment, rank)),
      peers(member_pids(segment, set_name)),
      rings(*this) {
  for (int r = 0; r < size(); ++r) {
    bells.push_back(member_bell(segment, r));
    data_bells.push_back(member_data_bell(segment, r));
  }
  if (FastLane::supports(size())) lane.emplace(segment, rank, size(), bells, seats, tuning.spin);
}

Attachment::~Attachment() { mark_departed(segment, rank); }

bool Attachment::member_departed(int member) const {
  const uint64_t area = segment.layout().member_offset(static_cast<uint32_t>(member));
  return shared<uint32_t>(segment, area + field::kState).load(std::memory_order_acquire) == kDeparted;
}

Clock::time_point Attachment::deadline() const {
  if (timeout.count() <= 0) return Clock::time_point::max();
  return Clock::now() + timeout;
}

Doorbell member_bell(const Segment& segment, int member) {
  const uint64_t area = segment.layout().member_offset(static_cast<uint32_t>(member));
  return Doorbell(segment.field_at<uint32_t>(area + field::kBell), segment.field_at<uint32_t>(area + field::kSleepers));
}

Doorbell member_data_bell(const Segment& segment, int member) {
  const uint64_t area = segment.layout().member_offset(static_cast<uint32_t>(member));
  return Doorbell(segment.field_at<uint32_t>(area + field::kDataBell),
                  segment.field_at<uint32_t>(area + field::kDataSleepers));
}

Seats member_seats(const Segment& segment, int rank) {
  std::vector<uint32_t*> words;
  for (uint32_t r = 0; r < segment.layout().ranks; ++r)
    words.push_back(segment.field_at<uint32_t>(segment.layout().member_offset(r) + field::kSeat));
  return Seats(std::move(words), rank);
}

void mark_departed(const Segment& segment, int member) {
  const uint64_t area = segment.layout().member_offset(static_cast<uint32_t>(member));
  shared<uint32_t>(segment, area + field::kState).store(kDeparted, std::memory_order_release);
  for (int r = 0; r < static_cast<int>(segment.layout().ranks); ++r) {
    if (r == member) continue;
    member_bell(segment, r).ring();
    member_data_bell(segment, r).ring();
  }
}

}  // namespace hora::shm
