"""hora.tensorflow, hora.tensorflow.keras and hora.keras have the public
names, signatures and defaults of horovod.tensorflow, horovod.tensorflow.keras
and horovod.keras 0.28 (TF 2), plus process_set= where this issue adds it."""

import importlib
import inspect

import pytest

TENSORFLOW_NAMES = """
Compression allgather_object broadcast_object broadcast_object_fn broadcast_variables allgather grouped_allgather
broadcast broadcast_ allreduce grouped_allreduce alltoall reducescatter grouped_reducescatter init shutdown
is_initialized start_timeline stop_timeline size local_size cross_size rank local_rank cross_rank is_homogeneous
rank_op local_rank_op size_op local_size_op process_set_included_op mpi_threads_supported mpi_enabled mpi_built
gloo_enabled gloo_built nccl_built ddl_built ccl_built cuda_built rocm_built ProcessSet global_process_set
add_process_set remove_process_set Average Sum Adasum Min Max Product join barrier SyncBatchNormalization
DistributedOptimizer DistributedGradientTape PartialDistributedGradientTape HorovodInternalError
""".split()
KERAS_NAMES = """
DistributedOptimizer PartialDistributedOptimizer broadcast_global_variables allreduce allgather broadcast
reducescatter load_model callbacks init shutdown size rank local_rank local_size ProcessSet global_process_set
add_process_set remove_process_set Compression Average Sum
""".split()
CALLBACKS = ("BroadcastGlobalVariablesCallback", "MetricAverageCallback", "LearningRateScheduleCallback",
             "LearningRateWarmupCallback")

# function (its path under hora) -> its parameters and defaults, in Horovod's order.
SIGNATURES = {
    "tensorflow.allreduce": (
        "tensor average=None device_dense='' device_sparse='' compression op=None prescale_factor=1.0 "
        "postscale_factor=1.0 name=None process_set ignore_name_scope=False"),
    "tensorflow.grouped_allreduce": (
        "tensors average=None device_dense='' device_sparse='' compression op=None prescale_factor=1.0 "
        "postscale_factor=1.0 process_set ignore_name_scope=False name=None"),
    "tensorflow.allgather": "tensor name=None ignore_name_scope=False process_set",
    "tensorflow.broadcast": "tensor root_rank name=None ignore_name_scope=False process_set",
    "tensorflow.alltoall": "tensor splits=None name=None ignore_name_scope=False process_set",
    "tensorflow.reducescatter": (
        "tensor device_dense='' compression op=0 name=None process_set ignore_name_scope=False prescale_factor=1.0 "
        "postscale_factor=1.0"),
    "tensorflow.grouped_reducescatter": (
        "tensors device_dense='' compression op=0 process_set prescale_factor=1.0 postscale_factor=1.0"),
    "tensorflow.broadcast_variables": "variables root_rank process_set inplace=False",
    "tensorflow.broadcast_object": "obj root_rank=0 session=None name=None process_set",
    "tensorflow.allgather_object": "obj session=None name=None process_set",
    "tensorflow.DistributedGradientTape": (
        "gradtape device_dense='' device_sparse='' compression sparse_as_dense=False op=0 "
        "gradient_predivide_factor=1.0 num_groups=0 groups=None process_set scale_local_gradients=True"),
    "tensorflow.keras.DistributedOptimizer": (
        "optimizer name=None device_dense='' device_sparse='' compression sparse_as_dense=False "
        "gradient_predivide_factor=1.0 op=0 backward_passes_per_step=1 average_aggregated_gradients=False "
        "num_groups=0 groups=None process_set scale_local_gradients=True"),
    "tensorflow.keras.load_model": (
        "filepath custom_optimizers=None custom_objects=None compression legacy_opts=False process_set"),
    "tensorflow.keras.callbacks.BroadcastGlobalVariablesCallback": (
        "root_rank device='' local_variables=None process_set"),
    "tensorflow.keras.callbacks.MetricAverageCallback": "device='' process_set",
    "tensorflow.keras.callbacks.LearningRateScheduleCallback": (
        "initial_lr multiplier start_epoch=0 end_epoch=None staircase=True momentum_correction=True "
        "steps_per_epoch=None process_set"),
    "tensorflow.keras.callbacks.LearningRateWarmupCallback": (
        "initial_lr warmup_epochs=5 momentum_correction=True steps_per_epoch=None verbose=0 process_set"),
}


@pytest.fixture(scope="module")
def modules():
    """hora.tensorflow, hora.tensorflow.keras and hora.keras, imported here
    (not when pytest collects the tests: importing TensorFlow takes seconds)."""
    return {name: importlib.import_module(f"hora.{name}") for name in ("tensorflow", "tensorflow.keras", "keras")}


def resolve(modules, path):
    for prefix in ("tensorflow.keras", "tensorflow"):
        if path.startswith(prefix + "."):
            target = modules[prefix]
            for part in path[len(prefix) + 1:].split("."):
                target = getattr(target, part)
            return target
    raise KeyError(path)


def test_every_horovod_name_exists(modules):
    hvd, hvd_tf_keras, hvd_keras = modules["tensorflow"], modules["tensorflow.keras"], modules["keras"]
    assert [name for name in TENSORFLOW_NAMES if not hasattr(hvd, name)] == []
    for module in (hvd_tf_keras, hvd_keras):
        assert [name for name in KERAS_NAMES if not hasattr(module, name)] == []
        assert [name for name in CALLBACKS if not hasattr(module.callbacks, name)] == []
    assert hvd_keras.DistributedOptimizer is hvd_tf_keras.DistributedOptimizer


def test_signatures_and_defaults_match_horovod(modules):
    hvd = modules["tensorflow"]
    for path, spec in SIGNATURES.items():
        fn = resolve(modules, path)
        parameters = list(inspect.signature(fn).parameters.values())
        assert [p.name for p in parameters] == [item.split("=")[0] for item in spec.split()], fn
        for item, p in zip(spec.split(), parameters):
            if "=" in item:
                assert repr(p.default) == item.split("=", 1)[1], (fn, p.name, p.default)
            elif p.name == "process_set":
                assert p.default is hvd.global_process_set, fn
            elif p.name == "compression":
                assert p.default is hvd.Compression.none, fn


def test_fp16_compression_and_constants(modules):
    import tensorflow as tf

    hvd = modules["tensorflow"]
    assert (hvd.Average, hvd.Sum, hvd.Adasum, hvd.Min, hvd.Max, hvd.Product) == (0, 1, 2, 3, 4, 5)
    x = tf.range(4, dtype=tf.float64)
    compressed, ctx = hvd.Compression.fp16.compress(x)
    assert compressed.dtype == tf.float16
    assert hvd.Compression.fp16.decompress(compressed, ctx).dtype == tf.float64
    ints = tf.range(3)
    assert hvd.Compression.fp16.compress(ints)[0] is ints
