"""Elastic jobs on one machine: horarun's driver with a discovery script
over local "hosts" (127.0.0.x), workers killed and added mid-run
(tests/python/workers/elastic_train.py), and the flags' checks."""

import json
import os
import subprocess
import sys

import pytest
import torch

from hora.common import elastic as worker_side
from hora.runner import elastic as driver
from hora.runner import launch

HERE = os.path.dirname(os.path.abspath(__file__))
WORKER = os.path.join(HERE, "workers", "elastic_train.py")
STEPS = 24
DIM = 4


def horarun(tmp_path, hosts, flags, worker_args, timeout=120):
    hosts_file = tmp_path / "hosts"
    hosts_file.write_text("".join(line + "\n" for line in hosts))
    cmd = [sys.executable, "-m", "hora.runner", *flags, "--host-discovery-script", f"cat {hosts_file}",
           sys.executable, WORKER, str(tmp_path), str(STEPS), *worker_args]
    env = dict(os.environ, HORA_ELASTIC_DISCOVERY_INTERVAL="0.2", OMP_NUM_THREADS="1")
    return subprocess.run(cmd, capture_output=True, text=True, timeout=timeout, env=env), hosts_file


def results(tmp_path):
    return {path.name[:-5]: json.loads(path.read_text()) for path in tmp_path.glob("*.json")}


def sample(t, r):
    g = torch.Generator().manual_seed(1000 * t + r)
    x = torch.randn(DIM, generator=g, dtype=torch.float64)
    return x, x.sum() * 0.5


def reference(sizes):
    """The weights after one step per entry of `sizes` (the world size of
    that step), trained in one process as the workers train together."""
    torch.manual_seed(0)
    model = torch.nn.Linear(DIM, 1, bias=False).double()
    optimizer = torch.optim.SGD(model.parameters(), lr=0.05)
    for t, n in enumerate(sizes):
        grads = []
        for r in range(n):
            optimizer.zero_grad()
            x, y = sample(t, r)
            (model(x) - y).pow(2).sum().backward()
            grads.append(model.weight.grad.clone())
        model.weight.grad = sum(grads) / n
        optimizer.step()
    return model.weight.detach().flatten().tolist()


def describe(run):
    return f"exit {run.returncode}\nstdout:\n{run.stdout}\nstderr:\n{run.stderr}"


def test_survivors_of_a_killed_worker_resume_from_the_last_commit(tmp_path):
    run, _ = horarun(tmp_path, ["127.0.0.1:4"], ["--min-np", "3", "--max-np", "4", "--elastic-timeout", "30"],
                     ["--kill", "127.0.0.1:3@10"])
    assert run.returncode == 0, describe(run)
    assert "horarun: worker 127.0.0.1:3 killed by signal 9 (SIGKILL); blacklisting host 127.0.0.1" in run.stderr
    assert "horarun: elastic round 1: 3 workers (127.0.0.1:0 rank 0, 127.0.0.1:1 rank 1, 127.0.0.1:2 rank 2)" \
        in run.stderr, describe(run)
    done = results(tmp_path)
    assert sorted(done) == ["127.0.0.1:0", "127.0.0.1:1", "127.0.0.1:2"], describe(run)
    for worker, result in done.items():
        first, second = result["rounds"]
        assert (first["round"], first["size"], first["from_step"]) == (0, 4, 0)
        # Step 10's allreduce failed: back to the commit after step 9 (10 steps done).
        assert (second["round"], second["size"], second["from_step"]) == (1, 3, 10), result
        assert second["rank"] == first["rank"]   # survivors keep their order
    expected = reference([4] * 10 + [3] * (STEPS - 10))
    for result in done.values():
        assert result["weights"] == pytest.approx(expected, abs=1e-5)
    killed_at = float((tmp_path / "killed_at").read_text())
    resumed = max(result["rounds"][1]["at"] for result in done.values())
    print(f"from the worker's death to training on the survivors: {resumed - killed_at:.2f} s")


