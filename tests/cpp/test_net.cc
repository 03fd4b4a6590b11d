// The socket layer and the byte codec under the store and the control
// channel (src/net/): the byte layout the protocols document, errors that
// name what was wrong, and sockets that keep their deadlines and give up
// when cancelled.
#include <gtest/gtest.h>

#include <atomic>
#include <cerrno>
#include <chrono>
#include <cstring>
#include <string>
#include <thread>
#include <vector>

#include "hora/errors.h"
#include "net/codec.h"
#include "net/socket.h"

namespace hora::net {
namespace {

using std::chrono::milliseconds;
using Bytes = std::vector<uint8_t>;

template <typename Kind, typename Call>
std::string error_of(Call&& call) {
  try {
    call();
  } catch (const Kind& e) {
    return e.what();
  }
  ADD_FAILURE() << "no error of the expected kind";
  return "";
}

// ---------------------------------------------------------------- codec

TEST(ByteCodec, IntegersAndDoublesAreFixedWidthLittleEndian) {
  ByteWriter w;
  w.put<uint8_t>(0xab);
  w.put<uint16_t>(0x0102);
  w.put<int32_t>(-2);
  w.put<uint64_t>(0x0807060504030201);
  w.put<double>(1.5);
  const Bytes bytes = w.take();
  uint64_t one_and_a_half = 0;
  const double value = 1.5;
  std::memcpy(&one_and_a_half, &value, 8);
  Bytes expected = {0xab, 0x02, 0x01, 0xfe, 0xff, 0xff, 0xff, 1, 2, 3, 4, 5, 6, 7, 8};
  for (int i = 0; i < 8; ++i) expected.push_back(static_cast<uint8_t>(one_and_a_half >> (8 * i)));
  EXPECT_EQ(bytes, expected);

  ByteReader r(bytes, "test message");
  EXPECT_EQ(r.get<uint8_t>("a"), 0xab);
  EXPECT_EQ(r.get<uint16_t>("b"), 0x0102);
  EXPECT_EQ(r.get<int32_t>("c"), -2);
  EXPECT_EQ(r.get<uint64_t>("d"), 0x0807060504030201u);
  EXPECT_EQ(r.get<double>("e"), 1.5);
  r.expect_end();
}

TEST(ByteCodec, StringsBytesAndVectorsCarryAU32Length) {
  ByteWriter w;
  w.put_string("hi");
  w.put_vector(std::vector<int64_t>{-1, 7});
  const Bytes bytes = w.take();
  ASSERT_EQ(bytes.size(), 4u + 2 + 4 + 16);
  EXPECT_EQ(load_u32_le(bytes.data()), 2u);
  EXPECT_EQ(load_u32_le(bytes.data() + 6), 2u);
  ByteReader r(bytes, "test message");
  EXPECT_EQ(r.get_string("name", 16), "hi");
  EXPECT_EQ(r.get_vector<int64_t>("shape", 4), (std::vector<int64_t>{-1, 7}));
  r.expect_end();
}

TEST(ByteCodec, MalformedInputThrowsNamingTheFieldAndTheFault) {
  ByteWriter w;
  w.put_string("hello");
  const Bytes bytes = w.take();
  for (size_t n = 0; n < bytes.size(); ++n) {
    const Bytes cut(bytes.begin(), bytes.begin() + n);
    EXPECT_EQ(error_of<DecodeError>([&] { ByteReader(cut, "test message").get_string("name", 16); }),
              "malformed test message: name: truncated");
  }
  EXPECT_EQ(error_of<DecodeError>([&] { ByteReader(bytes, "test message").get_string("name", 4); }),
            "malformed test message: name of 5 bytes exceeds 4 bytes");
  EXPECT_EQ(error_of<Internal>([&] { ByteReader(bytes, "test message").get_vector<uint8_t>("flags", 4); }),
            "malformed test message: flags: count 5 exceeds 4");
  EXPECT_EQ(error_of<Internal>([&] { ByteReader(bytes, "test message").get_vector<uint32_t>("ranks", 8); }),
            "malformed test message: ranks: truncated");
  ByteReader r(bytes, "test message");
  r.get<uint32_t>("length");
  EXPECT_EQ(error_of<Internal>([&] { r.expect_end(); }), "malformed test message: 5 trailing bytes");
}

// -------------------------------------------------------------- sockets

// A listener and one connection to it, both ends.
struct Pair {
  Listener listener{"127.0.0.1"};
  Socket client;
  Socket server;

