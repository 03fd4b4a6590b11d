"""Two process sets training side by side, and what each one moves over
time, read from hora's per-set counters (hvd.metrics).

The even ranks train a wide model, whose gradients are few and large (a
1 MB weight matrix); the odd ranks train a deep, narrow one, whose
gradients are many and small (34 tensors of at most 16 KB), each in an
allreduce of its own (HORA_TORCH_BUCKET_MB=0). On each set's
first rank a thread reads hvd.metrics(set) every 0.2 s; at the end the
samples are gathered and each set's throughput over time, in GB/s and in
ops/s, is drawn into set_throughput.png. Run from the repository root,
after `make demo` (--steps, or HORA_EXAMPLE_STEPS, shortens it):

    .venv/bin/horarun -np 4 .venv/bin/python examples/set_throughput.py
"""

import os
import threading
import time

import torch
import torch.nn.functional as F

import hora.torch as hvd
from learning_curves import describe, gather, parser, report
from plots import save, throughput_figure

SAMPLE_SECONDS = 0.2
FEATURES = {"wide model": 256, "deep model": 16}
ROWS = 64


class CounterSampler:
    """Reads hvd.metrics(process_set) every SAMPLE_SECONDS on its own thread
    from start() until stop(), which returns the samples: (seconds since
    start, payload bytes, ops), the two counters summed over op kinds."""

    def __init__(self, process_set):
        self.process_set = process_set
        self.samples = []
        self._stopping = threading.Event()
        self._thread = threading.Thread(target=self._run, name="counter sampler", daemon=True)

    def _sample(self):
        found = hvd.metrics(self.process_set)
        self.samples.append((time.perf_counter() - self._start, sum(found["bytes"].values()),
                             sum(found["ops"].values())))

    def _run(self):
        while not self._stopping.wait(SAMPLE_SECONDS):
            self._sample()

    def start(self):
        self._start = time.perf_counter()
        self._sample()
        self._thread.start()

    def stop(self):
        self._stopping.set()
        self._thread.join()
        self._sample()
        return self.samples


def model_of(task):
    torch.manual_seed(0)
    if task == "wide model":
        return torch.nn.Sequential(torch.nn.Linear(FEATURES[task], 1024), torch.nn.Tanh(), torch.nn.Linear(1024, 1))
    layers = [torch.nn.Linear(FEATURES[task], 64), torch.nn.Tanh()]
    for _ in range(15):
        layers += [torch.nn.Linear(64, 64), torch.nn.Tanh()]
    return torch.nn.Sequential(*layers, torch.nn.Linear(64, 1))


args = parser(describe(__doc__), steps=1000, out="set_throughput.png").parse_args()
hvd.init()
torch.set_num_threads(1)
even = hvd.add_process_set(range(0, hvd.size(), 2))
odd = hvd.add_process_set(range(1, hvd.size(), 2))
my_set = even if even.included() else odd
task = "wide model" if my_set is even else "deep model"

# A regression target every rank draws for itself (its own shard).
g = torch.Generator().manual_seed(hvd.rank())
x = torch.randn(ROWS, FEATURES[task], generator=g)
y = torch.sin(x[:, :8].sum(1, keepdim=True))
model = model_of(task)
# One allreduce per gradient, so that the op rates show the two shapes of
# traffic; by default DistributedOptimizer packs the small gradients into
# buckets, one allreduce each (docs/torch.md, "Gradient buckets").
os.environ["HORA_TORCH_BUCKET_MB"] = "0"
optimizer = hvd.DistributedOptimizer(torch.optim.SGD(model.parameters(), lr=0.01),
                                     named_parameters=model.named_parameters(), process_set=my_set)
sizes = [p.numel() * 4 for p in model.parameters()]  # each gradient's bytes (float32)
report(task, my_set, f"training on ranks {my_set.ranks}: {len(sizes)} gradients of {max(sizes) / 1e3:.0f} KB "
       f"at most, {sum(sizes) / 1e6:.2f} MB in all per step")

hvd.barrier()  # both sets start together: their samples share a time axis
sampler = CounterSampler(my_set) if my_set.rank() == 0 else None
if sampler:
    sampler.start()
for step in range(1, args.steps + 1):
    optimizer.zero_grad()
    loss = F.mse_loss(model(x), y)
    loss.backward()
    optimizer.step()
samples = sampler.stop() if sampler else None
loss = hvd.allreduce(loss.detach(), name="final loss", process_set=my_set).item()

label = f"{task}, set {my_set.process_set_id} {my_set.ranks}"
if samples:
    seconds, moved, ops = (end - begin for end, begin in zip(samples[-1], samples[0]))
    summary = f"{moved / seconds / 1e9:.3f} GB/s, {ops / seconds:.0f} ops/s"
    report(task, my_set, f"{args.steps} steps in {seconds:.1f} s: {moved / 1e6:.1f} MB in {ops} ops, "
           f"{summary}; final loss {loss:.4f}")
# Keyed by set id, so that the sets appear in the order of their ids.
results = gather({my_set.process_set_id: (label, samples, summary)} if samples else {})
if hvd.rank() == 0:
    ordered = [results[set_id] for set_id in sorted(results)]
    title = (f"Two process sets training side by side on {hvd.size()} ranks: each set's throughput "
             f"from hvd.metrics()\n" + "; ".join(f"{label}: {summary}" for label, _, summary in ordered))
    save(throughput_figure({label: samples for label, samples, _ in ordered}, title), args.out)
hvd.shutdown()
