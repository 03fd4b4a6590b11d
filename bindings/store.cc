// The rendezvous store for Python (hora.runner.rendezvous): the server
// horarun runs, the client every Python user of the store shares with the
// core (src/store/tcp_store.cc), and the protocol's encoding for tools and
// tests that speak to a server byte by byte. The store's errors become
// Python types here, once:
//   StoreError (RuntimeError)            the server is unreachable, went away, or is not the job's
//   StoreTimeoutError (StoreError, TimeoutError)   a key was not set in time
//   StoreSecretError (PermissionError)   the server refused the job secret
//   StoreRequestError (ValueError)       the server refused a request (malformed, over a limit)
#include "store.h"

#include <nanobind/stl/optional.h>
#include <nanobind/stl/string.h>
#include <nanobind/stl/vector.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "hora/errors.h"
#include "net/codec.h"
#include "store/store_protocol.h"
#include "store/tcp_store.h"
#include "store/tcp_store_server.h"

namespace nb = nanobind;
using namespace nb::literals;

namespace hora::bindings {
namespace {

namespace protocol = store_protocol;
using std::chrono::milliseconds;

PyObject* store_error = nullptr;
PyObject* timeout_error = nullptr;
PyObject* secret_error = nullptr;
PyObject* request_error = nullptr;

// A store error on its way to Python as `type`.
struct PythonStoreError {
  PyObject* type;
  std::string message;
};

std::string bytes_of(const nb::bytes& b) { return std::string(b.c_str(), b.size()); }
std::vector<uint8_t> byte_vector(const nb::bytes& b) {
  const auto* data = static_cast<const uint8_t*>(b.data());
  return std::vector<uint8_t>(data, data + b.size());
}
nb::bytes to_bytes(std::span<const uint8_t> data) {
  return nb::bytes(reinterpret_cast<const char*>(data.data()), data.size());
}

// `seconds` (None: no timeout) as the store's timeout.
milliseconds store_timeout(std::optional<double> seconds) {
  const auto forever = milliseconds(int64_t{protocol::kNoTimeoutMs});
  if (!seconds) return forever;
  if (std::isnan(*seconds)) throw InvalidArgument("a rendezvous timeout must be a number of seconds, got nan");
  const double ms = std::clamp(*seconds * 1000.0, 0.0, static_cast<double>(protocol::kNoTimeoutMs - 1));
  return milliseconds(static_cast<int64_t>(ms));
}

// Runs `body` with the GIL released; the store's errors leave as the Python
// types above (`timeouts`: whether hora::Timeout is a key not set in time,
// else the server could not be reached).
template <typename Body>
auto store_call(Body&& body, bool timeouts = true) {
  try {
    nb::gil_scoped_release release;
    return body();
  } catch (const SecretRefused& e) {
    throw PythonStoreError{secret_error, e.what()};
  } catch (const RequestRefused& e) {
    throw PythonStoreError{request_error, e.what()};
  } catch (const ServerUnproven& e) {
    throw PythonStoreError{store_error, e.what()};
  } catch (const Timeout& e) {
    throw PythonStoreError{timeouts ? timeout_error : store_error, e.what()};
  } catch (const PeerFailure& e) {
    throw PythonStoreError{store_error, e.what()};
  } catch (const Internal& e) {
    throw PythonStoreError{store_error, e.what()};
  }
}

// Client of the job's rendezvous server over hora's C++ client; close()
// (or the object's end) closes its connections. Any thread; calls block.
class StoreClient {
 public:
  StoreClient(const std::string& host, int port, const nb::bytes& secret, double connect_timeout) {
    const milliseconds timeout = store_timeout(connect_timeout);
    const std::string key = bytes_of(secret);
    store_ = store_call([&] { return connect_tcp_store(host, port, key, timeout); }, /*timeouts=*/false);
  }

  void ping() {
    TcpStoreClient& store = open();
    store_call([&] { store.ping(); }, false);
  }

  void set(const nb::bytes& key, const nb::bytes& value) {
    TcpStoreClient& store = open();
    std::string k = bytes_of(key);
    std::vector<uint8_t> v = byte_vector(value);
    store_call([&] { store.set(k, v); }, false);
  }

  nb::bytes get(const nb::bytes& key, std::optional<double> timeout) {
    TcpStoreClient& store = open();
    std::string k = bytes_of(key);
    const milliseconds wait = store_timeout(timeout);
    std::vector<uint8_t> value = store_call([&] { return store.get(k, wait); });
    return to_bytes(value);
  }

  int64_t add(const nb::bytes& key, int64_t delta) {
    TcpStoreClient& store = open();
    std::string k = bytes_of(key);
    return store_call([&] { return store.add(k, delta); }, false);
  }

