"""HORA_METRICS_PORT: each rank serves its sets' counters over HTTP in
Prometheus' text format, at the base port plus its local rank. Two ranks
run known traffic and are scraped while they wait; a bad value is refused
by name; a taken port costs a warning, not the job."""

import os
import re
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request

import pytest
from fault_checks import describe, results_of

from hora.common import metrics_http
from hora.common.metrics_http import exposition, ranks_label

HERE = os.path.dirname(os.path.abspath(__file__))
WORKER = os.path.join(HERE, "workers", "metrics_http.py")
REPO = os.path.dirname(os.path.dirname(HERE))

SAMPLE = re.compile(r"^([a-z_]+)\{(.*)\} (\S+)$")
LABEL = re.compile(r'([a-z_]+)="((?:[^"\\]|\\.)*)"')


def parse(text):
    """{(metric, ((label, value), ...)): value} of a text-format page;
    checks that each sample's family was announced by HELP and TYPE."""
    samples, announced = {}, set()
    for line in text.splitlines():
        if line.startswith("# TYPE "):
            announced.add(line.split()[2])
            continue
        if line.startswith("#"):
            continue
        match = SAMPLE.match(line)
        assert match, line
        metric, labels, value = match.groups()
        assert metric in announced, line
        pairs = tuple(LABEL.findall(labels))
        assert ",".join(f'{k}="{v}"' for k, v in pairs) == labels, line
        samples[(metric, pairs)] = float(value)
    return samples


def free_ports(count):
    """A base port such that it and the next count - 1 are free now."""
    for _ in range(100):
        with socket.socket() as probe:
            probe.bind(("", 0))
            base = probe.getsockname()[1]
        if base + count > 65535:
            continue
        sockets = []
        try:
            for port in range(base, base + count):
                sockets.append(socket.socket())
                sockets[-1].bind(("", port))
            return base
        except OSError:
            continue
        finally:
            for s in sockets:
                s.close()
    raise RuntimeError("no free ports")


def scrape(port):
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=10) as response:
        return response.headers["Content-Type"], response.read().decode()


def status_of(url):
    try:
        with urllib.request.urlopen(url, timeout=10) as response:
            return response.status
    except urllib.error.HTTPError as error:
        return error.code


# The ranks label of each set in the worker's job.
SET_RANKS = {"0": "0-2", "1": "0,1"}


@pytest.fixture(scope="module")
def scraped(tmp_path_factory):
    """The pages of ranks 0 and 1 (the members of set 1; rank 2 is in the
    global set only), scraped while the ranks wait after their traffic; the
    status of a path other than /metrics; the ranks' RESULT lines."""
    outdir = tmp_path_factory.mktemp("metrics")
    base = free_ports(3)
    cmd = [sys.executable, "-m", "hora.runner", "-np", "3", sys.executable, WORKER, str(outdir)]
    job = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, cwd=REPO,
                           env=dict(os.environ, HORA_METRICS_PORT=str(base)))
    pages, other_path = {}, None
    try:
        deadline = time.monotonic() + 60
        while not all((outdir / f"ready.{r}").exists() for r in (0, 1, 2)) and time.monotonic() < deadline:
            time.sleep(0.05)
        for rank in (0, 1):
            if (outdir / f"ready.{rank}").exists():
                pages[rank] = scrape(base + rank)
        if pages:
            other_path = status_of(f"http://127.0.0.1:{base}/")
        (outdir / "go").write_text("")
        stdout, stderr = job.communicate(timeout=60)
    finally:
        job.kill()
    run = subprocess.CompletedProcess(cmd, job.returncode, stdout, stderr)
    assert run.returncode == 0, describe(run)
    assert sorted(pages) == [0, 1], describe(run)
    return base, pages, other_path, results_of(run)


def test_each_rank_serves_on_the_base_port_plus_its_local_rank(scraped):
    base, pages, other_path, results = scraped
    assert {rank: result["port"] for rank, result in results.items()} == {0: base, 1: base + 1, 2: base + 2}
    for content_type, _ in pages.values():
        assert content_type == "text/plain; version=0.0.4; charset=utf-8"
    assert other_path == 404


