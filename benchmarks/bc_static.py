"""Behaviour cloning's static stage: L-BFGS (the product, ``lifecycle.bc.fit_static``) against Adam on the
same loss and parametrisation, from each tau start, on a sample of a history's decisions; and the loss of
kube-scheduler's own arguments (w 1/2, 1/2, 0, 0, tau 0, requests 1, balance 1/2, as near as the action
box allows) at its best beta, the bar a fit of a k8s-default history should reach.

    python benchmarks/bc_static.py --history HIST                      # a history folder (td3sched simulate --record-history)
    python benchmarks/bc_static.py --history HIST --sample 5000 --adam-steps 300,1500 --target best

Prints one line per optimiser and start: the loss, the fitted tau, shares and beta, and the seconds it
took (one torch thread; side by side in one run, so the times compare).
"""

from __future__ import annotations

import argparse
import math
import time

import numpy as np
import torch

from td3sched.lifecycle.bc import TARGETS, BCConfig, ListwiseLoss, _batch, fit_static
from td3sched.lifecycle.history import Decisions, read_history
from td3sched.rl.actions import LOGIT_LIMIT, ScoreArgs, action_size, decode, encode

MODE = "balance"
KUBE = ScoreArgs(np.array([0.5, 0.5, 0.0, 0.0]), 0.0, None, 1.0, 0.5)


def describe(action: np.ndarray, loss: float, beta: float, seconds: float) -> str:
    args = decode(action, MODE)
    return (f"loss {loss:.4f}  tau {args.tau:.3f}  requests {args.requests:.3f}  balance {args.balance:.3f}  "
            f"w {np.round(args.weights, 3).tolist()}  beta {beta:,.0f}  {seconds:.1f} s")


def adam(d: Decisions, tau0: float, steps: int, beta0: float, target_kind: str) -> tuple[np.ndarray, float, float]:
    """Adam (lr 0.05) on the static stage's loss and parametrisation (LOGIT_LIMIT x tanh(z)), full batch."""
    _, u, r, log_weight, target, balanced = _batch(d, np.arange(len(d)), target_kind)
    size = action_size(MODE)
    a0 = torch.zeros(size, dtype=torch.float64)
    a0[4] = math.log(tau0 / (1 - tau0))
    z = torch.atanh(a0 / LOGIT_LIMIT).requires_grad_(True)
    loss_fn = ListwiseLoss(beta0, MODE)
    optimiser = torch.optim.Adam([z, loss_fn.log_beta], lr=0.05)
    for _ in range(steps):
        loss = loss_fn((LOGIT_LIMIT * torch.tanh(z)).expand(len(d), size), u, r, log_weight, target, balanced)
        optimiser.zero_grad()
        loss.backward()
        optimiser.step()
    with torch.no_grad():
        action = LOGIT_LIMIT * torch.tanh(z)
        final = loss_fn(action.expand(len(d), size), u, r, log_weight, target, balanced).item()
    return action.numpy(), final, loss_fn.log_beta.exp().item()


def reference_loss(d: Decisions, args: ScoreArgs, target_kind: str) -> tuple[float, float]:
    """(the least loss of ``args`` over a grid of beta, that beta)."""
    _, u, r, log_weight, target, balanced = _batch(d, np.arange(len(d)), target_kind)
    pre = torch.from_numpy(encode(args, MODE, bound=LOGIT_LIMIT * (1 - 1e-3)).astype(np.float64))
    with torch.no_grad():
        losses = {beta: ListwiseLoss(beta, MODE)(pre.expand(len(d), len(pre)), u, r, log_weight, target, balanced).item()
                  for beta in np.geomspace(10, 30_000, 31)}
    beta = min(losses, key=losses.get)
    return losses[beta], float(beta)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--history", required=True, help="a history folder (Parquet files of one schema)")
    parser.add_argument("--sample", type=int, default=5000, help="decisions sampled from the history (seed 0)")
    parser.add_argument("--starts", default="0.01,0.3", help="tau starts, comma-separated")
    parser.add_argument("--target", default="chosen", choices=TARGETS, help="the loss's target (BCConfig.target)")
    parser.add_argument("--adam-steps", default="300,1500", help="Adam's step counts to run, comma-separated (empty: none)")
    options = parser.parse_args()
    torch.set_num_threads(1)
    d = Decisions.from_table(read_history(options.history))
    d.require_requests()
    idx = np.arange(len(d)) if len(d) <= options.sample else np.sort(
        np.random.default_rng(0).choice(len(d), options.sample, replace=False))
    d = d.subset(idx)
    print(f"{len(d):,} decisions of {d.sizes.mean():.1f} candidates from {options.history}, mode {MODE}, "
          f"target {options.target}")
    loss, beta = reference_loss(d, KUBE, options.target)
    print(f"kube-scheduler's arguments: loss {loss:.4f} at beta {beta:,.0f}")
    for tau0 in (float(t) for t in options.starts.split(",")):
        config = BCConfig(action_mode=MODE, static_tau_starts=(tau0,), static_sample=len(d), target=options.target)
        t0 = time.perf_counter()
        action, loss, beta = fit_static(d, config, np.random.default_rng(0))
        print(f"tau start {tau0}: L-BFGS ({config.static_steps} iterations at most): "
              + describe(action, loss, beta, time.perf_counter() - t0), flush=True)
        for steps in (int(s) for s in options.adam_steps.split(",") if s):
            t0 = time.perf_counter()
            action, loss, beta = adam(d, tau0, steps, config.inverse_temperature, options.target)
            print(f"tau start {tau0}: Adam ({steps} steps): " + describe(action, loss, beta, time.perf_counter() - t0),
                  flush=True)


if __name__ == "__main__":
    main()
