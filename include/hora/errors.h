// The one way errors are reported inside hora: exceptions of these kinds.
// The bindings map each kind to a Python type once.
#pragma once

#include <stdexcept>
#include <string>

namespace hora {

class Error : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

// The caller's mistake, found before anything is sent (Python ValueError).
class InvalidArgument : public Error {
 public:
  using Error::Error;
};

// Members of a process set submitted ops that do not agree.
class Mismatch : public Error {
 public:
  using Error::Error;
};

// An operation or rendezvous did not complete in time.
class Timeout : public Error {
 public:
  using Error::Error;
};

// A peer of the process set died or became unreachable; the set is broken.
class PeerFailure : public Error {
 public:
  using Error::Error;
};

// A bug or an unexpected condition inside hora.
class Internal : public Error {
 public:
  using Error::Error;
};

}  // namespace hora
