"""The natural-gradient step of GeTRPO and GeVMPO under a KL bound (TRPO's step, Schulman et al.
2015, Appendix C, as the authors' GPI code takes it on the whole store).

With theta_k the policy's flat parameters at the start of the update, g the gradient at theta_k of
the surrogate to maximise, and F the Hessian at theta_k of the w-weighted mean KL(pi_k || pi_theta)
(the Fisher matrix) plus ``damping`` * I:

    x = F^-1 g                              conjugate gradient, never forming F
    full step = sqrt(2 delta / x'Fx) * x    the step whose quadratic KL model 0.5 s'Fs is delta
    theta = theta_k + shrink^j * full step  the first j = 0, 1, ... whose KL <= 1.5 delta and whose
                                            surrogate did not fall; theta_k if none of 10 does

delta = eps^2 / 2 (:func:`kl_bound`), eps the GPI trust-region size eps_PPO times the clip
multiple: 0.02 for TRPO and VMPO (eps 0.2), 0.005 for their generalized versions at B = 2.

Everything works on flat parameter vectors (``torch.nn.utils.parameters_to_vector``; a module is
evaluated at a flat vector through ``torch.func.functional_call(module, unflatten(theta, ...))``),
so the learner can use it on any module. Where the authors' code (jqueeney/gpi,
``common/update_utils.py``: ``cg``, ``make_F``; ``algs/getrpo.py``: ``_actor_update``,
``_backtrack``) differs from this module, the function says so.

Pure torch; no Ray.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping
from dataclasses import dataclass

import torch

Tensor = torch.Tensor

#: Conjugate-gradient iterations and the squared-residual tolerance that ends them early
#: (the authors' ``cg_it`` = 20 and ``residual_tol`` = 1e-10).
CG_ITERATIONS = 20
CG_RESIDUAL_TOL = 1e-10
#: Added to the Fisher-vector product as ``damping * v`` (the authors' ``trust_damp``).
DAMPING = 0.01
#: The line search accepts a KL of at most this multiple of delta (the authors' ``kl_maxfactor``).
KL_FACTOR = 1.5
#: Each backtrack multiplies the step by this (the authors divide by sqrt(2)).
SHRINK = 1.0 / math.sqrt(2.0)
#: Step sizes tried: the full step and 9 shrinks (the authors' loop checks 10).
MAX_TRIES = 10


def kl_bound(eps: float) -> float:
    """delta = eps^2 / 2: the mean-KL bound whose Pinsker bound on the TV is eps / 2, the TV
    that GePPO's clip range aims at (authors: ``self.delta = np.square(self.eps) / 2``).

    ``eps`` is eps_PPO times the clip multiple of the policy weights (1 on-policy): 0.2 gives
    0.02, 0.1 gives 0.005."""
    return 0.5 * eps * eps


def unflatten(flat: Tensor, like: Mapping[str, Tensor]) -> dict[str, Tensor]:
    """``flat`` cut into tensors shaped as the values of ``like``, in its order: the parameters
    ``torch.func.functional_call`` takes. The pieces are views of ``flat``, so gradients flow back
    to it. The order is ``parameters_to_vector``'s when ``like`` is ``dict(module.named_parameters())``.
    """
    sizes = [p.numel() for p in like.values()]
    if flat.numel() != sum(sizes):
        raise ValueError(
            f"unflatten: the flat vector has {flat.numel()} entries, the parameters {sum(sizes)}; "
            "pass the vector of exactly these parameters, parameters_to_vector(module.parameters())."
        )
    pieces = torch.split(flat, sizes)
    return {name: piece.view_as(p) for (name, p), piece in zip(like.items(), pieces)}


def conjugate_gradient(
    fvp: Callable[[Tensor], Tensor],
    b: Tensor,
    *,
    iterations: int = CG_ITERATIONS,
    residual_tol: float = CG_RESIDUAL_TOL,
) -> Tensor:
    """Solve F x = b for symmetric positive-definite F given only ``fvp(v) = F v``.

    Starts at x = 0 and runs at most ``iterations`` steps (default 20), ending after the step
    whose squared residual ``r'r`` falls below ``residual_tol`` (default 1e-10; units of b
    squared). In exact arithmetic it is exact after as many steps as F has distinct
    eigenvalues (at most ``len(b)``). The authors' ``cg`` (from OpenAI Baselines), step for step;
    theirs returns float32, this keeps ``b``'s dtype.
    """
    x = torch.zeros_like(b)
    r = b.clone()
    p = b.clone()
    rdotr = torch.dot(r, r)
    for _ in range(iterations):
        z = fvp(p)
        alpha = rdotr / torch.dot(p, z)
        x = x + alpha * p
        r = r - alpha * z
        new_rdotr = torch.dot(r, r)
        p = r + (new_rdotr / rdotr) * p
        rdotr = new_rdotr
        if rdotr < residual_tol:
            break
    return x


def fisher_vector_product(
    kl_fn: Callable[[Tensor], Tensor], params: Tensor, *, damping: float = DAMPING
) -> Callable[[Tensor], Tensor]:
    """``v -> H v + damping * v`` with H the Hessian of ``kl_fn`` at ``params``, by double
    backpropagation.

    ``kl_fn(theta)`` is the scalar w-weighted mean KL(pi_k || pi_theta) over the stored states,
    with pi_k's distribution held fixed (no gradient); at theta = theta_k its Hessian is the
    w-weighted Fisher matrix. The first derivative's graph is built once and kept for every
    product (the authors rebuild it per product; same value). ``damping`` (default 0.01) makes
    F positive definite.
    """
    theta = params.detach().requires_grad_(True)
    (grad,) = torch.autograd.grad(kl_fn(theta), theta, create_graph=True)

    def fvp(v: Tensor) -> Tensor:
        (hv,) = torch.autograd.grad(grad, theta, grad_outputs=v, retain_graph=True)
        return hv + damping * v

    return fvp


def step_scale(x: Tensor, fx: Tensor, delta: float) -> Tensor:
    """``sqrt(2 delta / x'Fx)``: the multiple of the search direction x (with ``fx`` = F x)
    whose quadratic KL model ``0.5 s'Fs`` equals ``delta`` (nats)."""
    return torch.sqrt(2.0 * delta / torch.dot(x, fx))


def natural_gradient_step(
    gradient: Tensor,
    fvp: Callable[[Tensor], Tensor],
    delta: float,
    *,
    cg_iterations: int = CG_ITERATIONS,
    cg_residual_tol: float = CG_RESIDUAL_TOL,
) -> Tensor:
    """The full step ``sqrt(2 delta / x'Fx) * x`` with x = F^-1 ``gradient`` by
    :func:`conjugate_gradient`; ``gradient`` is that of the surrogate to maximise.

    Zero, with no conjugate gradient, when every entry of ``gradient`` is within 1e-8 of 0 or
    ``delta`` is 0, as in the authors' code. Zero also where ``x'Fx`` is not a positive finite
    number (only rounding can do that, F being damped); the authors' step would be NaN there.
    """
    if delta <= 0.0 or bool((gradient.abs() <= 1e-8).all()):
        return torch.zeros_like(gradient)
    x = conjugate_gradient(fvp, gradient, iterations=cg_iterations, residual_tol=cg_residual_tol)
    scale = step_scale(x, fvp(x), delta)
    if not torch.isfinite(scale):
        return torch.zeros_like(gradient)
    return scale * x


@dataclass(frozen=True)
class LineSearchResult:
    """What :func:`backtracking_line_search` chose.

    Attributes:
        params: the accepted parameters, or the old ones where no step was accepted.
        accepted: whether a step was accepted.
        backtracks: how often the accepted step was shrunk (0: the full step); the number of
            tries where none was accepted.
        step_fraction: the accepted step as a fraction of the full one, ``shrink ** backtracks``;
            0 where none was accepted (the authors' logged ``adj``).
        surrogate: the surrogate at ``params``.
        kl: the mean KL from the old parameters to ``params`` (0 where none was accepted).
        improvement: ``surrogate`` minus the surrogate at the old parameters.
    """

    params: Tensor
    accepted: bool
    backtracks: int
    step_fraction: float
    surrogate: float
    kl: float
    improvement: float


def backtracking_line_search(
    params: Tensor,
    full_step: Tensor,
    evaluate: Callable[[Tensor], tuple[float | Tensor, float | Tensor]],
    *,
    max_kl: float,
    shrink: float = SHRINK,
    max_tries: int = MAX_TRIES,
) -> LineSearchResult:
    """Try ``params + shrink**j * full_step`` for j = 0, 1, ..., ``max_tries - 1`` and accept the
    first whose KL is at most ``max_kl`` and whose surrogate is at least the old one.

    ``evaluate(theta)`` returns ``(surrogate, kl)`` at flat parameters theta: the surrogate to
    maximise and the w-weighted mean KL(pi_k || pi_theta) over all stored samples; it is called
    once at ``params`` and once per try. ``max_kl`` is ``KL_FACTOR * delta`` (1.5 delta);
    ``shrink`` defaults to 1/sqrt(2), ``max_tries`` to 10. Where none is accepted the old
    parameters come back.

    The authors' rule, with two differences: a try whose KL or surrogate is not finite is
    refused (theirs accepts it, NaN failing both of its comparisons); and there are exactly
    ``max_tries`` evaluations of tries (theirs evaluates an 11th step it never checks).
    """
    surrogate_before, _ = evaluate(params)
    surrogate_before = float(surrogate_before)
    for j in range(max_tries):
        fraction = shrink**j
        candidate = params + fraction * full_step
        surrogate, kl = (float(value) for value in evaluate(candidate))
        improvement = surrogate - surrogate_before
        if math.isfinite(kl) and math.isfinite(improvement) and kl <= max_kl and improvement >= 0.0:
            return LineSearchResult(candidate, True, j, fraction, surrogate, kl, improvement)
    return LineSearchResult(params, False, max_tries, 0.0, surrogate_before, 0.0, 0.0)
