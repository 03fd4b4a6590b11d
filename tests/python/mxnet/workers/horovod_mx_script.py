"""A horovod.mxnet script, unchanged: Gluon training on two ranks with
DistributedTrainer after broadcast_parameters."""

import mxnet as mx
from mxnet import autograd, gluon

import horovod.mxnet as hvd

hvd.init()
print(f"rank {hvd.rank()} of {hvd.size()} with horovod from {hvd.__file__.rsplit('/horovod/', 1)[0]}", flush=True)
mx.random.seed(hvd.rank())
net = gluon.nn.Dense(1, in_units=2, prefix="dense_")
net.initialize()
hvd.broadcast_parameters(net.collect_params(), root_rank=0)
trainer = hvd.DistributedTrainer(net.collect_params(), "sgd", {"learning_rate": 0.1})
x = mx.nd.array([[1.0, 2.0]]) * (hvd.rank() + 1)
with autograd.record():
    loss = net(x).sum()
loss.backward()
trainer.step(1)
weights = hvd.allgather_object(net.weight.data().asnumpy().tolist())
total = hvd.allreduce(mx.nd.ones((1,)), op=hvd.Sum).asscalar()
print(f"total {total:g}, same weights {all(w == weights[0] for w in weights)}", flush=True)
