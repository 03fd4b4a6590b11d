"""Training steps per second: hora's DistributedOptimizer beside torch's
DistributedDataParallel and one process, on real models, in one run.

    python benchmarks/training_step.py                          # 2 ranks on this host, every model
    python benchmarks/training_step.py --models transformer,mlp --rounds 1
    sudo python benchmarks/training_step.py --hosts 2 --per-host 1 2 --rates none 10gbit
    python benchmarks/training_step.py --two-tasks              # 4 ranks: two tasks at once vs alone
    python benchmarks/training_step.py --keras                  # Keras: hora.keras vs MultiWorkerMirroredStrategy
    .venv-mxnet/bin/python benchmarks/training_step.py --mxnet  # MXNet Gluon: hora's trainer and optimizer

Models (float32, SGD, torch.set_num_threads(1) in every rank):
- transformer: nn.TransformerEncoder, 6 layers, d_model 64, 4 heads; batch 8 x 32 tokens (72 tensors);
- cnn: 19 conv + batch-norm blocks and a linear head, 16 channels on 16 x 16 images, batch 8 (59 tensors);
- mlp: 20 linear layers of 64, batch 32 (40 small tensors);
- big: 4 linear layers of 2048 x 2048, batch 16 (67 MB of gradients: bound by communication).
Peers, each its own job: one process (the same per-rank batch, no communication);
hora: hora.torch's DistributedOptimizer with its defaults (what users get); ddp: torch's
DistributedDataParallel on Gloo with its default buckets. Each rank times --steps steps after a
warm-up; a job's figure is its slowest rank's steps/s, and a peer's the median over --rounds jobs run
in rotating order. Prints steps/s, hora over ddp, and scaling efficiency (steps/s per rank over one
process's).

--hosts 2 runs the jobs on a simulated cluster (scripts/cluster.sh, as root): --per-host ranks on each
of two hosts, with each --rates limit on the links.

--keras: the Keras models below (Keras 3 on TensorFlow, one intra- and inter-op thread per rank), each
step a tf.function that takes the gradients on a GradientTape and applies them with a Keras SGD:
one process; hora (the optimizer wrapped in hora.keras.DistributedOptimizer, what Horovod's Keras users
write); mwms (tf.distribute.MultiWorkerMirroredStrategy over loopback gRPC, the step run by
strategy.run, the optimizer's own all-reduce of the gradients). Models: mlp, cnn and big as above (the
cnn in NHWC); the transformer is torch's only.

--mxnet (from .venv-mxnet): the same three models in Gluon (hybridized, one engine thread per rank):
one process (gluon.Trainer, SGD); hora.mxnet.DistributedTrainer; and gluon.Trainer over
hora.mxnet.DistributedOptimizer (the optimizer's per-update path). MXNet's own distributed kvstore needs
its parameter servers and is not a peer here; the figure to read is the scaling efficiency.

--two-tasks: 4 ranks on this host, two tasks on the sets [0, 1] and [2, 3], each training the model with
hora. "Together": both train. Against two figures of the first task alone: "alone, busy", while ranks 2
and 3 run the same model's steps with no communication (a load on the cores, so that what remains is
what the tasks' communication costs each other), and "alone, idle", while ranks 2 and 3 wait; together
over alone, idle is then set against the share of the cores each task has when both run (half, with 4
ranks on 2 cores). Every rank keeps stepping, untimed, until all have finished their timed steps, so
that no task times part of its steps with the cores to itself. Prints each task's steps/s together over
both, for hora and, on the same ranks, for torch DDP on two Gloo groups. Beside them, how fast two
memory-bound loops (64 MiB copied and added to, as a step's gradients are) run at once, each over one
alone: two tasks whose steps copy at the same moment share the memory bandwidth too. Not a test.
"""

import argparse
import os
import statistics
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(HERE)
sys.path.insert(0, HERE)
from jobs import free_port, print_result, run_job  # noqa: E402

