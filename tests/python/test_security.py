"""What an outsider cannot do to a job: read its secret from a command line,
join the output relay, pass an option to ssh through a host name, or have
the driver unpickle a result it wrote; and the parsers of bytes that come
from the network or from other processes either give a value or refuse
cleanly, whatever the bytes (property-based, with Hypothesis)."""

import io
import json
import os
import re
import socket
import subprocess
import sys
import textwrap
import threading
import time

import cloudpickle
import pytest
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

import hora.runner
from hora.runner import cluster, elastic, launch, monitor, rendezvous, run_function, signed
from hora.runner import env as rank_env
from hora.runner.hosts import RankPlacement
from hora.runner.rendezvous import RendezvousClient, RendezvousServer

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(os.path.dirname(HERE))
SECRET = "5f3c0de5ec7e7a11b0a7c0ffee0ddba1"
# Under CI the examples are the same in every run (derived from each test),
# so that a run passes or fails on the code alone; elsewhere each run draws
# new ones.
FUZZ = settings(max_examples=200, deadline=None, derandomize=bool(os.environ.get("CI")),
                suppress_health_check=[HealthCheck.function_scoped_fixture])


# --- no secret on a command line ------------------------------------------------

# Stands in for ssh: records every argument it gets, one a line, then runs
# the remote script here with ssh's stdin.
FAKE_SSH = """#!/bin/sh
printf '%s\\n' "$@" >> "$(dirname "$0")/ssh-calls"
while [ "$1" = "-o" ]; do shift 2; done
[ "$1" = "--" ] && shift
shift
exec sh -c "$1"
"""


@pytest.fixture
def fake_ssh(tmp_path):
    (tmp_path / "ssh").write_text(FAKE_SSH)
    (tmp_path / "ssh").chmod(0o755)
    return tmp_path


def test_the_ssh_command_of_a_remote_rank_holds_no_secret():
    args = launch.parse_args(["-np", "1", "-H", "nodea:1", "python", "train.py"])
    placement = RankPlacement(0, 1, "nodea", 0, 1, 0, 1)
    variables = rank_env.rank_environment(placement, hostname="nodea", rendezvous_addr="10.0.0.1",
                                          rendezvous_port=4000, secret=SECRET, start_timeout=30)
    variables[run_function.SECRET] = "f00dfeed" * 4
    remote = rank_env.remote_environment(variables, base={"HORA_CUSTOM_SECRET": "abad1dea"})
    argv = launch.remote_command("nodea", rank_env.remote_script("/work", remote, ["python", "train.py"]), args)
    for value in (SECRET, "f00dfeed" * 4, "abad1dea"):
        assert not any(value in arg for arg in argv), argv
    assert argv[-3:-1] == ["--", "nodea"]
    assert "HORA_RENDEZVOUS_PORT=4000" in argv[-1]   # what is not secret stays on the command line
    assert sorted(rank_env.secret_input(remote).decode().splitlines()) == sorted(
        [SECRET, "f00dfeed" * 4, "abad1dea"])


def test_a_secret_of_two_lines_is_refused_by_name():
    with pytest.raises(ValueError, match="HORA_SECRET must be one line"):
        rank_env.secret_input({"HORA_SECRET": "a\nb"})


def test_horarun_refuses_a_secret_of_two_lines_for_remote_ranks_before_starting_any():
    env = dict(os.environ, HORA_TOKEN_SECRET="first\nsecond")
    result = subprocess.run([sys.executable, "-m", "hora.runner", "-np", "2", "-H", "otherhost:2", "true"],
                            env=env, capture_output=True, text=True, timeout=60)
    assert result.returncode == 2, result.stderr
    assert "HORA_TOKEN_SECRET must be one line of text to reach a remote rank" in result.stderr
    assert "Traceback" not in result.stderr


