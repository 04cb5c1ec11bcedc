"""The product's node score in torch, differentiable in the weights and tau: what behaviour cloning
trains through. The same formula as ``policy.features.closeness`` and
``policy.static_weights.weighted_closeness`` (NumPy, which the simulator and the engine score with):

    f(u)    = clip(1 - |u - tau| / max(tau, 1 - tau), 0, 1)
    score   = sum_r w_r * f(u_r)

with CPU and memory read by requests to a share (``policy.features.with_requests``) in the requests
and balance action modes, and the score blended with the balance of CPU and memory
(``policy.features.balanced``) to the balance share in the balance mode
(``policy.static_weights.product_score``).

tests/lifecycle/test_bc.py holds this mirror to the NumPy score on the same inputs (float64, within
1e-12 on scores in [0, 1]) and to the same best node.
"""

from __future__ import annotations

import torch


def closeness(u: torch.Tensor, tau: torch.Tensor) -> torch.Tensor:
    """``u`` [..., k, 4], ``tau`` [...] -> [..., k, 4] closeness of each utilisation to tau."""
    t = tau[..., None, None]
    return torch.clamp(1.0 - (u - t).abs() / torch.maximum(t, 1.0 - t), 0.0, 1.0)


def weighted_closeness(u: torch.Tensor, weights: torch.Tensor, tau: torch.Tensor) -> torch.Tensor:
    """Scores [..., k] of candidates ``u`` [..., k, 4] under ``weights`` [..., 4] and ``tau`` [...]."""
    return (closeness(u, tau) * weights[..., None, :]).sum(-1)


def with_requests(u: torch.Tensor, r: torch.Tensor, share: torch.Tensor) -> torch.Tensor:
    """``u`` [..., k, 4] with CPU and memory blended with the requested utilisation ``r`` [..., k, 2]:
    (1 - share) x u + share x r, ``share`` [...]."""
    s = share[..., None, None]
    return torch.cat([(1.0 - s) * u[..., :2] + s * r, u[..., 2:]], dim=-1)


def balanced(u: torch.Tensor) -> torch.Tensor:
    """[..., k] balance of candidates ``u`` [..., k, >=2]: 1 - |min(u_cpu, 1) - min(u_mem, 1)| / 2."""
    return 1.0 - (torch.clamp(u[..., 0], max=1.0) - torch.clamp(u[..., 1], max=1.0)).abs() / 2.0


def product_score(u: torch.Tensor, r: torch.Tensor, weights: torch.Tensor, tau: torch.Tensor,
                  requests: torch.Tensor | None = None, balance: torch.Tensor | None = None) -> torch.Tensor:
    """Scores [..., k]: CPU and memory read by requests to the share ``requests`` [...] (None: usage),
    then the weighted closeness blended with their balance to the share ``balance`` [...] (None: none)."""
    if requests is not None:
        u = with_requests(u, r, requests)
    s = weighted_closeness(u, weights, tau)
    if balance is not None:
        b = balance[..., None]
        s = (1.0 - b) * s + b * balanced(u)
    return s
