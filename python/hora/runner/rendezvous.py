"""The job's rendezvous server (hora's C++ server, through hora._core) and a
Python client for it.

The protocol is described in docs/rendezvous.md; the client below speaks it
with the standard library only. Each connection starts with a handshake in
which the client and the server prove to each other that they hold the job
secret (HMAC-SHA-256 over fresh nonces); the secret never crosses the network.
"""

import argparse
import hashlib
import hmac
import os
import secrets
import signal
import socket
import struct
import sys
import threading
import time

VERSION = 2

SET, GET, ADD, WAIT, PING = 1, 2, 3, 4, 5
OK, NOT_FOUND, TIMEOUT, BAD_SECRET, BAD_REQUEST = 0, 1, 2, 3, 4

MAX_KEY_BYTES = 4096
MAX_VALUE_BYTES = 64 << 20
MAX_SECRET_BYTES = 256
MAX_WAIT_KEYS = 4096
MAX_FRAME_BYTES = MAX_VALUE_BYTES + (64 << 10)
NO_TIMEOUT_MS = 0xFFFFFFFF

CHALLENGE_BYTES = 4 + 16
PROOF_BYTES = 16 + 32
ANSWER_BYTES = 1 + 32
_CLIENT_LABEL = b"hora store client v2"
_SERVER_LABEL = b"hora store server v2"

_STATUS_NAMES = {OK: "OK", NOT_FOUND: "NOT_FOUND", TIMEOUT: "TIMEOUT",
                 BAD_SECRET: "BAD_SECRET", BAD_REQUEST: "BAD_REQUEST"}


class RendezvousError(RuntimeError):
    """The server could not be reached or broke the protocol."""


class BadSecretError(PermissionError):
    """The server refused the job secret."""


class BadRequestError(ValueError):
    """The server refused the request as malformed or oversized."""


class _Refusal(Exception):
    """A frame or field over the protocol's limits."""

    def __init__(self, status, message):
        super().__init__(message)
        self.status = status


# --- wire encoding ---------------------------------------------------------

class _PayloadReader:
    """Bounds-checked reader over one payload; overruns raise _Refusal."""

    def __init__(self, data):
        self._data = memoryview(data)
        self._pos = 0

    def take(self, n):
        if n > len(self._data) - self._pos:
            raise _Refusal(BAD_REQUEST, "truncated request")
        chunk = self._data[self._pos:self._pos + n]
        self._pos += n
        return chunk

    def u8(self):
        return self.take(1)[0]

    def u16(self):
        return struct.unpack("<H", self.take(2))[0]

    def u32(self):
        return struct.unpack("<I", self.take(4))[0]

    def sized(self, limit, what):
        n = self.u32()
        if n > limit:
            raise _Refusal(BAD_REQUEST, f"{what} of {n} bytes exceeds {limit} bytes")
        return bytes(self.take(n))

    def at_end(self):
        return self._pos == len(self._data)


def encode_keys(keys):
    parts = [struct.pack("<I", len(keys))]
    for key in keys:
        parts.append(struct.pack("<I", len(key)))
        parts.append(key)
    return b"".join(parts)


def decode_keys(data):
    reader = _PayloadReader(data)
    count = reader.u32()
    return [reader.sized(MAX_KEY_BYTES, "key") for _ in range(count)]


def decode_challenge(data):
    """The server's nonce from its challenge; RendezvousError if malformed."""
    if len(data) != CHALLENGE_BYTES or data[0] != VERSION or bytes(data[1:4]) != b"\0\0\0":
        version = data[0] if data else None
        raise RendezvousError(
            f"malformed challenge from the rendezvous server (protocol version {version}, "
            f"this client speaks {VERSION})")
    return bytes(data[4:])


def proof_mac(secret, server_nonce, client_nonce):
    return hmac.new(secret, _CLIENT_LABEL + server_nonce + client_nonce, hashlib.sha256).digest()


def encode_proof(secret, server_nonce, client_nonce):
    """The client's answer to a challenge: its nonce and the MAC of both."""
    return client_nonce + proof_mac(secret, server_nonce, client_nonce)


def check_answer(data, secret, server_nonce, client_nonce):
    """The status of the server's answer (OK or BAD_SECRET); RendezvousError
    when it is malformed or the server cannot prove it holds the secret."""
    if len(data) != ANSWER_BYTES or data[0] not in (OK, BAD_SECRET):
        raise RendezvousError("malformed answer from the rendezvous server")
    if data[0] == BAD_SECRET:
        return BAD_SECRET
    expected = hmac.new(secret, _SERVER_LABEL + client_nonce + server_nonce, hashlib.sha256).digest()
    if not hmac.compare_digest(bytes(data[1:]), expected):
        raise RendezvousError("the rendezvous server could not prove that it holds the job secret: "
                              "it is not this job's server")
    return OK