  void wait(const std::vector<nb::bytes>& keys, std::optional<double> timeout) {
    TcpStoreClient& store = open();
    std::vector<std::string> ks;
    for (const nb::bytes& key : keys) ks.push_back(bytes_of(key));
    const milliseconds wait = store_timeout(timeout);
    store_call([&] { store.wait(ks, wait); });
  }

  void close() {
    std::shared_ptr<TcpStoreClient> store = std::move(store_);
    nb::gil_scoped_release release;
    store.reset();
  }

 private:
  TcpStoreClient& open() {
    if (!store_) throw PythonStoreError{store_error, "the rendezvous client has been closed"};
    return *store_;
  }

  std::shared_ptr<TcpStoreClient> store_;
};

// The launcher's rendezvous server; close() (or the object's end) stops it.
class StoreServer {
 public:
  StoreServer(const std::string& host, const nb::bytes& secret, int port)
      : server_(std::make_unique<TcpStoreServer>(host, bytes_of(secret), port)), port_(server_->port()) {}

  int port() const { return port_; }

  void set(const nb::bytes& key, const nb::bytes& value) { running().set(bytes_of(key), byte_vector(value)); }

  nb::list items_with_prefix(const nb::bytes& prefix) {
    nb::list out;
    for (const auto& [key, value] : running().items_with_prefix(bytes_of(prefix)))
      out.append(nb::make_tuple(nb::bytes(key.data(), key.size()), nb::bytes(value.data(), value.size())));
    return out;
  }

  void close() {
    std::unique_ptr<TcpStoreServer> server = std::move(server_);
    nb::gil_scoped_release release;
    server.reset();
  }

 private:
  TcpStoreServer& running() {
    if (!server_) throw InvalidArgument("the rendezvous server has been stopped");
    return *server_;
  }

