// Test scaffolding: ranks as forked processes, and a Store over a
// directory that such processes share (the hash store lives in one
// process's memory).
#pragma once

#include <dirent.h>
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <sys/file.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <functional>
#include <iterator>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "hora/errors.h"
#include "hora/store.h"

namespace hora::test_support {

// One file per key in `dir`; set() writes a temporary file and renames it,
// so readers never see half a value; add() holds an flock.
class DirectoryStore final : public Store {
 public:
  explicit DirectoryStore(std::string dir) : dir_(std::move(dir)) {}

  void set(const std::string& key, const std::vector<uint8_t>& value) override {
    const std::string tmp = path(key) + ".tmp." + std::to_string(getpid());
    {
      std::ofstream out(tmp, std::ios::binary);
      out.write(reinterpret_cast<const char*>(value.data()), static_cast<std::streamsize>(value.size()));
    }
    std::rename(tmp.c_str(), path(key).c_str());
  }

  std::vector<uint8_t> get(const std::string& key, std::chrono::milliseconds timeout) override {
    wait({key}, timeout);
    std::ifstream in(path(key), std::ios::binary);
    return {std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()};
  }

  int64_t add(const std::string& key, int64_t delta) override {
    const int lock = open((dir_ + "/.lock").c_str(), O_CREAT | O_RDWR | O_CLOEXEC, 0600);
    flock(lock, LOCK_EX);
    int64_t value = 0;
    if (access(path(key).c_str(), F_OK) == 0) {
      const std::vector<uint8_t> old = get(key, std::chrono::milliseconds(0));
      value = std::stoll(std::string(old.begin(), old.end()));
    }
    value += delta;
    const std::string text = std::to_string(value);
    set(key, {text.begin(), text.end()});
    flock(lock, LOCK_UN);
    close(lock);
    return value;
  }

  void wait(const std::vector<std::string>& keys, std::chrono::milliseconds timeout) override {
    const auto deadline = std::chrono::steady_clock::now() + timeout;
    for (const std::string& key : keys) {
      while (access(path(key).c_str(), F_OK) != 0) {
        if (std::chrono::steady_clock::now() >= deadline) throw Timeout("directory store: no key '" + key + "'");
        std::this_thread::sleep_for(std::chrono::microseconds(500));
      }
    }
  }

 private:
  std::string path(const std::string& key) const {
    std::string name;
    for (char c : key) name += (c == '/' ? '#' : c);
    return dir_ + "/" + name;
  }

  const std::string dir_;
};

// A fresh directory for a DirectoryStore; removed (with its files) on
// destruction.
class TemporaryDirectory {
 public:
  TemporaryDirectory() {
    char pattern[] = "/tmp/hora-test-XXXXXX";
    path_ = mkdtemp(pattern);
  }
  ~TemporaryDirectory() {
    if (DIR* dir = opendir(path_.c_str())) {
      while (dirent* entry = readdir(dir)) {
        const std::string name = entry->d_name;
        if (name != "." && name != "..") unlink((path_ + "/" + name).c_str());
      }
      closedir(dir);
    }
    rmdir(path_.c_str());
  }
  const std::string& path() const { return path_; }

 private:
  std::string path_;
};

// How a forked rank ended: "" after body() returned, else what it threw,
// or how the process died.
struct RankOutcome {
  std::string error;
  bool killed = false;  // ended by a signal
};

// Forks one process per rank and runs body(rank) in each; `parent` (if
// given) runs meanwhile in this process with the children's pids. A rank
// still running after `limit` is killed and reported as hung.
inline std::vector<RankOutcome> run_processes(int n, const std::function<void(int rank)>& body,
                                              std::chrono::milliseconds limit,
                                              const std::function<void(const std::vector<pid_t>&)>& parent = {}) {
  std::vector<pid_t> pids;
  std::vector<int> pipes;
  for (int rank = 0; rank < n; ++rank) {
    int fds[2];
    if (pipe(fds) != 0) std::abort();
    const pid_t pid = fork();
    if (pid == 0) {
      close(fds[0]);
      std::string error;
      try {
        body(rank);
      } catch (const std::exception& e) {
        error = e.what();
        if (error.empty()) error = "exception";
      } catch (...) {
        error = "unknown exception";
      }
      if (!error.empty() && write(fds[1], error.data(), error.size()) < 0) _exit(3);
      _exit(error.empty() ? 0 : 1);
    }
    close(fds[1]);
    pids.push_back(pid);
    pipes.push_back(fds[0]);
  }
  if (parent) parent(pids);
  std::vector<RankOutcome> outcomes(n);
  const auto deadline = std::chrono::steady_clock::now() + limit;
  for (int rank = 0; rank < n; ++rank) {
    int status = 0;
    while (waitpid(pids[rank], &status, WNOHANG) == 0) {
      if (std::chrono::steady_clock::now() >= deadline) {
        kill(pids[rank], SIGKILL);
        waitpid(pids[rank], &status, 0);
        outcomes[rank].error = "hung (killed after the test's time limit)";
        break;
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(2));
    }
    char buffer[4096];
    ssize_t got = 0;
    while ((got = read(pipes[rank], buffer, sizeof(buffer))) > 0) outcomes[rank].error.append(buffer, got);
    close(pipes[rank]);
    if (WIFSIGNALED(status)) {
      outcomes[rank].killed = true;
      if (outcomes[rank].error.empty()) outcomes[rank].error = "killed by signal " + std::to_string(WTERMSIG(status));
    } else if (outcomes[rank].error.empty() && WEXITSTATUS(status) != 0) {
      outcomes[rank].error = "exit status " + std::to_string(WEXITSTATUS(status));
    }
  }
  return outcomes;
}

// In a forked rank: throws (ending the rank with that message) unless `ok`.
inline void require(bool ok, const std::string& what) {
  if (!ok) throw std::runtime_error(what);
}

}  // namespace hora::test_support
