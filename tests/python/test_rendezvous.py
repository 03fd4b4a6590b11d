"""The rendezvous server: authentication, refusal of bad frames, blocking reads
and atomic counters (protocol: docs/rendezvous.md)."""

import secrets
import socket
import struct
import threading
import time

import pytest

from hora.runner import rendezvous as rz

SECRET = "0123456789abcdef0123456789abcdef"


@pytest.fixture
def server():
    with rz.RendezvousServer("127.0.0.1", 0, SECRET) as srv:
        yield srv


def client(server, secret=SECRET):
    return rz.RendezvousClient("127.0.0.1", server.port, secret)


def raw_connection(server, secret=SECRET):
    """A connection that has passed the handshake with `secret` (None: that
    sends nothing yet), to send bytes as a broken or hostile client would."""
    sock = socket.create_connection(("127.0.0.1", server.port), timeout=10)
    if secret is not None:
        assert handshake(sock, secret.encode()) == rz.OK
    return sock


def handshake(sock, secret):
    """Answers the server's challenge with a proof of `secret`; returns the
    status of the server's answer."""
    server_nonce = rz.decode_challenge(recv_exact(sock, rz.CHALLENGE_BYTES))
    client_nonce = secrets.token_bytes(16)
    sock.sendall(rz.encode_proof(secret, server_nonce, client_nonce))
    return rz.check_answer(recv_exact(sock, rz.ANSWER_BYTES), secret, server_nonce, client_nonce)


def read_reply(sock):
    """Returns (status, value) of the next reply, or None if the server closed."""
    header = recv_exact(sock, 4)
    if header is None:
        return None
    payload = recv_exact(sock, struct.unpack("<I", header)[0])
    return rz.decode_reply(payload)


def recv_exact(sock, n):
    data = b""
    while len(data) < n:
        chunk = sock.recv(n - len(data))
        if not chunk:
            return None
        data += chunk
    return data


def assert_closed(sock):
    sock.settimeout(5)
    assert sock.recv(1) == b""


def frame(payload):
    return struct.pack("<I", len(payload)) + payload


def assert_still_serving(server):
    with client(server) as good:
        good.set("alive", b"yes")
        assert good.get("alive", timeout=1) == b"yes"


# --- authentication ---------------------------------------------------------

@pytest.mark.parametrize("secret", [b"", b"wrong-secret", SECRET.encode()[:-1]])
def test_missing_or_wrong_secret_is_refused_and_closed(server, secret):
    with raw_connection(server, secret=None) as sock:
        assert handshake(sock, secret) == rz.BAD_SECRET
        assert_closed(sock)
    assert_still_serving(server)


def test_a_proof_for_another_connections_challenge_is_refused(server):
    with raw_connection(server, secret=None) as first, raw_connection(server, secret=None) as second:
        first_nonce = rz.decode_challenge(recv_exact(first, rz.CHALLENGE_BYTES))
        recv_exact(second, rz.CHALLENGE_BYTES)
        second.sendall(rz.encode_proof(SECRET.encode(), first_nonce, secrets.token_bytes(16)))
        assert recv_exact(second, rz.ANSWER_BYTES)[0] == rz.BAD_SECRET
        assert_closed(second)


def test_requests_before_the_handshake_are_never_read_as_requests(server):
    with raw_connection(server, secret=None) as sock:
        # A whole request frame in place of the proof.
        sock.sendall(rz.encode_request(rz.SET, [b"k"], b"v") + b"\0" * rz.PROOF_BYTES)
        recv_exact(sock, rz.CHALLENGE_BYTES)
        assert recv_exact(sock, rz.ANSWER_BYTES)[0] == rz.BAD_SECRET
        assert_closed(sock)
    with client(server) as good:
        with pytest.raises(TimeoutError):
            good.get("k", timeout=0)


def test_a_client_of_another_jobs_server_is_refused():
    with rz.RendezvousServer("127.0.0.1", 0, "another job's secret") as other:
        with pytest.raises(rz.BadSecretError):
            rz.RendezvousClient("127.0.0.1", other.port, SECRET)


def test_a_server_that_cannot_prove_the_secret_is_not_believed():
    # An impostor: it sends a challenge and claims to accept any proof.
    listener = socket.create_server(("127.0.0.1", 0))

    def impostor():
        connection, _ = listener.accept()
        with connection:
            connection.sendall(bytes([rz.VERSION, 0, 0, 0]) + secrets.token_bytes(16))
            recv_exact(connection, rz.PROOF_BYTES)
            connection.sendall(bytes([rz.OK]) + b"\x5a" * 32)
            connection.settimeout(5)
            connection.recv(1)
    thread = threading.Thread(target=impostor)
    thread.start()
    with listener, pytest.raises(rz.RendezvousError, match="could not prove"):
        rz.RendezvousClient("127.0.0.1", listener.getsockname()[1], SECRET)
    thread.join(timeout=10)