def test_remote_ranks_get_the_secret_on_stdin_and_the_job_runs(fake_ssh):
    # The "hosts" are this machine: the ranks listen on its loopback interface.
    env = dict(os.environ, PATH=f"{fake_ssh}{os.pathsep}{os.environ['PATH']}", HORA_NETWORK_INTERFACES="lo")
    rank = textwrap.dedent("""
        import os
        import numpy as np
        import hora.numpy as hvd
        hvd.init()
        total = hvd.allreduce(np.array([hvd.rank() + 1.0]), op=hvd.Sum, name="x")
        print(os.environ["HORA_SECRET"], total.tolist())
        hvd.shutdown()
    """)
    run = subprocess.run([sys.executable, "-m", "hora.runner", "-np", "2", "-H", "nodea:1,nodeb:1",
                          sys.executable, "-c", rank], capture_output=True, text=True, timeout=120, env=env,
                         cwd=fake_ssh)
    assert run.returncode == 0, run.stderr
    seen = [re.fullmatch(r"\[([01])\]:([0-9a-f]{32}) \[3\.0\]", line) for line in run.stdout.splitlines()]
    assert all(seen) and sorted(match.group(1) for match in seen) == ["0", "1"], run.stdout
    secrets_seen = {match.group(2) for match in seen}
    assert len(secrets_seen) == 1, run.stdout
    calls = (fake_ssh / "ssh-calls").read_text()
    assert "HORA_RENDEZVOUS_PORT=" in calls      # the remote script is there ...
    assert secrets_seen.pop() not in calls       # ... the secret is not


def test_run_over_ssh_returns_the_signed_results_without_a_secret_on_a_command_line(fake_ssh, monkeypatch):
    monkeypatch.setenv("PATH", f"{fake_ssh}{os.pathsep}{os.environ['PATH']}")
    monkeypatch.setenv("HORA_NETWORK_INTERFACES", "lo")
    monkeypatch.chdir(fake_ssh)

    def secret_of_this_rank():
        return os.environ["HORA_RUN_FUNCTION_SECRET"]

    results = hora.runner.run(secret_of_this_rank, num_proc=2, hosts="nodea:1,nodeb:1")
    assert len(set(results)) == 1 and re.fullmatch(r"[0-9a-f]{32}", results[0])
    assert results[0] not in (fake_ssh / "ssh-calls").read_text()


# --- host names from a discovery script -------------------------------------------

@pytest.mark.parametrize("line", ["-oProxyCommand=touch /tmp/owned:1", "-p2222", "a b:2", ":4", "x;y:1",
                                  "node\x00a:1"])
def test_a_discovery_line_that_is_not_a_host_is_refused_naming_the_line(line):
    with pytest.raises(elastic.ElasticError) as raised:
        elastic.parse_discovery_output(f"good:2\n{line}\n", None, "./hosts.sh")
    assert str(raised.value).startswith("host discovery script ./hosts.sh, line 2: ")
    assert "is not a host name" in str(raised.value) and repr(line.strip()) in str(raised.value)


def test_discovered_hosts_that_are_names_or_addresses_are_taken():
    text = "# comment\nnode-1.example.com:4\n10.0.0.7:2\nlocalhost\n"
    assert elastic.parse_discovery_output(text, 1, "d") == {"node-1.example.com": 4, "10.0.0.7": 2,
                                                            "localhost": 1}


@FUZZ
@given(st.text(alphabet=st.characters(codec="utf-8"), max_size=200), st.one_of(st.none(), st.integers(1, 8)))
def test_fuzz_discovery_output_gives_host_names_and_slots_or_an_error(text, slots_per_host):
    try:
        found = elastic.parse_discovery_output(text, slots_per_host, "d")
    except elastic.ElasticError as error:
        assert str(error).startswith("host discovery script d, line ")
        return
    for host, slots in found.items():
        assert re.fullmatch(r"[A-Za-z0-9]([A-Za-z0-9._-]*[A-Za-z0-9])?", host), host
        assert isinstance(slots, int) and slots >= 1


# --- the output relay --------------------------------------------------------------

@pytest.fixture
def relay():
    out, err = io.StringIO(), io.StringIO()
    served = cluster.OutputRelay(SECRET, out, err)
    served.out, served.err = out, err
    yield served
    served.close()


def wait_for(condition, seconds=5.0):
    deadline = time.monotonic() + seconds
    while not condition() and time.monotonic() < deadline:
        time.sleep(0.01)
    return condition()


def test_a_rank_with_the_secret_is_heard(relay):
    client = cluster.RelayClient("127.0.0.1", relay.port, SECRET, 3)
    client.send_line("O", b"hello")
    client.send_exit(0)
    client.close()
    assert relay.wait_connected(1, 5)
    assert wait_for(lambda: relay.out.getvalue() == "[3]:hello\n")
    assert wait_for(lambda: [(o.rank, o.code) for o in relay.outcomes()] == [(3, 0)])


