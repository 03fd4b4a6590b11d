"""hora.runner.run(): a Python function on every rank of a job, the results
back in rank order; failures name the rank; arguments Horovod's run() takes
are mapped, noted or refused."""

import os
import sys

import cloudpickle
import pytest

import hora.runner
from hora.runner import horovodrun

# The ranks cannot import this test module: its functions travel by value.
cloudpickle.register_pickle_by_value(sys.modules[__name__])


def collective_step(scale, offset=0):
    """Runs on every rank: a real job, with a collective across the ranks."""
    import numpy as np

    import hora.numpy as hvd

    hvd.init()
    total = hvd.allreduce(np.array([float(hvd.rank() + 1)]), op=hvd.Sum)
    result = (hvd.rank(), hvd.size(), float(total[0]) * scale + offset)
    hvd.shutdown()
    return result


def test_results_come_back_in_rank_order(backend):
    results = hora.runner.run(collective_step, args=(10,), kwargs={"offset": 1}, np=2,
                              use_mpi=backend == "mpi")
    assert results == [(0, 2, 31.0), (1, 2, 31.0)]


def test_lambdas_and_closures_travel_with_cloudpickle():
    local_base = 100

    class Local:
        def __init__(self, value):
            self.value = value

    results = hora.runner.run(lambda: Local(local_base + int(os.environ["HORA_RANK"])), num_proc=3)
    assert [r.value for r in results] == [100, 101, 102]
    assert all(type(r).__name__ == "Local" for r in results)


def failing_on_rank_one():
    if os.environ["HORA_RANK"] == "1":
        raise KeyError("no such key on rank one")
    return "fine"


def test_a_failing_rank_is_named_with_its_traceback():
    with pytest.raises(RuntimeError) as raised:
        hora.runner.run(failing_on_rank_one, np=2)
    message = str(raised.value)
    assert "rank 1 of hora.runner.run raised" in message, message
    assert "KeyError: 'no such key on rank one'" in message and "failing_on_rank_one" in message, message


def test_a_rank_that_exits_without_a_result_is_reported():
    with pytest.raises(RuntimeError, match="rank 0 of hora.runner.run returned no result"):
        hora.runner.run(os._exit, args=(3,), np=1)


def test_output_files_follow_horovods_layout(tmp_path):
    hora.runner.run(print, args=("hello from a rank",), np=2, output_filename=str(tmp_path / "out"))
    for rank in (0, 1):
        assert (tmp_path / "out" / f"rank.{rank}" / "stdout").read_text() == "hello from a rank\n"
        assert (tmp_path / "out" / f"rank.{rank}" / "stderr").read_text() == ""


def test_elastic_arguments_run_the_elastic_driver(monkeypatch):
    monkeypatch.setenv("HORA_ELASTIC_DISCOVERY_INTERVAL", "0.2")
    results = hora.runner.run(collective_step, args=(1.0,), min_np=2, max_np=2,
                              host_discovery_script="echo localhost:2")
    assert results == [(0, 2, 3.0), (1, 2, 3.0)]
    with pytest.raises(ValueError, match="needs --host-discovery-script"):
        hora.runner.run(print, min_num_proc=2)


@pytest.mark.parametrize("interfaces", [{"network_interfaces": ["lo"]}, {"network_interface": "lo"}])
def test_network_interfaces_choose_where_the_ranks_listen(interfaces):
    assert hora.runner.run(collective_step, args=(1.0,), np=2, **interfaces) == [(0, 2, 3.0), (1, 2, 3.0)]


@pytest.mark.parametrize("arguments, message", [
    ({"np": 0}, "-np must be at least 1"),
    ({"np": 2, "hosts": "localhost:1"}, "2 ranks need 2 slots"),
    ({"np": 1, "hosts": "a:1", "hostfile": "f"}, "either -H or --hostfile"),
    ({"np": 1, "use_gloo": True, "use_mpi": True}, "use_gloo and use_mpi"),
    ({"np": 1, "start_timeout": -1}, "--start-timeout must be positive"),
])
def test_bad_arguments_raise_value_error(arguments, message):
    with pytest.raises(ValueError, match=message):
        hora.runner.run(print, **arguments)


def test_arguments_without_meaning_are_noted_once(capfd):
    horovodrun._noted.discard("disable_cache")
    assert hora.runner.run(int, args=("7",), np=1, disable_cache=True) == [7]
    assert hora.runner.run(int, args=("8",), np=1, disable_cache=True) == [8]
    err = capfd.readouterr().err
    assert err.count("disable_cache has no effect on hora") == 1, err