def test_workers_found_by_discovery_join_and_receive_the_state(tmp_path):
    hosts = tmp_path / "hosts"
    run, _ = horarun(tmp_path, ["127.0.0.1:2"], ["--min-np", "2", "--max-np", "4"],
                     ["--grow", f"{hosts}@6:127.0.0.2:2", "--step-time", "0.5"])
    assert run.returncode == 0, describe(run)
    done = results(tmp_path)
    assert sorted(done) == ["127.0.0.1:0", "127.0.0.1:1", "127.0.0.2:0", "127.0.0.2:1"], describe(run)
    joined_at = min(done[w]["rounds"][0]["from_step"] for w in ("127.0.0.2:0", "127.0.0.2:1"))
    assert joined_at >= 6
    for worker in ("127.0.0.1:0", "127.0.0.1:1"):
        first, second = done[worker]["rounds"]
        assert (first["size"], first["from_step"]) == (2, 0)
        # A new round is not a failure: nothing rolls back.
        assert (second["size"], second["from_step"]) == (4, joined_at), done[worker]
    for worker in ("127.0.0.2:0", "127.0.0.2:1"):
        (only,) = done[worker]["rounds"]
        assert (only["size"], only["from_step"]) == (4, joined_at)
        assert only["rank"] in (2, 3)   # newcomers follow the survivors
    expected = reference([2] * joined_at + [4] * (STEPS - joined_at))
    for result in done.values():
        assert result["weights"] == pytest.approx(expected, abs=1e-5)
    grown_at = float((tmp_path / "grown_at").read_text())
    trained = max(done[w]["rounds"][0]["at"] for w in ("127.0.0.2:0", "127.0.0.2:1"))
    print(f"from the new host's listing to training with the new workers: {trained - grown_at:.2f} s")


def task_reference(task, sizes):
    """Task `task`'s weights after one step per entry of `sizes` (its set's size)."""
    torch.manual_seed(task)
    model = torch.nn.Linear(DIM, 1, bias=False).double()
    optimizer = torch.optim.SGD(model.parameters(), lr=0.05)
    for t, n in enumerate(sizes):
        grads = []
        for r in range(n):
            g = torch.Generator().manual_seed(100000 * task + 1000 * t + r)
            x = torch.randn(DIM, generator=g, dtype=torch.float64)
            y = x.sum() * (0.5 if task == 0 else -0.25)
            optimizer.zero_grad()
            (model(x) - y).pow(2).sum().backward()
            grads.append(model.weight.grad.clone())
        model.weight.grad = sum(grads) / n
        optimizer.step()
    return model.weight.detach().flatten().tolist()


def test_sets_are_remade_by_spec_and_only_the_broken_task_rolls_back(tmp_path):
    hosts = tmp_path / "hosts"
    hosts.write_text("127.0.0.1:4\n")
    cmd = [sys.executable, "-m", "hora.runner", "--min-np", "3", "--max-np", "4", "--elastic-timeout", "30",
           "--host-discovery-script", f"cat {hosts}", sys.executable, os.path.join(HERE, "workers", "elastic_tasks.py"),
           str(tmp_path), "20", "--kill", "127.0.0.1:3@8"]
    env = dict(os.environ, HORA_ELASTIC_DISCOVERY_INTERVAL="0.2", OMP_NUM_THREADS="1")
    run = subprocess.run(cmd, capture_output=True, text=True, timeout=120, env=env)
    assert run.returncode == 0, describe(run)
    done = results(tmp_path)
    assert sorted(done) == ["127.0.0.1:0", "127.0.0.1:1", "127.0.0.1:2"], describe(run)
    # Even and odd stay even and odd in the world of 3: [0, 2] and [1].
    assert [r["set"] for r in done["127.0.0.1:0"]["rounds"]] == [[0, 2], [0, 2]]
    assert [r["set"] for r in done["127.0.0.1:1"]["rounds"]] == [[1, 3], [1]]
    # The odd task lost a member at its step 8: back to its commit of 8 steps.
    assert done["127.0.0.1:1"]["rounds"][1]["from_step"] == 8
    assert done["127.0.0.1:1"]["weights"] == pytest.approx(task_reference(1, [2] * 8 + [1] * 12), abs=1e-5)
    # The even task lost nobody: both its workers went on from the same step,
    # wherever the task was when the odd worker died (the tasks run at their
    # own pace), no step lost or repeated.
    even_from = done["127.0.0.1:0"]["rounds"][1]["from_step"]
    assert even_from >= 1 and done["127.0.0.1:2"]["rounds"][1]["from_step"] == even_from
    for worker in ("127.0.0.1:0", "127.0.0.1:2"):
        assert done[worker]["weights"] == pytest.approx(task_reference(0, [2] * 20), abs=1e-5)


