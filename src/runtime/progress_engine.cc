#include "runtime/progress_engine.h"

#include <chrono>

#include "coordinator/wire.h"
#include "hora/errors.h"

namespace hora {

ProgressEngine::ProgressEngine(EngineOptions options, Connect connect)
    : options_(std::move(options)), member_cache_(options_.cache_capacity) {
  if (coordinator())
    negotiator_.emplace(NegotiatorOptions{options_.process_set_id, options_.global_ranks,
                                          options_.fusion_threshold, options_.cache_capacity});
  thread_ = std::thread([this, connect = std::move(connect)] { run(connect); });
}

ProgressEngine::~ProgressEngine() { stop("process set " + std::to_string(options_.process_set_id) + " was shut down"); }

std::shared_ptr<Work> ProgressEngine::submit(Request request, TensorView input, TensorView output) {
  auto work = std::make_shared<Work>();
  {
    std::lock_guard<std::mutex> lock(state_mutex_);
    if (stopping_) throw InvalidArgument(stop_reason_);
    if (request.name.empty())
      request.name = std::string(op_type_name(request.op)) + ".noname." +
                     std::to_string(++noname_counters_[request.op]);
    if (broken_) {
      work->fail(broken_);
      return work;
    }
    queue_.push(TensorEntry{std::move(request), std::move(input), std::move(output), work});
  }
  wake();
  return work;
}

void ProgressEngine::stop(const std::string& reason) {
  {
    std::lock_guard<std::mutex> lock(state_mutex_);
    if (stopping_) return;
    stop_reason_ = reason;
    stopping_ = true;
  }
  wake();
  if (thread_.joinable()) thread_.join();
  for (TensorEntry& entry : queue_.take_all()) entry.work->fail(std::make_exception_ptr(InvalidArgument(reason)));
}

void ProgressEngine::wake() {
  std::lock_guard<std::mutex> lock(state_mutex_);
  if (backend_) backend_->wake();
}

void ProgressEngine::wait_connected() {
  std::unique_lock<std::mutex> lock(state_mutex_);
  connected_cv_.wait(lock, [this] { return connected_ || broken_; });
  if (!connected_ && broken_) std::rethrow_exception(broken_);
}

void ProgressEngine::run(const Connect& connect) {
  try {
    std::unique_ptr<Backend> backend = connect();
    {
      std::lock_guard<std::mutex> lock(state_mutex_);
      backend_ = std::move(backend);
      connected_ = true;
    }
    connected_cv_.notify_all();
    serve();
  } catch (...) {
    fail_everything(std::current_exception());
  }
}

// Negotiates and runs ops until stopped; a transport error ends it.
void ProgressEngine::serve() {
  while (!stopping_) {
    std::vector<Request> fresh = queue_.take_new();
    if (!fresh.empty()) negotiate_local(std::move(fresh));
    if (coordinator()) dispatch_ready();
    auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(1);
    std::optional<ControlMessage> message = backend_->receive_control(deadline);
    if (message) on_message(*message);
  }
}

// New local requests: the coordinator records them directly, a member sends
// them, as cache slots where the response cache knows them.
void ProgressEngine::negotiate_local(std::vector<Request> fresh) {
  MemberMessage message;
  for (Request& request : fresh) {
    int32_t slot = ResponseCache::cacheable(request.op) ? cache().lookup(request) : -1;
    if (coordinator()) {
      if (slot >= 0) negotiator_->submit_cached(0, static_cast<uint32_t>(slot));
      else negotiator_->submit(0, std::move(request));
    } else if (slot >= 0) {
      message.cached_slots.push_back(static_cast<uint32_t>(slot));
    } else {
      message.requests.push_back(std::move(request));
    }
  }
  if (coordinator()) return;
  backend_->send_control(0, encode(message));
}

void ProgressEngine::on_message(const ControlMessage& message) {
  if (coordinator()) {
    MemberMessage decoded = decode_member_message(message.bytes);
    for (uint32_t slot : decoded.cached_slots) negotiator_->submit_cached(message.from, slot);
    for (Request& request : decoded.requests) negotiator_->submit(message.from, std::move(request));
    return;
  }
  if (message.from != 0) throw Internal("control message from set rank " + std::to_string(message.from));
  for (Response& response : decode_coordinator_message(message.bytes).responses) execute(std::move(response));
}

void ProgressEngine::dispatch_ready() {
  std::vector<Response> ready = negotiator_->ready();
  if (ready.empty()) return;
  std::vector<uint8_t> bytes = encode(CoordinatorMessage{ready});
  for (int member = 1; member < backend_->size(); ++member) backend_->send_control(member, bytes);
  for (Response& response : ready) execute(std::move(response));
}

void ProgressEngine::execute(Response response) {
  std::vector<TensorEntry> entries;
  for (size_t i = 0; i < response.names.size(); ++i) {
    if (response.slots[i] >= 0) response.names[i] = cache().request(static_cast<uint32_t>(response.slots[i])).name;
    entries.push_back(queue_.take(response.names[i]));
  }
  if (!coordinator())
    for (size_t i = 0; i < entries.size(); ++i)
      if (response.cache[i]) member_cache_.insert(entries[i].request);
  if (!response.error.empty()) {
    for (TensorEntry& entry : entries) entry.work->fail(std::make_exception_ptr(Mismatch(response.error)));
    return;
  }
  try {
    run_op(response, entries);
  } catch (...) {
    for (TensorEntry& entry : entries) entry.work->fail(std::current_exception());
    throw;
  }
  for (TensorEntry& entry : entries) entry.work->complete();
}

void ProgressEngine::run_op(const Response& response, std::vector<TensorEntry>& entries) {
  const Request& head = entries.front().request;
  AllreduceOptions options{head.dtype, head.reduce_op, head.prescale, head.postscale};
  switch (response.op) {
    case OpType::kAllreduce: {
      std::vector<AllreducePart> parts;
      for (TensorEntry& entry : entries) parts.push_back({entry.input, entry.output});
      allreduce(*backend_, parts, options, fusion_);
      return;
    }
    case OpType::kAllgather:
      allgather(*backend_, entries.front().input, response.sizes, *entries.front().work);
      return;
    case OpType::kBroadcast:
      broadcast(*backend_, entries.front().input, entries.front().output, head.root);
      return;
    case OpType::kAlltoall:
      alltoall(*backend_, entries.front().input, response.sizes, *entries.front().work);
      return;
    case OpType::kReducescatter:
      reducescatter(*backend_, entries.front().input, entries.front().output, options, fusion_);
      return;
    case OpType::kBarrier:
      if (backend_->size() > 1) backend_->barrier();
      return;
  }
  throw Internal("unknown op type in response");
}

void ProgressEngine::fail_everything(std::exception_ptr error) {
  {
    std::lock_guard<std::mutex> lock(state_mutex_);
    broken_ = error;
  }
  connected_cv_.notify_all();
  for (TensorEntry& entry : queue_.take_all()) entry.work->fail(error);
}

}  // namespace hora
