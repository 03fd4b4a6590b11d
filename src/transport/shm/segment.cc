#include "transport/shm/segment.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/random.h>
#include <sys/stat.h>
#include <sys/statvfs.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <utility>

#include "hora/errors.h"

namespace hora::shm {
namespace {

constexpr uint64_t kMagic = 0x6d68732d61726f68;  // "hora-shm", little-endian
constexpr uint32_t kVersion = 4;
constexpr uint64_t kPage = 4096;
#ifdef MADV_POPULATE_WRITE
constexpr int kPopulateWrite = MADV_POPULATE_WRITE;
#else
constexpr int kPopulateWrite = 23;  // Linux 5.14
#endif
constexpr char kDirectory[] = "/dev/shm/";
constexpr char kPrefix[] = "hora-";

// The header as it lies in the segment's first line.
struct Header {
  uint64_t magic;
  uint32_t version;
  uint32_t ranks;
  uint64_t slot_bytes;
  uint64_t ring_bytes;
  uint64_t total_bytes;
};
static_assert(sizeof(Header) <= kLine);

uint64_t align_up(uint64_t value, uint64_t to) { return (value + to - 1) / to * to; }

bool is_power_of_two(uint64_t value) { return value != 0 && (value & (value - 1)) == 0; }

std::string system_error(const std::string& what) { return what + ": " + std::strerror(errno); }

// What is wrong with these sizes, or "".
std::string check_sizes(uint32_t ranks, uint64_t slot_bytes, uint64_t ring_bytes) {
  if (ranks < 2 || ranks > kMaxRanks) return "ranks " + std::to_string(ranks) + " outside 2.." + std::to_string(kMaxRanks);
  if (slot_bytes < kMinSlotBytes || slot_bytes > kMaxSlotBytes || slot_bytes % kPage != 0)
    return "slot size " + std::to_string(slot_bytes) + " is not a multiple of 4096 in 4 KiB..64 GiB";
  if (ring_bytes < kMinRingBytes || ring_bytes > kMaxRingBytes || !is_power_of_two(ring_bytes))
    return "ring size " + std::to_string(ring_bytes) + " is not a power of two in 4 KiB..16 MiB";
  return "";
}

SegmentLayout layout_of(uint32_t ranks, uint64_t slot_bytes, uint64_t ring_bytes) {
  SegmentLayout layout;
  layout.ranks = ranks;
  layout.slot_bytes = slot_bytes;
  layout.ring_bytes = ring_bytes;
  layout.total_bytes = layout.slots_offset() + uint64_t{ranks} * 2 * slot_bytes;
  return layout;
}

// Maps `fd` whole and shared; no page is faulted in yet.
uint8_t* map_whole(int fd, uint64_t bytes) {
  void* base = mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
  if (base == MAP_FAILED) throw Internal(system_error("shared memory: mmap of " + std::to_string(bytes) + " bytes"));
  return static_cast<uint8_t*>(base);
}

}  // namespace

void populate(void* begin, uint64_t bytes) {
  if (bytes == 0) return;
  if (madvise(begin, bytes, kPopulateWrite) == 0) return;
  if (errno != EINVAL) throw Internal(system_error("shared memory: allocating " + std::to_string(bytes) + " bytes in /dev/shm"));
  // A kernel before 5.14: touch every page (a full /dev/shm is then SIGBUS).
  auto* bytes_at = static_cast<volatile uint8_t*>(begin);
  for (uint64_t offset = 0; offset < bytes; offset += kPage) bytes_at[offset] = bytes_at[offset];
}

namespace {

void check_free_space(uint64_t bytes) {
  struct statvfs info {};
  if (statvfs(kDirectory, &info) != 0) throw Internal(system_error("shared memory: statvfs /dev/shm"));
  const unsigned long long free_bytes = static_cast<unsigned long long>(info.f_bavail) * info.f_frsize;
  if (free_bytes < bytes)
    throw Internal("shared memory: the segment needs " + std::to_string(bytes) + " bytes but /dev/shm has " +
                   std::to_string(free_bytes) + " free");
}

}  // namespace

uint64_t SegmentLayout::ring_offset(uint32_t member, bool upward) const {
  const uint64_t first = member_offset(ranks);
  const uint64_t index = (uint64_t{member} - 1) * 2 + (upward ? 0 : 1);
  return first + index * (kRingHeaderBytes + ring_bytes);
}

uint64_t SegmentLayout::lane_offset() const { return ring_offset(ranks, true); }

uint64_t SegmentLayout::carried_offset(uint32_t slot, uint32_t rank) const {
  return lane_offset() + kLaneBytes + (uint64_t{slot} * (ranks + 1) + rank) * kCarriedStride;
}

uint64_t SegmentLayout::slots_offset() const {
  const uint64_t carried = carries() ? kCarriedRows * (uint64_t{ranks} + 1) * kCarriedStride : 0;
  return align_up(lane_offset() + kLaneBytes + carried, kPage);
}

SegmentLayout plan_layout(uint32_t ranks, uint64_t slot_bytes, uint64_t ring_bytes) {
  const std::string problem = check_sizes(ranks, slot_bytes, ring_bytes);
  if (!problem.empty()) throw InvalidArgument("shared memory: " + problem);
  return layout_of(ranks, slot_bytes, ring_bytes);
}

void write_header(void* base, const SegmentLayout& layout) {
  const Header header{kMagic, kVersion, layout.ranks, layout.slot_bytes, layout.ring_bytes, layout.total_bytes};
  std::memcpy(base, &header, sizeof(header));
}

SegmentLayout decode_header(const void* base, size_t size) {
  Header header;
  if (size < sizeof(header)) throw Internal("shared memory: segment of " + std::to_string(size) + " bytes has no header");
  std::memcpy(&header, base, sizeof(header));
  if (header.magic != kMagic) throw Internal("shared memory: segment header has the wrong magic");
  if (header.version != kVersion)
    throw Internal("shared memory: segment version " + std::to_string(header.version) + ", expected " +
                   std::to_string(kVersion));
  const std::string problem = check_sizes(header.ranks, header.slot_bytes, header.ring_bytes);
  if (!problem.empty()) throw Internal("shared memory: segment header: " + problem);
  const SegmentLayout layout = layout_of(header.ranks, header.slot_bytes, header.ring_bytes);
  if (header.total_bytes != layout.total_bytes || layout.total_bytes > size)
    throw Internal("shared memory: segment header says " + std::to_string(header.total_bytes) + " bytes; its layout needs " +
                   std::to_string(layout.total_bytes) + " and " + std::to_string(size) + " are mapped");
  return layout;
}

std::string random_segment_name() {
  uint8_t random[16];
  size_t got = 0;
  while (got < sizeof(random)) {
    const ssize_t n = getrandom(random + got, sizeof(random) - got, 0);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) throw Internal(system_error("shared memory: getrandom"));
    got += static_cast<size_t>(n);
  }
  static const char kHex[] = "0123456789abcdef";
  std::string name = kPrefix + std::to_string(geteuid()) + "-";
  for (uint8_t byte : random) {
    name += kHex[byte >> 4];
    name += kHex[byte & 15];
  }
  return name;
}