def test_the_secret_never_reaches_the_relay():
    with socket.create_server(("127.0.0.1", 0)) as listener:
        received = []

        def challenge():
            connection, _ = listener.accept()
            with connection:
                connection.sendall(b"n" * cluster.NONCE_BYTES)
                connection.settimeout(5)
                while data := connection.recv(4096):
                    received.append(data)

        thread = threading.Thread(target=challenge)
        thread.start()
        client = cluster.RelayClient("127.0.0.1", listener.getsockname()[1], SECRET, 7)
        client.send_line("O", b"line")
        client.close()
        thread.join(10)
    sent = b"".join(received)
    assert sent.startswith(b"7\n" + cluster.answer(SECRET.encode(), b"n" * cluster.NONCE_BYTES, b"7") + b"\n")
    assert SECRET.encode() not in sent


def test_a_client_with_the_wrong_secret_is_refused(relay):
    client = cluster.RelayClient("127.0.0.1", relay.port, "0" * 32, 1)
    client.send_line("O", b"let me in")
    client.close()
    assert not relay.wait_connected(1, 1.0)
    assert relay.out.getvalue() == ""


def handshake_answer(port, secret, rank):
    """Connects, answers the relay's challenge; returns (socket, answer)."""
    connection = socket.create_connection(("127.0.0.1", port), timeout=5)
    nonce = b""
    while len(nonce) < cluster.NONCE_BYTES:
        nonce += connection.recv(cluster.NONCE_BYTES - len(nonce))
    answer = f"{rank}\n".encode() + cluster.answer(secret.encode(), nonce, str(rank).encode()) + b"\n"
    connection.sendall(answer)
    return connection, answer


def test_an_answer_replayed_to_another_challenge_is_refused(relay):
    first, answer = handshake_answer(relay.port, SECRET, 2)
    assert relay.wait_connected(1, 5)
    with socket.create_connection(("127.0.0.1", relay.port), timeout=5) as replay:
        replay.sendall(answer + b"Oreplayed\n")
        replay.shutdown(socket.SHUT_WR)
        try:
            while replay.recv(4096):
                pass    # the relay closes it ...
        except ConnectionResetError:
            pass        # ... with what it did not read unread
    first.sendall(b"Ogenuine\n")
    first.close()
    assert wait_for(lambda: relay.out.getvalue() == "[2]:genuine\n")
    assert relay.connected() == {2}


def test_a_silent_client_is_dropped_after_the_limit_and_holds_up_no_one(relay, monkeypatch):
    monkeypatch.setattr(cluster, "_HANDSHAKE_SECONDS", 4.0)
    with socket.create_connection(("127.0.0.1", relay.port), timeout=20) as silent:
        connected = time.monotonic()
        client = cluster.RelayClient("127.0.0.1", relay.port, SECRET, 0)
        client.send_line("E", b"heard")
        # Heard while the silent connection still has its handshake time.
        assert wait_for(lambda: relay.err.getvalue() == "[0]:heard\n", 3.0)
        assert time.monotonic() - connected < 4.0
        client.close()
        received = b""
        while data := silent.recv(4096):
            received += data
        assert len(received) == cluster.NONCE_BYTES
        assert 3.5 < time.monotonic() - connected < 15.0


def test_a_line_longer_than_the_limit_comes_in_pieces_of_its_kind(relay):
    client = cluster.RelayClient("127.0.0.1", relay.port, SECRET, 1)
    client.send_line("E", b"x" * (cluster.MAX_LINE_BYTES + 10))
    client.send_line("O", b"after")
    client.close()
    assert wait_for(lambda: relay.out.getvalue() == "[1]:after\n")
    pieces = relay.err.getvalue().splitlines()
    assert [len(p) for p in pieces] == [len("[1]:") + cluster.MAX_LINE_BYTES - 1, len("[1]:") + 11]


def serve_one_connection(relay, data, answer_rank=None):
    """Runs the relay's handling of one connection that sends `data` (after
    answering the challenge when `answer_rank` is given); returns what the
    handling raised, or None."""
    served, peer = socket.socketpair()
    raised = []

    def serve():
        try:
            relay._serve(served)
        except BaseException as error:   # noqa: BLE001 - the property under test
            raised.append(error)

    thread = threading.Thread(target=serve)
    thread.start()
    with peer:
        nonce = b""
        while len(nonce) < cluster.NONCE_BYTES:
            nonce += peer.recv(cluster.NONCE_BYTES - len(nonce))
        if answer_rank is not None:
            rank = str(answer_rank).encode()
            peer.sendall(rank + b"\n" + cluster.answer(SECRET.encode(), nonce, rank) + b"\n")
        try:
            peer.sendall(data)
            peer.shutdown(socket.SHUT_WR)
        except OSError:
            pass   # the relay closed it first
        thread.join(15)
    assert not thread.is_alive()
    return raised[0] if raised else None


