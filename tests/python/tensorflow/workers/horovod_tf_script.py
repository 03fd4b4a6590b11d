"""A script written for Horovod's TensorFlow and Keras front ends, unchanged:
run through the hora-horovod package on 2 ranks."""

import horovod
import horovod.keras as hvd_keras
import horovod.tensorflow as hvd
import horovod.tensorflow.keras as hvd_tf_keras
import keras
import numpy as np
import tensorflow as tf

hvd.init()
print(f"with horovod from {horovod.__file__}", flush=True)
total = hvd.allreduce(tf.constant([float(hvd.rank() + 1)]), op=hvd.Sum)
keras.utils.set_random_seed(hvd.rank())
model = keras.Sequential([keras.Input((2,)), keras.layers.Dense(1)])
model.compile(optimizer=hvd_tf_keras.DistributedOptimizer(keras.optimizers.SGD(0.1)), loss="mse")
x = np.full((4, 2), hvd.rank(), dtype="float32")
model.fit(x, x[:, :1], epochs=2, verbose=0, callbacks=[hvd_keras.callbacks.BroadcastGlobalVariablesCallback(0),
                                                       hvd_keras.callbacks.MetricAverageCallback()])
weights = hvd.allgather_object([w.tolist() for w in model.get_weights()])
print(f"total {total.numpy()[0]:g}, same weights {weights[0] == weights[1]}", flush=True)