bool valid_segment_name(const std::string& name) {
  const std::string prefix = kPrefix + std::to_string(geteuid()) + "-";
  if (name.size() != prefix.size() + 32 || name.compare(0, prefix.size(), prefix) != 0) return false;
  for (size_t i = prefix.size(); i < name.size(); ++i) {
    const char c = name[i];
    if (!((c >= '0' && c <= '9') || (c >= 'a' && c <= 'f'))) return false;
  }
  return true;
}

void unlink_segment(const std::string& name) noexcept {
  if (valid_segment_name(name)) unlink((kDirectory + name).c_str());
}

std::string format_segment_record(const SegmentRecord& record) {
  return "ok " + record.name + " " + std::to_string(record.total_bytes);
}

SegmentRecord parse_segment_record(std::string_view text) {
  auto refuse = [&](const std::string& why) {
    const std::string shown(text.substr(0, 120));
    return Internal("shared memory: malformed segment record '" + shown + (text.size() > 120 ? "...'" : "'") + ": " +
                    why);
  };
  if (!text.starts_with("ok ")) throw refuse("it does not start with 'ok '");
  const std::string_view rest = text.substr(3);
  const size_t space = rest.find(' ');
  if (space == std::string_view::npos) throw refuse("no size after the name");
  SegmentRecord record;
  record.name = std::string(rest.substr(0, space));
  if (!valid_segment_name(record.name)) throw refuse("not a segment name of this user");
  const std::string_view digits = rest.substr(space + 1);
  if (digits.empty() || digits.size() > 20 || digits[0] == '0')
    throw refuse("the size is not a decimal number without leading zeros");
  for (const char c : digits) {
    if (c < '0' || c > '9') throw refuse("the size is not a decimal number without leading zeros");
    const auto digit = static_cast<uint64_t>(c - '0');
    if (record.total_bytes > (UINT64_MAX - digit) / 10) throw refuse("the size exceeds 2^64-1");
    record.total_bytes = record.total_bytes * 10 + digit;
  }
  return record;
}

