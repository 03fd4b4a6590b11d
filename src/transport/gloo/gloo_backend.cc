#include "transport/gloo/gloo_backend.h"

#include <dirent.h>
#include <fcntl.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <unistd.h>
#include <gloo/allgatherv.h>
#include <gloo/allreduce.h>
#include <gloo/alltoallv.h>
#include <gloo/barrier.h>
#include <gloo/broadcast.h>
#include <gloo/common/error.h>
#include <gloo/common/logging.h>
#include <gloo/context.h>
#include <gloo/transport/pair.h>
#include <gloo/transport/tcp/address.h>

#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <numeric>

#include "core/reduce.h"
#include "transport/gloo/connection_names.h"
#include "hora/errors.h"

namespace hora::gloo_transport {
namespace {

bool mentions_timeout(const std::string& message) {
  return message.find("Timed out") != std::string::npos ||
         message.find("timeout") != std::string::npos;
}

// Gloo's reduction callback: out = a (op) b, where out may alias a or b.
::gloo::AllreduceOptions::Func make_reduce_function(DataType dtype, ReduceOp op) {
  const size_t element_bytes = dtype_size(dtype);
  return [=](void* out, const void* a, const void* b, size_t count) {
    if (out == a) {
      reduce_into(out, b, count, dtype, op);
    } else if (out == b) {
      reduce_into(out, a, count, dtype, op);  // every op is commutative
    } else {
      std::memcpy(out, a, count * element_bytes);
      reduce_into(out, b, count, dtype, op);
    }
  };
}

// Gloo only moves elements; an unsigned type of the same width stands in
// for every DataType.
void set_output(::gloo::AllreduceOptions& opts, void* buf, size_t count, size_t element_bytes) {
  switch (element_bytes) {
    case 1: return opts.setOutput(static_cast<uint8_t*>(buf), count);
    case 2: return opts.setOutput(static_cast<uint16_t*>(buf), count);
    case 4: return opts.setOutput(static_cast<uint32_t*>(buf), count);
    case 8: return opts.setOutput(static_cast<uint64_t*>(buf), count);
    default: throw Internal("gloo backend: no element type of " + std::to_string(element_bytes) +
                            " bytes");
  }
}

std::vector<int64_t> as_counts(const std::vector<size_t>& bytes) {
  return std::vector<int64_t>(bytes.begin(), bytes.end());
}

void copy_bytes(void* to, const void* from, size_t bytes) {
  if (bytes > 0) std::memmove(to, from, bytes);
}

// "[host]:port" of one end of a socket, the way Gloo writes addresses; ""
// if the socket has none.
std::string endpoint(int fd, bool local) {
  try {
    return (local ? ::gloo::transport::tcp::Address::fromSockName(fd) : ::gloo::transport::tcp::Address::fromPeerName(fd))
        .str();
  } catch (const std::exception&) {
    return "";
  }
}

// Shuts down (shutdown(2), both directions) this process's sockets that
// carry `connections` (local and remote address of each). Gloo's device
// thread then sees each connection end and fails the operations waiting on
// it, as when a peer dies, and the peers see the same. Gloo offers no public
// call that fails a pending operation from another thread, and does not
// expose its sockets, so they are found in /proc/self/fd. Each candidate is
// duplicated before it is checked: the check and the shutdown then act on
// the same socket even if Gloo closes the descriptor meanwhile and the
// number is reused.
void shut_down_connections(const std::vector<std::pair<std::string, std::string>>& connections) {
  if (connections.empty()) return;
  DIR* dir = opendir("/proc/self/fd");
  if (!dir) return;
  std::vector<int> candidates;
  while (dirent* entry = readdir(dir)) {
    char* end = nullptr;
    const long fd = std::strtol(entry->d_name, &end, 10);
    if (end != entry->d_name && *end == '\0' && fd != dirfd(dir)) candidates.push_back(static_cast<int>(fd));
  }
  closedir(dir);
  for (int fd : candidates) {
    const int pinned = fcntl(fd, F_DUPFD_CLOEXEC, 0);
    if (pinned < 0) continue;
    struct stat info {};
    if (fstat(pinned, &info) == 0 && S_ISSOCK(info.st_mode)) {
      const std::pair<std::string, std::string> ends{endpoint(pinned, true), endpoint(pinned, false)};
      if (std::find(connections.begin(), connections.end(), ends) != connections.end()) shutdown(pinned, SHUT_RDWR);
    }
    close(pinned);
  }
}

}  // namespace

void rethrow_as_hora_error(const std::string& where) {
  try {
    throw;
  } catch (const Timeout& e) {
    throw Timeout(where + ": " + e.what());
  } catch (const PeerFailure& e) {
    throw PeerFailure(where + ": " + e.what());
  } catch (const Error&) {
    throw;
  } catch (const ::gloo::IoException& e) {
    if (mentions_timeout(e.what())) throw Timeout(where + ": " + e.what());
    throw PeerFailure(where + ": " + e.what());
  } catch (const ::gloo::EnforceNotMet& e) {
    throw PeerFailure(where + ": " + e.what());
  } catch (const std::exception& e) {
    throw PeerFailure(where + ": " + e.what());
  }
}

GlooBackend::GlooBackend(std::vector<int> global_ranks, int rank, std::shared_ptr<Store> set_store,
                         std::shared_ptr<::gloo::Context> context, std::chrono::milliseconds timeout,
                         const std::vector<std::string>& remote_addresses)
    : global_ranks_(std::move(global_ranks)),
      rank_(rank),
      set_name_(describe_set(global_ranks_)),
      set_store_(std::move(set_store)),
      context_(std::move(context)),
      timeout_(timeout) {
  for (int peer = 0; peer < size(); ++peer) {
    if (peer == rank_ || remote_addresses.at(peer).empty() || !context_->getPair(peer)) continue;
    connections_.emplace_back(context_->getPair(peer)->address().str(), remote_addresses[peer]);
  }
}

GlooBackend::~GlooBackend() {
  try {
    context_.reset();  // closes Gloo's connections
  } catch (...) {
    // Destructors never throw; there is nobody left to tell.
  }
}

void GlooBackend::abort(const std::string& reason) {
  std::lock_guard<std::mutex> lock(abort_mutex_);
  if (aborted_) return;
  abort_reason_ = reason;
  aborted_ = true;
  shut_down_connections(connections_);
}

template <typename Collective>
void GlooBackend::run(const char* name, Collective&& collective) {
  if (aborted_) {
    std::lock_guard<std::mutex> lock(abort_mutex_);
    throw PeerFailure(set_name_ + ": " + name + " on an aborted set: " + abort_reason_);
  }
  if (!broken_.empty()) {
    throw PeerFailure(set_name_ + ": " + name + " on a set broken by an earlier failure: " +
                      broken_);
  }
  try {
    try {
      collective();
    } catch (...) {
      rethrow_as_hora_error(set_name_ + ": gloo " + name);
    }
  } catch (const PeerFailure& e) {
    broken_ = with_failed_ranks(e.what());
    throw PeerFailure(broken_);
  } catch (const Error& e) {
    broken_ = e.what();
    throw;
  }
}

std::string GlooBackend::with_failed_ranks(const std::string& message) const {
  const std::vector<int> named = global_ranks_named_in(*set_store_, global_ranks_, rank_, message);
  if (named.empty()) return message;
  std::string ranks;
  for (int g : named) ranks += (ranks.empty() ? "" : ", ") + std::to_string(g);
  return message + " (connection to global rank(s) [" + ranks + "])";
}

void GlooBackend::expect_one_per_member(const char* name, const std::vector<size_t>& sizes) const {
  if (sizes.size() != global_ranks_.size()) {
    throw InvalidArgument(set_name_ + ": " + name + " needs one size per member, got " +
                          std::to_string(sizes.size()));
  }
}

void GlooBackend::allreduce(void* buf, size_t count, DataType dtype, ReduceOp op) {
  if (size() == 1 || count == 0) return;
  run("allreduce", [&] {
    ::gloo::AllreduceOptions opts(context_);
    set_output(opts, buf, count, dtype_size(dtype));
    opts.setReduceFunction(make_reduce_function(dtype, op));
    opts.setTimeout(timeout_);
    ::gloo::allreduce(opts);
  });
}

void GlooBackend::allgatherv(const void* in, void* out, const std::vector<size_t>& recv_bytes) {
  expect_one_per_member("allgatherv", recv_bytes);
  if (size() == 1) return copy_bytes(out, in, recv_bytes[0]);
  if (std::accumulate(recv_bytes.begin(), recv_bytes.end(), size_t{0}) == 0) return;
  run("allgatherv", [&] {
    ::gloo::AllgathervOptions opts(context_);
    opts.setInput(static_cast<uint8_t*>(const_cast<void*>(in)), recv_bytes[rank_]);
    opts.setOutput(static_cast<uint8_t*>(out), recv_bytes);
    opts.setTimeout(timeout_);
    ::gloo::allgatherv(opts);
  });
}

void GlooBackend::broadcast(void* buf, size_t bytes, int root) {
  if (root < 0 || root >= size()) {
    throw InvalidArgument(set_name_ + ": broadcast root " + std::to_string(root) +
                          " is not a set rank");
  }
  if (size() == 1 || bytes == 0) return;
  run("broadcast", [&] {
    ::gloo::BroadcastOptions opts(context_);
    opts.setOutput(static_cast<uint8_t*>(buf), bytes);
    opts.setRoot(root);
    opts.setTimeout(timeout_);
    ::gloo::broadcast(opts);
  });
}

void GlooBackend::alltoallv(const void* in, const std::vector<size_t>& send_bytes, void* out,
                            const std::vector<size_t>& recv_bytes) {
  expect_one_per_member("alltoallv", send_bytes);
  expect_one_per_member("alltoallv", recv_bytes);
  if (size() == 1) {
    if (send_bytes[0] != recv_bytes[0]) {
      throw InvalidArgument(set_name_ + ": alltoallv sends " + std::to_string(send_bytes[0]) +
                            " bytes to itself but expects " + std::to_string(recv_bytes[0]));
    }
    return copy_bytes(out, in, send_bytes[0]);
  }
  run("alltoallv", [&] {
    ::gloo::AlltoallvOptions opts(context_);
    opts.setInput(static_cast<uint8_t*>(const_cast<void*>(in)), as_counts(send_bytes));
    opts.setOutput(static_cast<uint8_t*>(out), as_counts(recv_bytes));
    opts.setTimeout(timeout_);
    ::gloo::alltoallv(opts);
  });
}

void GlooBackend::barrier() {
  if (size() == 1) return;
  run("barrier", [&] {
    ::gloo::BarrierOptions opts(context_);
    opts.setTimeout(timeout_);
    ::gloo::barrier(opts);
  });
}

}  // namespace hora::gloo_transport
