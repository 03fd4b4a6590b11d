#include "transport/shm/host_doorbells.h"

#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <cstddef>
#include <cstring>

#include "hora/errors.h"

namespace hora::shm {
namespace {

// An address in the abstract namespace (a leading NUL): no file, gone
// with its socket.
sockaddr_un address_of(const std::string& name, socklen_t& length) {
  sockaddr_un address{};
  address.sun_family = AF_UNIX;
  const size_t bytes = std::min(name.size(), sizeof(address.sun_path) - 1);
  std::memcpy(address.sun_path + 1, name.data(), bytes);
  length = static_cast<socklen_t>(offsetof(sockaddr_un, sun_path) + 1 + bytes);
  return address;
}

std::atomic_ref<uint32_t> path_size(const Segment& segment, int member) {
  const uint64_t area = segment.layout().member_offset(static_cast<uint32_t>(member));
  return std::atomic_ref<uint32_t>(*segment.field_at<uint32_t>(area + field::kBellPathSize));
}

}  // namespace

HostDoorbells::HostDoorbells(const Segment& segment, int rank, int size)
    : segment_(&segment), rank_(rank), peers_(static_cast<size_t>(size), -1) {
  path_ = random_segment_name() + ".bell";
  if (path_.size() >= field::kBellPathBytes)
    throw Internal("shared memory: a wake-up socket's path is too long: " + path_);
  fd_ = socket(AF_UNIX, SOCK_DGRAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
  if (fd_ < 0) throw Internal(std::string("shared memory: a wake-up socket: ") + std::strerror(errno));
  socklen_t length = 0;
  const sockaddr_un address = address_of(path_, length);
  if (bind(fd_, reinterpret_cast<const sockaddr*>(&address), length) != 0) {
    const int error = errno;
    ::close(fd_);
    throw Internal("shared memory: binding a wake-up socket at " + path_ + ": " + std::strerror(error));
  }
  const uint64_t area = segment.layout().member_offset(static_cast<uint32_t>(rank));
  std::memcpy(segment.field_at<char>(area + field::kBellPath), path_.data(), path_.size());
  path_size(segment, rank).store(static_cast<uint32_t>(path_.size()), std::memory_order_release);
}

HostDoorbells::~HostDoorbells() {
  path_size(*segment_, rank_).store(0, std::memory_order_release);
  for (int peer : peers_)
    if (peer >= 0) ::close(peer);
  ::close(fd_);
}

void HostDoorbells::clear() noexcept {
  char bytes[64];
  while (recv(fd_, bytes, sizeof(bytes), MSG_DONTWAIT) > 0) {
  }
}

void HostDoorbells::ring(int member) noexcept {
  if (member < 0 || static_cast<size_t>(member) >= peers_.size()) return;
  std::lock_guard<std::mutex> lock(mutex_);
  int& peer = peers_[static_cast<size_t>(member)];
  if (peer < 0) {
    const uint32_t size = path_size(*segment_, member).load(std::memory_order_acquire);
    if (size == 0 || size >= field::kBellPathBytes) return;
    const uint64_t area = segment_->layout().member_offset(static_cast<uint32_t>(member));
    const std::string path(segment_->field_at<char>(area + field::kBellPath), size);
    const int fd = socket(AF_UNIX, SOCK_DGRAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
    if (fd < 0) return;
    socklen_t length = 0;
    const sockaddr_un address = address_of(path, length);
    if (connect(fd, reinterpret_cast<const sockaddr*>(&address), length) != 0) {
      ::close(fd);
      return;
    }
    peer = fd;
  }
  const char byte = 1;
  // A full queue already holds a wake-up; a member that left reads none.
  [[maybe_unused]] ssize_t sent = send(peer, &byte, 1, MSG_DONTWAIT | MSG_NOSIGNAL);
}

}  // namespace hora::shm
