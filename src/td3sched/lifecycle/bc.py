"""Behaviour cloning from chosen nodes: an actor whose action ranks the history's chosen node first.

History records chosen nodes, not weights. For a decision with observation o, candidates with
features u_1..u_k (the product's score features, ``policy.features``) and chosen node c:

    a           = actor(normalise(o))                       pre-activations (rl.networks.Actor)
    w, tau      = softmax(a[0:4]), sigmoid(a[4])            (tau = 0 in the seed mode; rl.actions)
    rho         = sigmoid(a[5])                             the requests share (requests, balance modes)
    b           = sigmoid(a[6])                             the balance share (balance mode only; 0 for
                                                            a BestEffort pod: static_weights.pod_balance)
    s_n         = (1 - b) x sum_r w_r * f(u'_nr, tau)       the product's score (lifecycle.score_torch,
                  + b x balanced(u'_n)                      policy.static_weights.product_score), CPU and
                                                            memory read by requests to the share rho:
                                                            u' = with_requests(u, r, rho)
    loss        = -log sum_{n in T} softmax(beta * s + log m)_n    listwise: the target nodes against the others
    T           = {c}, the chosen node (``BCConfig.target`` chosen, the default); with target best, the
                  nodes the history's policy scored best (its recorded scores) when c is one of them, else {c}

averaged over a batch of decisions; m_n is the number of the decision's candidates candidate n stands for
in the history (its ``weight``: 1 where all were kept; a history of a large cluster keeps the chosen node,
the best-scored others and a uniform sample of the rest, ``lifecycle.history``), which makes the loss a
sampled softmax: the softmax's sum over the nodes left out is estimated by the sampled ones, scaled.
A scheduler that breaks its ties at random (kube-scheduler among
equal integer scores) picks each of its m tied best nodes 1/m of the time; the chosen-node loss is
least when the clone scores them alike too, so it learns the scheduler's indifference. The set target
(best) is met by any order among the tied nodes: on tiny's k8s-default history it let the clone's tau
drift to 0.11, ordering them towards fuller nodes, where the chosen-node target finds kube-scheduler's
own tau (docs/lifecycle.md). An import's history has no scores: its target is always {c}.

``beta`` (the inverse temperature of the softmax; scores lie in [0, 1] and differ by hundredths) is
learned with the actor, from ``BCConfig.inverse_temperature``; it does not change which node scores
best, and is not part of the model.

Two stages (a new actor):

1. **static**: one action for every decision (the mode's 5 to 7 pre-activations) and beta, full batch,
   by L-BFGS from several tau starts (the score is piecewise linear in tau, the loss not convex in it;
   ``fit_static`` says why not Adam); its weights, tau and shares are
   what a static-weights policy would have to be to make the history's choices (reported in the card);
2. **actor**: the actor network, made to output that action whatever the observation (last layer's
   weights 0, bias the action), then trained by minibatches so that the action may depend on the
   state. If the actor stage agrees less with the held-out decisions than its start, the start is kept
   (``kept`` in the card says which).

Fine-tuning (``lifecycle.finetune``) runs the actor stage alone, from the serving model.

**Agreement** (reported, never optimised directly) is measured with the product's NumPy code: the
actor's action decoded by ``rl.actions.decode``, the candidates scored by
``policy.static_weights.product_score``; a decision agrees when its chosen node has the top score
(ties are exact float equality, as the simulator's Select; the simulator breaks them at random), among
the candidates the history kept: of a sampled decision, an upper bound of the agreement over all its
candidates (the near misses are all kept, so the bound is close).
The requests and balance modes need a history whose candidates carry their requested utilisation
(schema version 3 or later, the simulator's or an import's).
``expected_top1`` counts a tie of m nodes as 1/m: the share of choices a run would repeat. Both are
reported on the decisions trained on and on the held-out newest ``validation_share``.

The result is a model folder (``rl.model``: ``model.pt`` + ``model.json``) that ``td3:FOLDER``, the
engine and ``td3sched train``'s critics read as any other; its critics are untrained (fresh), its
normaliser is fitted on the history's observations, and its card's ``training`` says how it was made.
"""

from __future__ import annotations

import dataclasses
import math
import time
from dataclasses import dataclass
from typing import Callable

import numpy as np
import torch