MODELS = ("transformer", "cnn", "mlp", "big")
PEERS = ("single", "hora", "ddp")
# Apart from the clusters of tests/python/test_cluster.py (horat, horas) and
# cross_host.py (horab), so that one left by a stopped run stops none of them.
CLUSTER_NAME, CLUSTER_SUBNET = "horaw", "10.234.0"
HOSTS = [f"{CLUSTER_NAME}-host1", f"{CLUSTER_NAME}-host2"]
RATES = {"none": None, "10gbit": "10gbit"}


def build(name):
    """(model, batch maker, loss function) for `name`, the same on every rank (seeded)."""
    import torch
    from torch import nn

    torch.manual_seed(0)
    if name == "transformer":
        layer = nn.TransformerEncoderLayer(d_model=64, nhead=4, dim_feedforward=128, dropout=0.0, batch_first=True)
        model = nn.TransformerEncoder(layer, num_layers=6, enable_nested_tensor=False)
        shape = (8, 32, 64)
    elif name == "cnn":
        blocks = [nn.Conv2d(3, 16, 3, padding=1, bias=False), nn.BatchNorm2d(16), nn.ReLU()]
        for _ in range(18):
            blocks += [nn.Conv2d(16, 16, 3, padding=1, bias=False), nn.BatchNorm2d(16), nn.ReLU()]
        model = nn.Sequential(*blocks, nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Linear(16, 10))
        shape = (8, 3, 16, 16)
    elif name == "mlp":
        layers = []
        for _ in range(20):
            layers += [nn.Linear(64, 64), nn.ReLU()]
        model = nn.Sequential(*layers)
        shape = (32, 64)
    elif name == "big":
        model = nn.Sequential(*[m for _ in range(4) for m in (nn.Linear(2048, 2048), nn.ReLU())])
        shape = (16, 2048)
    else:
        raise SystemExit(f"unknown model {name!r}; choose from {', '.join(MODELS)}")
    generator = torch.Generator().manual_seed(1)
    batch = torch.randn(*shape, generator=generator)
    return model, batch, lambda output: output.float().pow(2).mean()


def timed_steps(step, steps, warm_up):
    for _ in range(warm_up):
        step()
    start = time.perf_counter()
    for _ in range(steps):
        step()
    return steps / (time.perf_counter() - start)


def two_task_steps(step, steps, warm_up, mode, flags, training, min_over_task):
    """A rank's steps/s in --two-tasks `mode` (0 for a rank that idles).
    After its timed steps the rank keeps loading the cores as before: it
    runs untimed steps until every rank of the job has finished its timed
    ones (a file each in `flags`). Otherwise a task that finishes first
    leaves the other the cores for the rest of its timed steps, which makes
    that one look faster than it trains beside the first. A rank that is
    `training` communicates in its steps, so its task's ranks agree on when
    all are done (`min_over_task(x)`: the least x over the task's ranks)
    and run as many steps."""
    stepping = training or mode != "idle"
    rate = timed_steps(step, steps, warm_up) if stepping else 0.0
    open(os.path.join(flags, f"done.{os.environ['HORA_RANK']}"), "w").close()
    size = int(os.environ["HORA_SIZE"])
    while stepping:
        done = all(os.path.exists(os.path.join(flags, f"done.{r}")) for r in range(size))
        if training:
            done = min_over_task(1.0 if done else 0.0) == 1.0
        if done:
            break
        step()
    return rate


def sgd_step(model, optimizer, batch, loss_of):
    def step():
        optimizer.zero_grad()
        loss_of(model(batch)).backward()
        optimizer.step()
    return step


def worker_single(model_name, steps, warm_up):
    import torch

    torch.set_num_threads(1)
    model, batch, loss_of = build(model_name)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.01)
    return timed_steps(sgd_step(model, optimizer, batch, loss_of), steps, warm_up)


