"""A training script written for Horovod, unchanged: it imports horovod.torch."""

import torch
import torch.nn.functional as F

import horovod
import horovod.torch as hvd
from horovod.common.exceptions import HorovodInternalError
from horovod.torch.mpi_ops import Sum

assert Sum == hvd.Sum and issubclass(HorovodInternalError, RuntimeError)
hvd.init()
torch.manual_seed(1234 + hvd.rank())  # different initial weights, fixed by the broadcast below
torch.set_num_threads(1)

model = torch.nn.Sequential(torch.nn.Linear(4, 8), torch.nn.ReLU(), torch.nn.Linear(8, 1)).double()
optimizer = torch.optim.SGD(model.parameters(), lr=0.01 * hvd.size(), momentum=0.5)
hvd.broadcast_parameters(model.state_dict(), root_rank=0)
hvd.broadcast_optimizer_state(optimizer, root_rank=0)
optimizer = hvd.DistributedOptimizer(optimizer, named_parameters=model.named_parameters(),
                                     compression=hvd.Compression.none, op=hvd.Average)

g = torch.Generator().manual_seed(99)
x = torch.randn(64, 4, generator=g, dtype=torch.float64)
y = x.sum(1, keepdim=True) ** 2
shard = slice(hvd.rank() * 16, (hvd.rank() + 1) * 16)
losses = []
for epoch in range(3):
    for i in range(0, 16, 4):
        optimizer.zero_grad()
        loss = F.mse_loss(model(x[shard][i:i + 4]), y[shard][i:i + 4])
        loss.backward()
        optimizer.step()
    losses.append(hvd.allreduce(loss.detach(), name="avg_loss").item())
    if hvd.rank() == 0:
        print(f"epoch {epoch} loss {losses[-1]:.12f}", flush=True)

weights = hvd.allgather(torch.cat([p.detach().reshape(-1) for p in model.parameters()]).unsqueeze(0))
assert all(torch.equal(weights[0], w) for w in weights)
checksum = weights[0].sum().item()
print(f"rank {hvd.rank()} checksum {checksum:.12f} with {horovod.__name__} from {horovod.__file__}", flush=True)
