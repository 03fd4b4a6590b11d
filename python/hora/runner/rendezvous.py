"""The job's rendezvous server and a Python client for it.

The protocol is described in docs/rendezvous.md. This module uses only the
standard library and imports nothing from hora, so it also runs as a plain
script (the C++ tests start it that way).
"""

import argparse
import hmac
import os
import signal
import socket
import struct
import sys
import threading
import time

VERSION = 1

SET, GET, ADD, WAIT, PING = 1, 2, 3, 4, 5
OK, NOT_FOUND, TIMEOUT, BAD_SECRET, BAD_REQUEST = 0, 1, 2, 3, 4

MAX_KEY_BYTES = 4096
MAX_VALUE_BYTES = 64 << 20
MAX_SECRET_BYTES = 256
MAX_WAIT_KEYS = 4096
MAX_FRAME_BYTES = MAX_VALUE_BYTES + (64 << 10)
NO_TIMEOUT_MS = 0xFFFFFFFF

_COMMAND_NAMES = {SET: "SET", GET: "GET", ADD: "ADD", WAIT: "WAIT", PING: "PING"}
_STATUS_NAMES = {OK: "OK", NOT_FOUND: "NOT_FOUND", TIMEOUT: "TIMEOUT",
                 BAD_SECRET: "BAD_SECRET", BAD_REQUEST: "BAD_REQUEST"}


class RendezvousError(RuntimeError):
    """The server could not be reached or broke the protocol."""


class BadSecretError(PermissionError):
    """The server refused the job secret."""


class BadRequestError(ValueError):
    """The server refused the request as malformed or oversized."""


class _Refusal(Exception):
    """Raised while serving a request that gets BAD_SECRET or BAD_REQUEST."""

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


def encode_request(secret, command, keys=(), value=b"", timeout_ms=0):
    """Returns one request frame (length prefix included)."""
    payload = b"".join([
        struct.pack("<BBH", VERSION, command, len(secret)), secret,
        struct.pack("<I", timeout_ms), encode_keys(list(keys)),
        struct.pack("<I", len(value)), value])
    return struct.pack("<I", len(payload)) + payload


def encode_reply(status, value=b""):
    payload = struct.pack("<BI", status, len(value)) + value
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

class _Request:
    __slots__ = ("command", "timeout_ms", "keys", "value")


def _parse_request(payload, secret):
    """Parses and authenticates a payload; raises _Refusal on any problem."""
    reader = _PayloadReader(payload)
    version, command = reader.u8(), reader.u8()
    if version != VERSION:
        raise _Refusal(BAD_REQUEST, f"unsupported protocol version {version}")
    secret_length = reader.u16()
    if secret_length > MAX_SECRET_BYTES:
        raise _Refusal(BAD_REQUEST, f"secret of {secret_length} bytes is too long")
    given = bytes(reader.take(secret_length))
    if not given or not hmac.compare_digest(given, secret):
        raise _Refusal(BAD_SECRET, "missing or wrong job secret")
    if command not in _COMMAND_NAMES:
        raise _Refusal(BAD_REQUEST, f"unknown command {command}")
    request = _Request()
    request.command = command
    request.timeout_ms = reader.u32()
    count = reader.u32()
    if count > MAX_WAIT_KEYS:
        raise _Refusal(BAD_REQUEST, f"{count} keys exceed the limit of {MAX_WAIT_KEYS}")
    request.keys = [reader.sized(MAX_KEY_BYTES, "key") for _ in range(count)]
    request.value = reader.sized(MAX_VALUE_BYTES, "value")
    if not reader.at_end():
        raise _Refusal(BAD_REQUEST, "trailing bytes after the request")
    expected = {PING: (0, 0), WAIT: (1, MAX_WAIT_KEYS)}.get(command, (1, 1))
    if not expected[0] <= count <= expected[1]:
        raise _Refusal(BAD_REQUEST, f"{_COMMAND_NAMES[command]} takes "
                                    f"{expected[0]}..{expected[1]} keys, got {count}")
    return request


def _parse_integer(data, what):
    text = data.decode("ascii", "replace").strip()
    try:
        return int(text, 10)
    except ValueError:
        raise _Refusal(BAD_REQUEST, f"{what} {text[:40]!r} is not a decimal integer") from None