def worker_hora(model_name, steps, warm_up, two_tasks=None, flags=None):
    import torch

    import hora.torch as hvd

    torch.set_num_threads(1)
    hvd.init()
    model, batch, loss_of = build(model_name)
    process_set = hvd.global_process_set
    if two_tasks is not None:
        first, second = hvd.ProcessSet([0, 1]), hvd.ProcessSet([2, 3])
        hvd.add_process_set(first)
        hvd.add_process_set(second)
        process_set = first if first.included() else second
    optimizer = torch.optim.SGD(model.parameters(), lr=0.01)
    hvd.broadcast_parameters(model.state_dict(), root_rank=process_set.ranks[0], process_set=process_set)
    training = two_tasks == "together" or process_set.ranks[0] == 0 or two_tasks is None
    if training:
        optimizer = hvd.DistributedOptimizer(optimizer, named_parameters=model.named_parameters(),
                                             process_set=process_set)
    hvd.barrier()
    step = sgd_step(model, optimizer, batch, loss_of)
    if two_tasks is None:
        rate = timed_steps(step, steps, warm_up)
    else:
        rate = two_task_steps(step, steps, warm_up, two_tasks, flags, training, lambda x: hvd.allreduce(
            torch.tensor([x]), op=hvd.Min, name="all_timed", process_set=process_set).item())
    hvd.barrier()
    hvd.shutdown()
    return {"rate": rate, "task": process_set.ranks[0]} if two_tasks is not None else rate


def worker_ddp(model_name, steps, warm_up, master, two_tasks=None, flags=None):
    import torch
    import torch.distributed as dist

    torch.set_num_threads(1)
    rank, size = int(os.environ["HORA_RANK"]), int(os.environ["HORA_SIZE"])
    dist.init_process_group("gloo", init_method=f"tcp://{master}", rank=rank, world_size=size)
    model, batch, loss_of = build(model_name)
    group, task = None, 0
    if two_tasks is not None:
        groups = [dist.new_group([0, 1]), dist.new_group([2, 3])]
        task = 0 if rank < 2 else 2
        group = groups[task // 2]
    training = two_tasks == "together" or task == 0 or two_tasks is None
    if training:
        model = torch.nn.parallel.DistributedDataParallel(model, process_group=group)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.01)
    dist.barrier()
    step = sgd_step(model, optimizer, batch, loss_of)
    if two_tasks is None:
        rate = timed_steps(step, steps, warm_up)
    else:
        def min_over_task(x):
            value = torch.tensor([x])
            dist.all_reduce(value, op=dist.ReduceOp.MIN, group=group)
            return value.item()
        rate = two_task_steps(step, steps, warm_up, two_tasks, flags, training, min_over_task)
    dist.barrier()
    dist.destroy_process_group()
    return {"rate": rate, "task": task} if two_tasks is not None else rate