def test_the_secret_never_crosses_the_network(server):
    # A proxy between a client and the server records both directions.
    listener = socket.create_server(("127.0.0.1", 0))
    seen = []

    def forward(source, target):
        while data := source.recv(65536):
            seen.append(data)
            target.sendall(data)
        target.shutdown(socket.SHUT_WR)

    def proxy():
        downstream, _ = listener.accept()
        upstream = socket.create_connection(("127.0.0.1", server.port))
        back = threading.Thread(target=forward, args=(upstream, downstream))
        back.start()
        forward(downstream, upstream)
        back.join()
        downstream.close()
        upstream.close()
    thread = threading.Thread(target=proxy)
    thread.start()
    with listener, rz.RendezvousClient("127.0.0.1", listener.getsockname()[1], SECRET) as c:
        c.set("k", b"v")
        assert c.get("k", timeout=1) == b"v"
    thread.join(timeout=10)
    traffic = b"".join(seen)
    assert len(traffic) > rz.CHALLENGE_BYTES + rz.PROOF_BYTES + rz.ANSWER_BYTES
    assert SECRET.encode() not in traffic


def test_client_with_wrong_secret_raises_bad_secret(server):
    with pytest.raises(rz.BadSecretError, match="secret"):
        client(server, secret="not-it")
    assert_still_serving(server)


def test_server_requires_a_secret():
    with pytest.raises(ValueError):
        rz.RendezvousServer("127.0.0.1", 0, "")


# --- malformed and oversized frames ------------------------------------------

def good_payload(command=rz.SET, keys=(b"k",), value=b"v"):
    return rz.encode_request(command, keys, value)[4:]


MALFORMED = {
    "empty payload": b"",
    "garbage": b"\xde\xad\xbe\xef" * 10,
    "bad version": b"\x07" + good_payload()[1:],
    "unknown command": good_payload()[:1] + b"\x63" + good_payload()[2:],
    "truncated": good_payload()[:-1],
    "trailing bytes": good_payload() + b"x",
    "key count too large": good_payload(rz.PING, ())[:-8] + struct.pack("<II", 0xFFFFFFFF, 0),
    "ADD that overflows": good_payload(rz.ADD, (b"max",), b"1"),
    "SET without a key": good_payload(rz.SET, ()),
    "GET with two keys": good_payload(rz.GET, (b"a", b"b"), b""),
    "oversized key": good_payload(rz.SET, (b"k" * (rz.MAX_KEY_BYTES + 1),)),
    "ADD of a non-integer": good_payload(rz.ADD, (b"n",), b"seven"),
}


@pytest.mark.parametrize("name", sorted(MALFORMED))
def test_malformed_requests_are_refused_and_closed(server, name):
    with client(server) as c:
        c.add("max", 2**63 - 1)
    with raw_connection(server) as sock:
        sock.sendall(frame(MALFORMED[name]))
        status, _ = read_reply(sock)
        assert status == rz.BAD_REQUEST
        assert_closed(sock)
    assert_still_serving(server)


def test_oversized_frame_is_refused_before_its_payload_is_read(server):
    with raw_connection(server) as sock:
        start = time.monotonic()
        sock.sendall(struct.pack("<I", rz.MAX_FRAME_BYTES + 1))
        status, message = read_reply(sock)
        assert status == rz.BAD_REQUEST
        assert b"exceeds" in message
        assert_closed(sock)
        assert time.monotonic() - start < 3
    assert_still_serving(server)


def test_oversized_value_is_refused(server):
    value_length = rz.MAX_VALUE_BYTES + 1
    with raw_connection(server) as sock:
        head = good_payload(rz.SET, (b"k",), b"")[:-4] + struct.pack("<I", value_length)
        sock.sendall(frame(head))   # announces a value longer than the limit
        status, _ = read_reply(sock)
        assert status == rz.BAD_REQUEST
        assert_closed(sock)
    assert_still_serving(server)


def test_client_that_disconnects_mid_frame_does_not_disturb_others(server):
    with raw_connection(server) as sock:
        sock.sendall(struct.pack("<I", 1000) + b"partial")
    with raw_connection(server) as sock:
        sock.sendall(b"\x01\x00")   # half a length prefix
    with raw_connection(server, secret=None) as sock:
        sock.sendall(b"\x01\x00")   # half a proof
    assert_still_serving(server)


