#include "telemetry/timeline.h"

#include <fcntl.h>
#include <sys/random.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstring>

#include "hora/errors.h"
#include "util/log.h"

namespace hora::telemetry {
namespace {

using Clock = std::chrono::steady_clock;

constexpr std::chrono::milliseconds kWriteInterval{20};
constexpr const char* kHeader = "{\"displayTimeUnit\": \"ms\", \"traceEvents\": [";
constexpr const char* kClosing = "]}";

bool write_all_at(int fd, const std::string& bytes, int64_t offset) {
  size_t done = 0;
  while (done < bytes.size()) {
    const ssize_t n = ::pwrite(fd, bytes.data() + done, bytes.size() - done, offset + static_cast<int64_t>(done));
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) return false;
    done += static_cast<size_t>(n);
  }
  return true;
}

}  // namespace

int64_t timeline_us(Clock::time_point t) {
  static const auto anchor_steady = Clock::now();
  static const auto anchor_wall = std::chrono::system_clock::now();
  const auto wall = anchor_wall + std::chrono::duration_cast<std::chrono::system_clock::duration>(t - anchor_steady);
  return std::chrono::duration_cast<std::chrono::microseconds>(wall.time_since_epoch()).count();
}

std::string json_escaped(const std::string& text) {
  std::string out;
  out.reserve(text.size());
  for (unsigned char c : text) {
    switch (c) {
      case '"': out += "\\\""; break;
      case '\\': out += "\\\\"; break;
      case '\n': out += "\\n"; break;
      case '\t': out += "\\t"; break;
      case '\r': out += "\\r"; break;
      default:
        if (c < 0x20) {
          char code[8];
          std::snprintf(code, sizeof code, "\\u%04x", c);
          out += code;
        } else {
          out += static_cast<char>(c);
        }
    }
  }
  return out;
}

Timeline::Timeline(size_t capacity) : capacity_(capacity) {}

Timeline::~Timeline() { stop(); }

void Timeline::start(const std::string& path, bool mark_cycles) {
  if (path.empty()) throw InvalidArgument("the timeline needs a file path");
  std::lock_guard<std::mutex> control(control_mutex_);
  stop_locked();
  std::lock_guard<std::mutex> lock(mutex_);
  path_ = path;
  stopping_ = false;
  first_event_ = true;
  lanes_written_.clear();
  rows_.clear();
  if (!sets_.empty() && !open_locked()) {
    const std::string error = std::strerror(errno);
    throw InvalidArgument("cannot create the timeline file '" + path + "': " + error);
  }
  mark_cycles_ = mark_cycles;
  active_ = true;
  running_ = true;
  writer_ = std::thread([this] { write_loop(); });
}

// The file is made new beside the path (O_EXCL|O_NOFOLLOW, mode 0600 less
// the umask), given its empty trace, and renamed onto the path: whatever was
// there, a file or a symlink, is replaced, and nothing it pointed to is
// followed or truncated.
bool Timeline::open_locked() {
  const size_t slash = path_.rfind('/');
  const std::string directory = slash == std::string::npos ? "" : path_.substr(0, slash + 1);
  const std::string base = slash == std::string::npos ? path_ : path_.substr(slash + 1);
  std::string draft;
  for (int attempt = 0; attempt < 8 && fd_ < 0; ++attempt) {
    uint64_t tag = 0;
    if (getrandom(&tag, sizeof(tag), 0) != static_cast<ssize_t>(sizeof(tag))) return false;
    char suffix[24];
    std::snprintf(suffix, sizeof suffix, ".%016llx", static_cast<unsigned long long>(tag));
    draft = directory + "." + base + suffix;
    fd_ = ::open(draft.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0600);
    if (fd_ < 0 && errno != EEXIST) return false;
  }
  if (fd_ < 0) return false;
  const std::string start = std::string(kHeader) + kClosing;
  end_offset_ = static_cast<int64_t>(std::strlen(kHeader));
  if (!write_all_at(fd_, start, 0) || ::rename(draft.c_str(), path_.c_str()) != 0) {
    const int error = errno;
    ::unlink(draft.c_str());
    ::close(fd_);
    fd_ = -1;
    errno = error;
    return false;
  }
  return true;
}

void Timeline::stop() {
  std::lock_guard<std::mutex> control(control_mutex_);
  stop_locked();
}

void Timeline::stop_locked() {
  if (!writer_.joinable()) return;
  {
    std::lock_guard<std::mutex> lock(mutex_);
    active_ = false;
    stopping_ = true;
  }
  wake_.notify_all();
  writer_.join();
  std::lock_guard<std::mutex> lock(mutex_);
  running_ = false;
  if (fd_ >= 0) ::close(fd_);
  fd_ = -1;
  const uint64_t dropped = dropped_.exchange(0);
  if (dropped > 0)
    log_warning("the timeline '" + path_ + "' dropped " + std::to_string(dropped) +
                " event(s): its buffer was full (the file says how many)");
  flushed_.notify_all();
}