@pytest.mark.parametrize("rank", [0, 1])
def test_the_counters_of_known_traffic_are_exact(scraped, rank):
    _, pages, _, _ = scraped
    samples = parse(pages[rank][1])

    def value(metric, set_id, **extra):
        labels = (("process_set", str(set_id)), ("ranks", SET_RANKS[str(set_id)]), ("rank", str(rank))) + \
            tuple(extra.items())
        return samples[(metric, labels)]

    # Set 1: 5 allreduces of 4096 bytes; the global set: 2 broadcasts of 64.
    assert value("hora_ops_total", 1, kind="allreduce") == 5
    assert value("hora_bytes_total", 1, kind="allreduce") == 5 * 4096
    assert value("hora_ops_total", 0, kind="broadcast") == 2
    assert value("hora_bytes_total", 0, kind="broadcast") == 2 * 64
    for set_id, ops in ((1, 5), (0, 2)):
        assert value("hora_responses_total", set_id) == ops
        assert value("hora_tensors_total", set_id) == ops
        assert value("hora_cache_lookups_total", set_id) == ops
        # The first op is negotiated; the repeats are agreed in the set's
        # fast lane (one host, shared memory).
        assert value("hora_cache_hits_total", set_id) == ops - 1
        assert value("hora_fast_path_hits_total", set_id) == ops - 1
        assert value("hora_errors_total", set_id) == 0
        assert value("hora_stalls_total", set_id) == 0
        assert value("hora_set_broken", set_id) == 0
    # No kind that did not run.
    kinds = {(dict(labels)["process_set"], dict(labels)["kind"]) for metric, labels in samples
             if metric == "hora_ops_total"}
    assert kinds == {("1", "allreduce"), ("0", "broadcast")}


@pytest.mark.parametrize("rank", [0, 1])
def test_the_page_holds_what_hvd_metrics_says(scraped, rank):
    # Every field of hvd.metrics(), taken after the scrape with no traffic
    # in between, is on the page with the same value.
    _, pages, _, results = scraped
    samples = parse(pages[rank][1])
    scalars = {"negotiation_seconds": "hora_negotiation_seconds_total",
               "transport_seconds": "hora_transport_seconds_total",
               "wait_for_slowest_seconds": "hora_wait_for_slowest_seconds_total",
               "cache_hits": "hora_cache_hits_total", "cache_lookups": "hora_cache_lookups_total",
               "fast_path_hits": "hora_fast_path_hits_total",
               "responses": "hora_responses_total", "tensors": "hora_tensors_total", "errors": "hora_errors_total",
               "stalls": "hora_stalls_total", "broken": "hora_set_broken"}
    metrics = results[rank]["metrics"]
    assert sorted(metrics) == ["0", "1"]
    for set_id, found in metrics.items():
        labels = (("process_set", set_id), ("ranks", SET_RANKS[set_id]), ("rank", str(rank)))
        for key, metric in scalars.items():
            assert samples[(metric, labels)] == float(found[key]), (set_id, key)
        members = {dict(pairs)["member"]: value for (metric, pairs), value in samples.items()
                   if metric == "hora_slowest_member_total" and dict(pairs)["process_set"] == set_id}
        assert members == {member: float(count) for member, count in found["slowest_member"].items()}
        # The coordinator (rank 0) waited for a slowest member at least
        # once: the set's first op is negotiated in full.
        assert sum(members.values()) > 0 if rank == 0 else members == {}


def test_shutdown_stops_the_server(scraped):
    _, _, _, results = scraped
    assert [result["answers_after_shutdown"] for result in results.values()] == [False, False, False]


def run_alone(code, **environment):
    return subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60, cwd=REPO,
                          env=dict(os.environ, **environment))


ONE_OP = ("import numpy as np\nimport hora.numpy as hvd\nfrom hora.common import metrics_http\n"
          "hvd.init()\nprint('SUM', hvd.allreduce(np.ones(2), op=hvd.Sum, name='x').tolist())\n"
          "print('PORT', metrics_http.serving_port())\n")


@pytest.mark.parametrize("value", ["abc", "0", "65536", "-3", "80.5"])
def test_a_bad_port_is_refused_by_name(value):
    code = ("import hora.numpy as hvd\n"
            "try:\n    hvd.init()\nexcept ValueError as e:\n    print('REFUSED', e)\n"
            "print('INITIALIZED', hvd.is_initialized())\n")
    run = run_alone(code, HORA_METRICS_PORT=value)
    assert run.returncode == 0, describe(run)
    assert (f"REFUSED HORA_METRICS_PORT must be a port number from 1 to 65535 "
            f"(each rank serves on it plus its local rank), got {value!r}") in run.stdout, describe(run)
    assert "INITIALIZED False" in run.stdout


def test_a_taken_port_warns_once_and_the_job_runs_on():
    with socket.socket() as taken:
        taken.bind(("", 0))
        taken.listen()
        port = taken.getsockname()[1]
        run = run_alone(ONE_OP, HORA_METRICS_PORT=str(port))
    assert run.returncode == 0, describe(run)
    assert "SUM [1.0, 1.0]" in run.stdout and "PORT None" in run.stdout, describe(run)
    warnings = [line for line in run.stderr.splitlines() if "HORA_METRICS_PORT" in line]
    assert warnings == [f"hora: WARNING: HORA_METRICS_PORT={port}: cannot serve this rank's metrics on port "
                        f"{port} (Address already in use); the job runs on without them"], describe(run)


def test_no_server_without_the_variable():
    run = run_alone(ONE_OP, HORA_METRICS_PORT="")
    assert run.returncode == 0, describe(run)
    assert "PORT None" in run.stdout and "HORA_METRICS_PORT" not in run.stderr, describe(run)