from td3sched.lifecycle import score_torch
from td3sched.lifecycle.history import Decisions
from td3sched.policy.static_weights import pod_balance, product_score
from td3sched.rl.actions import LOGIT_LIMIT, action_size, check_action_mode, decode, reads_requests
from td3sched.rl.networks import Actor, squash
from td3sched.rl.normalizer import ObservationNormalizer
from td3sched.rl.observation import OBSERVATION_SIZE


BC_MODES = ("full", "seed", "requests", "balance")
"""The action modes behaviour cloning trains (``rl.actions``)."""


TARGETS = ("best", "chosen")
"""The loss's targets (``BCConfig.target``)."""


@dataclass(frozen=True)
class BCConfig:
    epochs: int = 40
    """Passes over the decisions trained on."""
    batch_size: int = 128
    """Decisions per gradient step."""
    learning_rate: float = 1e-4
    """Adam's learning rate of the actor stage (it starts from the static stage's action; fine-tuning a
    serving model uses a smaller one still: ``td3sched finetune``)."""
    inverse_temperature: float = 100.0
    """Initial beta of softmax(beta * scores); learned (log-parametrised)."""
    hidden: tuple[int, ...] = (256, 256)
    """Hidden layer widths of a new actor (a fine-tuned actor keeps its own)."""
    action_mode: str = "full"
    """full: weights and tau; seed: weights, tau fixed at 0; requests: weights, tau and the requests
    share; balance: those and the balance share (rl.actions). The ceiling mode is not cloned: a history records where pods went, not which
    nodes a ceiling held back."""
    static_steps: int = 100
    """L-BFGS iterations at most of the static stage (one action for every decision) from each tau start."""
    static_tau_starts: tuple[float, ...] = (0.1, 0.3, 0.5, 0.7, 0.9)
    """Initial tau values of the static stage (the score is piecewise linear in tau: several starts);
    ignored in the seed mode."""
    static_sample: int = 20_000
    """Decisions the static stage reads at most (a random sample of the training ones)."""
    validation_share: float = 0.1
    """The newest share of decisions (by time) held out: agreement is reported on it too; 0 trains on all."""
    seed: int = 1
    """torch's seed (actor initialisation, batch order)."""
    target: str = "chosen"
    """The loss's target nodes: chosen, the chosen node (as for a history whose scores are unknown: an
    import's); best, the nodes the history's policy scored best where its scores are recorded and the
    chosen node is among them, else the chosen node (see the module's docstring for why not by default)."""

    def __post_init__(self) -> None:
        object.__setattr__(self, "hidden", tuple(int(h) for h in self.hidden))
        object.__setattr__(self, "static_tau_starts", tuple(float(t) for t in self.static_tau_starts))
        if check_action_mode(self.action_mode) not in BC_MODES:
            raise ValueError(f"BCConfig.action_mode={self.action_mode!r}: expected one of {', '.join(BC_MODES)}")
        if self.target not in TARGETS:
            raise ValueError(f"BCConfig.target={self.target!r}: expected one of {', '.join(TARGETS)}")
        lo, hi = 1 / (1 + math.exp(LOGIT_LIMIT)), 1 / (1 + math.exp(-LOGIT_LIMIT))  # the action box's tau
        if not self.static_tau_starts or not all(lo < t < hi for t in self.static_tau_starts):
            raise ValueError(f"BCConfig.static_tau_starts={self.static_tau_starts!r}: expected values in "
                             f"({lo:.4f}, {hi:.4f}), the action box's tau range")
        checks = [("epochs", isinstance(self.epochs, int) and self.epochs >= 0, "a whole number >= 0"),
                  ("static_steps", isinstance(self.static_steps, int) and self.static_steps >= 0,
                   "a whole number >= 0"),
                  ("static_sample", isinstance(self.static_sample, int) and self.static_sample >= 1,
                   "a whole number >= 1"),
                  ("batch_size", isinstance(self.batch_size, int) and self.batch_size >= 1, "a whole number >= 1"),
                  ("learning_rate", self.learning_rate > 0, "a positive number"),
                  ("inverse_temperature", self.inverse_temperature > 0, "a positive number"),
                  ("validation_share", 0 <= self.validation_share < 1, "a share in [0, 1)")]
        for name, ok, expected in checks:
            value = getattr(self, name)
            if not ok or (isinstance(value, float) and not math.isfinite(value)):
                raise ValueError(f"BCConfig.{name}={value!r}: expected {expected}")

    def to_json(self) -> dict:
        return {**dataclasses.asdict(self), "hidden": list(self.hidden)}


