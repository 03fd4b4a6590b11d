"""Pieces shared by the cluster-engine drivers (hora.spark, hora.ray): ranks
for workers an engine placed, and the relay that brings the ranks' output
back to the driver.

An engine decides where its workers run; hora then numbers them so that
the ranks on one host are contiguous (hosts in order of their first
worker), which is what horarun does for a host list, and gives each the
local and cross coordinates of that numbering.

The output relay is a TCP server in the driver. Each rank's task connects
and proves that it holds the job secret without sending it: the relay
sends a random 16-byte nonce, the task answers with two lines, its rank
and the hex HMAC-SHA-256 of b"hora-relay" + nonce + rank under the
secret (answer()), and the relay compares that with its own in constant
time. A connection that does not answer correctly within 10 s is closed
unheard; each waits on its own thread, so a silent one holds up no
other. Then the task sends one line per line of output ('O' + a stdout
line, 'E' + a stderr line) and at the end 'X' and its exit status. The
driver prints the lines as horarun does ('[rank]:' before each; a line
longer than MAX_LINE_BYTES in pieces of that size) and keeps what
failures.Summary needs to name the rank that failed first. (An elastic
job's workers connect with their worker number in place of a rank.)
"""

import hashlib
import hmac
import secrets
import socket
import threading
import time

from hora.runner import failures, hosts

_HANDSHAKE_SECONDS = 10.0
MAX_HANDSHAKE_BYTES = 512
# Connections that may be in their handshake at once; more are closed as
# they arrive, so a flood of strangers costs a bounded number of threads.
MAX_PENDING_HANDSHAKES = 256
MAX_LINE_BYTES = 64 << 10
NONCE_BYTES = 16
_CONTEXT = b"hora-relay"


def answer(secret, nonce, rank_text):
    """The hex HMAC a task sends for the relay's `nonce` (bytes) and its
    rank (bytes), under the job `secret` (bytes)."""
    return hmac.new(secret, _CONTEXT + nonce + rank_text, hashlib.sha256).hexdigest().encode()


def placements_for(host_of_worker):
    """host_of_worker[i]: the host (any hashable name) worker i runs on.
    Returns the RankPlacement of each worker, in worker order: ranks are
    contiguous per host, hosts numbered in order of their first worker."""
    if not host_of_worker:
        raise ValueError("no workers to place")
    counts = {}
    for host in host_of_worker:
        counts[host] = counts.get(host, 0) + 1
    placed = hosts.place_ranks([hosts.Host(str(h), n) for h, n in counts.items()],
                               len(host_of_worker))
    by_host = {}
    for placement in placed:
        by_host.setdefault(placement.host, []).append(placement)
    return [by_host[str(host)].pop(0) for host in host_of_worker]


