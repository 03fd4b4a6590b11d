// Timeline: the Chrome trace (Perfetto, chrome://tracing) one rank writes
// for the process sets it coordinates: one lane (trace process) per set,
// named with the set's id and ranks, and one row (trace thread) per tensor
// name, plus a row for the set's own events.
//
// Producers — engine threads and callers that run the fast lane — append
// events to a bounded buffer under a mutex and never wait for the disk; a
// writer thread formats and writes them every 20 ms. The file is valid JSON
// after every write: each write ends with the closing "]}" and the next one
// starts over it, so a process killed at any point leaves a file that
// parses. Events that find the buffer full are dropped and counted; stop()
// writes the count into the file and warns.
#pragma once

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <map>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

namespace hora::telemetry {

struct TimelineEvent {
  char phase = 'i';     // 'X': a span of dur_us; 'i': an instant
  int32_t set_id = 0;
  std::string row;      // the tensor name; empty: the set's own row
  std::string name;     // NEGOTIATE_ALLREDUCE, ALLREDUCE, QUEUE, CYCLE_START, ...
  int64_t ts_us = 0;    // microseconds since the Unix epoch (timeline_us)
  int64_t dur_us = 0;
  std::string args;     // members of a JSON object ("\"bytes\": 16"), or empty
};

// Microseconds since the Unix epoch, read from the steady clock (so spans
// never run backwards) and anchored to the wall clock once per process.
int64_t timeline_us(std::chrono::steady_clock::time_point t);

// `text` as the body of a JSON string (without the quotes).
std::string json_escaped(const std::string& text);

class Timeline {
 public:
  static constexpr size_t kDefaultCapacity = 1 << 16;

  explicit Timeline(size_t capacity = kDefaultCapacity);
  ~Timeline();
  Timeline(const Timeline&) = delete;
  Timeline& operator=(const Timeline&) = delete;

  // Starts writing to `path` once a set is registered (a rank that
  // coordinates no set writes no file): a new file, mode 0600 less the
  // umask, made beside it and renamed onto it, so that a file or symlink
  // already at `path` is replaced, never followed or truncated. A running
  // timeline is stopped first. InvalidArgument when the file cannot be
  // created.
  void start(const std::string& path, bool mark_cycles);
  // Writes what is buffered, the dropped count if any, and closes the file.
  // Idempotent.
  void stop();
  bool active() const { return active_.load(std::memory_order_relaxed); }
  bool mark_cycles() const { return mark_cycles_.load(std::memory_order_relaxed); }

  // The sets whose lanes this timeline shows (their coordinators register
  // them), with the lane's name ("process set 1 [0, 1]").
  void register_set(int32_t id, const std::string& description);
  void unregister_set(int32_t id);

  // Any thread; never blocks on I/O.
  void record(TimelineEvent event);
  uint64_t dropped() const { return dropped_.load(); }
  // Blocks until everything recorded so far is in the file (tests, stop).
  void flush();

 private:
  void stop_locked();  // with control_mutex_ held
  void write_loop();
  void write_batch(std::vector<TimelineEvent>& batch, bool final_write);
  bool open_locked();
  std::string format(const TimelineEvent& event);
  int row_id(int32_t set_id, const std::string& row, std::string& metadata);

  const size_t capacity_;
  std::atomic<bool> active_{false};
  std::atomic<bool> mark_cycles_{false};
  std::atomic<uint64_t> dropped_{0};

  std::mutex control_mutex_;  // serializes start() and stop(); owns writer_
  std::mutex mutex_;  // the buffer, the sets and the writer's state
  std::condition_variable wake_;
  std::condition_variable flushed_;
  std::vector<TimelineEvent> buffer_;
  std::map<int32_t, std::string> sets_;
  bool stopping_ = false;
  bool running_ = false;  // a writer thread is running
  uint64_t recorded_ = 0, written_ = 0;
  std::string path_;
  std::thread writer_;

  // Writer thread only (and stop() after joining it).
  int fd_ = -1;
  int64_t end_offset_ = 0;  // where the closing "]}" starts
  bool first_event_ = true;
  std::map<int32_t, bool> lanes_written_;
  std::map<int32_t, std::map<std::string, int>> rows_;
};

}  // namespace hora::telemetry