def encode_request(command, keys=(), value=b"", timeout_ms=0):
    """Returns one request frame (length prefix included)."""
    payload = b"".join([
        struct.pack("<BBI", VERSION, command, timeout_ms), encode_keys(list(keys)),
        struct.pack("<I", len(value)), value])
    return struct.pack("<I", len(payload)) + payload


def decode_reply(payload):
    if len(payload) < 5:
        raise RendezvousError("truncated reply from rendezvous server")
    status, length = struct.unpack_from("<BI", payload)
    if length != len(payload) - 5:
        raise RendezvousError("malformed reply from rendezvous server")
    return status, bytes(payload[5:])


def _recv_exact(sock, n):
    """Reads exactly n bytes; returns None if the peer closed first."""
    buf = bytearray(n)
    view = memoryview(buf)
    got = 0
    while got < n:
        r = sock.recv_into(view[got:])
        if r == 0:
            return None
        got += r
    return buf


def _recv_frame(sock, limit):
    """Returns a payload, None on a clean close, or raises _Refusal if oversized."""
    header = _recv_exact(sock, 4)
    if header is None:
        return None
    (length,) = struct.unpack("<I", header)
    if length > limit:
        raise _Refusal(BAD_REQUEST, f"frame of {length} bytes exceeds {limit} bytes")
    return _recv_exact(sock, length)


# --- server ----------------------------------------------------------------

class RendezvousServer:
    """Key-value store for one job, served over TCP by hora's C++ server
    (src/store/tcp_store_server.cc: one epoll thread for every connection,
    blocking GET and WAIT without polling, the job secret proved by each
    client before anything else is read from it).

    start() binds and returns at once; stop() closes every connection, wakes
    blocked GET/WAIT requests and joins the threads. Thread-safe.
    """

    def __init__(self, host="127.0.0.1", port=0, secret=""):
        secret = _to_bytes(secret)
        if not secret:
            raise ValueError("the rendezvous server needs a non-empty secret")
        if len(secret) > MAX_SECRET_BYTES:
            raise ValueError(f"secret longer than {MAX_SECRET_BYTES} bytes")
        self._host = host
        self._requested_port = int(port)
        self._secret = secret
        self._server = None

    @property
    def port(self):
        if self._server is None:
            raise RuntimeError("the rendezvous server is not started")
        return self._server.port

    def start(self):
        from hora import _core

        try:
            self._server = _core.StoreServer(self._host, self._secret, self._requested_port)
        except ValueError as error:   # cannot resolve or bind: as socket.bind says it
            raise OSError(str(error)) from None
        return self

    def stop(self):
        if self._server is not None:
            self._server.close()

    def set_value(self, key, value):
        """Sets `key` (str or bytes) to `value` in the served data, as a
        client's SET would: for the process that runs the server."""
        self._running().set(_to_bytes(key), _to_bytes(value))

    def values_of_keys_starting_with(self, prefix):
        """{key: value} (bytes) for every key that starts with `prefix`."""
        return dict(self._running().items_with_prefix(_to_bytes(prefix)))

    def values_of_keys_ending_with(self, suffix):
        """The values of every key that ends with `suffix` (str or bytes)."""
        suffix = _to_bytes(suffix)
        return [value for key, value in self._running().items_with_prefix(b"") if key.endswith(suffix)]

    def _running(self):
        if self._server is None:
            raise RuntimeError("the rendezvous server is not started")
        return self._server

    def __enter__(self):
        return self.start()

    def __exit__(self, *exc):
        self.stop()


# --- client ----------------------------------------------------------------

def _to_bytes(data):
    return data.encode() if isinstance(data, str) else bytes(data)


def _timeout_ms(timeout):
    if timeout is None:
        return NO_TIMEOUT_MS
    return max(0, min(int(timeout * 1000), NO_TIMEOUT_MS - 1))


