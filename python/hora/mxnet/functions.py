"""Parameters and Python objects across a process set, for MXNet:
``broadcast_parameters`` (Gluon parameters, including ones whose
initialization is deferred), ``broadcast_object`` and ``allgather_object``."""

import mxnet as mx

from hora.common import objects as _objects
from hora.common.process_sets import global_process_set
from hora.mxnet import mpi_ops as _mpi_ops


def _named_values(params):
    """``params`` (a dict or Gluon ParameterDict of Parameters or NDArrays)
    as (name, value) pairs sorted by name: the same order on every rank."""
    try:
        from mxnet.gluon.parameter import ParameterDict

        dict_types = (dict, ParameterDict)
    except ImportError:  # MXNet 2 has no ParameterDict
        dict_types = (dict,)
    if not isinstance(params, dict_types):
        raise ValueError(f"broadcast_parameters needs a dict or ParameterDict of parameters, got "
                         f"{type(params).__name__}")
    return sorted(params.items(), key=lambda item: str(item[0]))


def _broadcast_after_initialization(param, root_rank, name, process_set):
    """Makes ``param`` (initialization deferred until its shape is known)
    take the root's value as soon as it is initialized."""
    initialize = param._init_impl

    def initialize_then_broadcast(*args, **kwargs):
        initialize(*args, **kwargs)
        param.set_data(_mpi_ops.broadcast(param.data(), root_rank, name=name, process_set=process_set))

    param._init_impl = initialize_then_broadcast


def broadcast_parameters(params, root_rank=0, prefix=None, process_set=global_process_set):
    """Gives every member of the set the values of ``params`` on ``root_rank``:
    a Gluon ``ParameterDict`` (``net.collect_params()``) or a dict of
    Parameters or NDArrays (``Module.get_params()``). A parameter whose
    initialization is deferred is broadcast when it is initialized (every
    member must run the forward pass that initializes it). ``prefix`` names
    the ops; two calls in flight at once need different prefixes."""
    if prefix is not None and not isinstance(prefix, str):
        raise ValueError(f"prefix must be a string or None, got {type(prefix).__name__}")
    prefix = prefix or ""
    for key, value in _named_values(params):
        name = f"{prefix}{key}"
        if isinstance(value, mx.gluon.Parameter):
            try:
                data = value.data()
            except mx.gluon.parameter.DeferredInitializationError:
                _broadcast_after_initialization(value, root_rank, name, process_set)
                continue
            value.set_data(_mpi_ops.broadcast(data, root_rank, name=name, process_set=process_set))
        elif isinstance(value, mx.nd.NDArray):
            _mpi_ops.broadcast_(value, root_rank, name=name, process_set=process_set)
        else:
            raise ValueError(f"broadcast_parameters: {key!r} is a {type(value).__name__}, not a Parameter or "
                             "NDArray")


def broadcast_object(obj, root_rank=0, name=None, process_set=global_process_set):
    """Returns ``obj`` as it is on ``root_rank`` (a global rank), pickled
    with cloudpickle and broadcast over the set."""
    return _objects.broadcast_object(obj, root_rank, name, process_set)


def allgather_object(obj, name=None, process_set=global_process_set):
    """The list of every member's ``obj`` (pickled with cloudpickle), in
    set-rank order."""
    return _objects.allgather_object(obj, name, process_set)
