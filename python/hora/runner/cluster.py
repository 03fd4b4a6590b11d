"""Pieces shared by the cluster-engine drivers (hora.spark, hora.ray): ranks
for workers an engine placed, and the relay that brings the ranks' output
back to the driver.

An engine decides where its workers run; hora then numbers them so that
the ranks on one host are contiguous (hosts in order of their first
worker), which is what horarun does for a host list, and gives each the
local and cross coordinates of that numbering.

The output relay is a TCP server in the driver. Each rank's task connects,
sends the job secret and its rank on two lines, then one line per line of
output ('O' + a stdout line, 'E' + a stderr line) and at the end 'X' and
its exit status. The driver prints the lines as horarun does ('[rank]:'
before each) and keeps what failures.Summary needs to name the rank that
failed first. (An elastic job's workers connect with their worker number
in place of a rank.)
"""

import hmac
import socket
import threading
import time

from hora.runner import failures, hosts

_HANDSHAKE_SECONDS = 10.0
MAX_HANDSHAKE_BYTES = 512


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
            thread = threading.Thread(target=self._serve, args=(connection,), daemon=True,
                                      name="hora-output-rank")
            thread.start()

    def _serve(self, connection):
        with connection:
            reader = connection.makefile("rb")
            rank = self._handshake(connection, reader)
            if rank is None:
                return
            with self._changed:
                self._connected.add(rank)
                self._open += 1
                self._tails.setdefault(rank, failures.StderrTail())
                self._changed.notify_all()
            try:
                for line in reader:
                    self._take(rank, line)
            except OSError:
                pass
            finally:
                with self._changed:
                    self._open -= 1
                    status = self._exits.get(rank, (None, None))[0]
                    self._changed.notify_all()
                if self._on_end is not None:
                    self._on_end(rank, status)

    def _handshake(self, connection, reader):
        connection.settimeout(_HANDSHAKE_SECONDS)
        try:
            secret = reader.readline(MAX_HANDSHAKE_BYTES).rstrip(b"\n")
            rank_text = reader.readline(MAX_HANDSHAKE_BYTES).strip()
        except OSError:
            return None
        if not hmac.compare_digest(secret, self._secret) or not rank_text.isdigit():
            return None
        connection.settimeout(None)
        return int(rank_text)

    def _take(self, rank, line):
        kind, text = line[:1].decode(errors="replace"), line[1:]
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


class RelayClient:
    """A rank's end of the output relay: send_line() from any thread."""

    def __init__(self, host, port, secret, rank, timeout=30.0):
        self._sock = socket.create_connection((host, int(port)), timeout=timeout)
        self._sock.settimeout(None)
        self._lock = threading.Lock()
        self._sock.sendall(f"{secret}\n{rank}\n".encode())

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