@dataclass
class Agreement:
    decisions: int
    agreement: float
    """Share of decisions whose chosen node has the top score."""
    expected_top1: float
    """The same, a tie of m nodes counted 1/m."""
    policy_top1: float | None = None
    """Share of decisions whose best node by the clone is one the history's policy scored best (its
    recorded scores, ties included): what agreement would be if the policy broke its ties as the clone
    does. None when a decision's scores are unknown (imports, older engines)."""

    def to_json(self) -> dict:
        return dataclasses.asdict(self)


def agreement(act: Callable[[np.ndarray], np.ndarray], d: Decisions, action_mode: str = "full") -> Agreement:
    """How often the product's score, with the weights and tau ``act`` (raw observations [n, 35] ->
    pre-activations [n, action size]) chooses, puts the history's chosen node on top (see the module's
    docstring)."""
    if len(d) == 0:
        raise ValueError("agreement of no decision: expected at least one")
    actions = np.asarray(act(d.obs))
    hits, expected, in_top = 0, 0.0, 0
    for i in range(len(d)):
        args = decode(actions[i], action_mode)
        lo, hi = d.offsets[i], d.offsets[i + 1]
        s = product_score(d.u[lo:hi], d.r[lo:hi], args.weights, args.tau, args.requests,
                          pod_balance(args.balance, d.qos[i]))
        top = s.max()
        if s[d.chosen[i]] == top:
            hits += 1
            expected += 1.0 / d.weight[lo:hi][s == top].sum()
        recorded = d.scores[lo:hi]
        in_top += bool(recorded[np.argmax(s)] == recorded.max())
    known = not np.isnan(d.scores).any()
    return Agreement(len(d), hits / len(d), expected / len(d), in_top / len(d) if known else None)


def static_agreement(weights, tau: float, d: Decisions, requests: float = 0.0, balance: float = 0.0) -> Agreement:
    """The agreement of fixed weights, tau and shares (a static-weights policy) with a history."""
    w = np.asarray(weights, dtype=float)
    hits, expected = 0, 0.0
    for i in range(len(d)):
        lo, hi = d.offsets[i], d.offsets[i + 1]
        s = product_score(d.u[lo:hi], d.r[lo:hi], w, tau, requests, pod_balance(balance, d.qos[i]))
        if s[d.chosen[i]] == s.max():
            hits += 1
            expected += 1.0 / d.weight[lo:hi][s == s.max()].sum()
    return Agreement(len(d), hits / len(d), expected / len(d))


def split(d: Decisions, validation_share: float) -> tuple[Decisions, Decisions | None]:
    """(train, held out): the newest ``validation_share`` of decisions by time are held out."""
    n_val = int(round(len(d) * validation_share))
    if n_val == 0 or n_val >= len(d):
        return d, None
    order = np.argsort(d.time_s, kind="stable")
    return d.subset(np.sort(order[:-n_val])), d.subset(np.sort(order[-n_val:]))


def _batch(d: Decisions, idx: np.ndarray, target: str = "chosen") -> tuple[torch.Tensor, ...]:
    """(obs [B, 35], u [B, K, 4] padded, r [B, K, 2] padded, log_weight [B, K]: log of each candidate's
    weight, -inf for the padding, target [B, K]: the loss's target nodes (``BCConfig.target``), balanced
    [B]: 1.0 where the pod is scored with the balance share, ``static_weights.pod_balance``) of decisions
    ``idx``."""
    sizes = d.sizes[idx]
    k = int(sizes.max())
    cols = np.arange(k)
    mask = cols[None, :] < sizes[:, None]
    rows = np.minimum(d.offsets[idx][:, None] + cols[None, :], len(d.u) - 1)
    u = np.where(mask[..., None], d.u[rows], 0.0)
    r = np.where(mask[..., None], d.r[rows], 0.0)
    balanced = np.array([pod_balance(1.0, q) for q in d.qos[idx].tolist()])
    log_weight = np.where(mask, np.log(np.where(mask, d.weight[rows], 1.0)), -np.inf)
    return (torch.from_numpy(d.obs[idx]), torch.from_numpy(u), torch.from_numpy(r), torch.from_numpy(log_weight),
            torch.from_numpy(targets(d.scores[rows] if target == "best" else np.full(rows.shape, np.nan), mask,
                                     d.chosen[idx])),
            torch.from_numpy(balanced))


