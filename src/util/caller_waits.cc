#include "util/caller_waits.h"

#include <atomic>

namespace hora {
namespace {

std::atomic<int> waiting_callers{0};

}  // namespace

CallerWaiting::CallerWaiting() noexcept { waiting_callers.fetch_add(1, std::memory_order_relaxed); }

CallerWaiting::~CallerWaiting() { waiting_callers.fetch_sub(1, std::memory_order_relaxed); }

bool caller_waiting() noexcept { return waiting_callers.load(std::memory_order_relaxed) > 0; }

}  // namespace hora
