"""A Keras model trained with model.fit in an elastic job (horarun
--min-np ... --host-discovery-script), with KerasState and the elastic
callbacks, as Horovod's Keras elastic examples do:

    keras_elastic.py OUTDIR EPOCHS [--kill WORKER@EPOCH]

--kill makes WORKER SIGKILL itself as its EPOCH begins in the first round.
Each worker that finishes writes OUTDIR/<worker>.json: its final weights
and, per entry of the training function, the round, world size and the
epoch it (re)started from.
"""

import json
import os
import signal
import sys

import keras
import numpy as np

import hora.tensorflow.keras as hvd

outdir, epochs = sys.argv[1], int(sys.argv[2])
kill = sys.argv[sys.argv.index("--kill") + 1].rsplit("@", 1) if "--kill" in sys.argv else None
worker = os.environ["HORA_WORKER_ID"]
hvd.init()
keras.utils.set_random_seed(5)
model = keras.Sequential([keras.Input((3,)), keras.layers.Dense(8, activation="tanh"), keras.layers.Dense(1)])
optimizer = hvd.DistributedOptimizer(keras.optimizers.SGD(learning_rate=0.05, momentum=0.9))
model.compile(optimizer=optimizer, loss="mse")
rng = np.random.default_rng(3)
x = rng.standard_normal((64, 3)).astype("float32")
y = np.sin(x.sum(axis=1, keepdims=True)).astype("float32")
entries = []


class Killer(keras.callbacks.Callback):
    def on_epoch_begin(self, epoch, logs=None):
        if kill and worker == kill[0] and epoch == int(kill[1]) and hvd.elastic.current_round() == 0:
            os.kill(os.getpid(), signal.SIGKILL)


state = hvd.elastic.KerasState(model, optimizer, epoch=0, batch=0)


@hvd.elastic.run
def train(state):
    entries.append({"round": hvd.elastic.current_round(), "size": hvd.size(), "from_epoch": state.epoch})
    shard = slice(hvd.rank(), None, hvd.size())
    state.model.fit(x[shard], y[shard], batch_size=8, epochs=epochs, initial_epoch=state.epoch, verbose=0,
                    shuffle=False,
                    callbacks=[Killer(), hvd.elastic.UpdateBatchStateCallback(state),
                               hvd.elastic.UpdateEpochStateCallback(state), hvd.elastic.CommitStateCallback(state)])


train(state)
with open(os.path.join(outdir, worker + ".json"), "w") as f:
    json.dump({"weights": [w.ravel().tolist() for w in model.get_weights()], "entries": entries}, f)
