// The timeline writer: a valid Chrome trace after every write, lanes per
// set and rows per tensor, a bounded buffer whose drops are counted, and no
// file for a rank that coordinates no set; the file is a new one, private
// to its owner, renamed onto the path (never through a symlink there).
#include <gtest/gtest.h>

#include <dirent.h>
#include <sys/stat.h>
#include <unistd.h>

#include <chrono>
#include <fstream>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "hora/errors.h"
#include "hora/runtime.h"
#include "telemetry/timeline.h"
#include "ranks_as_processes.h"

namespace hora::telemetry {
namespace {

std::string read_file(const std::string& path) {
  std::ifstream in(path);
  std::stringstream text;
  text << in.rdbuf();
  return text.str();
}

size_t count(const std::string& text, const std::string& part) {
  size_t n = 0;
  for (size_t at = text.find(part); at != std::string::npos; at = text.find(part, at + part.size())) ++n;
  return n;
}

bool contains(const std::string& text, const std::string& part) { return text.find(part) != std::string::npos; }

TimelineEvent span(int32_t set, const std::string& row, const std::string& name, int64_t ts) {
  return {'X', set, row, name, ts, 5, "\"bytes\": 16"};
}

class TimelineTest : public ::testing::Test {
 protected:
  test_support::TemporaryDirectory dir_;
  std::string path_ = dir_.path() + "/trace.json";
};

TEST_F(TimelineTest, WritesLanesRowsAndEventsAndIsValidAfterEveryWrite) {
  Timeline timeline;
  timeline.register_set(1, "process set 1 [0, 1]");
  timeline.start(path_, false);
  timeline.record(span(1, "grad", "ALLREDUCE", 100));
  timeline.flush();
  std::string text = read_file(path_);
  EXPECT_EQ(text.rfind("{\"displayTimeUnit\": \"ms\", \"traceEvents\": [", 0), 0u) << text;
  EXPECT_EQ(text.substr(text.size() - 2), "]}") << text;
  EXPECT_TRUE(contains(text, "\"args\": {\"name\": \"process set 1 [0, 1]\"}")) << text;
  EXPECT_TRUE(contains(text, "\"name\": \"thread_name\", \"ph\": \"M\", \"pid\": 1, \"tid\": 1, \"args\": {\"name\": \"grad\"}"))
      << text;
  EXPECT_TRUE(contains(text, "{\"name\": \"ALLREDUCE\", \"ph\": \"X\", \"pid\": 1, \"tid\": 1, \"ts\": 100, \"dur\": 5, "
                             "\"args\": {\"bytes\": 16}}"))
      << text;

  // More events land before the closing brackets; the row keeps its id.
  timeline.record(span(1, "grad", "ALLREDUCE", 200));
  timeline.record({'i', 1, "", "CYCLE_START", 300, 0, ""});
  timeline.flush();
  text = read_file(path_);
  EXPECT_EQ(text.substr(text.size() - 2), "]}") << text;
  EXPECT_EQ(count(text, "\"tid\": 1, \"ts\""), 2u) << text;
  EXPECT_EQ(count(text, "\"thread_name\""), 2u) << text;  // the set's own row and "grad"
  EXPECT_TRUE(contains(text, "{\"name\": \"CYCLE_START\", \"ph\": \"i\", \"pid\": 1, \"tid\": 0, \"ts\": 300, \"s\": \"t\"}"))
      << text;
  timeline.stop();
  EXPECT_EQ(read_file(path_), text);
}

TEST_F(TimelineTest, NamesAreEscaped) {
  Timeline timeline;
  timeline.register_set(0, "process set 0 [0]");
  timeline.start(path_, false);
  timeline.record({'i', 0, "a \"quoted\"\\name\n", "ERROR", 1, 0, "\"message\": \"" + json_escaped("tab\there") + "\""});
  timeline.stop();
  const std::string text = read_file(path_);
  EXPECT_TRUE(contains(text, "\"name\": \"a \\\"quoted\\\"\\\\name\\n\"")) << text;
  EXPECT_TRUE(contains(text, "\"message\": \"tab\\there\"")) << text;
}

TEST_F(TimelineTest, AFullBufferDropsEventsAndTheFileSaysHowMany) {
  Timeline timeline(4);
  timeline.register_set(0, "process set 0 [0]");
  timeline.start(path_, false);
  // The writer is not given time to drain between these.
  for (int i = 0; i < 1000; ++i) timeline.record(span(0, "x", "ALLREDUCE", i));
  const uint64_t dropped = timeline.dropped();
  EXPECT_GT(dropped, 0u);
  testing::internal::CaptureStderr();
  timeline.stop();
  const std::string warning = testing::internal::GetCapturedStderr();
  const std::string text = read_file(path_);
  EXPECT_EQ(count(text, "\"name\": \"ALLREDUCE\""), 1000 - dropped) << text;
  EXPECT_TRUE(contains(text, "\"name\": \"hora.timeline.dropped\", \"ph\": \"M\", \"pid\": 0, \"tid\": 0, \"args\": "
                             "{\"events\": " + std::to_string(dropped) + "}"))
      << text;
  EXPECT_TRUE(contains(warning, "dropped " + std::to_string(dropped) + " event(s)")) << warning;
}

TEST_F(TimelineTest, NoSetNoFileUntilOneIsRegistered) {
  Timeline timeline;
  timeline.start(path_, false);
  timeline.record(span(3, "x", "ALLREDUCE", 1));
  timeline.flush();
  EXPECT_FALSE(std::ifstream(path_).good());
  timeline.register_set(3, "process set 3 [2, 3]");
  timeline.record(span(3, "x", "ALLREDUCE", 2));
  timeline.stop();
  const std::string text = read_file(path_);
  EXPECT_TRUE(contains(text, "process set 3 [2, 3]")) << text;
  EXPECT_TRUE(contains(text, "\"ts\": 2")) << text;
}

TEST_F(TimelineTest, AFileThatCannotBeCreatedIsAClearError) {
  Timeline timeline;
  timeline.register_set(0, "process set 0 [0]");
  try {
    timeline.start(dir_.path() + "/missing/trace.json", false);
    FAIL() << "no error";
  } catch (const InvalidArgument& e) {
    EXPECT_TRUE(contains(e.what(), "cannot create the timeline file")) << e.what();
    EXPECT_TRUE(contains(e.what(), "missing/trace.json")) << e.what();
  }
  EXPECT_FALSE(timeline.active());
  EXPECT_THROW(timeline.start("", false), InvalidArgument);
}

TEST_F(TimelineTest, RestartingWritesANewFileAndNothingIsRecordedWhileStopped) {
  Timeline timeline;
  timeline.register_set(0, "process set 0 [0]");
  timeline.start(path_, false);
  timeline.record(span(0, "x", "ALLREDUCE", 1));
  timeline.stop();
  timeline.record(span(0, "x", "ALLREDUCE", 2));
  const std::string second = dir_.path() + "/second.json";
  timeline.start(second, true);
  EXPECT_TRUE(timeline.mark_cycles());
  timeline.record(span(0, "x", "ALLREDUCE", 3));
  timeline.stop();
  EXPECT_TRUE(contains(read_file(path_), "\"ts\": 1"));
  EXPECT_FALSE(contains(read_file(path_), "\"ts\": 2"));
  const std::string text = read_file(second);
  EXPECT_FALSE(contains(text, "\"ts\": 2")) << text;
  EXPECT_TRUE(contains(text, "\"ts\": 3")) << text;
  EXPECT_TRUE(contains(text, "process set 0 [0]")) << text;
}

TEST_F(TimelineTest, ManyThreadsRecordAtOnce) {
  Timeline timeline;
  timeline.register_set(0, "process set 0 [0]");
  timeline.start(path_, false);
  std::vector<std::thread> threads;
  for (int t = 0; t < 4; ++t)
    threads.emplace_back([&, t] {
      for (int i = 0; i < 500; ++i) timeline.record(span(0, "row" + std::to_string(t), "ALLREDUCE", i));
    });
  for (auto& t : threads) t.join();
  timeline.stop();
  EXPECT_EQ(count(read_file(path_), "\"name\": \"ALLREDUCE\""), 2000u);
}

// The names in `dir`, "." and ".." aside.
std::vector<std::string> entries(const std::string& dir) {
  std::vector<std::string> names;
  if (DIR* d = opendir(dir.c_str())) {
    while (dirent* entry = readdir(d)) {
      const std::string name = entry->d_name;
      if (name != "." && name != "..") names.push_back(name);
    }
    closedir(d);
  }
  return names;
}

void record_one_span(const std::string& path) {
  Timeline timeline;
  timeline.register_set(0, "process set 0 [0]");
  timeline.start(path, false);
  timeline.record(span(0, "x", "ALLREDUCE", 1));
  timeline.stop();
}

TEST_F(TimelineTest, ASymlinkAtThePathIsReplacedAndWhatItPointsToIsUntouched) {
  const std::string victim = dir_.path() + "/victim.txt";
  std::ofstream(victim) << "keep me";
  ASSERT_EQ(symlink(victim.c_str(), path_.c_str()), 0);
  record_one_span(path_);
  EXPECT_EQ(read_file(victim), "keep me");
  struct stat info {};
  ASSERT_EQ(lstat(path_.c_str(), &info), 0);
  EXPECT_TRUE(S_ISREG(info.st_mode));
  EXPECT_TRUE(contains(read_file(path_), "\"ts\": 1"));
  EXPECT_EQ(entries(dir_.path()).size(), 2u);  // the trace and the victim: no draft left
}

TEST_F(TimelineTest, TheFileIsReadableByItsOwnerOnly) {
  const mode_t before = umask(022);
  record_one_span(path_);
  umask(before);
  struct stat info {};
  ASSERT_EQ(stat(path_.c_str(), &info), 0);
  EXPECT_EQ(info.st_mode & 07777, 0600u);
}

TEST_F(TimelineTest, AnExistingFileIsReplacedNotTruncated) {
  const std::string other_name = dir_.path() + "/other_name.json";
  std::ofstream(path_) << "an earlier trace";
  ASSERT_EQ(link(path_.c_str(), other_name.c_str()), 0);  // the same file under a second name
  record_one_span(path_);
  EXPECT_EQ(read_file(other_name), "an earlier trace");
  const std::string text = read_file(path_);
  EXPECT_EQ(text.rfind("{\"displayTimeUnit\"", 0), 0u) << text;
  EXPECT_TRUE(contains(text, "\"ts\": 1")) << text;
  EXPECT_EQ(entries(dir_.path()).size(), 2u);
}

TEST(TimelineFile, RankZeroWritesThePathOthersTagIt) {
  EXPECT_EQ(Runtime::timeline_file("/tmp/t.json", 0), "/tmp/t.json");
  EXPECT_EQ(Runtime::timeline_file("/tmp/t.json", 2), "/tmp/t.rank2.json");
  EXPECT_EQ(Runtime::timeline_file("/tmp/a.b/t", 3), "/tmp/a.b/t.rank3");
  EXPECT_EQ(Runtime::timeline_file("trace", 1), "trace.rank1");
  EXPECT_EQ(Runtime::timeline_file("/tmp/.hidden", 1), "/tmp/.hidden.rank1");
}

}  // namespace
}  // namespace hora::telemetry
