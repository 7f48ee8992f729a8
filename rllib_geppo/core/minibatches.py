"""The minibatches of an update, the same with one learner or many.

Every learner holds the whole store and computes the same targets on it (V-trace runs over whole
stored episodes, whatever their length). An epoch is one shuffle of the store's real rows, the
same on every learner (:func:`epoch_orders`, from a seed the Algorithm sends), cut into
``steps`` global minibatches of ``size`` rows (:func:`minibatch_shape`). Advantages are
standardised over each global minibatch. Learner r of L then computes its loss on its slice of
every global minibatch (:func:`learner_slice`), its sample weights scaled by
:func:`slice_weight_scale` so that the mean of the L learners' losses, which is what the
learners average (with their gradients), is the global minibatch's mean loss:
every learner takes the same number of steps, every sample counts the same whichever learner
holds it, and L learners take the gradient steps one learner would (to float rounding).

Pure torch; no Ray.
"""

from __future__ import annotations

import torch

Tensor = torch.Tensor


def minibatch_shape(rows: int, minibatches_per_epoch: int, num_learners: int = 1) -> tuple[int, int]:
    """``(steps, size)``: gradient steps per epoch and rows per global minibatch.

    ``steps`` is ``minibatches_per_epoch``, fewer where the store is too small for every
    learner to get at least one row of every minibatch; the ``rows - steps * size`` rows left
    over by the division sit out the epoch (a fresh shuffle picks others next epoch).
    """
    if rows < 1 or minibatches_per_epoch < 1 or num_learners < 1:
        raise ValueError(
            f"need rows, minibatches and learners >= 1; got {rows}, {minibatches_per_epoch}, {num_learners}."
        )
    steps = max(1, min(minibatches_per_epoch, rows // num_learners))
    return steps, rows // steps


def epoch_orders(
    rows: int, num_epochs: int, *, seed: int, shuffle: bool = True, device: torch.device | str = "cpu"
) -> list[Tensor]:
    """Each epoch's row order: permutations drawn on the CPU from ``seed`` (any integer), so
    that every learner, on any device, draws the same ones; ``shuffle=False``: rows in order."""
    if not shuffle:
        return [torch.arange(rows, device=device)] * num_epochs
    generator = torch.Generator().manual_seed(seed % 2**63)
    return [torch.randperm(rows, generator=generator).to(device) for _ in range(num_epochs)]


def learner_slice(size: int, rank: int, num_learners: int) -> slice:
    """Learner ``rank``'s rows of a global minibatch of ``size`` rows: the L slices differ in
    length by at most one row and cover every row once."""
    if not 0 <= rank < num_learners:
        raise ValueError(f"rank {rank} is not one of {num_learners} learners.")
    return slice(rank * size // num_learners, (rank + 1) * size // num_learners)


def slice_weight_scale(size: int, rank: int, num_learners: int) -> float:
    """The factor on learner ``rank``'s sample weights that makes the mean over learners of
    their minibatch losses (means over their slices) the mean over the global minibatch:
    rows in the slice x L / size; 1 when L divides ``size``."""
    rows = learner_slice(size, rank, num_learners)
    return (rows.stop - rows.start) * num_learners / size
