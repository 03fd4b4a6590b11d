"""hora's ops in TensorFlow 1 graphs (``tf.compat.v1`` sessions).

A session runs the nodes that do not depend on each other in any order, and
on each rank in its own. Were an op one ``tf.py_function`` node that waits
until every member has submitted it, that node would hold one of the
session's few inter-op threads while it waits, and when one ``run`` holds
more such nodes than the session has threads, every thread of rank 0 could
wait on ops that rank 1 has not reached, because all of rank 1's wait on
others: the set would stop. Horovod's ops are asynchronous kernels, which
hold no thread while they wait.

So in a TensorFlow 1 graph an op is two nodes that hold no thread while the
op waits for the other members: a ``tf.py_function`` that starts the op on
its own Python thread and returns at once, and the ``get_next`` of a
``tf.data`` iterator over a generator that yields the op's results in the
order the op was started (an asynchronous kernel, which waits in the
iterator's own thread; it runs after the first node). Every member then
starts every op of a run, whatever order its session picks, and the ops
match by name. A hora error of the op is raised by ``get_next`` as
hora.tensorflow.errors says. ``tf.function`` does not need this: it runs
hora's nodes one after the other in program order.
"""

import atexit
import queue
import threading

import numpy as np
import tensorflow as tf

from hora.tensorflow import errors as _errors

# Set at exit: generators still waiting for a run end, so that TensorFlow
# can tear the iterators down.
_closing = threading.Event()
atexit.register(_closing.set)


def asynchronous(fn, inputs, dtypes):
    """``fn(*inputs)`` (a list of eager tensors of ``dtypes``, run eagerly) as
    graph nodes that hold no thread while the op waits; returns the list of
    output tensors (shapes unknown)."""
    from tensorflow.python.eager import context

    results = queue.Queue()  # (error, values) of each run of the op, in order

    def work(args):
        try:
            with context.eager_mode():
                values = [np.asarray(v.numpy()) for v in fn(*args)]
            results.put((None, values))
        except BaseException as error:  # noqa: B036 - handed to get_next, which raises it
            results.put((error, None))

    @tf.autograph.experimental.do_not_convert
    def start(*args):
        threading.Thread(target=work, args=(args,), name="hora-graph-op", daemon=True).start()
        return tf.constant(0, tf.int64)

    def generate():
        while True:
            try:
                error, values = results.get(timeout=0.1)
            except queue.Empty:
                if _closing.is_set():
                    return
                continue
            if error is not None:
                raise _errors.carried(error) if isinstance(error, Exception) else error
            yield tuple(values)

    started = tf.py_function(start, list(inputs), tf.int64)
    signature = tuple(tf.TensorSpec(None, dtype) for dtype in dtypes)
    dataset = tf.data.Dataset.from_generator(generate, output_signature=signature)
    # Nothing runs the generator ahead of a get_next (it would wait for a run
    # that may never come).
    options = tf.data.Options()
    options.autotune.enabled = False
    options.experimental_optimization.inject_prefetch = False
    dataset = dataset.with_options(options)
    with tf.control_dependencies([started]):
        outputs = tf.compat.v1.data.make_one_shot_iterator(dataset).get_next()
    return list(outputs)