class OutputRelay:
    """The driver's end: serves rank connections on (host, port) until
    close(). `stdout` and `stderr` are text streams; the lines of rank r go
    there as '[r]:line' (after the time, with `timestamps`)."""

    def __init__(self, secret, stdout, stderr, host="127.0.0.1", timestamps=False, on_end=None):
        self._secret = secret.encode()
        self._on_end = on_end     # on_end(rank, status, or None when the connection ended without one)
        self._streams = {"O": stdout, "E": stderr}
        self._timestamps = timestamps
        self._lock = threading.Lock()
        self._handshake_slots = threading.BoundedSemaphore(MAX_PENDING_HANDSHAKES)
        self._tails = {}
        self._exits = {}          # rank -> (status, time.monotonic())
        self._connected = set()
        self._open = 0
        self._changed = threading.Condition(self._lock)
        self._listener = socket.create_server((host, 0))
        self.port = self._listener.getsockname()[1]
        self._closed = False
        self._threads = [threading.Thread(target=self._accept, daemon=True, name="hora-output-relay")]
        self._threads[0].start()

    # --- what the driver asks --------------------------------------------

    def connected(self):
        """The ranks whose task has connected so far."""
        with self._lock:
            return set(self._connected)

    def wait_connected(self, count, timeout):
        """True once `count` ranks have connected, False after `timeout` s."""
        deadline = time.monotonic() + timeout
        with self._changed:
            while len(self._connected) < count:
                left = deadline - time.monotonic()
                if left <= 0:
                    return False
                self._changed.wait(left)
            return True

    def wait_quiet(self, timeout):
        """Waits until every connected rank has closed its connection (its
        task ended), at most `timeout` s."""
        deadline = time.monotonic() + timeout
        with self._changed:
            while self._open > 0:
                left = deadline - time.monotonic()
                if left <= 0:
                    return
                self._changed.wait(left)

    def outcomes(self):
        """failures.RankOutcome of every rank that reported its exit."""
        with self._lock:
            result = []
            for rank, (status, when) in sorted(self._exits.items()):
                outcome = failures.RankOutcome(rank, status, when)
                if rank in self._tails:
                    outcome.tail.lines.extend(self._tails[rank].lines)
                result.append(outcome)
            return result

    def close(self):
        self._closed = True
        try:
            self._listener.shutdown(socket.SHUT_RDWR)
        except OSError:
            pass
        self._listener.close()

    # --- serving ----------------------------------------------------------

    def _accept(self):
        while not self._closed:
            try:
                connection, _ = self._listener.accept()
            except OSError:
                return
            if not self._handshake_slots.acquire(blocking=False):
                connection.close()   # too many strangers in their handshake at once
                continue
            thread = threading.Thread(target=self._serve, args=(connection, self._handshake_slots.release),
                                      daemon=True, name="hora-output-rank")
            try:
                thread.start()
            except RuntimeError:   # no thread to be had now: drop this one, serve on
                self._handshake_slots.release()
                connection.close()

    def _serve(self, connection, handshake_done=None):
        with connection:
            try:
                rank = self._handshake(connection)
            finally:
                if handshake_done is not None:
                    handshake_done()
            if rank is None:
                return
            with self._changed:
                self._connected.add(rank)
                self._open += 1
                self._tails.setdefault(rank, failures.StderrTail())
                self._changed.notify_all()
            try:
                self._take_lines(rank, connection.makefile("rb"))
            except OSError:
                pass
            finally:
                with self._changed:
                    self._open -= 1
                    status = self._exits.get(rank, (None, None))[0]
                    self._changed.notify_all()
                if self._on_end is not None:
                    self._on_end(rank, status)

    def _handshake(self, connection):
        """The rank of a connection that answers the challenge within
        _HANDSHAKE_SECONDS in all, else None."""
        deadline = time.monotonic() + _HANDSHAKE_SECONDS
        nonce = secrets.token_bytes(NONCE_BYTES)
        try:
            connection.settimeout(_HANDSHAKE_SECONDS)
            connection.sendall(nonce)
            rank_text = _read_line(connection, deadline)
            tag = _read_line(connection, deadline)
        except OSError:
            return None
        if rank_text is None or tag is None or not rank_text.isdigit():
            return None
        if not hmac.compare_digest(tag, answer(self._secret, nonce, rank_text)):
            return None
        connection.settimeout(None)
        return int(rank_text)

    def _take_lines(self, rank, reader):
        """Takes the rank's lines until it closes; a line longer than
        MAX_LINE_BYTES comes in pieces, each of the line's kind."""
        kind = None
        for piece in iter(lambda: reader.readline(MAX_LINE_BYTES), b""):
            line_ends = piece.endswith(b"\n")
            if kind is None:
                kind, piece = piece[:1], piece[1:]
            self._take(rank, kind.decode(errors="replace"), piece)
            if line_ends:
                kind = None

    def _take(self, rank, kind, text):
        now = time.monotonic()
        if kind == "X":
            try:
                status = int(text)
            except ValueError:
                return
            with self._lock:
                self._exits[rank] = (status, now)
            return
        stream = self._streams.get(kind)
        if stream is None:
            return
        if not text.endswith(b"\n"):
            text += b"\n"
        with self._lock:
            if kind == "E":
                self._tails[rank].add(text, now)
            prefix = f"[{rank}]:"
            if self._timestamps:
                prefix = time.strftime("%Y-%m-%d %H:%M:%S ") + prefix
            try:
                stream.write(prefix + text.decode(errors="replace"))
                stream.flush()
            except (OSError, ValueError):
                pass   # the driver's stream is gone; keep the tail


def _read_line(connection, deadline):
    """One line (without its newline) of at most MAX_HANDSHAKE_BYTES, read
    byte by byte so that nothing after it is taken; None when the peer
    closes, the line is longer or `deadline` passes."""
    line = bytearray()
    while len(line) <= MAX_HANDSHAKE_BYTES:
        left = deadline - time.monotonic()
        if left <= 0:
            return None
        connection.settimeout(left)
        byte = connection.recv(1)
        if not byte:
            return None
        if byte == b"\n":
            return bytes(line)
        line += byte
    return None


def _recv_exactly(sock, count):
    data = bytearray()
    while len(data) < count:
        chunk = sock.recv(count - len(data))
        if not chunk:
            raise ConnectionError("the output relay closed the connection during its handshake")
        data += chunk
    return bytes(data)


class RelayClient:
    """A rank's end of the output relay: send_line() from any thread. The
    constructor answers the relay's challenge (blocking, up to `timeout`)."""

    def __init__(self, host, port, secret, rank, timeout=30.0):
        self._sock = socket.create_connection((host, int(port)), timeout=timeout)
        try:
            nonce = _recv_exactly(self._sock, NONCE_BYTES)
            rank_text = str(rank).encode()
            self._sock.sendall(rank_text + b"\n" + answer(secret.encode(), nonce, rank_text) + b"\n")
        except OSError:
            self._sock.close()
            raise
        self._sock.settimeout(None)
        self._lock = threading.Lock()

    def send_line(self, kind, line):
        """`kind` 'O' or 'E'; `line` bytes."""
        if not line.endswith(b"\n"):
            line += b"\n"
        self._send(kind.encode() + line)

    def send_exit(self, status):
        self._send(f"X{status}\n".encode())

    def _send(self, data):
        with self._lock:
            try:
                self._sock.sendall(data)
            except OSError:
                pass   # the driver is gone; the rank's own exit says the rest

    def close(self):
        self._sock.close()
