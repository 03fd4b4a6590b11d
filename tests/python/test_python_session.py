"""The Python side's configuration and state: ``Config`` read from the
environment once and handed to init(); an elastic worker's round joined
without writing the environment; the public names listed once
(hora.common.api) and exported unchanged by each front end; objects moved
over bytes by hora.common.objects."""

import dataclasses
import json
import os
import subprocess
import sys

import pytest

from conftest import REPO
from hora.common import api
from hora.common import elastic_rounds
from hora.common.config import Config
from hora.common.session import session
from hora.runner import rounds
from hora.runner.rendezvous import RendezvousServer

SECRET = "0123456789abcdef0123456789abcdef"


# --- Config --------------------------------------------------------------------------

def test_a_config_holds_what_the_launchers_variables_say():
    config = Config.from_environment({
        "HORA_RENDEZVOUS_ADDR": "10.0.0.1", "HORA_RENDEZVOUS_PORT": "4242", "HORA_SECRET": SECRET,
        "HORA_SIZE": "8", "HORA_TIMELINE": "/tmp/t.json", "HORA_METRICS_PORT": "9100",
        "HORA_METRICS_ADDR": "0.0.0.0", "HORA_MONITOR_INTERVAL": "2", "HORA_ELASTIC": "1",
        "HORA_WORKER_ID": "a:0", "HORA_ELASTIC_TIMEOUT": "30", "HORA_START_TIMEOUT": "60"})
    assert config.store_address() == ("10.0.0.1", 4242, SECRET)
    assert config.launcher_size == 8 and config.start_timeout == 60.0
    assert config.timeline == ("HORA_TIMELINE", "/tmp/t.json")
    assert (config.metrics_port, config.metrics_address, config.monitor_interval) == (9100, "0.0.0.0", "2")
    assert (config.elastic, config.worker_id, config.elastic_timeout) == (True, "a:0", 30.0)
    # The core reads the coordinates itself unless a Config sets them.
    assert config.core_settings() == {"rendezvous_addr": "10.0.0.1", "rendezvous_port": 4242, "secret": SECRET}


def test_horovods_names_give_the_same_config():
    config = Config.from_environment({"HOROVOD_GLOO_RENDEZVOUS_ADDR": "h", "HOROVOD_GLOO_RENDEZVOUS_PORT": "7",
                                      "HORA_SECRET": SECRET, "HOROVOD_SIZE": "3", "HOROVOD_TIMELINE": "/x"})
    assert config.store_address() == ("h", 7, SECRET)
    assert config.launcher_size == 3 and config.timeline == ("HOROVOD_TIMELINE", "/x")


def test_an_empty_environment_is_a_single_process():
    config = Config.from_environment({})
    assert config.store_address() is None and config.launcher_size is None and not config.elastic
    assert config.core_settings() == {}


@pytest.mark.parametrize("name, value", [("HORA_METRICS_PORT", "http"), ("HORA_METRICS_PORT", "70000"),
                                         ("HORA_RENDEZVOUS_PORT", "x"), ("HORA_START_TIMEOUT", "soon"),
                                         ("HORA_ELASTIC_TIMEOUT", "never")])
def test_a_malformed_variable_is_named(name, value):
    with pytest.raises(ValueError, match=name):
        Config.from_environment({name: value})


def test_a_config_is_immutable_and_changed_by_replace():
    config = Config.from_environment({})
    with pytest.raises(dataclasses.FrozenInstanceError):
        config.rank = 3
    moved = dataclasses.replace(config, rank=3, size=4, elastic_round=2)
    assert moved.core_settings() == {"rank": 3, "size": 4, "elastic_round": 2}


def test_init_refuses_a_config_of_another_type():
    from hora.common import basics

    with pytest.raises(ValueError, match="config must be a hora.common.config.Config"):
        basics.init_with_config({"rank": 0})
    assert not basics.is_initialized()


