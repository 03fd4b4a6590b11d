"""The same DistributedOptimizer and callbacks with Keras 2 (tf_keras, what
tf.keras is under TF_USE_LEGACY_KERAS=1): two ranks on half batches end
with the weights of one process on the whole batch (to 1e-5), with the
optimizer API of Keras 2 and its legacy optimizers, and with gradient
aggregation. Run on 2 ranks with TF_USE_LEGACY_KERAS=1; prints
"ok <check> keras2 - -" per rank."""

import sys
import traceback

import numpy as np
import tensorflow as tf

import hora.tensorflow.keras as hvd

keras = tf.keras
assert not keras.__name__.startswith("keras.") and "tf_keras" in keras.__name__, keras.__name__
hvd.init()
me = hvd.rank()
ROWS = 16
rng = np.random.default_rng(3)
x = rng.standard_normal((ROWS, 3)).astype("float32")
y = np.sin(x.sum(axis=1, keepdims=True)).astype("float32")
half = slice(me * ROWS // 2, (me + 1) * ROWS // 2)


def report(check, fn):
    try:
        fn()
        line = f"ok {check} keras2 - -"
    except Exception:
        line = f"FAIL {check} keras2 - -\n{traceback.format_exc()}"
    sys.stdout.write(line + "\n")
    sys.stdout.flush()


def model_from(seed):
    tf.random.set_seed(seed)
    return keras.Sequential([keras.layers.Dense(8, activation="tanh", input_shape=(3,)), keras.layers.Dense(1)])


def compare(make_optimizer, batch, epochs, passes=1):
    model = model_from(10 + me)  # different starts: the callback makes them the root's
    model.compile(optimizer=hvd.DistributedOptimizer(make_optimizer(), backward_passes_per_step=passes,
                                                     average_aggregated_gradients=True), loss="mse")
    start = []
    keep = keras.callbacks.LambdaCallback(on_train_begin=lambda logs: start.extend(model.get_weights()))
    model.fit(x[half], y[half], batch_size=batch, epochs=epochs, shuffle=False, verbose=0,
              callbacks=[hvd.callbacks.BroadcastGlobalVariablesCallback(0), keep,
                         hvd.callbacks.MetricAverageCallback()])
    reference = model_from(0)
    reference.set_weights(start)
    reference.compile(optimizer=make_optimizer(), loss="mse")
    reference.fit(x, y, batch_size=ROWS, epochs=epochs, shuffle=False, verbose=0)
    for actual, expected in zip(model.get_weights(), reference.get_weights()):
        assert np.max(np.abs(actual - expected)) <= 1e-5, np.max(np.abs(actual - expected))


report("fit_matches_one_process", lambda: compare(lambda: keras.optimizers.SGD(0.2), ROWS // 2, 5))
report("legacy_optimizer", lambda: compare(lambda: keras.optimizers.legacy.SGD(0.2), ROWS // 2, 5))
report("aggregation", lambda: compare(lambda: keras.optimizers.SGD(0.2), ROWS // 4, 3, passes=2))
print("keras2 done", flush=True)
