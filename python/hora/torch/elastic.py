"""``hvd.elastic`` for PyTorch: Horovod's elastic API on hora
(the machinery is hora.common.elastic; docs/elastic.md)."""

import copy
import math

import torch

from hora.common import basics as _basics
from hora.common import elastic as _common
from hora.common.elastic import *  # noqa: F401,F403
from hora.common.elastic import ObjectState
from hora.common.elastic import run as _run
from hora.torch import functions as _functions

__all__ = _common.__all__ + ["ElasticSampler", "TorchState"]


def run(func):
    """Runs ``func(state, ...)`` and keeps it running when workers fail or
    join: see hora.common.elastic.run."""
    return _run(func)


class TorchState(ObjectState):
    """A model, an optimizer and any other attributes (``epoch=0``, ...).
    ``process_set`` (an ``ElasticProcessSet``) scopes commit, restore and
    sync to that set's members."""

    def __init__(self, model=None, optimizer=None, process_set=None, **attributes):
        self.model = model
        self.optimizer = optimizer
        self._model_saved = None
        self._optimizer_saved = None
        super().__init__(process_set=process_set, **attributes)
        self._save_tensors()

    def _save_tensors(self):
        if self.model is not None:
            self._model_saved = copy.deepcopy(self.model.state_dict())
        if self.optimizer is not None:
            self._optimizer_saved = copy.deepcopy(self.optimizer.state_dict())

    def save(self):
        self._save_tensors()
        super().save()

    def restore(self):
        if self.model is not None:
            self.model.load_state_dict(self._model_saved)
        if self.optimizer is not None:
            self.optimizer.load_state_dict(self._optimizer_saved)
        super().restore()

    def _sync_from(self, root, process_set):
        if self.model is not None:
            _functions.broadcast_parameters(self.model.state_dict(), root_rank=root, process_set=process_set)
        if self.optimizer is not None:
            _functions.broadcast_optimizer_state(self.optimizer, root_rank=root, process_set=process_set)
        super()._sync_from(root, process_set)
        # What every member now holds is the commit it restores to.
        self._save_tensors()


class ElasticSampler(torch.utils.data.Sampler):
    """Shards a dataset over the current world (or ``process_set``) and
    remembers which indices were processed, so that after a reset the
    remaining ones are split over the new world. Call ``record_batch`` (or
    ``record_indices``) as batches are done and ``set_epoch`` at each epoch;
    keep the sampler in the state (``TorchState(..., sampler=sampler)``) so
    its progress is committed, restored and synchronised."""

    def __init__(self, dataset, shuffle=True, seed=0, process_set=None):
        self.dataset = dataset
        self.shuffle = shuffle
        self.seed = seed
        self.process_set = process_set
        self.epoch = 0
        self.processed_indices = set()
        self.reset()

    def set_epoch(self, epoch):
        self.epoch = epoch
        self.processed_indices = set()
        self.reset()

    def record_batch(self, batch_idx, batch_size):
        start = batch_idx * batch_size
        self.record_indices(self.indices[start:start + batch_size])

    def record_indices(self, indices):
        self.processed_indices.update(indices)

    def _members(self):
        group = _common._resolved(self.process_set)
        if group.ranks is None:
            return _basics.rank(), _basics.size()
        return group.ranks.index(_basics.rank()), len(group.ranks)

    def reset(self):
        """Re-shards what is left of this epoch over the current members."""
        order = list(range(len(self.dataset)))
        if self.shuffle:
            generator = torch.Generator()
            generator.manual_seed(self.seed + self.epoch)
            order = torch.randperm(len(self.dataset), generator=generator).tolist()
        remaining = [i for i in order if i not in self.processed_indices]
        try:
            rank, size = self._members()
        except ValueError:
            rank, size = 0, 1   # before init
        per_rank = math.ceil(len(remaining) / size) if remaining else 0
        padded = remaining + remaining[:per_rank * size - len(remaining)]
        self.indices = padded[rank * per_rank:(rank + 1) * per_rank]

    def __iter__(self):
        return iter(self.indices)

    def __len__(self):
        return len(self.indices)

    # ObjectState keeps the sampler's progress, not the sampler.
    def state_dict(self):
        return {"epoch": self.epoch, "processed_indices": sorted(self.processed_indices)}

    def load_state_dict(self, state):
        self.epoch = state["epoch"]
        self.processed_indices = set(state["processed_indices"])
        self.reset()