def test_too_few_workers_for_longer_than_the_elastic_timeout_ends_the_job(tmp_path):
    run, _ = horarun(tmp_path, ["127.0.0.1:4"], ["--min-np", "4", "--elastic-timeout", "2"],
                     ["--kill", "127.0.0.1:3@3"])
    assert run.returncode == 1, describe(run)
    assert "horarun: elastic job stopped: fewer than --min-np 4 workers (3) for longer than " \
           "--elastic-timeout 2 s" in run.stderr, describe(run)
    assert not results(tmp_path)


def test_a_job_whose_every_worker_fails_stops_at_once(tmp_path):
    hosts = tmp_path / "hosts"
    hosts.write_text("127.0.0.1:2\n")
    cmd = [sys.executable, "-m", "hora.runner", "--min-np", "2", "--host-discovery-script", f"cat {hosts}",
           sys.executable, "-c", "import sys; sys.exit(3)"]
    run = subprocess.run(cmd, capture_output=True, text=True, timeout=60,
                         env=dict(os.environ, HORA_ELASTIC_DISCOVERY_INTERVAL="0.2"))
    assert run.returncode == 1, describe(run)
    assert "no worker is left and every listed host is blacklisted for good (the last failure: worker " \
           "127.0.0.1:" in run.stderr and "exited with code 3)" in run.stderr, describe(run)


def test_the_reset_limit_ends_the_job(tmp_path):
    run, _ = horarun(tmp_path, ["127.0.0.1:3"], ["--min-np", "2", "--max-np", "3", "--reset-limit", "0"],
                     ["--kill", "127.0.0.1:2@3"])
    assert run.returncode == 1, describe(run)
    assert "horarun: elastic job stopped: the workers changed 1 times, more than --reset-limit 0" \
        in run.stderr, describe(run)


def test_a_blacklisted_host_comes_back_after_its_cooldown(tmp_path):
    # The killed worker's host gets no worker for 1-2 s, then its slot is
    # filled again and the world grows back to 3.
    run, _ = horarun(tmp_path, ["127.0.0.1:3"], ["--min-np", "2", "--max-np", "3",
                                                  "--blacklist-cooldown-range", "1", "2"],
                     ["--kill", "127.0.0.1:2@3", "--step-time", "0.3"])
    assert run.returncode == 0, describe(run)
    done = results(tmp_path)
    assert sorted(done) == ["127.0.0.1:0", "127.0.0.1:1", "127.0.0.1:2"], describe(run)
    sizes = [r["size"] for r in done["127.0.0.1:0"]["rounds"]]
    assert sizes[:2] == [3, 2] and sizes[-1] == 3, done["127.0.0.1:0"]