def test_init_takes_a_config_instead_of_the_environment():
    # Two ranks whose environment names no job: their Configs (from their
    # command lines) give each its rank and the job's rendezvous.
    code = ("import dataclasses, sys, hora.numpy as hvd\n"
            "from hora.common import basics\n"
            "from hora.common.config import Config\n"
            "from hora.common.session import session\n"
            "rank, port, secret = int(sys.argv[1]), int(sys.argv[2]), sys.argv[3]\n"
            "config = dataclasses.replace(Config.from_environment(), rank=rank, size=2, local_rank=rank,\n"
            "                             local_size=2, rendezvous_addr='127.0.0.1', rendezvous_port=port,\n"
            "                             secret=secret)\n"
            "basics.init_with_config(config)\n"
            "assert session.config is config, session.config\n"
            "print('world', hvd.rank(), hvd.size(), hvd.allreduce([hvd.rank() + 1.0], op=hvd.Sum)[0])\n"
            "hvd.shutdown()\n"
            "assert session.config is None\n")
    env = {k: v for k, v in os.environ.items() if not k.startswith(("HORA_", "HOROVOD_", "OMPI_", "PMI"))}
    with RendezvousServer("127.0.0.1", 0, SECRET) as server:
        ranks = [subprocess.Popen([sys.executable, "-c", code, str(rank), str(server.port), SECRET], env=env,
                                  cwd=REPO, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
                 for rank in range(2)]
        outputs = [rank.communicate(timeout=120) for rank in ranks]
    for rank, (process, (out, err)) in enumerate(zip(ranks, outputs)):
        assert process.returncode == 0, out + err
        assert f"world {rank} 2 3.0" in out


# --- an elastic worker's round ------------------------------------------------------------

@pytest.fixture
def driver():
    with RendezvousServer("127.0.0.1", 0, SECRET) as server:
        yield server
    session.joined_round = -1


def worker_config(server, worker="hostb:1"):
    return Config.from_environment({"HORA_RENDEZVOUS_ADDR": "127.0.0.1", "HORA_RENDEZVOUS_PORT": str(server.port),
                                    "HORA_SECRET": SECRET, "HORA_ELASTIC": "1", "HORA_WORKER_ID": worker,
                                    "HORA_ELASTIC_TIMEOUT": "5"})


def publish_round(server, number, assignment):
    server.set_value(rounds.assignment_key(number), json.dumps(assignment))
    server.set_value(rounds.ROUND_KEY, str(number))


def test_joining_a_round_gives_a_config_and_writes_no_environment(driver):
    before = dict(os.environ)
    publish_round(driver, 0, {"hosta:0": [0, 2, 0, 1, 0, 2], "hostb:1": [1, 2, 0, 1, 1, 2]})
    config = elastic_rounds.join_round(worker_config(driver))
    assert (config.rank, config.size, config.local_rank, config.local_size, config.cross_rank,
            config.cross_size, config.elastic_round) == (1, 2, 0, 1, 1, 2, 0)
    assert config.core_settings()["elastic_round"] == 0
    assert elastic_rounds.current_round() == 0 and elastic_rounds.newest_round(config) == 0
    assert dict(os.environ) == before
    assert driver.values_of_keys_starting_with(rounds.joined_key("hostb:1")) == {
        rounds.joined_key("hostb:1").encode(): b"0"}
    # The next join waits for a newer round that includes this worker.
    publish_round(driver, 1, {"hosta:0": [0, 1, 0, 1, 0, 1]})
    publish_round(driver, 2, {"hostb:1": [0, 1, 0, 1, 0, 1]})
    again = elastic_rounds.join_round(config)
    assert (again.rank, again.size, again.elastic_round) == (0, 1, 2)


def test_a_worker_no_round_includes_times_out_naming_itself(driver):
    publish_round(driver, 0, {"hosta:0": [0, 1, 0, 1, 0, 1]})
    config = dataclasses.replace(worker_config(driver), elastic_timeout=0.5)
    with pytest.raises(TimeoutError, match="elastic worker hostb:1"):
        elastic_rounds.join_round(config)


# --- the public names, listed once -------------------------------------------------------

FRONT_ENDS = ["hora.numpy", "hora.torch", "hora.tensorflow", "hora.tensorflow.keras", "hora.keras"]


@pytest.mark.parametrize("name", FRONT_ENDS)
def test_every_front_end_exports_the_common_names_unchanged(name):
    module = pytest.importorskip(name)
    assert set(api.__all__) <= set(module.__all__)
    for exported in api.__all__:
        assert getattr(module, exported) is getattr(api, exported), exported
    assert all(hasattr(module, exported) for exported in module.__all__)
    assert len(set(module.__all__)) == len(module.__all__)


def test_the_common_names_are_horovods_framework_free_ones():
    assert {"init", "shutdown", "rank", "size", "local_rank", "local_size", "cross_rank", "cross_size",
            "is_initialized", "mpi_enabled", "gloo_enabled", "nccl_built", "ProcessSet", "global_process_set",
            "add_process_set", "remove_process_set", "Average", "Sum", "Adasum", "Min", "Max", "Product",
            "HorovodInternalError", "metrics", "start_timeline", "stop_timeline"} <= set(api.__all__)
    assert not {"allreduce", "broadcast", "broadcast_object", "DistributedOptimizer"} & set(api.__all__)


# --- objects over bytes ------------------------------------------------------------------

def test_objects_travel_as_bytes_through_every_front_end():
    code = ("import hora.numpy as hvd\n"
            "from hora.common import objects\n"
            "hvd.init()\n"
            "f = lambda x: x + 1\n"
            "assert hvd.broadcast_object(f, 0) is f\n"
            "assert objects.broadcast_bytes(b'\\x00bytes', 0, 'raw') == b'\\x00bytes'\n"
            "assert hvd.allgather_object({'rank': hvd.rank()}) == [{'rank': 0}]\n"
            "assert objects.allgather_bytes(b'', 'empty') == [b'']\n"
            "assert objects.allreduce_int64(7, hvd.Max, 'seven') == 7\n"
            "assert objects.allgather_int64(-3, 'minus') == [-3]\n"
            "print('objects ok')\n")
    env = {k: v for k, v in os.environ.items() if not k.startswith(("HORA_", "HOROVOD_", "OMPI_", "PMI"))}
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120, env=env,
                            cwd=REPO)
    assert result.returncode == 0, result.stdout + result.stderr
    assert "objects ok" in result.stdout