def targets(scores: np.ndarray, mask: np.ndarray, chosen: np.ndarray) -> np.ndarray:
    """[B, K] bool: the nodes a decision's history policy scored best (``scores`` [B, K] as recorded, NaN
    unknown; ``mask`` the real candidates) when its ``chosen`` node is among them, else the chosen node
    alone (see the module's docstring)."""
    b = np.arange(len(chosen))
    recorded = np.where(mask, scores, -np.inf)
    best = (recorded == recorded.max(axis=1, keepdims=True)) & mask  # a NaN among them: no best at all
    hot = np.zeros_like(mask)
    hot[b, chosen] = True
    return np.where(best[b, chosen][:, None], best, hot)


class ListwiseLoss(torch.nn.Module):
    """-log of the softmax(beta * score(candidates) + log weight) mass on the target nodes, the mean over a
    batch (the module's docstring); beta learned."""

    def __init__(self, inverse_temperature: float, action_mode: str = "full"):
        super().__init__()
        self.log_beta = torch.nn.Parameter(torch.tensor(math.log(inverse_temperature), dtype=torch.float64))
        self.seed_mode = action_mode == "seed"
        self.requests_mode = reads_requests(action_mode)
        self.balance_mode = action_mode == "balance"

    def forward(self, pre_activations: torch.Tensor, u: torch.Tensor, r: torch.Tensor, log_weight: torch.Tensor,
                target: torch.Tensor, balanced: torch.Tensor) -> torch.Tensor:
        pre = pre_activations.double()
        weights, tau = squash(pre, self.seed_mode)
        scores = score_torch.product_score(u, r, weights, tau,
                                           torch.sigmoid(pre[..., 5]) if self.requests_mode else None,
                                           torch.sigmoid(pre[..., 6]) * balanced if self.balance_mode else None)
        logits = self.log_beta.exp() * scores + log_weight
        return -torch.logsumexp(torch.log_softmax(logits, dim=-1).masked_fill(~target, -math.inf), dim=-1).mean()


@dataclass
class BCResult:
    actor: Actor
    normalizer: ObservationNormalizer
    config: BCConfig
    train: Agreement
    validation: Agreement | None
    initial_train: Agreement
    """The agreement before training (a fresh actor, or the model fine-tuned)."""
    losses: list[float]
    """Mean loss of each epoch."""
    inverse_temperature: float
    wall_s: float
    static: dict | None = None
    """The static stage's action, weights, tau and loss (None when fine-tuning a given actor)."""
    kept: str = "actor"
    """actor: the actor stage's result; start: its starting point, kept because the actor stage agreed
    less with the held-out decisions."""

    def act(self, obs: np.ndarray) -> np.ndarray:
        with torch.no_grad():
            return self.actor(torch.from_numpy(self.normalizer.normalize(obs))).numpy()

    def summary(self) -> dict:
        return {"train": self.train.to_json(), "validation": self.validation.to_json() if self.validation else None,
                "initial_train": self.initial_train.to_json(), "final_loss": self.losses[-1] if self.losses else None,
                "epochs": len(self.losses), "inverse_temperature": self.inverse_temperature,
                "static": self.static, "kept": self.kept,
                "wall_s": round(self.wall_s, 1)}


def fit_normalizer(obs: np.ndarray) -> ObservationNormalizer:
    normalizer = ObservationNormalizer(OBSERVATION_SIZE)
    normalizer.update(obs)
    return normalizer


