// The machine's floor for an allreduce between two hosts (benchmarks/
// cross_host.py's "floor" peer): the least work a two-host allreduce can do,
// with nothing around it: no sets, agreement, queues, checks or threads
// besides the ranks. It runs as a job under horarun (HORA_RANK, HORA_SIZE,
// HORA_LOCAL_RANK, HORA_LOCAL_SIZE; the ranks of a host consecutive), with
// the same number of ranks on each of the two hosts:
//
//   - the members of a host share one mapping, and every member's input
//     lives in it already (no copy in: a favour no library gets);
//   - one TCP connection joins the two hosts' first members (the leaders);
//   - up to 1 KiB: each member puts its input in its slot, the leader adds
//     the slots, exchanges the sum with the other leader and publishes the
//     total, which every member reads;
//   - larger: in chunks of 1 MiB, the host's members reduce a chunk together
//     (each a part of it) into the leader's input, the leader sends it while
//     it receives the other host's (one thread, non-blocking socket, both
//     ways at once), adds that in, and every other member copies the chunk
//     out while the next ones move;
//   - with --every-member, larger ones go as Horovod's hierarchical
//     allreduce does: each member owns a part of every chunk, reduces it,
//     and exchanges it with the member of the same local rank on the other
//     host over a connection of its own (port + local rank); every member
//     then copies the whole chunk out.
//
// Before timing a size, one op on known inputs checks that every member
// ends with the sum.
//
// Every wait looks, and yields the CPU between looks (sched_yield), which
// is the fastest way to wait on this machine when ranks outnumber cores
// (docs/performance.md, "Waiting when threads outnumber cores").
//
//     horarun -np 4 -H a:2,b:2 --launch-agent AGENT \
//         build/hora_host_floor --peer a --port P --sizes 4,67108864 [--every-member]
//
// Each rank prints {"RESULT": {"<bytes>": <median seconds>, ...}}.
#include <fcntl.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <sched.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <thread>
#include <vector>

#include "core/reduce.h"

namespace {

using Clock = std::chrono::steady_clock;
constexpr size_t kLine = 128;
constexpr int kMaxLocal = 8;
constexpr size_t kSmallBytes = 1024;
constexpr size_t kChunkBytes = 1 << 20;

[[noreturn]] void die(const std::string& what) {
  std::fprintf(stderr, "hora_host_floor: %s (%s)\n", what.c_str(), std::strerror(errno));
  std::exit(1);
}

int env_int(const char* name) {
  const char* value = std::getenv(name);
  if (!value) {
    errno = 0;
    die(std::string(name) + " is not set: run under horarun");
  }
  return std::atoi(value);
}

int iterations(size_t bytes) {
  return bytes <= kSmallBytes ? 3000 : bytes <= (256 << 10) ? 400 : bytes <= (4 << 20) ? 60 : 10;
}

// A sum of `count` floats into `into`.
void add(float* into, const float* from, size_t count) {
  hora::reduce_into(into, from, count, hora::DataType::kFloat32, hora::ReduceOp::kSum);
}

struct alignas(kLine) Counter {
  std::atomic<uint64_t> value;
};

// The host's mapping: counters, the small slots, then each member's input.
struct Header {
  Counter arrived[kMaxLocal];  // small: the iterations whose input is in the slot
  Counter reduced[kMaxLocal];  // large: chunks this member has reduced its part of
  Counter copied[kMaxLocal];   // large: chunks this member has copied out (the leader: the chunks
                               // of the ops before the one it has started)
  Counter published;           // small: the iterations the leader finished
  Counter finished;            // large: the chunks the leader finished
  Counter ready;               // the leader made the mapping
  Counter attached;            // the other members that have mapped it
  alignas(kLine) float slot[kMaxLocal][kSmallBytes / sizeof(float)];
  alignas(kLine) float total[kSmallBytes / sizeof(float)];
};

template <typename Done>
void wait_until(Done done) {
  while (!done()) {
    for (int i = 0; i < 32 && !done(); ++i) {
#if defined(__x86_64__) || defined(__i386__)
      __builtin_ia32_pause();
#endif
    }
    if (!done()) sched_yield();
  }
}

class Floor {
 public:
  Floor(int port, const std::string& peer, size_t max_bytes, bool every_member)
      : every_member_(every_member),
        rank_(env_int("HORA_RANK")),
        size_(env_int("HORA_SIZE")),
        local_(env_int("HORA_LOCAL_RANK")),
        locals_(env_int("HORA_LOCAL_SIZE")),
        max_bytes_(std::max(max_bytes, kSmallBytes)) {
    errno = 0;
    if (size_ != 2 * locals_ || locals_ > kMaxLocal)
      die("needs the same number of ranks (at most 8) on each of two hosts");
    const int host = rank_ / locals_;
    map(port, host);
    own_ = std::vector<float>(max_bytes_ / sizeof(float), 1.0f);
    if (local_ == 0 || every_member_) connect_leaders(port + (every_member_ ? local_ : 0), peer, host);
  }