# --- state in one object ------------------------------------------------------------------

PACKAGE = os.path.join(REPO, "python", "hora")
# Module-level containers that are registries of the process, not session
# state: the front ends registered for ProcessSet dispatch, and the buffers
# of dropped handles the core still uses (each under its own lock).
REGISTRIES = {("common/adapters.py", "_registered"), ("common/handles.py", "_orphans")}


def module_sources():
    for folder, _, files in os.walk(PACKAGE):
        for file in sorted(files):
            if file.endswith(".py"):
                path = os.path.join(folder, file)
                with open(path, encoding="utf-8") as f:
                    yield os.path.relpath(path, PACKAGE), f.read()


def test_no_module_rebinds_a_global():
    import ast

    found = [f"{path}:{node.lineno} global {', '.join(node.names)}" for path, source in module_sources()
             for node in ast.walk(ast.parse(source)) if isinstance(node, ast.Global)]
    assert not found, "state belongs in hora.common.session, not module globals:\n" + "\n".join(found)


def test_hora_common_keeps_no_mutable_container_outside_the_session():
    import ast

    def mutable(value):
        """An empty container (constant tables are filled where they are written)."""
        if isinstance(value, (ast.List, ast.Set)):
            return not value.elts
        if isinstance(value, ast.Dict):
            return not value.keys
        return isinstance(value, ast.Call) and not value.args and getattr(
            value.func, "attr", getattr(value.func, "id", None)) in ("set", "dict", "list", "WeakSet",
                                                                     "WeakValueDictionary", "OrderedDict")

    found = []
    for path, source in module_sources():
        if not path.startswith("common" + os.sep) or path.endswith("session.py"):
            continue
        for node in ast.parse(source).body:
            if isinstance(node, ast.Assign) and mutable(node.value):
                names = [t.id for t in node.targets if isinstance(t, ast.Name)]
                found += [f"{path}:{node.lineno} {name}" for name in names
                          if (path, name) not in REGISTRIES and name != "__all__"]
    assert not found, "session state outside hora.common.session:\n" + "\n".join(found)


# --- The core's boundary -------------------------------------------------------------

def test_the_core_names_an_op_argument_that_is_no_array():
    """The front ends hand the core arrays only; what else reaches it is
    refused by name, not taken for something it is not."""
    code = ("import numpy as np, hora.numpy as hvd\n"
            "from hora import _core\n"
            "from hora.common import core_types as t\n"
            "hvd.init()\n"
            "for source, output in (([1.0], None), (np.ones(1, np.float32), 'x')):\n"
            "    try:\n"
            "        _core.enqueue(0, t.ALLREDUCE, 'x', source, output, t.core_reduce_op(hvd.Sum), 0, 1.0, 1.0, [],"
            " True)\n"
            "    except ValueError as e:\n"
            "        print(e)\n"
            "hvd.shutdown()\n")
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60, cwd=REPO)
    assert result.returncode == 0, result.stderr
    assert result.stdout.splitlines() == [
        "input must be an array on the CPU (buffer protocol or DLPack), got list",
        "output must be an array on the CPU (buffer protocol or DLPack), got str"], result.stdout