class RendezvousServer:
    """Key-value store for one job, served over TCP on a thread per connection.

    start() binds and returns at once; stop() closes every connection, wakes
    blocked GET/WAIT requests and joins the threads. Thread-safe.
    """

    def __init__(self, host="127.0.0.1", port=0, secret=""):
        if isinstance(secret, str):
            secret = secret.encode()
        if not secret:
            raise ValueError("the rendezvous server needs a non-empty secret")
        if len(secret) > MAX_SECRET_BYTES:
            raise ValueError(f"secret longer than {MAX_SECRET_BYTES} bytes")
        self._host = host
        self._requested_port = port
        self._secret = secret
        self._data = {}
        self._changed = threading.Condition()
        self._stopping = False
        self._listener = None
        self._accept_thread = None
        self._connections = {}   # socket -> thread, guarded by _changed

    @property
    def port(self):
        if self._listener is None:
            raise RuntimeError("the rendezvous server is not started")
        return self._listener.getsockname()[1]

    def start(self):
        listener = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            listener.bind((self._host, self._requested_port))
            listener.listen(socket.SOMAXCONN)
        except OSError:
            listener.close()
            raise
        self._listener = listener
        self._accept_thread = threading.Thread(
            target=self._accept_loop, name="hora-rendezvous-accept", daemon=True)
        self._accept_thread.start()
        return self

    def stop(self):
        with self._changed:
            if self._stopping:
                return
            self._stopping = True
            self._changed.notify_all()
            connections = list(self._connections.items())
        if self._listener is not None:
            _shutdown_quietly(self._listener)
            self._listener.close()
        for conn, _ in connections:
            _shutdown_quietly(conn)
        if self._accept_thread is not None:
            self._accept_thread.join(timeout=5)
        for _, thread in connections:
            thread.join(timeout=5)

    def set_value(self, key, value):
        """Sets `key` (str or bytes) to `value` in the served data, as a
        client's SET would: for the process that runs the server."""
        with self._changed:
            self._data[_to_bytes(key)] = _to_bytes(value)
            self._changed.notify_all()

    def values_of_keys_starting_with(self, prefix):
        """{key: value} (bytes) for every key that starts with `prefix`."""
        prefix = _to_bytes(prefix)
        with self._changed:
            return {key: value for key, value in self._data.items() if key.startswith(prefix)}

    def values_of_keys_ending_with(self, suffix):
        """The values of every key that ends with `suffix` (str or bytes)."""
        suffix = _to_bytes(suffix)
        with self._changed:
            return [value for key, value in self._data.items() if key.endswith(suffix)]

    def __enter__(self):
        return self.start()

    def __exit__(self, *exc):
        self.stop()

    def _accept_loop(self):
        while True:
            try:
                conn, _ = self._listener.accept()
            except OSError:
                return   # the listener was shut down by stop()
            conn.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            thread = threading.Thread(target=self._serve_connection, args=(conn,),
                                      name="hora-rendezvous-conn", daemon=True)
            with self._changed:
                if self._stopping:
                    conn.close()
                    return
                self._connections[conn] = thread
            thread.start()

    def _serve_connection(self, conn):
        try:
            while True:
                try:
                    payload = _recv_frame(conn, MAX_FRAME_BYTES)
                    if payload is None:
                        return
                    status, value = self._execute(_parse_request(payload, self._secret))
                except _Refusal as refusal:
                    conn.sendall(encode_reply(refusal.status, str(refusal).encode()))
                    _drain_before_close(conn)
                    return
                conn.sendall(encode_reply(status, value))
        except Exception:   # a broken or misbehaving client; keep serving others
            return
        finally:
            with self._changed:
                self._connections.pop(conn, None)
            _shutdown_quietly(conn)
            conn.close()

    def _execute(self, request):
        """Returns (status, value) for an authenticated request."""
        key = request.keys[0] if request.keys else None
        if request.command == PING:
            return OK, b""
        if request.command == SET:
            with self._changed:
                self._data[key] = request.value
                self._changed.notify_all()
            return OK, b""
        if request.command == ADD:
            delta = _parse_integer(request.value, "ADD delta")
            with self._changed:
                current = _parse_integer(self._data.get(key, b"0"), "value of the key")
                result = str(current + delta).encode()
                self._data[key] = result
                self._changed.notify_all()
            return OK, result
        missing = self._wait_for(request.keys, request.timeout_ms)
        if request.command == GET:
            if missing:
                return (NOT_FOUND if request.timeout_ms == 0 else TIMEOUT), b""
            with self._changed:
                return OK, self._data[key]
        return (TIMEOUT, encode_keys(missing)) if missing else (OK, b"")

    def _wait_for(self, keys, timeout_ms):
        """Blocks until every key exists; returns the keys still missing."""
        deadline = None if timeout_ms == NO_TIMEOUT_MS else time.monotonic() + timeout_ms / 1000
        with self._changed:
            while True:
                missing = [k for k in keys if k not in self._data]
                if not missing or self._stopping:
                    return missing
                remaining = None if deadline is None else deadline - time.monotonic()
                if remaining is not None and remaining <= 0:
                    return missing
                self._changed.wait(remaining)


def _drain_before_close(conn, limit=1 << 20, seconds=0.5):
    """Reads (a bounded amount of) what the client still sends, so that closing
    does not reset the connection before the client has read the refusal."""
    conn.shutdown(socket.SHUT_WR)
    conn.settimeout(seconds)
    deadline = time.monotonic() + seconds
    while limit > 0 and time.monotonic() < deadline:
        chunk = conn.recv(min(limit, 65536))
        if not chunk:
            return
        limit -= len(chunk)


def _shutdown_quietly(sock):
    try:
        sock.shutdown(socket.SHUT_RDWR)
    except OSError:
        pass


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
                break
            except OSError as error:
                if time.monotonic() >= deadline:
                    raise RendezvousError(
                        f"cannot reach the rendezvous server at {host}:{port}: {error}") from None
                time.sleep(0.05)
        self._sock.settimeout(None)
        self._sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)

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
        self._sock.sendall(encode_request(self._secret, command, keys, value, timeout_ms))
        try:
            payload = _recv_frame(self._sock, MAX_FRAME_BYTES)
        except _Refusal as error:
            raise RendezvousError(str(error)) from None
        if payload is None:
            raise RendezvousError("the rendezvous server closed the connection")
        status, value = decode_reply(payload)
        if status == BAD_SECRET:
            raise BadSecretError(f"the rendezvous server at {self._address[0]}:"
                                 f"{self._address[1]} refused the job secret")
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
        description="Runs a rendezvous server; prints its port on the first line.")
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, default=0)
    parser.add_argument("--secret", default=os.environ.get("HORA_SECRET", ""),
                        help="job secret (default: $HORA_SECRET)")
    parser.add_argument("--exit-on-stdin-eof", action="store_true",
                        help="stop serving when stdin closes")
    args = parser.parse_args(argv)
    if not args.secret:
        parser.error("a secret is required (--secret or HORA_SECRET)")

    stop = threading.Event()
    for signum in (signal.SIGTERM, signal.SIGINT):
        signal.signal(signum, lambda *_: stop.set())
    server = RendezvousServer(args.host, args.port, args.secret).start()
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
