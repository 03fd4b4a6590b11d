"""Functions the Spark and Ray tests run on every rank of a job. The ranks
cannot import this module, so the tests send these by value (cloudpickle)."""

import os


def coordinates():
    """This rank's coordinates, and a collective that checks the world."""
    import numpy as np

    import hora.numpy as hvd

    hvd.init()
    total = hvd.allreduce(np.array([float(hvd.rank() + 1)]), op=hvd.Sum)
    return {"rank": hvd.rank(), "size": hvd.size(), "local_rank": hvd.local_rank(),
            "local_size": hvd.local_size(), "cross_rank": hvd.cross_rank(), "cross_size": hvd.cross_size(),
            "sum": float(total[0]), "pid": os.getpid()}


def regression(seed, steps=15):
    """SGD on a small linear regression, gradients averaged over this
    rank's set: ranks 0 and 1 train one task, ranks 2 and 3 another (or the
    whole world trains one, at size 2). Returns (the task's seed, its
    weights); a task's weights depend only on its seed and its two members'
    data, not on what the other task does."""
    import numpy as np

    import hora.numpy as hvd

    hvd.init()
    if hvd.size() == 2:
        task, process_set = 0, hvd.global_process_set
    else:
        task = hvd.rank() // 2
        process_set = hvd.add_process_set([2 * task, 2 * task + 1])
    seed = seed[task] if isinstance(seed, (list, tuple)) else seed
    rng = np.random.default_rng(1000 * seed + process_set.rank())
    x = rng.normal(size=(32, 4))
    y = x @ np.array([1.0, -2.0, 0.5, 3.0]) + 0.1 * rng.normal(size=32)
    w = np.zeros(4)
    for _ in range(steps):
        grad = 2 * x.T @ (x @ w - y) / len(y)
        w -= 0.05 * process_set.allreduce(grad, op=hvd.Average)
    return seed, w.tolist()


def fail_on_rank_one():
    """Rank 1 raises after the first collective; the others wait in the next."""
    import numpy as np

    import hora.numpy as hvd

    hvd.init()
    hvd.allreduce(np.ones(1))
    if hvd.rank() == 1:
        raise ValueError("rank 1 found a NaN loss")
    for _ in range(1000):
        hvd.allreduce(np.ones(1))
    return "finished"


def collectives_forever():
    """Collectives until the job is stopped from outside."""
    import time

    import numpy as np

    import hora.numpy as hvd

    hvd.init()
    while True:
        hvd.allreduce(np.ones(1))
        time.sleep(0.01)


def secret_is_checked():
    """Whether the job's rendezvous refuses a client with a wrong secret
    (and serves one with the right secret)."""
    from hora.runner.rendezvous import BadSecretError, RendezvousClient

    address, port = os.environ["HORA_RENDEZVOUS_ADDR"], os.environ["HORA_RENDEZVOUS_PORT"]
    with RendezvousClient(address, port, os.environ["HORA_SECRET"]) as right:
        right.ping()
    try:
        with RendezvousClient(address, port, "not-the-job-secret") as wrong:
            wrong.ping()
    except BadSecretError as error:   # at the handshake, before any request
        return str(error)
    return None


def child_processes(marker):
    """The pids of running processes whose command line holds `marker`."""
    pids = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/cmdline", "rb") as f:
                command = f.read()
        except OSError:
            continue
        if marker.encode() in command:
            pids.append(int(entry))
    return pids


def horovod_training(steps=3):
    """A Horovod script's training loop (horovod.torch through the shim);
    returns the model's weights, which every rank must agree on."""
    import torch

    import horovod.torch as hvd

    hvd.init()
    torch.manual_seed(hvd.rank())   # different data and initial weights per rank
    model = torch.nn.Linear(4, 1)
    optimizer = hvd.DistributedOptimizer(torch.optim.SGD(model.parameters(), lr=0.1),
                                         named_parameters=model.named_parameters())
    hvd.broadcast_parameters(model.state_dict(), root_rank=0)
    for _ in range(steps):
        x = torch.randn(8, 4)
        loss = ((model(x) - 1.0) ** 2).mean()
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
    return [p.detach().flatten().tolist() for p in model.parameters()]


def elastic_sample(step, rank):
    """The sample rank `rank` trains on at `step` in elastic_regression."""
    import numpy as np

    x = np.random.default_rng(1000 * step + rank).normal(size=4)
    return x, 0.5 * x.sum()


def elastic_reference(steps, sizes):
    """The weights elastic_regression reaches when step t runs on
    sizes(t) ranks."""
    import numpy as np

    w = np.zeros(4)
    for step in range(steps):
        grads = []
        for rank in range(sizes(step)):
            x, y = elastic_sample(step, rank)
            grads.append(2 * (x @ w - y) * x)
        w = w - 0.05 * np.mean(grads, axis=0)
    return w.tolist()


def elastic_regression(steps, kill_worker=None, kill_step=None, step_time=0.0):
    """Elastic training (hora.common.elastic): SGD on a linear model, the
    state committed after every step. The worker named `kill_worker`
    (its slot, e.g. ':3') SIGKILLs itself before `kill_step` in round 0.
    Returns the worker's id, final weights and the (round, size, from
    step) of each round it trained in."""
    import signal
    import time

    import numpy as np

    import hora.numpy as hvd
    from hora.common import elastic

    worker = os.environ["HORA_WORKER_ID"]
    hvd.init()
    state = elastic.ObjectState(w=np.zeros(4), step=0)
    rounds = []

    @elastic.run
    def train(state):
        rounds.append((elastic.current_round(), hvd.size(), state.step))
        while state.step < steps:
            if kill_worker and worker.endswith(kill_worker) and state.step == kill_step and \
                    elastic.current_round() == 0:
                os.kill(os.getpid(), signal.SIGKILL)
            x, y = elastic_sample(state.step, hvd.rank())
            grad = hvd.allreduce(2 * (x @ state.w - y) * x, op=hvd.Average)
            state.w = state.w - 0.05 * grad
            state.step += 1
            time.sleep(step_time)
            state.commit()

    train(state)
    hvd.shutdown()
    return {"worker": worker, "w": state.w.tolist(), "rounds": rounds}
