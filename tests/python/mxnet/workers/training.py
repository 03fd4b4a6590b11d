"""Gluon training on process sets, on 4 ranks: broadcast_parameters (on the
global set, on [1,2,3] and for a net whose initialization is deferred);
DistributedTrainer and DistributedOptimizer on the pairs [0,1] and [2,3] at
once with half batches, and on the global set with quarter batches, each
matching one process trained on the whole batch. Prints one line per check:

    ok <check> <set> <dtype>        (or FAIL ... and the error)
"""

import sys
import traceback

import mxnet as mx
import numpy as np
from mxnet import autograd, gluon

import hora.mxnet as hvd

hvd.init()
me = hvd.rank()
assert hvd.size() == 4
failures = 0
BATCH = 8
STEPS = 3


def report(check, label, fn):
    global failures
    try:
        fn()
        line = f"ok {check} {label} float32\n"
    except Exception:
        failures += 1
        line = f"FAIL {check} {label} float32\n{traceback.format_exc()}"
    sys.stdout.write(line)
    sys.stdout.flush()


def make_net(in_units=3):
    """A small MLP whose initial values differ on every rank. Its parameters
    are named by explicit prefixes: Gluon's own names count the blocks a
    process made, which differs between ranks here."""
    mx.random.seed(100 + me)
    net = gluon.nn.Sequential(prefix="mlp_")
    with net.name_scope():
        net.add(gluon.nn.Dense(5, in_units=in_units, activation="tanh", prefix="hidden_"),
                gluon.nn.Dense(1, in_units=5 if in_units else 0, prefix="out_"))
    net.initialize(mx.init.Uniform(0.5))
    return net


def values(net):
    return {name: p.data().asnumpy() for name, p in net.collect_params().items()}


def same_as_root(net, root, ps):
    gathered = hvd.allgather_object((hvd.rank(), values(net)), process_set=ps)
    reference = dict(gathered)[root]
    for rank, theirs in gathered:
        for name, value in theirs.items():
            assert np.array_equal(value, reference[name]), f"{name} on rank {rank} differs from root {root}"


def check_broadcast_parameters(label, ps, root):
    net = make_net()
    hvd.broadcast_parameters(net.collect_params(), root_rank=root, prefix=f"{label}.", process_set=ps)
    same_as_root(net, root, ps)


def check_deferred(label, ps, root):
    net = make_net(in_units=0)  # shapes known only after the first forward pass
    hvd.broadcast_parameters(net.collect_params(), root_rank=root, prefix="deferred.", process_set=ps)
    net(mx.nd.ones((2, 3)))
    same_as_root(net, root, ps)


def data(seed):
    rng = np.random.RandomState(seed)
    x = rng.uniform(-1, 1, (BATCH, 3)).astype(np.float32)
    y = (x @ np.array([[1.0], [-2.0], [0.5]], dtype=np.float32) + 0.3).astype(np.float32)
    return mx.nd.array(x), mx.nd.array(y)


def train(net, trainer, x, y):
    loss = gluon.loss.L2Loss()
    for _ in range(STEPS):
        with autograd.record():
            out = loss(net(x), y)
        out.backward()
        trainer.step(x.shape[0])


def check_matches_one_process(make_trainer, ps, ranks, tolerance):
    """Each member trains on its slice of the batch; one local net trains on
    the whole batch from the same start; their parameters must agree."""
    root, n, i = ranks[0], len(ranks), ranks.index(me)
    net = make_net()
    hvd.broadcast_parameters(net.collect_params(), root_rank=root, process_set=ps)
    alone = make_net()
    for (_, mine), (_, theirs) in zip(sorted(net.collect_params().items()), sorted(alone.collect_params().items())):
        theirs.set_data(mine.data())
    start = values(net)
    x, y = data(seed=ranks[0])
    part = BATCH // n
    train(net, make_trainer(net.collect_params(), ps), x[i * part:(i + 1) * part], y[i * part:(i + 1) * part])
    train(alone, gluon.Trainer(alone.collect_params(), "sgd", {"learning_rate": 0.1}, kvstore=None), x, y)
    for (name, mine), (_, theirs) in zip(sorted(values(net).items()), sorted(values(alone).items())):
        assert np.allclose(mine, theirs, rtol=tolerance, atol=tolerance), f"{name}:\n{mine}\n!=\n{theirs}"
        assert not np.allclose(mine, start[name], rtol=0, atol=1e-4), f"training did not change {name}"


def trainer(params, ps):
    return hvd.DistributedTrainer(params, "sgd", {"learning_rate": 0.1}, process_set=ps)


def trainer_fp16_groups(params, ps):
    return hvd.DistributedTrainer(params, "sgd", {"learning_rate": 0.1}, compression=hvd.Compression.fp16,
                                  num_groups=2, gradient_predivide_factor=2.0, prefix="fp16.", process_set=ps)


def optimizer(params, ps):
    wrapped = hvd.DistributedOptimizer(mx.optimizer.SGD(learning_rate=0.1), process_set=ps)
    return gluon.Trainer(params, wrapped, kvstore=None)


pair = hvd.ProcessSet([0, 1]) if me < 2 else hvd.ProcessSet([2, 3])
pair_label = "pair01" if me < 2 else "pair23"
upper = hvd.ProcessSet([1, 2, 3])
report("broadcast_parameters", "global", lambda: check_broadcast_parameters("global", hvd.global_process_set, 2))
if upper.included():
    report("broadcast_parameters", "upper", lambda: check_broadcast_parameters("upper", upper, 3))
report("broadcast_parameters_deferred", "global", lambda: check_deferred("global", hvd.global_process_set, 1))
report("trainer_half_batches", pair_label, lambda: check_matches_one_process(trainer, pair, pair.ranks, 1e-5))
report("optimizer_half_batches", pair_label, lambda: check_matches_one_process(optimizer, pair, pair.ranks, 1e-5))
report("trainer_quarter_batches", "global",
       lambda: check_matches_one_process(trainer, hvd.global_process_set, [0, 1, 2, 3], 1e-5))
report("trainer_fp16_groups", "global",
       lambda: check_matches_one_process(trainer_fp16_groups, hvd.global_process_set, [0, 1, 2, 3], 1e-2))
hvd.barrier()
print(f"training done failures={failures}", flush=True)
