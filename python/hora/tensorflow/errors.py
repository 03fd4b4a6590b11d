"""hora's errors as TensorFlow sees them.

An error of a hora op is raised as a class that derives from both the hora
error (``hora.errors``: ``MismatchError``, ``PeerFailureError``, ... all
``HorovodInternalError``; ``ValueError`` for bad arguments) and the
``tf.errors.OpError`` Horovod's TensorFlow ops raise for it
(``FailedPreconditionError`` for mismatched ops, ``InvalidArgumentError``
for bad arguments, ...). Code written for either catches it.

Eagerly, the op raises it directly. Inside a ``tf.function`` the op runs in
``tf.py_function``, whose errors TensorFlow turns into a status code (only
INVALID_ARGUMENT for a ``ValueError``, UNKNOWN for the others) and a
message; ``install`` makes the error TensorFlow raises for a status that
carries a hora error (recognised by a token in its message) an instance of
the hora error's type and of Horovod's class too: a mismatch inside
tf.function (or in a TensorFlow 1 session, where the op's result comes
through a tf.data iterator) is a ``tf.errors.UnknownError``, a
``MismatchError`` and a ``tf.errors.FailedPreconditionError``. Every other
error is left as TensorFlow makes it.
"""

import collections
import itertools
import threading

import tensorflow as tf

from hora.errors import HoraError, InternalError, MismatchError, PeerFailureError, TimeoutError

# hora error kind -> the tf.errors class Horovod raises for it (first match).
_TF_CLASSES = (
    (MismatchError, tf.errors.FailedPreconditionError),
    (PeerFailureError, tf.errors.UnavailableError),
    (TimeoutError, tf.errors.DeadlineExceededError),
    (InternalError, tf.errors.InternalError),
    (ValueError, tf.errors.InvalidArgumentError),
    (HoraError, tf.errors.UnknownError),
)

_classes = {}
_classes_lock = threading.Lock()


def _class_of(tf_classes, kind):
    """The class deriving from ``tf_classes`` (one class or a tuple) and
    hora's ``kind``."""
    bases = tf_classes if isinstance(tf_classes, tuple) else (tf_classes,)
    with _classes_lock:
        combined = _classes.get((bases, kind))
        if combined is None:
            combined = type(kind.__name__, bases + (kind,), {"__module__": kind.__module__, "__doc__": kind.__doc__})
            _classes[(bases, kind)] = combined
    return combined


def _graph_class(made, kind):
    """The class of an error TensorFlow made as ``made`` for a graph node
    that failed with hora's ``kind``: both, and the tf.errors class Horovod
    raises for ``kind`` (FailedPreconditionError for a mismatch, ...)."""
    horovod = next((entry[1] for entry in _TF_CLASSES if issubclass(kind, entry[0])), None)
    if horovod is None or issubclass(made, horovod):
        return _class_of(made, kind)
    return _class_of((made, horovod), kind)


def _combined_class(error):
    """The class deriving from ``type(error)`` and its tf.errors class, or
    None for an error hora does not translate."""
    if isinstance(error, tf.errors.OpError):
        return None
    match = next((entry for entry in _TF_CLASSES if isinstance(error, entry[0])), None)
    if match is None:
        return None
    return _class_of(match[1], type(error))


def translated(error):
    """``error`` as the class that is both its hora type and its tf.errors
    type (the same object if it is not a hora error or already one)."""
    combined = _combined_class(error)
    if combined is None:
        return error
    result = combined(None, None, str(error))
    result.__cause__ = error.__cause__
    return result


def run_eagerly(fn, *args):
    """``fn(*args)``, with a hora error raised as its translated class."""
    try:
        return fn(*args)
    except (HoraError, ValueError) as error:
        new = translated(error)
        if new is error:
            raise
        raise new from None


# Errors raised inside py_function bodies, by token, until TensorFlow's
# conversion of the failed status picks them up (bounded: a status that is
# never converted in Python does not leak).
_pending = collections.OrderedDict()
_pending_lock = threading.Lock()
_tokens = itertools.count(1)
_PENDING_LIMIT = 256
_TOKEN_TEXT = "[hora error {}]"


def graph_body(fn):
    """``fn`` as a py_function body: a hora error it raises leaves a token in
    the message TensorFlow builds, for ``install``'s conversion."""

    @tf.autograph.experimental.do_not_convert
    def body(*args):
        try:
            return fn(*args)
        except (HoraError, ValueError) as error:
            carrier = carried(error)
            if carrier is error:
                raise
            raise carrier from None

    return body


def carried(error):
    """What a function TensorFlow calls from a graph raises for ``error``:
    for a hora error, an exception whose message leaves a token in the
    message TensorFlow builds, for ``install``'s conversion; else ``error``."""
    if _combined_class(error) is None:
        return error
    token = next(_tokens)
    with _pending_lock:
        _pending[token] = type(error)
        while len(_pending) > _PENDING_LIMIT:
            _pending.popitem(last=False)
    return _carrier(error)(f"{error} {_TOKEN_TEXT.format(token)}")


_carriers = {}


def _carrier(error):
    """An exception class named as ``error``'s that TensorFlow's py_function
    maps to the same status code as ``error`` (INVALID_ARGUMENT for a
    ValueError, else UNKNOWN), so that its message reads as hora's."""
    kind = type(error)
    with _classes_lock:
        carrier = _carriers.get(kind)
        if carrier is None:
            base = ValueError if isinstance(error, ValueError) else RuntimeError
            carrier = type(kind.__name__, (base,), {"__module__": kind.__module__})
            _carriers[kind] = carrier
    return carrier


def _recalled(message):
    """``(type, token text)`` of the hora error whose token ``message``
    holds, or Nones (kept: TensorFlow may build several errors from one
    status)."""
    start = message.find("[hora error ")
    if start < 0:
        return None, None
    end = message.find("]", start)
    try:
        token = int(message[start + len("[hora error "):end])
    except ValueError:
        return None, None
    with _pending_lock:
        return _pending.get(token), _TOKEN_TEXT.format(token)


def install():
    """Makes the tf.errors.OpError that TensorFlow raises for a failed
    graph node that carries a hora error also an instance of that error's
    type and of the tf.errors class Horovod raises for it (once per
    process): TensorFlow's class is kept (UnknownError for runtime errors,
    InvalidArgumentError for bad arguments), and the class is set when
    TensorFlow constructs the error, on whichever path."""
    op_error = tf.errors.OpError
    original = op_error.__init__
    if getattr(original, "_hora", False):
        return

    def __init__(self, node_def, op, message, *args):
        original(self, node_def, op, message, *args)
        kind, token = _recalled(message if isinstance(message, str) else "")
        if kind is not None and not isinstance(self, kind):
            # A subclass of the class TensorFlow made: it checks the type.
            self.__class__ = _graph_class(type(self), kind)
            self._message = message.replace(f" {token}", "")

    __init__._hora = True
    op_error.__init__ = __init__


def keep_hora_out_of_autograph():
    """Tells AutoGraph not to convert hora's own functions when a
    tf.function calls them: they build py_function nodes and run eagerly
    inside them, and converting them would only slow tracing down."""
    try:
        from tensorflow.python.autograph.core import config, config_lib
    except ImportError:
        return
    rule = config_lib.DoNotConvert("hora")
    if not any(str(existing) == str(rule) for existing in config.CONVERSION_RULES):
        config.CONVERSION_RULES = (rule,) + tuple(config.CONVERSION_RULES)
