"""The job's rendezvous store: its server and its client, both hora's C++
ones (src/store/) through hora._core, and the protocol's encoding for tools
and tests that speak to a server byte by byte.

The protocol is described in docs/rendezvous.md. Each connection starts
with a handshake in which the client and the server prove to each other that
they hold the job secret (HMAC-SHA-256 over fresh nonces); the secret never
crosses the network. The core's runtime uses the same client.
"""

import argparse
import os
import signal
import sys
import threading

from hora import _core
from hora._core import (  # noqa: F401  (the protocol's encoding, src/store/store_protocol.h)
    ADD,
    ANSWER_BYTES,
    BAD_REQUEST,
    BAD_SECRET,
    CHALLENGE_BYTES,
    GET,
    MAX_FRAME_BYTES,
    MAX_KEY_BYTES,
    MAX_SECRET_BYTES,
    MAX_VALUE_BYTES,
    MAX_WAIT_KEYS,
    NO_TIMEOUT_MS,
    NOT_FOUND,
    OK,
    PING,
    PROOF_BYTES,
    SET,
    TIMEOUT,
    VERSION,
    WAIT,
    check_answer,
    decode_challenge,
    decode_keys,
    decode_reply,
    encode_keys,
    encode_proof,
    encode_request,
)

# The store's errors, as hora._core raises them.
RendezvousError = _core.StoreError            # unreachable, gone, or not this job's server (RuntimeError)
BadSecretError = _core.StoreSecretError       # the server refused the job secret (PermissionError)
BadRequestError = _core.StoreRequestError     # the server refused a request (ValueError)
# A key not set in time: a RendezvousError and a TimeoutError.
RendezvousTimeoutError = _core.StoreTimeoutError

for _error in (RendezvousError, BadSecretError, BadRequestError, RendezvousTimeoutError):
    _error.__module__ = __name__
del _error


def _to_bytes(data):
    return data.encode() if isinstance(data, str) else bytes(data)


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

class RendezvousClient:
    """Blocking client of RendezvousServer: hora's C++ client
    (src/store/tcp_store.cc), connected and past the handshake once made.

    Keys and values may be str (UTF-8) or bytes; values come back as bytes.
    Timeouts are in seconds, None meaning no timeout. Any thread may use it;
    a connection that breaks fails the call (RendezvousError), and a key
    not set in time raises TimeoutError.
    """

    def __init__(self, host, port, secret, connect_timeout=30.0):
        self._store = _core.StoreClient(str(host), int(port), _to_bytes(secret), float(connect_timeout))

    def close(self):
        self._store.close()

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()

    def ping(self):
        self._store.ping()

    def set(self, key, value):
        self._store.set(_to_bytes(key), _to_bytes(value))

    def get(self, key, timeout=None):
        return self._store.get(_to_bytes(key), timeout)

    def add(self, key, delta=1):
        return self._store.add(_to_bytes(key), int(delta))

    def wait(self, keys, timeout=None):
        self._store.wait([_to_bytes(k) for k in keys], timeout)


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