  // One op on known inputs (rank + 1 in every element): every member must
  // end with the sum. Exits the program otherwise.
  void verify(size_t bytes) {
    float scratch = 0;
    small(sizeof scratch, &scratch);  // every member is done with the ops before
    const size_t count = bytes / sizeof(float);
    std::fill_n(own_.data(), count, static_cast<float>(rank_ + 1));
    std::fill_n(input(local_), count, static_cast<float>(rank_ + 1));
    small(sizeof scratch, &scratch);  // and every member's inputs are set
    one_op(bytes);
    const float* result = bytes > kSmallBytes && local_ == 0 ? input(0) : own_.data();
    const float expected = static_cast<float>(size_ * (size_ + 1) / 2);
    size_t wrong = 0, first = count, last = 0;
    for (size_t i = 0; i < count; ++i)
      if (result[i] != expected) ++wrong, first = std::min(first, i), last = i;
    if (wrong > 0) {
      errno = 0;
      die("wrong sum at " + std::to_string(bytes) + " bytes: " + std::to_string(wrong) + " elements from " +
          std::to_string(first) + " to " + std::to_string(last) + ", the first " + std::to_string(result[first]) +
          " instead of " + std::to_string(expected));
    }
  }

  double run(size_t bytes) {
    verify(bytes);
    std::vector<double> times;
    const int n = iterations(bytes);
    for (int i = 0; i < n + n / 10 + 1; ++i) {
      const auto start = Clock::now();
      one_op(bytes);
      if (i > n / 10) times.push_back(std::chrono::duration<double>(Clock::now() - start).count());
    }
    std::nth_element(times.begin(), times.begin() + times.size() / 2, times.end());
    return times[times.size() / 2];
  }

 private:
  void one_op(size_t bytes) {
    if (bytes <= kSmallBytes) {
      small(bytes, own_.data());
    } else if (every_member_ && locals_ > 1) {
      large_by_parts(bytes);
    } else {
      large(bytes);
    }
  }

