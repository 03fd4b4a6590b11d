"""A Horovod elastic PyTorch script, written against Horovod's API only (in
the manner of Horovod's examples/elastic/pytorch/pytorch_synthetic_benchmark_elastic.py):
a synthetic model trained for a few batches per epoch under
``hvd.elastic.run``, with a reset callback and a TorchState. Run through
the horovod shim under ``horovodrun --min-np ... --host-discovery-script``.

    horovod_elastic_synthetic.py EPOCHS BATCHES OUTDIR
"""

import json
import os
import sys

import torch
import torch.nn.functional as F

import horovod.torch as hvd
from horovod.common.exceptions import HostsUpdatedInterrupt  # noqa: F401  (importable as in Horovod)

epochs, batches, outdir = int(sys.argv[1]), int(sys.argv[2]), sys.argv[3]
hvd.init()
torch.manual_seed(1234)
model = torch.nn.Sequential(torch.nn.Linear(16, 32), torch.nn.ReLU(), torch.nn.Linear(32, 4))
lr_scaler = hvd.size()
optimizer = torch.optim.SGD(model.parameters(), lr=0.01 * lr_scaler)
optimizer = hvd.DistributedOptimizer(optimizer, named_parameters=model.named_parameters())
data = torch.randn(8, 16)
target = torch.randint(0, 4, (8,))
resets = []


def on_state_reset():
    # As Horovod's example: scale the learning rate with the new world size.
    for group in optimizer.param_groups:
        group["lr"] = 0.01 * hvd.size()
    resets.append(hvd.size())


@hvd.elastic.run
def train(state):
    for state.epoch in range(state.epoch, epochs):
        for state.batch in range(state.batch, batches):
            optimizer.zero_grad()
            loss = F.cross_entropy(model(data), target)
            loss.backward()
            optimizer.step()
            state.commit()
        state.batch = 0
    return float(loss)


state = hvd.elastic.TorchState(model, optimizer, batch=0, epoch=0)
state.register_reset_callbacks([on_state_reset])
loss = train(state)
params = [p.detach().flatten().tolist() for p in model.parameters()]
with open(os.path.join(outdir, f"rank{hvd.rank()}.json"), "w") as f:
    json.dump({"loss": loss, "size": hvd.size(), "resets": resets, "params": params}, f)