def test_ranks_label():
    assert ranks_label([0, 1]) == "0,1"
    assert ranks_label([0, 2, 4]) == "0,2,4"
    assert ranks_label(list(range(64))) == "0-63"
    assert ranks_label([0, 1, 2, 5, 7, 8, 9, 10]) == "0-2,5,7-10"


def test_exposition_escapes_labels_and_writes_booleans_and_floats():
    found = {"ops": {'odd"kind\\': 3}, "bytes": {}, "slowest_member": {2: 4}, "ranks": [2, 3],
             "negotiation_seconds": 1.5e-06, "transport_seconds": 0.25, "wait_for_slowest_seconds": 0.0,
             "cache_lookups": 0, "cache_hits": 0, "fast_path_hits": 0, "responses": 3, "tensors": 6, "errors": 1,
             "stalls": 2, "broken": True}
    text = exposition({7: found}, rank=2)
    labels = 'process_set="7",ranks="2,3",rank="2"'
    assert f'hora_ops_total{{{labels},kind="odd\\"kind\\\\"}} 3' in text.splitlines()
    samples = parse(text)
    pairs = (("process_set", "7"), ("ranks", "2,3"), ("rank", "2"))
    assert samples[("hora_slowest_member_total", pairs + (("member", "2"),))] == 4
    assert samples[("hora_negotiation_seconds_total", pairs)] == 1.5e-06
    assert samples[("hora_set_broken", pairs)] == 1
    assert samples[("hora_stalls_total", pairs)] == 2
    assert "# TYPE hora_set_broken gauge" in text


IDLE_CLIENT_THEN_SHUTDOWN = """
import socket, threading, time
import hora.numpy as hvd
from hora.common import metrics_http
hvd.init()
print('ADDRESS', metrics_http.serving_address())
idle = socket.create_connection(('127.0.0.1', metrics_http.serving_port()))   # connects, says nothing
time.sleep(0.3)   # the server has accepted it
started = time.monotonic()
stopping = threading.Thread(target=hvd.shutdown, daemon=True)
stopping.start()
stopping.join(10)
print('SHUTDOWN', 'hung' if stopping.is_alive() else round(time.monotonic() - started, 3), flush=True)
import os
os._exit(0)
"""


def test_shutdown_returns_at_once_with_an_idle_client_connected():
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    run = run_alone(IDLE_CLIENT_THEN_SHUTDOWN, HORA_METRICS_PORT=str(port))
    assert run.returncode == 0, describe(run)
    seconds = re.search(r"^SHUTDOWN (\S+)$", run.stdout, re.M).group(1)
    assert seconds != "hung" and float(seconds) < 2.0, describe(run)


def test_an_idle_client_neither_blocks_a_scrape_nor_stays_connected(monkeypatch):
    monkeypatch.setattr(metrics_http._MetricsHandler, "timeout", 4.0)
    server = metrics_http.MetricsServer(0)
    try:
        port = server._server.server_address[1]
        with socket.create_connection(("127.0.0.1", port)) as idle:
            connected = time.monotonic()
            time.sleep(0.1)
            assert status_of(f"http://127.0.0.1:{port}/other") == 404   # answered beside the idle one
            assert time.monotonic() - connected < 3.5   # before the idle one's time is up
            idle.settimeout(20)
            assert idle.recv(1) == b""    # the server closed it after its request time
            assert 3.5 < time.monotonic() - connected < 15.0
    finally:
        started = time.monotonic()
        server.stop()
        assert time.monotonic() - started < 2.0


@pytest.mark.parametrize("value, address", [(None, "127.0.0.1"), ("", "127.0.0.1"), ("0.0.0.0", "0.0.0.0")])
def test_the_endpoint_listens_on_loopback_unless_told_otherwise(value, address):
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    environment = {"HORA_METRICS_PORT": str(port)}
    if value is not None:
        environment["HORA_METRICS_ADDR"] = value
    env = {k: v for k, v in os.environ.items() if k != "HORA_METRICS_ADDR"}
    run = subprocess.run([sys.executable, "-c", ONE_OP + "print('ADDRESS', metrics_http.serving_address())\n"],
                         capture_output=True, text=True, timeout=60, cwd=REPO, env=dict(env, **environment))
    assert run.returncode == 0, describe(run)
    assert f"ADDRESS {address}" in run.stdout, describe(run)


def test_an_address_the_host_does_not_have_warns_and_the_job_runs_on():
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    run = run_alone(ONE_OP, HORA_METRICS_PORT=str(port), HORA_METRICS_ADDR="192.0.2.1")
    assert run.returncode == 0, describe(run)
    assert "SUM [1.0, 1.0]" in run.stdout and "PORT None" in run.stdout, describe(run)
    assert (f"hora: WARNING: HORA_METRICS_PORT={port}: cannot serve this rank's metrics on "
            f"HORA_METRICS_ADDR=192.0.2.1 port {port} (") in run.stderr, describe(run)
