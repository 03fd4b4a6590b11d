"""hora.torch has horovod.torch 0.28's public names, signatures and defaults."""

import inspect

import hora.torch as hvd

# Everything horovod/torch/__init__.py 0.28 exports, except the elastic module.
HOROVOD_NAMES = """
Compression allgather_object broadcast_object broadcast_optimizer_state broadcast_parameters
allreduce allreduce_async allreduce_ allreduce_async_ grouped_allreduce grouped_allreduce_async
grouped_allreduce_ grouped_allreduce_async_ sparse_allreduce_async allgather allgather_async
grouped_allgather grouped_allgather_async broadcast broadcast_async broadcast_ broadcast_async_
alltoall alltoall_async reducescatter reducescatter_async grouped_reducescatter grouped_reducescatter_async
join barrier poll synchronize init shutdown is_initialized start_timeline stop_timeline
size local_size cross_size rank local_rank cross_rank mpi_threads_supported mpi_enabled mpi_built
gloo_enabled gloo_built nccl_built ddl_built ccl_built cuda_built rocm_built
ProcessSet global_process_set add_process_set remove_process_set
Average Sum Adasum Min Max Product HorovodInternalError DistributedOptimizer SyncBatchNorm
""".split()

G = hvd.global_process_set
# name -> (parameter, default) pairs, Horovod's order; hora's extra keywords come last.
SIGNATURES = {
    "allreduce": "tensor average=None name=None compression op=None prescale_factor=1.0 postscale_factor=1.0 "
                 "process_set",
    "allreduce_async": "tensor average=None name=None op=None prescale_factor=1.0 postscale_factor=1.0 process_set",
    "allreduce_": "tensor average=None name=None op=None prescale_factor=1.0 postscale_factor=1.0 process_set",
    "grouped_allreduce": "tensors average=None name=None compression op=None prescale_factor=1.0 "
                         "postscale_factor=1.0 process_set",
    "grouped_allreduce_async_": "tensors average=None name=None op=None prescale_factor=1.0 postscale_factor=1.0 "
                                "process_set",
    "sparse_allreduce_async": "tensor name op process_set",
    "allgather": "tensor name=None process_set",
    "grouped_allgather_async": "tensors name=None process_set",
    "broadcast": "tensor root_rank name=None process_set",
    "broadcast_async_": "tensor root_rank name=None process_set",
    "alltoall": "tensor splits=None name=None process_set",
    "reducescatter": "tensor name=None compression op=0 process_set prescale_factor=1.0 postscale_factor=1.0",
    "grouped_reducescatter_async": "tensors name=None op=0 process_set prescale_factor=1.0 postscale_factor=1.0",
    "join": "device=-1 process_set",
    "barrier": "process_set",
    "init": "comm=None process_sets=None",
    "broadcast_parameters": "params root_rank process_set",
    "broadcast_optimizer_state": "optimizer root_rank model=None process_set",
    "broadcast_object": "obj root_rank=0 name=None process_set",
    "allgather_object": "obj name=None process_set",
    "DistributedOptimizer": "optimizer named_parameters=None compression backward_passes_per_step=1 op=0 "
                            "gradient_predivide_factor=1.0 num_groups=0 groups=None sparse_as_dense=False process_set",
    "start_timeline": "file_path mark_cycles=False",
}


def test_every_horovod_name_exists():
    missing = [name for name in HOROVOD_NAMES if not hasattr(hvd, name)]
    assert not missing
    assert set(HOROVOD_NAMES) <= set(hvd.__all__)


def test_signatures_and_defaults_match_horovod():
    for name, spec in SIGNATURES.items():
        parameters = list(inspect.signature(getattr(hvd, name)).parameters.values())
        expected = [item.split("=")[0] for item in spec.split()]
        assert [p.name for p in parameters] == expected, name
        for item, p in zip(spec.split(), parameters):
            if "=" in item:
                assert repr(p.default) == item.split("=")[1], (name, p.name, p.default)
            elif p.name == "process_set":
                assert p.default is G, name
            elif p.name == "compression":
                assert p.default is hvd.Compression.none, name


def test_constants_and_compression():
    import torch

    assert (hvd.Average, hvd.Sum, hvd.Adasum, hvd.Min, hvd.Max, hvd.Product) == (0, 1, 2, 3, 4, 5)
    x = torch.arange(4, dtype=torch.float64)
    compressed, ctx = hvd.Compression.fp16.compress(x)
    assert compressed.dtype == torch.float16
    assert torch.equal(hvd.Compression.fp16.decompress(compressed, ctx), x)
    ints = torch.arange(3)
    assert hvd.Compression.fp16.compress(ints)[0] is ints
    assert hvd.Compression.none.compress(x) == (x, None)