  Pair() {
    ConnectOptions options;
    options.deadline = Clock::now() + milliseconds(5000);
    client = connect_to("127.0.0.1", listener.port(), "the test server", options);
    server = listener.accept(Clock::now() + milliseconds(5000));
  }
};

TEST(Sockets, WholeMessagesCrossAConnection) {
  Pair pair;
  ASSERT_TRUE(pair.server.valid());
  EXPECT_EQ(pair.listener.address(), "127.0.0.1:" + std::to_string(pair.listener.port()));
  const Bytes head = {1, 2, 3};
  const Bytes body(1 << 20, 7);  // more than a socket buffer holds
  std::thread writer([&] { pair.client.send_all(head, body, Clock::now() + milliseconds(5000), "the server"); });
  Bytes got(head.size() + body.size());
  pair.server.recv_exact(got.data(), got.size(), Clock::now() + milliseconds(5000), "the client");
  writer.join();
  EXPECT_EQ(Bytes(got.begin(), got.begin() + 3), head);
  EXPECT_EQ(Bytes(got.begin() + 3, got.end()), body);
  uint8_t byte = 0;
  EXPECT_EQ(pair.server.recv_available(&byte, 1), std::optional<size_t>(0));
}

TEST(Sockets, ReadsEndAtTheDeadlineOrWhenThePeerCloses) {
  Pair pair;
  uint8_t out[4];
  const auto start = Clock::now();
  EXPECT_NE(error_of<Timeout>([&] { pair.server.recv_exact(out, 4, Clock::now() + milliseconds(100), "the client"); })
                .find("timed out waiting for the client"),
            std::string::npos);
  EXPECT_GE(Clock::now() - start, milliseconds(100));
  pair.client.send_all(Bytes{9}, Clock::now() + milliseconds(1000), "the server");
  pair.client.close();
  EXPECT_NE(error_of<PeerFailure>([&] { pair.server.recv_exact(out, 4, Clock::now() + milliseconds(5000), "the client"); })
                .find("the client closed the connection"),
            std::string::npos);
  EXPECT_EQ(pair.server.recv_available(out, 4), std::nullopt);
}

TEST(Sockets, AcceptEndsAtTheDeadlineOrWhenWokenUp) {
  Listener listener("127.0.0.1");
  EXPECT_FALSE(listener.accept(Clock::now() + milliseconds(50)).valid());
  Wakeup stop;
  std::thread waker([&] {
    std::this_thread::sleep_for(milliseconds(50));
    stop.signal();
  });
  const auto start = Clock::now();
  EXPECT_FALSE(listener.accept(Clock::now() + milliseconds(10'000), stop.fd()).valid());
  EXPECT_LT(Clock::now() - start, milliseconds(5000));
  waker.join();
}

// A port on which nothing listens (the kernel gave it to a listener now gone).
int closed_port() { return Listener("127.0.0.1").port(); }

TEST(Sockets, ConnectingToNobodyFailsAtOnceOrRetriesUntilTheDeadline) {
  const int port = closed_port();
  ConnectOptions options;
  options.deadline = Clock::now() + milliseconds(5000);
  auto start = Clock::now();
  EXPECT_NE(error_of<PeerFailure>([&] { connect_to("127.0.0.1", port, "the coordinator", options); })
                .find("cannot connect to the coordinator at 127.0.0.1:" + std::to_string(port)),
            std::string::npos);
  EXPECT_LT(Clock::now() - start, milliseconds(1000));

  options.retry = true;
  options.deadline = Clock::now() + milliseconds(300);
  start = Clock::now();
  EXPECT_NE(error_of<Timeout>([&] { connect_to("127.0.0.1", port, "the server", options); })
                .find("cannot reach the server at 127.0.0.1:" + std::to_string(port)),
            std::string::npos);
  EXPECT_GE(Clock::now() - start, milliseconds(300));
}

TEST(Sockets, ARetryingConnectGivesUpWhenCancelled) {
  std::atomic<bool> cancelled{false};
  ConnectOptions options;
  options.deadline = Clock::now() + milliseconds(60'000);
  options.retry = true;
  options.cancelled = &cancelled;
  options.cancel_poll = milliseconds(50);
  std::thread canceller([&] {
    std::this_thread::sleep_for(milliseconds(100));
    cancelled = true;
  });
  const auto start = Clock::now();
  const std::string message = error_of<InvalidArgument>([&] { connect_to("127.0.0.1", closed_port(), "the server", options); });
  canceller.join();
  EXPECT_NE(message.find("connecting to the server was cancelled"), std::string::npos) << message;
  EXPECT_LT(Clock::now() - start, milliseconds(2000));
}

TEST(Sockets, AddressesSplitIntoHostAndPort) {
  EXPECT_EQ(split_address("127.0.0.1:80"), (std::pair<std::string, int>{"127.0.0.1", 80}));
  EXPECT_EQ(split_address("[::1]:8080"), (std::pair<std::string, int>{"::1", 8080}));
  for (const char* bad : {"localhost", "host:", "host:0", "host:70000", "host:8x"}) {
    EXPECT_NE(error_of<InvalidArgument>([&] { split_address(bad); }).find("is not a host:port address"),
              std::string::npos)
        << bad;
  }
  EXPECT_NE(error_of<InvalidArgument>([] { Listener("no-such-host.invalid"); }).find("no-such-host.invalid"),
            std::string::npos);
}

// A watched connection whose peer's host went quiet breaks with ETIMEDOUT, or
// with the ICMP error that came meanwhile (a neighbour that no longer answers
// ARP leaves EHOSTUNREACH): both are the host's silence, an end or a reset is
// not. tests/python/test_cluster.py cuts a real link.
TEST(Sockets, ABreakFromAHostsSilenceIsToldFromAnEnd) {
  for (int error : {ETIMEDOUT, EHOSTUNREACH, ENETUNREACH, EHOSTDOWN, ENONET}) EXPECT_TRUE(went_silent(error)) << error;
  for (int error : {0, ECONNRESET, EPIPE, ECONNREFUSED}) EXPECT_FALSE(went_silent(error)) << error;
}

}  // namespace
}  // namespace hora::net