def fit_static(d: Decisions, config: BCConfig, rng: np.random.Generator,
               progress: Callable[[str], None] | None = None) -> tuple[np.ndarray, float, float]:
    """The static stage: one action (the mode's pre-activations) for every decision, minimising the
    listwise loss full-batch with L-BFGS from each of ``config.static_tau_starts`` (the shares from 1/2);
    (the best action, its loss, its beta). ``progress(line)`` is told of each start's fit.

    The action is parametrised as the actor's last layer makes it, LOGIT_LIMIT x tanh(z), so it stays in
    the action box without clamping and ``set_constant`` takes z as it is. A quasi-Newton method, because
    beta and the score's arguments are badly scaled against each other: on dlrm-small's k8s-default
    history (the set target) Adam (lr 0.05) from tau 0.3 was still at loss 0.215, beta 836 and tau 0.25
    after 1,500 steps, where L-BFGS reaches loss 0.180, beta 1,111 and tau 0.007 (the action box's floor;
    kube-scheduler's is 0) from tau starts 0.01 and 0.3 alike (benchmarks/bc_static.py, docs/lifecycle.md)."""
    idx = np.arange(len(d)) if len(d) <= config.static_sample else np.sort(
        rng.choice(len(d), config.static_sample, replace=False))
    _, u, r, log_weight, target, balanced = _batch(d, idx, config.target)
    best = (None, math.inf, config.inverse_temperature)
    limit = LOGIT_LIMIT * (1 - 1e-3)  # inside the actor's tanh range in float32 (set_constant)
    starts = (0.5,) if config.action_mode == "seed" else config.static_tau_starts
    size = action_size(config.action_mode)
    for tau0 in starts:
        t0 = time.perf_counter()
        a0 = torch.zeros(size, dtype=torch.float64)
        a0[4] = math.log(tau0 / (1 - tau0))
        z = torch.atanh(a0 / LOGIT_LIMIT).requires_grad_(True)
        loss_fn = ListwiseLoss(config.inverse_temperature, config.action_mode)

        def loss() -> torch.Tensor:
            return loss_fn((LOGIT_LIMIT * torch.tanh(z)).expand(len(idx), size), u, r, log_weight, target, balanced)

        def closure() -> torch.Tensor:
            optimiser.zero_grad()
            value = loss()
            value.backward()
            return value

        optimiser = torch.optim.LBFGS([z, loss_fn.log_beta], lr=1.0, max_iter=max(config.static_steps, 1),
                                      line_search_fn="strong_wolfe")
        if config.static_steps:
            optimiser.step(closure)
        with torch.no_grad():
            final = loss().item()
            action = (LOGIT_LIMIT * torch.tanh(z)).numpy()
        beta = loss_fn.log_beta.exp().item()
        if progress:
            progress(f"static stage, tau start {tau0}: loss {final:.4f}, tau "
                     f"{decode(action, config.action_mode).tau:.3f}, beta {beta:,.0f} "
                     f"({time.perf_counter() - t0:.1f} s)")
        if math.isfinite(final) and final < best[1]:
            best = (np.clip(action, -limit, limit), final, beta)
    if best[0] is None:
        raise ValueError(f"behaviour cloning: the static stage's loss is not finite from any tau start "
                         f"{list(starts)}: expected decisions whose target nodes are among their candidates")
    return best


def set_constant(actor: Actor, action: np.ndarray) -> None:
    """Make ``actor`` output ``action`` whatever the observation: its last layer's weights 0, its bias
    the pre-tanh value of the action."""
    last = [m for m in actor.net if isinstance(m, torch.nn.Linear)][-1]
    with torch.no_grad():
        last.weight.zero_()
        last.bias.copy_(torch.atanh(torch.as_tensor(action / LOGIT_LIMIT, dtype=torch.float32)))


