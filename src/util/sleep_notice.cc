#include "util/sleep_notice.h"

#include <utility>

namespace hora {
namespace {

thread_local SleepNotice this_threads_notice;

}  // namespace

SleepNotice set_sleep_notice(SleepNotice notice) noexcept { return std::exchange(this_threads_notice, notice); }

bool sleep_noticed() noexcept { return this_threads_notice.notice != nullptr; }

void about_to_sleep() noexcept {
  if (this_threads_notice.notice) this_threads_notice.notice(this_threads_notice.context);
}

}  // namespace hora