def steps_for(model_name, steps):
    return max(5, steps // 10) if model_name == "big" else steps


def run_peer(peer, model_name, np_, args, launcher=(), env=None, two_tasks=None):
    steps = steps_for(model_name, args.steps)
    master = f"{HOSTS[0] if args.hosts else '127.0.0.1'}:{free_port()}"
    argv = [sys.executable, os.path.abspath(__file__), "--worker", peer, "--models", model_name,
            "--steps", str(steps), "--master", master]
    if peer == "single":
        np_, launcher = 1, ()
    with tempfile.TemporaryDirectory(prefix="hora-two-tasks-") as flags:
        if two_tasks:
            argv += ["--two-tasks-mode", two_tasks, "--flags", flags]
        per_rank = run_job(np_, argv, env, launcher_args=launcher, cwd=REPO, timeout=1800,
                           what=f"{peer} {model_name}")
    if two_tasks:
        return {task: min(r["rate"] for r in per_rank if r["task"] == task) for task in (0, 2)}
    return min(per_rank)


def rotated_medians(peers, rounds, run):
    """Each peer's median of run(peer) over `rounds` rounds, the peers'
    order rotating from round to round."""
    values = {peer: [] for peer in peers}
    for r in range(rounds):
        shift = r % len(peers)
        for peer in peers[shift:] + peers[:shift]:
            values[peer].append(run(peer))
    return {peer: statistics.median(v) for peer, v in values.items()}


def table(models, np_, args, launcher=(), env=None, where="this host"):
    print(f"\ntraining steps/s, {np_} ranks on {where} (slowest rank, median of {args.rounds} rounds)")
    print(f"{'model':>12} {'one process':>12} {'hora':>9} {'ddp':>9} {'hora/ddp':>9} "
          f"{'hora eff.':>10} {'ddp eff.':>9}", flush=True)
    for model_name in models:
        rate = rotated_medians(PEERS, args.rounds,
                               lambda peer: run_peer(peer, model_name, np_, args, launcher, env))
        print(f"{model_name:>12} {rate['single']:>12.1f} {rate['hora']:>9.1f} {rate['ddp']:>9.1f} "
              f"{rate['hora'] / rate['ddp']:>8.2f}x {rate['hora'] / rate['single']:>9.0%} "
              f"{rate['ddp'] / rate['single']:>8.0%}", flush=True)


KERAS_MODELS = ("mlp", "cnn", "big")
KERAS_PEERS = ("single", "hora", "mwms")


def keras_threads():
    import tensorflow as tf

    tf.config.threading.set_intra_op_parallelism_threads(1)
    tf.config.threading.set_inter_op_parallelism_threads(1)


def build_keras(name):
    """(model, batch) for `name` in Keras, the same on every rank (seeded)."""
    import keras
    from keras import layers

    keras.utils.set_random_seed(0)
    if name == "mlp":
        model = keras.Sequential([keras.Input((64,))] + [layers.Dense(64, activation="relu") for _ in range(20)])
        shape = (32, 64)
    elif name == "cnn":
        blocks = [keras.Input((16, 16, 3))]
        for _ in range(19):
            blocks += [layers.Conv2D(16, 3, padding="same", use_bias=False), layers.BatchNormalization(),
                       layers.ReLU()]
        model = keras.Sequential(blocks + [layers.GlobalAveragePooling2D(), layers.Dense(10)])
        shape = (8, 16, 16, 3)
    elif name == "big":
        model = keras.Sequential([keras.Input((2048,))] + [layers.Dense(2048, activation="relu") for _ in range(4)])
        shape = (16, 2048)
    else:
        raise SystemExit(f"unknown Keras model {name!r}; choose from {', '.join(KERAS_MODELS)}")
    batch = keras.random.normal(shape, seed=1)
    return model, batch


def keras_step(model, optimizer, batch, scale=1.0):
    import tensorflow as tf

    def step():
        with tf.GradientTape() as tape:
            loss = tf.reduce_mean(tf.square(model(batch, training=True))) * scale
        grads = tape.gradient(loss, model.trainable_variables)
        optimizer.apply_gradients(zip(grads, model.trainable_variables))
    return step


def worker_keras(peer, model_name, steps, warm_up, master):
    import json

    keras_threads()
    import keras
    import tensorflow as tf

    if peer == "single":
        model, batch = build_keras(model_name)
        step = tf.function(keras_step(model, keras.optimizers.SGD(0.01), batch))
        return timed_steps(step, steps, warm_up)
    if peer == "hora":
        import hora.keras as hvd
        import hora.tensorflow as htf

        hvd.init()
        model, batch = build_keras(model_name)
        optimizer = hvd.DistributedOptimizer(keras.optimizers.SGD(0.01))
        step = tf.function(keras_step(model, optimizer, batch))
        step()  # builds the variables, which the broadcast then makes equal
        htf.broadcast_variables(model.variables, root_rank=0)
        htf.barrier()
        rate = timed_steps(step, steps, warm_up)
        htf.barrier()
        hvd.shutdown()
        return rate
    rank, size = int(os.environ["HORA_RANK"]), int(os.environ["HORA_SIZE"])
    os.environ["TF_CONFIG"] = json.dumps({"cluster": {"worker": master.split(",")},
                                          "task": {"type": "worker", "index": rank}})
    strategy = tf.distribute.MultiWorkerMirroredStrategy()
    with strategy.scope():
        model, batch = build_keras(model_name)
        optimizer = keras.optimizers.SGD(0.01)
    replica_step = keras_step(model, optimizer, batch, scale=1.0 / size)

    @tf.function
    def step():
        strategy.run(replica_step)
    return timed_steps(step, steps, warm_up)


def keras_table(models, args):
    print(f"\nKeras training steps/s, {args.np} ranks on this host (slowest rank, median of {args.rounds} rounds)")
    print(f"{'model':>12} {'one process':>12} {'hora':>9} {'mwms':>9} {'hora/mwms':>10} "
          f"{'hora eff.':>10} {'mwms eff.':>10}", flush=True)
    for model_name in models:
        def run(peer):
            np_ = 1 if peer == "single" else args.np
            master = ",".join(f"127.0.0.1:{free_port()}" for _ in range(np_))
            argv = [sys.executable, os.path.abspath(__file__), "--worker", "keras-" + peer, "--models",
                    model_name, "--steps", str(steps_for(model_name, args.steps)), "--master", master]
            return min(run_job(np_, argv, {"TF_CPP_MIN_LOG_LEVEL": "2"}, cwd=REPO, timeout=1800,
                               what=f"keras {peer} {model_name}"))
        rate = rotated_medians(KERAS_PEERS, args.rounds, run)
        print(f"{model_name:>12} {rate['single']:>12.1f} {rate['hora']:>9.1f} {rate['mwms']:>9.1f} "
              f"{rate['hora'] / rate['mwms']:>9.2f}x {rate['hora'] / rate['single']:>9.0%} "
              f"{rate['mwms'] / rate['single']:>9.0%}", flush=True)


MXNET_PEERS = ("single", "trainer", "optimizer")


def build_gluon(name):
    """(net, batch) for `name` in Gluon, the same on every rank (seeded)."""
    import mxnet as mx
    from mxnet.gluon import nn

    mx.random.seed(0)
    net = nn.HybridSequential()
    if name == "mlp":
        for _ in range(20):
            net.add(nn.Dense(64, activation="relu"))
        shape = (32, 64)
    elif name == "cnn":
        for _ in range(19):
            net.add(nn.Conv2D(16, 3, padding=1, use_bias=False), nn.BatchNorm(), nn.Activation("relu"))
        net.add(nn.GlobalAvgPool2D(), nn.Flatten(), nn.Dense(10))
        shape = (8, 3, 16, 16)
    elif name == "big":
        for _ in range(4):
            net.add(nn.Dense(2048, activation="relu"))
        shape = (16, 2048)
    else:
        raise SystemExit(f"unknown MXNet model {name!r}; choose from {', '.join(KERAS_MODELS)}")
    net.initialize(mx.init.Xavier())
    net.hybridize()
    batch = mx.nd.random.normal(shape=shape)
    return net, batch


def worker_mxnet(peer, model_name, steps, warm_up):
    os.environ.setdefault("MXNET_CPU_WORKER_NTHREADS", "1")
    os.environ.setdefault("OMP_NUM_THREADS", "1")
    import mxnet as mx
    from mxnet import autograd, gluon

    net, batch = build_gluon(model_name)
    net(batch).wait_to_read()  # shapes the parameters
    params = net.collect_params()
    if peer == "single":
        trainer = gluon.Trainer(params, "sgd", {"learning_rate": 0.01})
    else:
        import hora.mxnet as hvd

        hvd.init()
        hvd.broadcast_parameters(params, root_rank=0)
        if peer == "trainer":
            trainer = hvd.DistributedTrainer(params, "sgd", {"learning_rate": 0.01})
        else:
            optimizer = hvd.DistributedOptimizer(mx.optimizer.SGD(learning_rate=0.01))
            trainer = gluon.Trainer(params, optimizer, kvstore=None)

    def step():
        with autograd.record():
            loss = (net(batch) ** 2).mean()
        loss.backward()
        trainer.step(batch.shape[0])
        mx.nd.waitall()
    rate = timed_steps(step, steps, warm_up)
    if peer != "single":
        hvd.barrier()
        hvd.shutdown()
    return rate


def mxnet_table(models, args):
    print(f"\nMXNet Gluon training steps/s, {args.np} ranks on this host (slowest rank, median of {args.rounds} "
          f"rounds)")
    print(f"{'model':>12} {'one process':>12} {'trainer':>9} {'optimizer':>10} {'trainer eff.':>13} "
          f"{'optimizer eff.':>15}", flush=True)
    for model_name in models:
        def run(peer):
            np_ = 1 if peer == "single" else args.np
            argv = [sys.executable, os.path.abspath(__file__), "--worker", "mxnet-" + peer, "--models",
                    model_name, "--steps", str(steps_for(model_name, args.steps))]
            return min(run_job(np_, argv, cwd=REPO, timeout=1800, what=f"mxnet {peer} {model_name}"))
        rate = rotated_medians(MXNET_PEERS, args.rounds, run)
        print(f"{model_name:>12} {rate['single']:>12.1f} {rate['trainer']:>9.1f} {rate['optimizer']:>10.1f} "
              f"{rate['trainer'] / rate['single']:>12.0%} {rate['optimizer'] / rate['single']:>14.0%}", flush=True)


# A memory-bound loop like a step's gradient copies: on the CPU given as
# its argument, 64 MiB copied, then added to, 30 times once a line arrives
# on standard input (after it printed "ready"); prints the median seconds
# of one pass.
COPY_LOOP = """
import os, statistics, sys, time
import numpy as np
os.sched_setaffinity(0, {int(sys.argv[1])})
a = np.ones(16 << 20, dtype=np.float32)
b = np.ones_like(a)
print("ready", flush=True)
sys.stdin.readline()
passes = []
for _ in range(30):
    start = time.perf_counter()
    np.copyto(b, a)
    np.add(a, b, out=b)
    passes.append(time.perf_counter() - start)
print(statistics.median(passes), flush=True)
"""


def memory_share(rounds):
    """Two copy loops at once, one CPU each, started together: each one's speed over one loop alone
    (median of `rounds`), the share of the memory bandwidth that two tasks copying at the same moment
    can each expect here."""
    import subprocess

    cpus = sorted(os.sched_getaffinity(0))

    def passes(n):
        loops = [subprocess.Popen([sys.executable, "-c", COPY_LOOP, str(cpus[i % len(cpus)])],
                                  stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True) for i in range(n)]
        for loop in loops:
            if loop.stdout.readline().strip() != "ready":
                raise SystemExit("a copy loop did not start")
        for loop in loops:
            loop.stdin.write("go\n")
            loop.stdin.flush()
        return [float(loop.communicate()[0]) for loop in loops]

    alone, together = [], []
    for _ in range(rounds):
        alone.append(passes(1)[0])
        together.append(max(passes(2)))
    return statistics.median(alone) / statistics.median(together)


def two_tasks(models, args):
    cores = os.cpu_count()
    share = min(1.0, cores / 4)  # of the cores, each task's when both run
    print(f"\ntwo tasks on sets [0, 1] and [2, 3] of 4 ranks on {cores} cores: each task's steps/s, median of "
          f"{args.rounds} rounds; ddp: the same with torch DDP on two Gloo groups")
    print(f"memory: two 64 MiB copy-and-add loops at once (one CPU each) each run at "
          f"{memory_share(args.rounds):.0%} of one alone", flush=True)
    print("alone, idle: the first task trains, ranks 2 and 3 idle; alone, busy: ranks 2 and 3 run the same "
          "steps without communication; /busy: together over alone, busy; /share: together over alone, idle, "
          f"times the task's share of the cores together ({share:.0%})")
    print(f"{'model':>12} {'peer':>5} {'alone,idle':>11} {'alone,busy':>11} {'together A':>11} {'together B':>11} "
          f"{'A/busy':>7} {'B/busy':>7} {'A/share':>8} {'B/share':>8}", flush=True)
    for model_name in models:
        for peer in ("hora", "ddp"):
            idle, busy, together = [], [], []
            for _ in range(args.rounds):
                idle.append(run_peer(peer, model_name, 4, args, two_tasks="idle")[0])
                busy.append(run_peer(peer, model_name, 4, args, two_tasks="busy")[0])
                together.append(run_peer(peer, model_name, 4, args, two_tasks="together"))
            i, b = statistics.median(idle), statistics.median(busy)
            t = {task: statistics.median(x[task] for x in together) for task in (0, 2)}
            print(f"{model_name:>12} {peer:>5} {i:>11.1f} {b:>11.1f} {t[0]:>11.1f} {t[2]:>11.1f} "
                  f"{t[0] / b:>6.0%} {t[2] / b:>6.0%} {t[0] / (i * share):>7.0%} {t[2] / (i * share):>7.0%}",
                  flush=True)


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--models", default=",".join(MODELS), help=f"comma-separated, from {', '.join(MODELS)}")
    parser.add_argument("--np", type=int, default=2, help="ranks on this host")
    parser.add_argument("--steps", type=int, default=60, help="timed steps (the big model: a tenth)")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--hosts", type=int, choices=(2,), help="run on 2 simulated hosts (root)")
    parser.add_argument("--per-host", type=int, nargs="*", default=[1, 2])
    parser.add_argument("--rates", nargs="*", default=["none"], choices=list(RATES))
    parser.add_argument("--two-tasks", action="store_true", help="two tasks at once against each alone")
    parser.add_argument("--keras", action="store_true", help="Keras: hora.keras against MultiWorkerMirroredStrategy")
    parser.add_argument("--mxnet", action="store_true", help="MXNet Gluon: hora's trainer and optimizer (.venv-mxnet)")
    parser.add_argument("--worker", help=argparse.SUPPRESS)
    parser.add_argument("--master", help=argparse.SUPPRESS)
    parser.add_argument("--two-tasks-mode", help=argparse.SUPPRESS)
    parser.add_argument("--flags", help=argparse.SUPPRESS)
    args = parser.parse_args()
    models = args.models.split(",")

    if args.worker:
        warm_up = 3 if models[0] == "big" else 10
        if args.worker.startswith("mxnet-"):
            print_result(worker_mxnet(args.worker[len("mxnet-"):], models[0], args.steps, warm_up))
        elif args.worker.startswith("keras-"):
            print_result(worker_keras(args.worker[len("keras-"):], models[0], args.steps, warm_up, args.master))
        elif args.worker == "single":
            print_result(worker_single(models[0], args.steps, warm_up))
        elif args.worker == "hora":
            print_result(worker_hora(models[0], args.steps, warm_up, args.two_tasks_mode, args.flags))
        else:
            print_result(worker_ddp(models[0], args.steps, warm_up, args.master, args.two_tasks_mode, args.flags))
            # torch 2.13's Gloo process group sometimes aborts the
            # interpreter's exit ("terminate called without an active
            # exception", after destroy_process_group()); the figure is out.
            os._exit(0)
        return

    if args.two_tasks:
        two_tasks(models, args)
        return
    if args.keras or args.mxnet:
        if args.models == ",".join(MODELS):
            models = list(KERAS_MODELS)
        (keras_table if args.keras else mxnet_table)(models, args)
        return
    if not args.hosts:
        table(models, args.np, args)
        return
    import subprocess

    cluster = os.path.join(REPO, "scripts", "cluster.sh")
    env = {"HORA_CLUSTER": CLUSTER_NAME, "HORA_CLUSTER_SUBNET": CLUSTER_SUBNET}
    try:
        for rate in args.rates:
            subprocess.run([cluster, "up", "2"] + ([RATES[rate]] if RATES[rate] else []), check=True,
                           env=dict(os.environ, **env), capture_output=True)
            for per_host in args.per_host:
                launcher = ["--launch-agent", f"{cluster} exec", "-H", ",".join(f"{h}:{per_host}" for h in HOSTS)]
                table(models, 2 * per_host, args, launcher, env,
                      where=f"2 simulated hosts ({per_host}+{per_host}), link {rate}")
    finally:
        subprocess.run([cluster, "down"], env=dict(os.environ, **env))


if __name__ == "__main__":
    main()