void Timeline::register_set(int32_t id, const std::string& description) {
  std::lock_guard<std::mutex> lock(mutex_);
  sets_[id] = description;
  if (active_ && fd_ < 0 && !open_locked())
    log_warning("cannot create the timeline file '" + path_ + "': " + std::strerror(errno) +
                "; process set " + std::to_string(id) + " is not recorded");
}

void Timeline::unregister_set(int32_t id) {
  std::lock_guard<std::mutex> lock(mutex_);
  sets_.erase(id);
}

void Timeline::record(TimelineEvent event) {
  bool wake_writer = false;
  {
    std::lock_guard<std::mutex> lock(mutex_);
    if (!active_) return;
    if (buffer_.size() >= capacity_) {
      dropped_.fetch_add(1);
      return;
    }
    buffer_.push_back(std::move(event));
    ++recorded_;
    wake_writer = buffer_.size() == capacity_ / 2;
  }
  if (wake_writer) wake_.notify_all();
}

void Timeline::flush() {
  std::unique_lock<std::mutex> lock(mutex_);
  const uint64_t target = recorded_;
  wake_.notify_all();
  flushed_.wait(lock, [&] { return written_ >= target || !running_ || stopping_; });
}

void Timeline::write_loop() {
  std::vector<TimelineEvent> batch;
  std::unique_lock<std::mutex> lock(mutex_);
  for (;;) {
    wake_.wait_for(lock, kWriteInterval, [&] { return stopping_ || buffer_.size() >= capacity_ / 2; });
    const bool final_write = stopping_;
    batch.swap(buffer_);
    const uint64_t upto = recorded_;
    lock.unlock();
    write_batch(batch, final_write);
    batch.clear();
    lock.lock();
    written_ = upto;
    flushed_.notify_all();
    if (final_write) return;
  }
}

// Writer thread. Lane and row names come first, then the events; the
// closing "]}" is rewritten after them each time.
void Timeline::write_batch(std::vector<TimelineEvent>& batch, bool final_write) {
  std::map<int32_t, std::string> sets;
  int fd;
  {
    std::lock_guard<std::mutex> lock(mutex_);
    sets = sets_;
    fd = fd_;
  }
  if (fd < 0) return;
  std::string out;
  auto append = [&](const std::string& event) {
    out += first_event_ ? "\n" : ",\n";
    out += event;
    first_event_ = false;
  };
  for (const auto& [id, description] : sets) {
    if (lanes_written_[id]) continue;
    lanes_written_[id] = true;
    const std::string pid = std::to_string(id);
    append("{\"name\": \"process_name\", \"ph\": \"M\", \"pid\": " + pid + ", \"tid\": 0, \"args\": {\"name\": \"" +
           json_escaped(description) + "\"}}");
    append("{\"name\": \"process_sort_index\", \"ph\": \"M\", \"pid\": " + pid +
           ", \"tid\": 0, \"args\": {\"sort_index\": " + pid + "}}");
    append("{\"name\": \"thread_name\", \"ph\": \"M\", \"pid\": " + pid +
           ", \"tid\": 0, \"args\": {\"name\": \"process set " + pid + "\"}}");
  }
  for (const TimelineEvent& event : batch) {
    std::string metadata;
    const int tid = row_id(event.set_id, event.row, metadata);
    if (!metadata.empty()) append(metadata);
    std::string text = "{\"name\": \"" + json_escaped(event.name) + "\", \"ph\": \"" + std::string(1, event.phase) +
                       "\", \"pid\": " + std::to_string(event.set_id) + ", \"tid\": " + std::to_string(tid) +
                       ", \"ts\": " + std::to_string(event.ts_us);
    if (event.phase == 'X') text += ", \"dur\": " + std::to_string(event.dur_us);
    if (event.phase == 'i') text += ", \"s\": \"t\"";
    if (!event.args.empty()) text += ", \"args\": {" + event.args + "}";
    append(text + "}");
  }
  const uint64_t dropped = final_write ? dropped_.load() : 0;
  if (dropped > 0)
    append("{\"name\": \"hora.timeline.dropped\", \"ph\": \"M\", \"pid\": 0, \"tid\": 0, \"args\": {\"events\": " +
           std::to_string(dropped) + "}}");
  if (out.empty()) return;
  out += kClosing;
  if (write_all_at(fd, out, end_offset_)) end_offset_ += static_cast<int64_t>(out.size() - std::strlen(kClosing));
}

int Timeline::row_id(int32_t set_id, const std::string& row, std::string& metadata) {
  if (row.empty()) return 0;
  auto& rows = rows_[set_id];
  auto [it, added] = rows.try_emplace(row, static_cast<int>(rows.size()) + 1);
  if (added)
    metadata = "{\"name\": \"thread_name\", \"ph\": \"M\", \"pid\": " + std::to_string(set_id) +
               ", \"tid\": " + std::to_string(it->second) + ", \"args\": {\"name\": \"" + json_escaped(row) + "\"}}";
  return it->second;
}

}  // namespace hora::telemetry