class RendezvousClient:
    """Blocking client of RendezvousServer over one connection.

    Not thread-safe: give each thread its own client. Keys and values may be
    str (UTF-8) or bytes; values come back as bytes. Timeouts are in seconds,
    None meaning no timeout.
    """

    def __init__(self, host, port, secret, connect_timeout=30.0):
        self._secret = _to_bytes(secret)
        self._address = (host, int(port))
        deadline = time.monotonic() + connect_timeout
        while True:
            try:
                self._sock = socket.create_connection(self._address, timeout=connect_timeout)
            except OSError as error:
                if time.monotonic() >= deadline:
                    raise RendezvousError(
                        f"cannot reach the rendezvous server at {host}:{port}: {error}") from None
                time.sleep(0.05)
                continue
            self._sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            try:
                if self._handshake(max(connect_timeout, 1.0)):
                    break
            except BaseException:
                self._sock.close()
                raise
            # Closed before its challenge: a server at its connection limit.
            self._sock.close()
            if time.monotonic() >= deadline:
                raise RendezvousError(f"the rendezvous server at {host}:{port} kept closing new "
                                      f"connections for {connect_timeout} s (at its connection limit?)")
            time.sleep(0.05)
        self._sock.settimeout(None)

    def _handshake(self, timeout):
        """Proves the job secret to the server, and checks the server's proof;
        False when the server closed the connection before its challenge."""
        where = f"{self._address[0]}:{self._address[1]}"
        self._sock.settimeout(timeout)
        try:
            challenge = _recv_exact(self._sock, CHALLENGE_BYTES)
            if challenge is None:
                return False
            server_nonce = decode_challenge(challenge)
            client_nonce = secrets.token_bytes(16)
            self._sock.sendall(encode_proof(self._secret, server_nonce, client_nonce))
            answer = _recv_exact(self._sock, ANSWER_BYTES)
        except socket.timeout:
            raise RendezvousError(f"no handshake from the rendezvous server at {where} "
                                  f"within {timeout} s") from None
        except OSError as error:
            raise RendezvousError(f"lost the rendezvous server at {where} during the handshake: "
                                  f"{error}") from None
        if answer is None:
            raise RendezvousError(f"the rendezvous server at {where} closed the connection "
                                  "during the handshake")
        if check_answer(answer, self._secret, server_nonce, client_nonce) == BAD_SECRET:
            raise BadSecretError(f"the rendezvous server at {where} refused the job secret")
        return True

    def close(self):
        self._sock.close()

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()

    def ping(self):
        self._call(PING)

    def set(self, key, value):
        self._call(SET, [_to_bytes(key)], _to_bytes(value))

    def get(self, key, timeout=None):
        status, value = self._call(GET, [_to_bytes(key)], timeout_ms=_timeout_ms(timeout))
        if status != OK:
            raise TimeoutError(f"rendezvous key {key!r} not set within {timeout} s")
        return value

    def add(self, key, delta=1):
        _, value = self._call(ADD, [_to_bytes(key)], str(int(delta)).encode())
        return int(value)

    def wait(self, keys, timeout=None):
        status, value = self._call(WAIT, [_to_bytes(k) for k in keys],
                                   timeout_ms=_timeout_ms(timeout))
        if status != OK:
            missing = [k.decode(errors="replace") for k in decode_keys(value)]
            raise TimeoutError(f"rendezvous keys {missing} not set within {timeout} s")

    def _call(self, command, keys=(), value=b"", timeout_ms=0):
        self._sock.sendall(encode_request(command, keys, value, timeout_ms))
        try:
            payload = _recv_frame(self._sock, MAX_FRAME_BYTES)
        except _Refusal as error:
            raise RendezvousError(str(error)) from None
        if payload is None:
            raise RendezvousError("the rendezvous server closed the connection")
        status, value = decode_reply(payload)
        if status == BAD_REQUEST:
            raise BadRequestError(f"the rendezvous server refused the request: "
                                  f"{value.decode(errors='replace')}")
        if status not in _STATUS_NAMES:
            raise RendezvousError(f"unknown status {status} from the rendezvous server")
        return status, value


# --- command line ----------------------------------------------------------

def main(argv=None):
    parser = argparse.ArgumentParser(
        prog="python -m hora.runner.rendezvous",
        description="Runs a rendezvous server; prints its port on the first line.",
        allow_abbrev=False)   # "--secret" must not pass for "--secret-file"
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, default=0)
    parser.add_argument("--secret-file", metavar="PATH",
                        help="read the job secret from the first line of this file "
                             "(default: $HORA_SECRET); never put a secret on a command line")
    parser.add_argument("--exit-on-stdin-eof", action="store_true",
                        help="stop serving when stdin closes")
    args = parser.parse_args(argv)
    if args.secret_file:
        try:
            with open(args.secret_file, encoding="utf-8") as file:
                secret = file.readline().rstrip("\n")
        except OSError as error:
            parser.error(f"cannot read the secret file: {error}")
    else:
        secret = os.environ.get("HORA_SECRET", "")
    if not secret:
        parser.error("a secret is required: set HORA_SECRET or pass --secret-file")

    stop = threading.Event()
    for signum in (signal.SIGTERM, signal.SIGINT):
        signal.signal(signum, lambda *_: stop.set())
    server = RendezvousServer(args.host, args.port, secret).start()
    print(server.port, flush=True)
    if args.exit_on_stdin_eof:
        def watch_stdin():
            while os.read(sys.stdin.fileno(), 4096):
                pass
            stop.set()
        threading.Thread(target=watch_stdin, daemon=True).start()
    while not stop.wait(1.0):
        pass
    server.stop()
    return 0


if __name__ == "__main__":
    sys.exit(main())
