"""hora.common is framework-free and a new framework is one Adapter: run as a
single process (size 1), with no front end imported at first."""

import array
import sys

import hora.common.adapters as adapters
import hora.common.basics as basics
import hora.common.ops as ops
import hora.common.process_sets as process_sets
from checks import raises

FRAMEWORKS = ("numpy", "torch", "hora.numpy", "hora.torch")
loaded = [name for name in FRAMEWORKS if name in sys.modules]
assert not loaded, f"hora.common imported {loaded}"


class Box:
    """A tensor of a made-up framework: float64 values in an array.array."""

    def __init__(self, values):
        self.data = array.array("d", values)

    def values(self):
        return list(self.data)


class BoxAdapter(adapters.Adapter):
    name = "box"
    tensor_types = (Box,)

    def check(self, tensor, what):
        if not isinstance(tensor, Box):
            raise ValueError(f"{what} must be a Box")
        return tensor

    def dtype_name(self, tensor):
        return "float64"

    def shape(self, tensor):
        return (len(tensor.data),)

    def buffer(self, tensor):
        return tensor.data

    def empty(self, shape, like):
        return Box([0.0] * shape[0])

    def in_place_target(self, tensor, what):
        return self.buffer(tensor), lambda: tensor

    def from_core(self, array, dtype_name):
        return Box([float(v) for v in array])

    def received_splits(self, values, kind):
        return list(values)


box_ops = ops.Collectives(BoxAdapter())
# A tensor of a framework whose front end is not loaded: a clear ValueError.
raises(ValueError, lambda: process_sets.global_process_set.allreduce(Box([1.0])), "no hora front end", "Box")
adapters.register(box_ops.adapter, box_ops)

basics.init()
assert process_sets.global_process_set.allreduce(Box([1.0, 2.0]), op=ops.Sum).values() == [1.0, 2.0]
assert box_ops.allgather(Box([3.0])).values() == [3.0]
box = Box([4.0, 5.0])
assert box_ops.allreduce_(box, op=ops.Max) is box and box.values() == [4.0, 5.0]
output, received = box_ops.alltoall(Box([6.0, 7.0]))
assert output.values() == [6.0, 7.0] and received == [2]
handle = box_ops.broadcast_async(Box([8.0]), root_rank=0)
assert ops.synchronize(handle).values() == [8.0] and ops.poll(handle)
raises(ValueError, lambda: box_ops.allreduce([1.0]), "must be a Box")
raises(ValueError, lambda: process_sets.global_process_set.allreduce(object()), "no hora front end", "box")
assert ops.join() == 0
ops.barrier()
basics.shutdown()
# The core hands its own outputs back as NumPy arrays; no front end was loaded.
loaded = [name for name in ("torch", "hora.numpy", "hora.torch") if name in sys.modules]
assert not loaded, f"running ops imported {loaded}"
print("front ends ok", flush=True)
