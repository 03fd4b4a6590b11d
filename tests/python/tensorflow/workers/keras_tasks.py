"""Two Keras tasks train side by side with model.fit on disjoint process sets,
each compared with the same model trained by one process on the whole batch.
Run on 4 ranks:

    keras_tasks.py train OUTDIR    A = [0, 2], B = [1, 3]: every check below
    keras_tasks.py kill OUTDIR     A = [0, 1], B = [2, 3]; rank 1 dies mid-fit

Checks (one "ok <check> <task> - <mode>" line per rank): the weights after
fit with DistributedOptimizer(process_set=s), half a batch per member, equal
(to 1e-5) those of one process on the whole batch, with the callbacks
(broadcast from the set's root, metric average, learning-rate schedule and
warmup); the same with backward_passes_per_step=2 on quarter batches; after
hvd.load_model and more training. In kill mode rank 0 prints the error its
fit raised and B checks its weights as in train mode.
"""

import os
import signal
import sys
import traceback

import keras
import numpy as np
import tensorflow as tf

import hora.tensorflow as htf
import hora.tensorflow.keras as hvd

mode, outdir = sys.argv[1], sys.argv[2]
if mode == "kill":
    a, b = hvd.ProcessSet([0, 1]), hvd.ProcessSet([2, 3])
else:
    a, b = hvd.ProcessSet([0, 2]), hvd.ProcessSet([1, 3])
hvd.init(process_sets=[a, b])
me = hvd.rank()
my_set, task = (a, "A") if a.included() else (b, "B")
tolerance = 1e-5
EPOCHS, ROWS = 6, 16


def make_model(seed):
    keras.utils.set_random_seed(seed)
    if task == "A":
        layers = [keras.layers.Dense(8, activation="tanh"), keras.layers.Dense(1)]
    else:
        layers = [keras.layers.Dense(6, activation="relu"), keras.layers.Dense(4, activation="tanh"),
                  keras.layers.Dense(1)]
    return keras.Sequential([keras.Input((3,))] + layers)