def test_many_bad_clients_at_once_leave_the_server_serving(server):
    def misbehave(i):
        with raw_connection(server, secret=SECRET if i % 2 else None) as sock:
            sock.sendall(frame(MALFORMED["garbage"]) if i % 2 else b"\xff" * 7)
    threads = [threading.Thread(target=misbehave, args=(i,)) for i in range(20)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert_still_serving(server)


# --- store semantics ----------------------------------------------------------

def test_set_and_get_bytes(server):
    with client(server) as c:
        c.set("k", b"\x00\xffvalue")
        assert c.get("k", timeout=1) == b"\x00\xffvalue"
        c.set("k", "replaced")
        assert c.get("k", timeout=1) == b"replaced"
        c.ping()


def test_get_blocks_until_another_client_sets(server):
    def set_later():
        time.sleep(0.3)
        with client(server) as writer:
            writer.set("late", b"now")
    start = time.monotonic()
    threading.Thread(target=set_later).start()
    with client(server) as reader:
        assert reader.get("late", timeout=10) == b"now"
    assert 0.25 <= time.monotonic() - start < 5


def test_get_times_out_and_the_connection_stays_usable(server):
    with client(server) as c:
        start = time.monotonic()
        with pytest.raises(TimeoutError, match="never"):
            c.get("never", timeout=0.3)
        assert 0.28 <= time.monotonic() - start < 3
        c.set("after", b"1")
        assert c.get("after", timeout=0) == b"1"


def test_get_without_waiting_answers_not_found(server):
    with raw_connection(server) as sock:
        sock.sendall(rz.encode_request(rz.GET, [b"absent"], timeout_ms=0))
        assert read_reply(sock) == (rz.NOT_FOUND, b"")


def test_add_is_atomic_across_threads(server):
    threads, adds_each = 8, 50
    results = []
    lock = threading.Lock()

    def count():
        with client(server) as c:
            mine = [c.add("counter", 1) for _ in range(adds_each)]
        with lock:
            results.extend(mine)
    workers = [threading.Thread(target=count) for _ in range(threads)]
    for w in workers:
        w.start()
    for w in workers:
        w.join()
    # Every add saw a distinct value: no two threads read the same count.
    assert sorted(results) == list(range(1, threads * adds_each + 1))
    with client(server) as c:
        assert c.get("counter", timeout=0) == str(threads * adds_each).encode()
        assert c.add("counter", -threads * adds_each) == 0


def test_wait_returns_when_all_keys_exist(server):
    def set_later():
        with client(server) as writer:
            writer.set("a", b"1")
            time.sleep(0.2)
            writer.set("b", b"2")
    threading.Thread(target=set_later).start()
    start = time.monotonic()
    with client(server) as c:
        c.wait(["a", "b"], timeout=10)
    assert time.monotonic() - start >= 0.15


def test_wait_times_out_naming_the_missing_keys(server):
    with client(server) as c:
        c.set("here", b"x")
        start = time.monotonic()
        with pytest.raises(TimeoutError) as info:
            c.wait(["here", "gone"], timeout=0.3)
        assert 0.28 <= time.monotonic() - start < 3
        assert "'gone'" in str(info.value)
        assert "'here'" not in str(info.value)


def test_stop_wakes_blocked_requests_promptly():
    server = rz.RendezvousServer("127.0.0.1", 0, SECRET).start()
    errors = []

    def blocked_get():
        try:
            with client(server) as c:
                c.get("never", timeout=60)
        except (TimeoutError, rz.RendezvousError, OSError) as error:
            errors.append(error)
    thread = threading.Thread(target=blocked_get)
    thread.start()
    time.sleep(0.2)
    start = time.monotonic()
    server.stop()
    thread.join(timeout=5)
    assert not thread.is_alive()
    assert time.monotonic() - start < 3
    assert len(errors) == 1


# --- the command line -----------------------------------------------------------

def run_server_command(args, env_secret=None, timeout=20):
    """Starts `python -m hora.runner.rendezvous ARGS`; returns (process, first line)."""
    import os
    import subprocess
    import sys
    env = {k: v for k, v in os.environ.items() if k != "HORA_SECRET"}
    if env_secret is not None:
        env["HORA_SECRET"] = env_secret
    process = subprocess.Popen([sys.executable, "-m", "hora.runner.rendezvous", "--port", "0"] + args,
                               env=env, stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                               stderr=subprocess.PIPE, text=True)
    return process


def test_the_server_command_takes_no_secret_on_its_command_line():
    process = run_server_command(["--secret", SECRET])
    _, err = process.communicate(timeout=20)
    assert process.returncode == 2
    assert "unrecognized arguments: --secret" in err


@pytest.mark.parametrize("how", ["environment", "file"])
def test_the_server_command_reads_the_secret_from_the_environment_or_a_file(tmp_path, how):
    if how == "file":
        path = tmp_path / "secret"
        path.write_text(SECRET + "\n")
        path.chmod(0o600)
        process = run_server_command(["--secret-file", str(path), "--exit-on-stdin-eof"])
    else:
        process = run_server_command(["--exit-on-stdin-eof"], env_secret=SECRET)
    try:
        port = int(process.stdout.readline())
        with rz.RendezvousClient("127.0.0.1", port, SECRET) as c:
            c.set("k", b"v")
            assert c.get("k", timeout=1) == b"v"
    finally:
        process.stdin.close()
        process.wait(timeout=20)
    assert process.returncode == 0


def test_the_server_command_without_a_secret_says_how_to_give_one():
    process = run_server_command([])
    _, err = process.communicate(timeout=20)
    assert process.returncode == 2
    assert "set HORA_SECRET or pass --secret-file" in err