Segment Segment::create(const std::string& name, const SegmentLayout& layout) {
  if (!valid_segment_name(name)) throw Internal("shared memory: bad segment name '" + name + "'");
  check_free_space(layout.total_bytes);
  const std::string path = kDirectory + name;
  const int fd = ::open(path.c_str(), O_RDWR | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0600);
  if (fd < 0) throw Internal(system_error("shared memory: creating " + path));
  uint8_t* base = nullptr;
  try {
    if (fchmod(fd, 0600) != 0) throw Internal(system_error("shared memory: fchmod " + path));
    if (ftruncate(fd, static_cast<off_t>(layout.total_bytes)) != 0)
      throw Internal(system_error("shared memory: sizing " + path));
    // The control part now; each member's slots when it first uses them.
    const int rc = posix_fallocate(fd, 0, static_cast<off_t>(layout.slots_offset()));
    if (rc != 0) {
      errno = rc;
      throw Internal(system_error("shared memory: allocating " + std::to_string(layout.slots_offset()) +
                                  " bytes in /dev/shm"));
    }
    base = map_whole(fd, layout.total_bytes);
    populate(base, layout.slots_offset());
  } catch (...) {
    close(fd);
    unlink(path.c_str());
    throw;
  }
  close(fd);
  write_header(base, layout);
  return Segment(base, layout);
}

Segment Segment::open(const std::string& name, uint32_t ranks, uint64_t total_bytes) {
  if (!valid_segment_name(name)) throw Internal("shared memory: refused segment name '" + name + "'");
  const std::string path = kDirectory + name;
  const int fd = ::open(path.c_str(), O_RDWR | O_NOFOLLOW | O_CLOEXEC);
  if (fd < 0) throw Internal(system_error("shared memory: opening " + path));
  uint8_t* base = nullptr;
  try {
    struct stat info {};
    if (fstat(fd, &info) != 0) throw Internal(system_error("shared memory: fstat " + path));
    if (!S_ISREG(info.st_mode)) throw Internal("shared memory: refused " + path + ": not a regular file");
    if (info.st_uid != geteuid())
      throw Internal("shared memory: refused " + path + ": owned by uid " + std::to_string(info.st_uid) + ", not " +
                     std::to_string(geteuid()));
    if ((info.st_mode & 07777) != 0600) throw Internal("shared memory: refused " + path + ": mode is not 0600");
    if (static_cast<uint64_t>(info.st_size) != total_bytes)
      throw Internal("shared memory: refused " + path + ": " + std::to_string(info.st_size) + " bytes, expected " +
                     std::to_string(total_bytes));
    base = map_whole(fd, total_bytes);
  } catch (...) {
    close(fd);
    throw;
  }
  close(fd);
  try {
    // Its maker allocated and faulted in the control part; a member maps
    // the pages it touches as it touches them.
    populate(base, kPage);
    SegmentLayout layout = decode_header(base, total_bytes);
    if (layout.ranks != ranks)
      throw Internal("shared memory: segment is for " + std::to_string(layout.ranks) + " members, not " + std::to_string(ranks));
    return Segment(base, layout);
  } catch (...) {
    munmap(base, total_bytes);
    throw;
  }
}

Segment::Segment(Segment&& other) noexcept
    : base_(std::exchange(other.base_, nullptr)), layout_(other.layout_) {}

Segment& Segment::operator=(Segment&& other) noexcept {
  if (this != &other) {
    if (base_) munmap(base_, layout_.total_bytes);
    base_ = std::exchange(other.base_, nullptr);
    layout_ = other.layout_;
  }
  return *this;
}

Segment::~Segment() {
  if (base_) munmap(base_, layout_.total_bytes);
}

}  // namespace hora::shm