  std::unique_ptr<TcpStoreServer> server_;
  int port_;
};

net::Nonce nonce_of(const nb::bytes& b, const char* what) {
  net::Nonce nonce;
  if (b.size() != nonce.size()) {
    throw InvalidArgument(std::string(what) + " must be " + std::to_string(nonce.size()) + " bytes, got " +
                          std::to_string(b.size()));
  }
  std::copy_n(static_cast<const uint8_t*>(b.data()), nonce.size(), nonce.begin());
  return nonce;
}

// The protocol's encoding (src/store/store_protocol.h), client side.
void register_protocol(nb::module_& m) {
  m.attr("VERSION") = protocol::kVersion;
  for (auto [name, command] : {std::pair{"SET", protocol::Command::kSet}, {"GET", protocol::Command::kGet},
                               {"ADD", protocol::Command::kAdd}, {"WAIT", protocol::Command::kWait},
                               {"PING", protocol::Command::kPing}})
    m.attr(name) = static_cast<int>(command);
  for (auto [name, status] : {std::pair{"OK", protocol::Status::kOk}, {"NOT_FOUND", protocol::Status::kNotFound},
                              {"TIMEOUT", protocol::Status::kTimeout}, {"BAD_SECRET", protocol::Status::kBadSecret},
                              {"BAD_REQUEST", protocol::Status::kBadRequest}})
    m.attr(name) = static_cast<int>(status);
  m.attr("MAX_KEY_BYTES") = protocol::kMaxKeyBytes;
  m.attr("MAX_VALUE_BYTES") = protocol::kMaxValueBytes;
  m.attr("MAX_SECRET_BYTES") = protocol::kMaxSecretBytes;
  m.attr("MAX_WAIT_KEYS") = protocol::kMaxWaitKeys;
  m.attr("MAX_FRAME_BYTES") = protocol::kMaxFrameBytes;
  m.attr("NO_TIMEOUT_MS") = protocol::kNoTimeoutMs;
  m.attr("CHALLENGE_BYTES") = protocol::kChallengeBytes;
  m.attr("PROOF_BYTES") = protocol::kProofBytes;
  m.attr("ANSWER_BYTES") = protocol::kAnswerBytes;

  m.def(
      "encode_request",
      [](int command, const std::vector<nb::bytes>& keys, const nb::bytes& value, uint32_t timeout_ms) {
        protocol::Request request{static_cast<protocol::Command>(command), timeout_ms, {}, byte_vector(value)};
        for (const nb::bytes& key : keys) request.keys.push_back(bytes_of(key));
        return to_bytes(protocol::encode_request(request));
      },
      "command"_a, "keys"_a = std::vector<nb::bytes>{}, "value"_a = nb::bytes(""), "timeout_ms"_a = 0,
      "One request frame, its length prefix included.");
  m.def(
      "decode_reply",
      [](const nb::bytes& payload) {
        const std::vector<uint8_t> bytes = byte_vector(payload);
        const protocol::Reply reply = store_call([&] { return protocol::decode_reply(bytes); });
        return nb::make_tuple(static_cast<int>(reply.status), to_bytes(reply.value));
      },
      "payload"_a, "(status, value) of a reply payload; StoreError when it is not one.");
  m.def(
      "encode_keys",
      [](const std::vector<nb::bytes>& keys) {
        std::vector<std::string> ks;
        for (const nb::bytes& key : keys) ks.push_back(bytes_of(key));
        return to_bytes(protocol::encode_keys(ks));
      },
      "keys"_a);
  m.def(
      "decode_keys",
      [](const nb::bytes& data) {
        const std::vector<uint8_t> bytes = byte_vector(data);
        const std::vector<std::string> keys = store_call([&] { return protocol::decode_keys(bytes); });
        nb::list out;
        for (const std::string& key : keys) out.append(nb::bytes(key.data(), key.size()));
        return out;
      },
      "data"_a, "The keys of a key list; StoreError when it is not one.");
  m.def(
      "decode_challenge",
      [](const nb::bytes& data) {
        const std::vector<uint8_t> bytes = byte_vector(data);
        const net::Nonce nonce = store_call([&] { return protocol::decode_challenge(bytes); });
        return to_bytes(nonce);
      },
      "data"_a, "The server's nonce from its challenge; StoreError when it is not one of this version.");
  m.def(
      "encode_proof",
      [](const nb::bytes& secret, const nb::bytes& server_nonce, const nb::bytes& client_nonce) {
        return to_bytes(protocol::encode_proof(bytes_of(secret), nonce_of(server_nonce, "server_nonce"),
                                               nonce_of(client_nonce, "client_nonce")));
      },
      "secret"_a, "server_nonce"_a, "client_nonce"_a, "The client's answer to a challenge.");
  m.def(
      "check_answer",
      [](const nb::bytes& data, const nb::bytes& secret, const nb::bytes& server_nonce,
         const nb::bytes& client_nonce) {
        const net::Nonce server = nonce_of(server_nonce, "server_nonce");
        const net::Nonce client = nonce_of(client_nonce, "client_nonce");
        const std::string key = bytes_of(secret);
        const std::vector<uint8_t> answer = byte_vector(data);
        return static_cast<int>(
            store_call([&] { return protocol::check_answer(answer, key, server, client); }));
      },
      "data"_a, "secret"_a, "server_nonce"_a, "client_nonce"_a,
      "The status of the server's answer (OK or BAD_SECRET); StoreError when it is malformed or the server "
      "cannot prove that it holds the secret.");
}

PyObject* new_exception(nb::module_& m, const char* name, PyObject* bases, const char* doc) {
  const std::string qualified = std::string("hora._core.") + name;
  PyObject* type = PyErr_NewExceptionWithDoc(qualified.c_str(), doc, bases, nullptr);
  if (!type) throw nb::python_error();
  m.attr(name) = nb::handle(type);
  return type;
}

void register_errors(nb::module_& m) {
  store_error = new_exception(m, "StoreError", PyExc_RuntimeError,
                              "The rendezvous server could not be reached, went away, or is not the job's.");
  nb::object timeout_bases = nb::make_tuple(nb::handle(store_error), nb::handle(PyExc_TimeoutError));
  timeout_error = new_exception(m, "StoreTimeoutError", timeout_bases.ptr(),
                                "A rendezvous key was not set in time.");
  secret_error = new_exception(m, "StoreSecretError", PyExc_PermissionError,
                               "The rendezvous server refused the job secret.");
  request_error = new_exception(m, "StoreRequestError", PyExc_ValueError,
                                "The rendezvous server refused a request as malformed or over its limits.");
  nb::register_exception_translator([](const std::exception_ptr& p, void*) {
    try {
      std::rethrow_exception(p);
    } catch (const PythonStoreError& e) {
      PyErr_SetString(e.type, e.message.c_str());
    }
  });
}

}  // namespace

void register_store(nb::module_& m) {
  register_errors(m);
  register_protocol(m);

  nb::class_<StoreServer>(m, "StoreServer")
      .def(nb::init<const std::string&, const nb::bytes&, int>(), "host"_a, "secret"_a, "port"_a = 0)
      .def_prop_ro("port", &StoreServer::port)
      .def("set", &StoreServer::set, "key"_a, "value"_a)
      .def("items_with_prefix", &StoreServer::items_with_prefix, "prefix"_a)
      .def("close", &StoreServer::close);

  nb::class_<StoreClient>(m, "StoreClient")
      .def(nb::init<const std::string&, int, const nb::bytes&, double>(), "host"_a, "port"_a, "secret"_a,
           "connect_timeout"_a = 30.0)
      .def("ping", &StoreClient::ping)
      .def("set", &StoreClient::set, "key"_a, "value"_a)
      .def("get", &StoreClient::get, "key"_a, "timeout"_a.none() = nb::none())
      .def("add", &StoreClient::add, "key"_a, "delta"_a)
      .def("wait", &StoreClient::wait, "keys"_a, "timeout"_a.none() = nb::none())
      .def("close", &StoreClient::close);
}

}  // namespace hora::bindings