@pytest.mark.parametrize("args, message", [
    (["--min-np", "2", "x"], "an elastic job (--min-np/--max-np) needs --host-discovery-script"),
    (["--min-np", "3", "--max-np", "2", "--host-discovery-script", "d", "x"], "--max-np 2 is below --min-np 3"),
    (["-np", "5", "--min-np", "1", "--max-np", "4", "--host-discovery-script", "d", "x"],
     "-np 5 is outside --min-np 1 .. --max-np 4"),
    (["--min-np", "2", "--host-discovery-script", "d", "--mpi", "x"], "--mpi does not apply to an elastic job"),
    (["--min-np", "2", "--host-discovery-script", "d", "--blacklist-cooldown-range", "5", "1", "x"],
     "--blacklist-cooldown-range needs 0 <= MIN <= MAX, got 5 1"),
    (["--min-np", "2", "--host-discovery-script", "d", "--elastic-timeout", "0", "x"],
     "--elastic-timeout must be positive"),
    (["-np", "2", "--reset-limit", "3", "x"], "--reset-limit applies to elastic jobs only"),
    (["x"], "-np is required"),
])
def test_bad_elastic_flags_are_refused(args, message):
    with pytest.raises(ValueError, match=message.replace("(", r"\(").replace(")", r"\)").replace(".", r"\.")):
        launch.parse_args(args, raise_errors=True)


def test_discovery_output_and_round_plans():
    assert driver.parse_discovery_output("a:2\n# comment\n\nb\n", 3, "s") == {"a": 2, "b": 3}
    for text, message in (("a", "gives no slots"), ("a:x", "is not host or host:slots"), ("a:0", "has no slots")):
        with pytest.raises(driver.ElasticError, match=message):
            driver.parse_discovery_output(text, None, "s")
    plan = driver.plan_round(["a:1", "b:0"], ["a:0", "c:0"], {"a:1": "a", "b:0": "b", "a:0": "a", "c:0": "c"})
    # rank, size, local rank, local size, cross rank, cross size
    assert plan == {"a:1": [0, 4, 0, 2, 0, 3], "b:0": [1, 4, 0, 1, 1, 3], "a:0": [2, 4, 1, 2, 0, 1],
                    "c:0": [3, 4, 0, 1, 2, 3]}


def test_set_specs_are_evaluated_for_each_world():
    even = lambda size: range(0, size, 2)  # noqa: E731
    assert worker_side.evaluate_spec(even, 4) == [0, 2] and worker_side.evaluate_spec(even, 3) == [0, 2]
    assert [list(worker_side.Parts(2, i)(3)) for i in range(2)] == [[0, 1], [2]]
    assert worker_side.evaluate_spec([3, 1], 4) == [1, 3]
    with pytest.raises(ValueError, match=r"gives rank\(s\) \[3\] outside the world of 3 ranks"):
        worker_side.evaluate_spec([1, 3], 3)
    with pytest.raises(ValueError, match="not a collection of ranks"):
        worker_side.evaluate_spec(lambda size: None, 3)
    with pytest.raises(ValueError, match="need count >= 1"):
        worker_side.Parts(2, 2)


def test_elastic_sampler_keeps_its_progress_through_a_state():
    import hora.torch as hvd

    hvd.init()
    try:
        sampler = hvd.elastic.ElasticSampler(list(range(10)), shuffle=False)
        assert list(sampler) == list(range(10))
        sampler.record_batch(0, 3)
        state = hvd.elastic.TorchState(sampler=sampler, step=1)
        state.commit()   # not an elastic job: nothing to check after saving
        sampler.record_batch(1, 3)
        state.restore()
        assert sampler.processed_indices == {0, 1, 2}
        sampler.reset()
        assert list(sampler) == list(range(3, 10)) and len(sampler) == 7
        sampler.set_epoch(1)
        assert len(sampler) == 10 and not sampler.processed_indices
        shuffled = hvd.elastic.ElasticSampler(list(range(10)), seed=3)
        assert sorted(shuffled) == list(range(10)) and list(shuffled) != list(range(10))
    finally:
        hvd.shutdown()