def behaviour_clone(d: Decisions, config: BCConfig = BCConfig(), actor: Actor | None = None,
                    normalizer: ObservationNormalizer | None = None,
                    progress: Callable[[str], None] | None = None) -> BCResult:
    """Behaviour cloning on ``d`` in two stages (see the module's docstring): a new actor (``actor``
    None) starts from the static stage's action; a given actor (fine-tuning) starts from itself.
    ``normalizer``: the actor's own (fine-tuning keeps it); None fits one on the decisions trained on.
    ``progress(line)`` is told of each stage and epoch."""
    start = time.perf_counter()
    say = progress or (lambda line: None)
    torch.manual_seed(config.seed)
    rng = np.random.default_rng(config.seed)
    if reads_requests(config.action_mode):
        d.require_requests()
    train_d, val_d = split(d, config.validation_share)
    say(f"{len(train_d):,} decisions to train on, {len(val_d) if val_d else 0:,} held out, "
        f"{train_d.sizes.mean():.1f} candidates each on average")
    static = None
    beta = config.inverse_temperature
    if normalizer is None:
        normalizer = fit_normalizer(train_d.obs)
    if actor is None:
        actor = Actor(OBSERVATION_SIZE, config.hidden, action_size(config.action_mode))
        action, loss, beta = fit_static(train_d, config, rng, say)
        set_constant(actor, action)
        args = decode(action, config.action_mode)
        static = {"action": action.tolist(), "weights": args.weights.tolist(), "tau": args.tau, "loss": loss,
                  "inverse_temperature": beta}
        shares = {}
        if reads_requests(config.action_mode):
            shares["requests"] = args.requests
        if config.action_mode == "balance":
            shares["balance"] = args.balance
        static.update(shares)
        say(f"static stage: weights {np.round(args.weights, 3).tolist()}, tau {args.tau:.3f}"
            + "".join(f", {name} share {value:.3f}" for name, value in shares.items()) + f", loss {loss:.4f}")
    act = lambda obs: _act(actor, normalizer, obs)  # noqa: E731
    initial = agreement(act, train_d, config.action_mode)
    initial_val = agreement(act, val_d, config.action_mode) if val_d is not None else None
    say(f"agreement before the actor stage: {initial.agreement:.3f} (train)"
        + (f", {initial_val.agreement:.3f} (held out)" if initial_val else ""))
    before = {k: v.clone() for k, v in actor.state_dict().items()}
    loss_fn = ListwiseLoss(beta, config.action_mode)  # the actor stage goes on from the static stage's beta
    optimiser = torch.optim.Adam([*actor.parameters(), loss_fn.log_beta], lr=config.learning_rate)
    normed = train_d.with_obs(normalizer.normalize(train_d.obs))
    losses = []
    actor.train()
    for epoch in range(config.epochs):
        t0 = time.perf_counter()
        order = rng.permutation(len(normed))
        total, batches = 0.0, 0
        for lo in range(0, len(order), config.batch_size):
            obs, u, r, log_weight, target, balanced = _batch(normed, order[lo:lo + config.batch_size], config.target)
            loss = loss_fn(actor(obs), u, r, log_weight, target, balanced)
            optimiser.zero_grad()
            loss.backward()
            optimiser.step()
            total += loss.item()
            batches += 1
        losses.append(total / max(batches, 1))
        say(f"epoch {epoch + 1}/{config.epochs}: loss {losses[-1]:.4f}, "
            f"{len(order) / max(time.perf_counter() - t0, 1e-9):,.0f} decisions/s")
    actor.eval()
    kept = "actor"
    val_agree = agreement(act, val_d, config.action_mode) if val_d is not None else None
    if val_agree is not None and initial_val is not None and val_agree.agreement < initial_val.agreement:
        actor.load_state_dict(before)  # the actor stage generalised worse than where it started
        val_agree, kept = initial_val, "start"
        say("the actor stage agreed less on the held-out decisions than its start: the start is kept")
    train_agree = agreement(act, train_d, config.action_mode)
    return BCResult(actor, normalizer, config, train_agree, val_agree, initial, losses,
                    loss_fn.log_beta.exp().item(), time.perf_counter() - start, static, kept)


def _act(actor: Actor, normalizer: ObservationNormalizer, obs: np.ndarray) -> np.ndarray:
    with torch.no_grad():
        return actor(torch.from_numpy(normalizer.normalize(obs))).numpy()


def mean_score_arguments(result: BCResult, d: Decisions) -> tuple[np.ndarray, float]:
    """The mean weights and tau the cloned actor chooses over the decisions ``d``."""
    decoded = [decode(a, result.config.action_mode) for a in result.act(d.obs)]
    return np.mean([a.weights for a in decoded], axis=0), float(np.mean([a.tau for a in decoded]))