@FUZZ
@given(st.binary(max_size=600))
def test_fuzz_a_handshake_of_any_bytes_is_refused_quietly(relay, data):
    assert serve_one_connection(relay, data) is None
    assert relay.connected() == set() and relay.out.getvalue() == "" and relay.err.getvalue() == ""


LINES = st.lists(st.one_of(st.binary(max_size=40), st.sampled_from([b"O", b"E", b"X", b"X0", b"X-3", b"\n"]))
                 .map(lambda b: b + b"\n"), max_size=6).map(b"".join)


@FUZZ
@given(st.one_of(st.binary(max_size=300), LINES))
@example(b"E\x0b")   # a line that is a vertical tab
def test_fuzz_any_lines_after_the_handshake_print_as_the_ranks(relay, data):
    relay.out.seek(0), relay.out.truncate(), relay.err.seek(0), relay.err.truncate()
    assert serve_one_connection(relay, data, answer_rank=4) is None
    for stream in (relay.out, relay.err):
        # Lines end at "\n" only (str.splitlines would also split at a
        # vertical tab or form feed that a rank printed).
        lines = stream.getvalue().split("\n")
        assert lines[-1] == ""
        assert all(line.startswith("[4]:") for line in lines[:-1])
    assert all(outcome.rank == 4 for outcome in relay.outcomes())


# --- results the driver unpickles ----------------------------------------------------

@pytest.fixture
def store():
    with RendezvousServer("127.0.0.1", 0, SECRET) as server:
        with RendezvousClient("127.0.0.1", server.port, SECRET) as client:
            yield client


def test_a_genuine_result_round_trips(store):
    for rank in (0, 1):
        key = run_function.result_key(rank)
        store.set(key, signed.sign(SECRET, key, cloudpickle.dumps({"rank": rank})))
    assert run_function._collect(store, SECRET, [0, 1], 0) == [{"rank": 0}, {"rank": 1}]


class Trap:
    def __reduce__(self):
        return (os.system, ("touch /tmp/hora-security-test-trap",))


@pytest.mark.parametrize("forgery", ["unsigned", "other secret", "moved", "short"])
def test_a_forged_result_is_refused_naming_the_rank(store, forgery):
    payload = cloudpickle.dumps(Trap())
    genuine = signed.sign(SECRET, run_function.result_key(0), cloudpickle.dumps(0))
    written = {"unsigned": payload,
               "other secret": signed.sign("0" * 32, run_function.result_key(1), payload),
               "moved": signed.sign(SECRET, run_function.result_key(0), payload),
               "short": b"x"}[forgery]
    store.set(run_function.result_key(0), genuine)
    store.set(run_function.result_key(1), written)
    with pytest.raises(RuntimeError, match=r"^rank 1 of hora\.runner\.run: its result is not signed with the "
                                           r"job's secret; refusing to unpickle it$"):
        run_function._collect(store, SECRET, [0, 1], 0)


@FUZZ
@given(st.binary(max_size=100), st.text(max_size=20), st.binary(max_size=100))
def test_fuzz_only_the_signed_payload_verifies(payload, key, other):
    stored = signed.sign(SECRET, key, payload)
    assert signed.verify(SECRET, key, stored) == payload
    if other != stored:
        with pytest.raises(signed.UnsignedValueError):
            signed.verify(SECRET, key, other)


# --- the rendezvous client's decoders (read-only use) --------------------------------

@FUZZ
@given(st.binary(max_size=300))
def test_fuzz_a_reply_of_any_bytes_decodes_or_is_refused(data):
    try:
        status, value = rendezvous.decode_reply(data)
    except rendezvous.RendezvousError:
        return
    assert 0 <= status <= 255 and len(value) == len(data) - 5


KEY_LISTS = st.lists(st.binary(max_size=20), max_size=5).map(rendezvous.encode_keys)


@FUZZ
@given(st.one_of(st.binary(max_size=300), KEY_LISTS, KEY_LISTS.map(lambda b: b[:-1]),
                 KEY_LISTS.map(lambda b: b + b"\x00")))
