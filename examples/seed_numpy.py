"""Two tasks side by side in one job, each on its own process set.

The even ranks and the odd ranks each fit their own linear model by
data-parallel gradient descent: every rank computes the gradient on its own
shard and the set averages it. The two sets never wait for each other. Run
from the repository root, after `make demo`:

    .venv/bin/horarun -np 4 .venv/bin/python examples/seed_numpy.py
"""

import numpy as np

import hora.numpy as hvd

hvd.init()
even_set = hvd.ProcessSet(range(0, hvd.size(), 2))
odd_set = hvd.ProcessSet(range(1, hvd.size(), 2))
my_set = even_set if even_set.included() else odd_set
task = "even" if my_set is even_set else "odd"

# The seed scenario: each rank allreduces on its own set only.
total = my_set.allreduce(np.array([hvd.rank()], dtype=np.int64), op=hvd.Sum)
assert total[0] == sum(my_set.ranks), (total, my_set.ranks)
print(f"{task} set {my_set.ranks}: sum of ranks = {total[0]}", flush=True)

# Each task fits a different target: y = w . x with its own true weights.
rng = np.random.default_rng(seed=1000 + hvd.rank())
true_w = np.array([2.0, -1.0, 0.5]) if task == "even" else np.array([-3.0, 0.0, 1.5])
x = rng.normal(size=(256, 3))
y = x @ true_w + 0.01 * rng.normal(size=256)
w = np.zeros(3)
lr = 0.1
for step in range(1, 51):
    grad = 2 * x.T @ (x @ w - y) / len(y)
    grad = my_set.allreduce(grad, name="grad")  # Average over this task's ranks
    w -= lr * grad
    if step % 10 == 0 and my_set.rank() == 0:
        loss = float(np.mean((x @ w - y) ** 2))
        print(f"{task} task step {step}: loss {loss:.5f}", flush=True)

if my_set.rank() == 0:
    print(f"{task} task learned w = {np.round(w, 3).tolist()} (true {true_w.tolist()})", flush=True)
hvd.shutdown()