rng = np.random.default_rng(7 if task == "A" else 11)
x = rng.standard_normal((ROWS, 3)).astype("float32")
y = (np.sin(x.sum(axis=1, keepdims=True)) + (0.5 if task == "B" else 0.0)).astype("float32")
half = slice(my_set.rank() * ROWS // 2, (my_set.rank() + 1) * ROWS // 2)
root = my_set.ranks[0]


def say(line):
    """One write per line: mpirun tags output by the chunk, not by the line."""
    sys.stdout.write(line + "\n")
    sys.stdout.flush()


def report(check, fn):
    try:
        fn()
        say(f"ok {check} {task} - {mode}")
    except Exception:
        say(f"FAIL {check} {task} - {mode}\n{traceback.format_exc()}")


def assert_close(actual_weights, expected_weights):
    for actual, expected in zip(actual_weights, expected_weights):
        assert np.max(np.abs(actual - expected)) <= tolerance, np.max(np.abs(actual - expected))


class KeepInitialWeights(keras.callbacks.Callback):
    """Records the weights fit starts from (after the broadcast callback)."""

    def on_train_begin(self, logs=None):
        self.weights = [w.copy() for w in self.model.get_weights()]


def schedule_callbacks():
    return [hvd.callbacks.LearningRateWarmupCallback(0.2, warmup_epochs=2, process_set=my_set),
            hvd.callbacks.LearningRateScheduleCallback(0.2, multiplier=0.5, start_epoch=3, process_set=my_set)]


def reference(initial_weights, epochs, fit_batch=ROWS, model=None):
    """One process, whole batch, the same schedule: what the task should reach."""
    if model is None:
        model = make_model(0)
        model.set_weights(initial_weights)
        model.compile(optimizer=keras.optimizers.SGD(0.2), loss="mse")
    history = model.fit(x, y, batch_size=fit_batch, epochs=epochs, shuffle=False, verbose=0,
                        callbacks=schedule_callbacks())
    return model, history


def distributed_fit(epochs, fail_at=None):
    """The task's model (each member starts from its own random weights)."""
    model = make_model(100 + me)
    model.compile(optimizer=hvd.DistributedOptimizer(keras.optimizers.SGD(0.2), process_set=my_set), loss="mse")
    initial = KeepInitialWeights()
    callbacks = [hvd.callbacks.BroadcastGlobalVariablesCallback(root, process_set=my_set), initial,
                 hvd.callbacks.MetricAverageCallback(process_set=my_set)] + schedule_callbacks()
    if fail_at is not None:
        callbacks.append(DieAtBatch(fail_at))
    history = model.fit(x[half], y[half], batch_size=ROWS // 2, epochs=epochs, shuffle=False, verbose=0,
                        callbacks=callbacks)
    return model, history, initial.weights


class DieAtBatch(keras.callbacks.Callback):
    def __init__(self, batch):
        super().__init__()
        self.batch = batch

    def on_train_batch_begin(self, batch, logs=None):
        if self.model.optimizer.iterations.numpy() == self.batch:
            os.kill(os.getpid(), signal.SIGKILL)


def check_training():
    model, history, initial = distributed_fit(EPOCHS)
    expected_model, expected_history = reference(initial, EPOCHS)
    report("same_start", lambda: [assert_close(weights, initial)
                                  for weights in htf.allgather_object(initial, process_set=my_set)])
    report("fit_matches_one_process", lambda: assert_close(model.get_weights(), expected_model.get_weights()))
    report("metric_average", lambda: np.testing.assert_allclose(history.history["loss"],
                                                                expected_history.history["loss"], rtol=1e-5))
    report("learning_rates", lambda: np.testing.assert_allclose(history.history["lr"],
                                                                expected_history.history["lr"], rtol=1e-6))
    return model, expected_model


def check_load_model(model, expected_model):
    path = os.path.join(outdir, f"task-{task}.keras")
    if me == root:
        model.save(path)
    htf.barrier(process_set=my_set)  # the saved file exists for every member now
    loaded = hvd.load_model(path, process_set=my_set)
    report("load_model_rewraps", lambda: assert_equal(loaded.optimizer._hora_options["process_set"], my_set))
    loaded.fit(x[half], y[half], batch_size=ROWS // 2, epochs=2, shuffle=False, verbose=0)
    expected = keras.models.load_model(path)
    expected.fit(x, y, batch_size=ROWS, epochs=2, shuffle=False, verbose=0)
    report("load_model_continues", lambda: assert_close(loaded.get_weights(), expected.get_weights()))


def check_aggregation():
    """backward_passes_per_step=2 on quarter batches = one process on the whole batch."""
    model = make_model(0)
    start = [w.copy() for w in model.get_weights()]
    model.compile(optimizer=hvd.DistributedOptimizer(keras.optimizers.SGD(0.2), process_set=my_set,
                                                     backward_passes_per_step=2,
                                                     average_aggregated_gradients=True), loss="mse")
    model.fit(x[half], y[half], batch_size=ROWS // 4, epochs=3, shuffle=False, verbose=0)
    expected = make_model(0)
    expected.set_weights(start)
    expected.compile(optimizer=keras.optimizers.SGD(0.2), loss="mse")
    expected.fit(x, y, batch_size=ROWS, epochs=3, shuffle=False, verbose=0)
    report("aggregation_matches_one_process", lambda: assert_close(model.get_weights(), expected.get_weights()))
    report("aggregation_counts_iterations", lambda: assert_equal(int(model.optimizer.iterations.numpy()), 6))


def assert_equal(actual, expected):
    assert actual == expected, (actual, expected)


if mode == "train":
    trained, expected_model = check_training()
    check_load_model(trained, expected_model)
    check_aggregation()
else:
    try:
        if task == "A":
            distributed_fit(EPOCHS, fail_at=3 if me == 1 else None)
        else:
            check_training()
        print(f"finished {task}", flush=True)
    except hvd.HorovodInternalError as error:
        reason = next((line for line in str(error).splitlines() if "missing global rank" in line), "")
        print(f"task {task} failed with {type(error).__name__} (HorovodInternalError, tf.errors.OpError: "
              f"{isinstance(error, tf.errors.OpError)}): {reason.strip()[:300]}", flush=True)
print(f"keras done {task}", flush=True)