def test_fuzz_a_key_list_of_any_bytes_decodes_or_is_refused(data):
    try:
        keys = rendezvous.decode_keys(data)
    except rendezvous.RendezvousError:
        return
    assert all(isinstance(key, bytes) and len(key) <= rendezvous.MAX_KEY_BYTES for key in keys)
    assert len(rendezvous.encode_keys(keys)) <= len(data)


# --- the monitor's reports ------------------------------------------------------------

NUMBER = st.one_of(st.integers(), st.floats(), st.booleans())
JSON_VALUE = st.recursive(st.one_of(st.none(), NUMBER, st.text(max_size=5)),
                          lambda inner: st.one_of(st.lists(inner, max_size=3),
                                                  st.dictionaries(st.text(max_size=5), inner, max_size=3)),
                          max_leaves=10)
COUNTERS = st.fixed_dictionaries({}, optional={
    "ranks": st.one_of(st.lists(st.integers(0, 8), min_size=1, max_size=4), JSON_VALUE),
    "ops": st.one_of(st.dictionaries(st.sampled_from(["allreduce", "broadcast"]), NUMBER), JSON_VALUE),
    "bytes": st.one_of(st.dictionaries(st.sampled_from(["allreduce"]), NUMBER), JSON_VALUE),
    "slowest_member": st.one_of(st.dictionaries(st.sampled_from(["0", "1", "x", "-1", "²"]), NUMBER), JSON_VALUE),
    "negotiation_seconds": st.one_of(NUMBER, JSON_VALUE), "cache_lookups": st.one_of(NUMBER, JSON_VALUE),
    "cache_hits": NUMBER, "responses": NUMBER, "tensors": NUMBER, "stalls": NUMBER, "broken": NUMBER,
    "errors": NUMBER, "transport_seconds": NUMBER})
REPORTS = st.fixed_dictionaries({}, optional={
    "at": st.one_of(NUMBER, JSON_VALUE), "since": NUMBER, "final": JSON_VALUE,
    "sets": st.one_of(st.dictionaries(st.sampled_from(["0", "1", "x"]), COUNTERS, max_size=2), JSON_VALUE)})


def use_report(report):
    """What the monitor does with a report's counters."""
    for set_id, counters in report.sets.items():
        monitor.live_line(set_id, (report.at, counters), (report.since, {}))
        monitor.live_line(set_id, (report.at, counters), (report.since, counters))
        monitor.table_lines(monitor.SUMMARY_HEADER, [monitor.summary_row(set_id, {report.rank: counters})])


@FUZZ
@given(st.one_of(st.binary(max_size=200), REPORTS.map(lambda r: json.dumps(r).encode())),
       st.sampled_from(["hora.metrics.0", "hora.metrics.12", "hora.metrics.x", "hora.metrics."]))
def test_fuzz_a_report_of_any_bytes_is_one_the_monitor_can_use_or_none(value, key):
    report = monitor.parse_report(key, value)
    if report is not None:
        use_report(report)


@pytest.mark.parametrize("value", [
    b'{"at": 1, "since": 0, "sets": {"0": {"ranks": [0], "ops": [1]}}}',
    b'{"at": 1, "since": 0, "sets": {"0": {"ranks": [0], "slowest_member": {"x": 1}}}}',
    b'{"at": 1, "since": 0, "sets": {"0": {"ranks": "0,1"}}}',
    b'{"at": 1, "since": 0, "sets": {"0": {"ranks": [0], "responses": 1e999}}}',
    b'{"at": 1, "since": 0, "sets": {"0": {"ranks": [0], "bytes": {"allreduce": ' + b"9" * 400 + b"}}}}",
    b'{"at": ' + b"9" * 400 + b', "since": 0, "sets": {}}',
    b"[" * 100000 + b"]" * 100000,
])
def test_a_report_the_monitor_cannot_use_is_ignored(value):
    assert monitor.parse_report("hora.metrics.0", value) is None


def test_a_well_formed_report_is_read():
    value = json.dumps({"at": 2.5, "since": 1.0, "final": True, "sets": {"0": {
        "ranks": [0, 1], "ops": {"allreduce": 3}, "bytes": {"allreduce": 96}, "slowest_member": {"1": 2},
        "responses": 3, "tensors": 3, "broken": False}}}).encode()
    report = monitor.parse_report("hora.metrics.1", value)
    assert (report.rank, report.at, report.since, report.final) == (1, 2.5, 1.0, True)
    assert report.sets[0]["ops"] == {"allreduce": 3}
    use_report(report)