def save_bc_model(folder, result: BCResult, card: dict, critic_state: dict | None = None) -> None:
    """Write the cloned actor as a model folder (``rl.model``) with the card fields given (scenario, ...)
    and ``training`` describing the cloning. The critics are ``critic_state`` (a fine-tuned model keeps
    its parent's), or fresh."""
    from td3sched.rl.model import save_model
    from td3sched.rl.td3 import TD3, TD3Config

    hidden = tuple(m.out_features for m in result.actor.net if isinstance(m, torch.nn.Linear))[:-1]
    config = TD3Config.from_json(card.pop("config")) if "config" in card else TD3Config(hidden=hidden)
    agent = TD3(OBSERVATION_SIZE, config, seed=result.config.seed, action_mode=result.config.action_mode)
    agent.actor.load_state_dict(result.actor.state_dict())
    if critic_state is not None:
        agent.critic.load_state_dict(critic_state)
    agent.normalizer = result.normalizer
    save_model(folder, agent, card)


def tie_bound(d: Decisions) -> float | None:
    """The agreement a clone can reach with a policy that broke its ties at random: the mean over the
    decisions of 1/m, m the candidates the policy scored best (its recorded scores); None when they are
    not all known."""
    if np.isnan(d.scores).any():
        return None
    return float(np.mean([1.0 / d.weight[lo:hi][d.scores[lo:hi] == d.scores[lo:hi].max()].sum()
                          for lo, hi in zip(d.offsets[:-1].tolist(), d.offsets[1:].tolist())]))


def history_card(table) -> dict:
    """Card fields a history implies: its scenario and overrides-free label when it has one scenario."""
    scenarios = {s for s in table.column("scenario").to_pylist() if s is not None}
    return {"scenario": scenarios.pop() if len(scenarios) == 1 else None, "overrides": [], "span": None,
            "episode_hours": None}


def clone_history(history, out, config: BCConfig = BCConfig(), progress: Callable[[str], None] | None = None) -> dict:
    """``td3sched bc``: behaviour-clone the history (a folder or file) into the model folder ``out``;
    returns the card's ``training`` entry (agreements, static stage, settings)."""
    from pathlib import Path

    from td3sched.lifecycle.history import read_history

    table = read_history(history)
    d = Decisions.from_table(table)
    result = behaviour_clone(d, config, progress=progress)
    training = {"kind": "behaviour-cloning", "history": str(history), "decisions": len(d),
                "tie_bound": tie_bound(d),
                "decisions_dropped": d.dropped, "history_time_s": [float(d.time_s.min()), float(d.time_s.max())],
                "policies": sorted({p for p in table.column("policy").to_pylist() if p}),
                "bc_config": config.to_json(), **result.summary()}
    save_bc_model(Path(out), result, {**history_card(table), "seed": config.seed, "training": training})
    return training


def static_model(folder, weights, tau: float, card: dict | None = None) -> None:
    """A model folder whose actor outputs the action of fixed ``weights`` and ``tau`` whatever it sees:
    ``static-weights`` as a model (to register a static policy, e.g. the one serving before the first
    cloned or trained model). tau = 0 gives a seed-mode model (tau fixed at 0). The weights must be
    positive with log-ratios within the action box (rl.actions.LOGIT_LIMIT)."""
    from td3sched.policy.static_weights import validate_weights

    w, tau = validate_weights(weights, tau)
    if np.any(w <= 0):
        raise ValueError(f"weights {w.tolist()}: expected positive weights (a softmax cannot reach 0)")
    logits = np.log(w) - np.log(w).mean()
    mode = "seed" if tau == 0 else "full"
    tau_pre = 0.0 if tau == 0 else math.log(tau / (1 - tau)) if tau < 1 else LOGIT_LIMIT
    action = np.append(logits, tau_pre)
    if np.any(np.abs(action) >= LOGIT_LIMIT):
        raise ValueError(f"weights {w.tolist()}, tau {tau}: pre-activations {np.round(action, 3).tolist()} reach the "
                         f"action box (+-{LOGIT_LIMIT}): expected less extreme weights or tau")
    config = BCConfig(epochs=0, action_mode=mode)
    actor = Actor(OBSERVATION_SIZE, config.hidden)
    set_constant(actor, action)
    result = BCResult(actor, ObservationNormalizer(OBSERVATION_SIZE), config, None, None, None, [], 0.0, 0.0)
    training = {"kind": "static", "weights": w.tolist(), "tau": tau}
    save_bc_model(folder, result, {"scenario": None, "overrides": [], **(card or {}), "training": training})