  void map(int port, int host) {
    // The job's rendezvous port besides --port: a name no earlier job left.
    const char* job = std::getenv("HORA_RENDEZVOUS_PORT");
    const std::string name = "/hora_host_floor_" + std::string(job ? job : "0") + "_" + std::to_string(port) + "_" +
                             std::to_string(host);
    bytes_mapped_ = sizeof(Header) + static_cast<size_t>(locals_) * max_bytes_;
    int fd = -1;
    if (local_ == 0) {
      shm_unlink(name.c_str());
      fd = shm_open(name.c_str(), O_CREAT | O_EXCL | O_RDWR, 0600);
      if (fd < 0 || ftruncate(fd, static_cast<off_t>(bytes_mapped_)) != 0) die("shm_open " + name);
    } else {
      for (int tries = 0; (fd = shm_open(name.c_str(), O_RDWR, 0)) < 0; ++tries) {
        if (tries > 20000) die("shm_open " + name);
        std::this_thread::sleep_for(std::chrono::microseconds(500));
      }
      struct stat st{};
      while (fstat(fd, &st) == 0 && static_cast<size_t>(st.st_size) < bytes_mapped_) sched_yield();
    }
    void* at = mmap(nullptr, bytes_mapped_, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
    close(fd);
    if (at == MAP_FAILED) die("mmap");
    header_ = static_cast<Header*>(at);
    inputs_ = reinterpret_cast<float*>(static_cast<uint8_t*>(at) + sizeof(Header));
    std::fill_n(input(local_), max_bytes_ / sizeof(float), 1.0f);
    if (local_ == 0) {
      header_->ready.value.store(1, std::memory_order_release);
      // Once every member has it mapped, the name can go.
      const auto others = static_cast<uint64_t>(locals_ - 1);
      wait_until([&] { return header_->attached.value.load(std::memory_order_acquire) == others; });
      shm_unlink(name.c_str());
    } else {
      wait_until([&] { return header_->ready.value.load(std::memory_order_acquire) == 1; });
      header_->attached.value.fetch_add(1, std::memory_order_acq_rel);
    }
  }

  void connect_leaders(int port, const std::string& peer, int host) {
    if (host == 0) {
      const int listener = socket(AF_INET, SOCK_STREAM, 0);
      const int on = 1;
      setsockopt(listener, SOL_SOCKET, SO_REUSEADDR, &on, sizeof on);
      sockaddr_in address{};
      address.sin_family = AF_INET;
      address.sin_port = htons(static_cast<uint16_t>(port));
      if (bind(listener, reinterpret_cast<sockaddr*>(&address), sizeof address) != 0 || listen(listener, 1) != 0)
        die("listen on port " + std::to_string(port));
      socket_ = accept(listener, nullptr, nullptr);
      close(listener);
    } else {
      addrinfo hints{}, *found = nullptr;
      hints.ai_family = AF_INET;
      hints.ai_socktype = SOCK_STREAM;
      if (getaddrinfo(peer.c_str(), std::to_string(port).c_str(), &hints, &found) != 0 || !found)
        die("resolve " + peer);
      for (int tries = 0;; ++tries) {
        socket_ = socket(AF_INET, SOCK_STREAM, 0);
        if (connect(socket_, found->ai_addr, found->ai_addrlen) == 0) break;
        close(socket_);
        if (tries > 2000) die("connect to " + peer);
        std::this_thread::sleep_for(std::chrono::milliseconds(5));
      }
      freeaddrinfo(found);
    }
    if (socket_ < 0) die("accept");
    const int on = 1;
    setsockopt(socket_, IPPROTO_TCP, TCP_NODELAY, &on, sizeof on);
    fcntl(socket_, F_SETFL, fcntl(socket_, F_GETFL) | O_NONBLOCK);
    staging_.resize(max_bytes_ / sizeof(float));
  }

  float* input(int local) const { return inputs_ + static_cast<size_t>(local) * (max_bytes_ / sizeof(float)); }

  // Moves what it can of the send and the receive; ends the program if the peer is gone.
  static void progress(int fd, const uint8_t* out, size_t out_end, size_t& sent, uint8_t* in, size_t in_end,
                       size_t& received) {
    if (sent < out_end) {
      const ssize_t n = send(fd, out + sent, out_end - sent, MSG_DONTWAIT | MSG_NOSIGNAL);
      if (n > 0) sent += static_cast<size_t>(n);
      else if (n < 0 && errno != EAGAIN && errno != EWOULDBLOCK) die("send");
    }
    if (received < in_end) {
      const ssize_t n = recv(fd, in + received, in_end - received, MSG_DONTWAIT);
      if (n > 0) received += static_cast<size_t>(n);
      else if (n == 0) { errno = 0; die("the other leader closed the connection"); }
      else if (errno != EAGAIN && errno != EWOULDBLOCK) die("recv");
    }
  }

  void exchange(const uint8_t* out, uint8_t* in, size_t bytes) {
    size_t sent = 0, received = 0;
    wait_until([&] {
      progress(socket_, out, bytes, sent, in, bytes, received);
      return sent == bytes && received == bytes;
    });
  }

  // `data`: this member's input, then the sum.
  void small(size_t bytes, float* data) {
    const size_t count = bytes / sizeof(float);
    const uint64_t turn = ++iteration_;
    std::memcpy(header_->slot[local_], data, bytes);
    header_->arrived[local_].value.store(turn, std::memory_order_release);
    if (local_ == 0) {
      // Every member has arrived, so each has read the previous total.
      for (int l = 1; l < locals_; ++l)
        wait_until([&] { return header_->arrived[l].value.load(std::memory_order_acquire) >= turn; });
      float* total = header_->total;
      std::memcpy(total, header_->slot[0], bytes);
      for (int l = 1; l < locals_; ++l)
        add(total, header_->slot[l], count);
      exchange(reinterpret_cast<uint8_t*>(total), reinterpret_cast<uint8_t*>(staging_.data()), bytes);
      add(total, staging_.data(), count);
      std::memcpy(data, total, bytes);
      header_->published.value.store(turn, std::memory_order_release);
    } else {
      wait_until([&] { return header_->published.value.load(std::memory_order_acquire) >= turn; });
      std::memcpy(data, header_->total, bytes);
    }
  }

  void large(size_t bytes) {
    const size_t chunks = (bytes + kChunkBytes - 1) / kChunkBytes;
    const uint64_t base = chunk_base_;
    chunk_base_ += chunks;
    float* result = input(0);  // the leader's input takes the host's sum, then the total
    auto span = [&](size_t k) {
      return std::pair<size_t, size_t>{k * kChunkBytes, std::min(bytes, (k + 1) * kChunkBytes)};
    };
    wait_for_previous_result(base);
    auto reduce_part = [&](size_t k) {
      const auto [from, to] = span(k);
      const size_t elements = (to - from) / sizeof(float);
      const size_t part = (elements + locals_ - 1) / locals_;
      const size_t begin = from / sizeof(float) + std::min(elements, part * local_);
      const size_t end = from / sizeof(float) + std::min(elements, part * (local_ + 1));
      for (int l = 1; l < locals_; ++l)
        if (end > begin)
          add(result + begin, input(l) + begin, end - begin);
      header_->reduced[local_].value.store(base + k + 1, std::memory_order_release);
    };
    if (local_ != 0) {
      size_t copied = 0;
      for (size_t k = 0; k < chunks; ++k) {
        reduce_part(k);
        // Copy out what the leader has finished meanwhile.
        while (copied < k && header_->finished.value.load(std::memory_order_acquire) >= base + copied + 1)
          copy_out(base, copied++, span);
      }
      while (copied < chunks) {
        wait_until([&] { return header_->finished.value.load(std::memory_order_acquire) >= base + copied + 1; });
        copy_out(base, copied++, span);
      }
      return;
    }
    // The leader: reduces its part of each chunk, sends a chunk once every
    // member has reduced its part, receives the other host's into staging,
    // adds it in once its own chunk is sent and publishes.
    const auto* out = reinterpret_cast<const uint8_t*>(result);
    auto* in = reinterpret_cast<uint8_t*>(staging_.data());
    size_t next_reduce = 0, sendable = 0, sent = 0, received = 0, finished = 0;
    while (finished < chunks) {
      if (next_reduce < chunks) reduce_part(next_reduce++);
      while (sendable < chunks && everyone_reduced(base + sendable + 1)) sendable = sendable + 1;
      const size_t send_end = sendable == 0 ? 0 : span(sendable - 1).second;
      bool moved = false;
      do {
        const size_t before = sent + received;
        progress(socket_, out, send_end, sent, in, bytes, received);
        moved = sent + received != before;
        while (finished < chunks && sent >= span(finished).second && received >= span(finished).second) {
          const auto [from, to] = span(finished);
          add(result + from / sizeof(float), staging_.data() + from / sizeof(float), (to - from) / sizeof(float));
          header_->finished.value.store(base + ++finished, std::memory_order_release);
        }
      } while (moved && finished < chunks);
      if (!moved && next_reduce >= chunks && finished < chunks) sched_yield();
    }
    // The leader's input is its tensor: the total is in place.
  }

  // The leader's input holds the previous op's result until the leader
  // starts the next op (it is the leader's tensor) and every other member
  // has copied it out: only then may the next op's sums go there.
  void wait_for_previous_result(uint64_t base) {
    if (local_ == 0) header_->copied[0].value.store(base, std::memory_order_release);
    for (int l = 0; l < locals_; ++l)
      wait_until([&] { return header_->copied[l].value.load(std::memory_order_acquire) >= base; });
  }

  bool everyone_reduced(uint64_t chunk) const {
    for (int l = 0; l < locals_; ++l)
      if (header_->reduced[l].value.load(std::memory_order_acquire) < chunk) return false;
    return true;
  }

  template <typename Span>
  void copy_out(uint64_t base, size_t k, Span span) {
    const auto [from, to] = span(k);
    std::memcpy(reinterpret_cast<uint8_t*>(own_.data()) + from, reinterpret_cast<const uint8_t*>(input(0)) + from,
                to - from);
    header_->copied[local_].value.store(base + k + 1, std::memory_order_release);
  }

  // --every-member: each member owns a part of every chunk, reduces it, and
  // exchanges it with the member of the same local rank on the other host
  // over a connection of its own; every member then copies the whole
  // chunk out.
  void large_by_parts(size_t bytes) {
    const size_t chunks = (bytes + kChunkBytes - 1) / kChunkBytes;
    const uint64_t base = chunk_base_;
    chunk_base_ += chunks;
    float* result = input(0);
    wait_for_previous_result(base);
    // This member's part of chunk k, in elements from the buffer's start.
    auto part = [&](size_t k) {
      const size_t from = k * kChunkBytes / sizeof(float);
      const size_t elements = (std::min(bytes, (k + 1) * kChunkBytes) - k * kChunkBytes) / sizeof(float);
      const size_t each = (elements + locals_ - 1) / locals_;
      return std::pair<size_t, size_t>{from + std::min(elements, each * local_),
                                       from + std::min(elements, each * (local_ + 1))};
    };
    size_t reduced = 0, sending = 0, sent = 0, receiving = 0, received = 0, finished = 0, copied = 0;
    while (finished < chunks || copied < chunks) {
      bool moved = false;
      if (reduced < chunks) {
        const auto [begin, end] = part(reduced++);
        for (int l = 1; l < locals_; ++l)
          if (end > begin)
            add(result + begin, input(l) + begin, end - begin);
        moved = true;
      }
      // One chunk's part at a time each way, the send only once reduced.
      if (sending < reduced && sending < chunks) {
        const auto [begin, end] = part(sending);
        size_t unused = 0;
        const auto* out = reinterpret_cast<const uint8_t*>(result + begin);
        progress(socket_, out, (end - begin) * sizeof(float), sent, nullptr, 0, unused);
        if (sent == (end - begin) * sizeof(float)) sending++, sent = 0, moved = true;
      }
      if (receiving < chunks) {
        const auto [begin, end] = part(receiving);
        size_t unused = 0;
        const size_t before = received;
        auto* in = reinterpret_cast<uint8_t*>(staging_.data() + begin);
        progress(socket_, nullptr, 0, unused, in, (end - begin) * sizeof(float), received);
        if (received != before) moved = true;
        if (received == (end - begin) * sizeof(float)) receiving++, received = 0;
      }
      while (finished < std::min(sending, receiving)) {
        const auto [begin, end] = part(finished);
        add(result + begin, staging_.data() + begin, end - begin);
        header_->reduced[local_].value.store(base + ++finished, std::memory_order_release);
        moved = true;
      }
      while (copied < chunks && everyone_reduced(base + copied + 1)) {
        if (local_ != 0) {
          copy_out(base, copied, [&](size_t k) {
            return std::pair<size_t, size_t>{k * kChunkBytes, std::min(bytes, (k + 1) * kChunkBytes)};
          });
        }
        ++copied;
        moved = true;
      }
      if (!moved) sched_yield();
    }
  }

  const bool every_member_;
  const int rank_, size_, local_, locals_;
  const size_t max_bytes_;
  size_t bytes_mapped_ = 0;
  Header* header_ = nullptr;
  float* inputs_ = nullptr;
  std::vector<float> own_, staging_;
  int socket_ = -1;
  uint64_t iteration_ = 0, chunk_base_ = 0;
};

}  // namespace

int main(int argc, char** argv) {
  int port = 0;
  std::string peer;
  std::vector<size_t> sizes;
  bool every_member = false;
  for (int i = 1; i < argc; i += 2) {
    const std::string flag = argv[i];
    if (flag == "--every-member") {
      every_member = true;
      --i;
    } else if (i + 1 >= argc) {
      break;
    } else if (flag == "--port") {
      port = std::atoi(argv[i + 1]);
    } else if (flag == "--peer") {
      peer = argv[i + 1];
    } else if (flag == "--sizes") {
      for (const char* p = argv[i + 1]; *p;) {
        char* end = nullptr;
        sizes.push_back(std::strtoull(p, &end, 10));
        p = *end == ',' ? end + 1 : end;
        if (end == p && *p) break;
      }
    }
  }
  if (port <= 0 || peer.empty() || sizes.empty()) {
    std::fprintf(stderr, "usage: hora_host_floor --peer FIRST_HOST --port PORT --sizes BYTES,... [--every-member]\n");
    return 2;
  }
  Floor floor(port, peer, *std::max_element(sizes.begin(), sizes.end()), every_member);
  std::string out = "{\"RESULT\": {";
  for (size_t i = 0; i < sizes.size(); ++i) {
    char item[64];
    std::snprintf(item, sizeof item, "%s\"%zu\": %.9e", i ? ", " : "", sizes[i], floor.run(sizes[i] / 4 * 4));
    out += item;
  }
  std::printf("%s}}\n", out.c_str());
  return 0;
}
