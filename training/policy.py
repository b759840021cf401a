"""The structured manager policy: an MLP over ParaOrch-v0's observation with one head per action dimension.

The action is MultiDiscrete ``[stop, (tool, model, target) x K]`` (see ``envs.paraorch``).
Each dimension gets its own categorical head (factorized over call slots and the stop action), and
the env's ``action_mask`` (the per-dimension masks, concatenated) sets illegal logits to -inf, so the
policy never samples a masked choice and its log-probabilities renormalize over legal ones.

Not every dimension matters for every action: after ``stop`` nothing else is executed, an empty slot
has no model or target, and basic tools (python, search) take no model. Those dimensions still get a
sample (the env ignores them) but are left out of the log-probability and entropy, so the gradient
only flows through choices that changed what the environment did.

Models are chosen by one of two heads (``PolicyConfig.model_head``). ``"index"``: one logit per model index of the
training pool, plus a learned per-(slot, tool, model) offset; the policy acts on that pool only. ``"descriptor"``:
each model's logit is a score of its descriptor row (``parasim.pools.descriptors``: price, speed, context, published
accuracy per domain), a per-slot query from the trunk dotted with a learned embedding ``tanh(W d + b)`` of the row,
plus the per-tool offset as a ``[slots, tools, E]`` table dotted with the same embedding; no weight depends on the
number of models, so the same weights act on any pool with the same tool spec (``eval.pool``). Every pass of the
descriptor head takes the pool's ``models`` rows ``[M, F_m]`` (all rows of a pass come from one env, so one pool);
the trunk never reads them (their size depends on M). With the env's router signal (``router_signal``,
``parasim.sim.router_signal``) the features end with its M columns, one per model, which the trunk does not read
either: each model's logit in a slot adds a learned per-(slot, tool) weight times the model's signal, so either
head reads it as E[effect | signal] is, linearly in one model's own column, and on any pool size.

A population of policies (a sweep's grid points and seeds) runs as one ``PolicyStack``: P members' parameters
stacked along a leading dimension, one pass for all. Each member's trunk and heads are its own matrix products
on its own rows, of the shapes the member has alone; everything after them (tool conditioning, masking,
sampling, log-probabilities, entropies) runs once over all members' rows, fused over the action dimensions: the
heads' outputs are read choice-major, one ``[size, dims, rows]`` block per ``Group`` of equally sized dimensions
(stop; the tools; the models; the targets), so each step is a few elementwise passes over every row with the
rows innermost, instead of 13 small per-dimension calls whose cost is per row, not per element. The groups run in
that order because a slot's model and target are offset by its tool: the tools are sampled before them. Sampling
draws one uniform per row and dimension from the member's own generator (``draw_uniforms``, one ``torch.rand``
per member) and inverts the row's CDF, rather than one exponential per choice; greedy members take the argmax.
The descriptor head scores every slot's query in one product per member.

A member therefore computes the same floats in a population as alone (``ManagerPolicy`` is a population of one
and runs through the same code), gradients included: the sums over choices and dimensions are elementwise
additions (``_sum0``), and the log-softmax has its own backward (``_LogSoftmax0``), because autograd's backward of
a broadcast reduction sums in an order that depends on where a lane sits. ``MemberAdam`` steps each member exactly
as ``torch.optim.Adam`` steps it alone. (Padding every dimension to the largest, one ``[rows, 13, 8]`` tensor, was
slower than the per-dimension pass: more elements, and a last-dimension log-softmax still costs per row.)
"""
from __future__ import annotations

from collections import OrderedDict
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

import numpy as np
import torch
from torch import nn
from torch.nn import functional

from parasim.config.fields import opt
from parasim.pools.descriptors import DESCRIPTOR_KEYS, MODEL_FEATURES
from parasim.protocol.schema import NUM_STATUSES
from parasim.sim.router_signal import ROUTER_KEY
from parasim.sim.state import slot_column, slot_of_dimension

MIN_LOGIT = -1e9
MODEL_HEADS = ("index", "descriptor")
ADAM_BETAS = (0.9, 0.999)  # torch.optim.Adam's defaults, which both trainers use


@dataclass(frozen=True)
class PolicyConfig:
    """Size of the manager policy network."""

    hidden: int = opt(128, lo=8, hi=4096, help="width of the shared trunk")
    layers: int = opt(2, lo=1, hi=8, help="hidden layers of the trunk")
    model_head: str = opt("descriptor", choices=MODEL_HEADS,
                          help="model logits: per pool index, or scored from model descriptors (any pool)")
    model_embed: int = opt(16, lo=1, hi=1024, help="width of the model descriptor embedding (descriptor head)")


CATEGORICAL = {"last_status": NUM_STATUSES + 1}  # per-slot status of the last round, NUM_STATUSES = no call
NOT_TRUNK = ("action_mask", *DESCRIPTOR_KEYS)  # the mask gates the logits; descriptors enter the model head only


def trunk_keys(obs: Mapping[str, np.ndarray]) -> tuple[str, ...]:
    """The observation keys of a policy's features, in the order it reads them: every key but the mask and the
    descriptor rows, sorted, and the router signal last (``ROUTER_KEY``, when the env has it): its M columns are
    read by the model head, one per model, not by the trunk, whose width then does not depend on the pool's size."""
    keys = tuple(sorted(k for k in obs if k not in NOT_TRUNK and k != ROUTER_KEY))
    return keys + ((ROUTER_KEY,) if ROUTER_KEY in obs else ())


def obs_to_tensor(obs: Mapping[str, np.ndarray], keys: tuple[str, ...]) -> torch.Tensor:
    """Flatten the observation keys (batched, leading dim N) into float features.

    Counts, tokens and costs are squashed by ``sign(x) * log1p(|x|)`` (thousands and flags on one
    scale without running statistics, which would make a run depend on its history and break exact
    resume); categorical keys (``CATEGORICAL``) are one-hot encoded; the router signal is read as it is.
    """
    parts = []
    for k in keys:
        arr = np.asarray(obs[k])
        n = len(arr)
        if k in CATEGORICAL:
            parts.append(np.eye(CATEGORICAL[k], dtype=np.float32)[arr.astype(np.int64).reshape(n, -1)].reshape(n, -1))
        elif k == ROUTER_KEY:  # standard normal already, and read linearly: E[effect | signal] is linear in it
            parts.append(arr.astype(np.float32).reshape(n, -1))
        else:
            a = arr.astype(np.float32).reshape(n, -1)
            parts.append(np.sign(a) * np.log1p(np.abs(a)))
    return torch.from_numpy(np.concatenate(parts, axis=1))


def relevance(actions: torch.Tensor, nvec: list[int], num_agent_tools: int) -> torch.Tensor:
    """Which dimensions of each action changed what the env did (bool[N, D]).

    ``stop`` always; a slot's tool only when the round runs; its model only for an agent tool; its
    target for any call.
    """
    rel = torch.zeros_like(actions, dtype=torch.bool)
    rel[:, 0] = True
    go = actions[:, 0] == 0
    for s in range((len(nvec) - 1) // 3):
        j = slot_column(s)
        tool = actions[:, j]
        used = go & (tool != nvec[j] - 1)
        rel[:, j] = go
        rel[:, j + 1] = used & (tool < num_agent_tools)
        rel[:, j + 2] = used
    return rel


@dataclass(frozen=True)
class Weights:
    """What one pass reads: each member's (weight, bias) pairs (trunk layers, then the heads) and the stacked
    per-tool offsets ``[P, slots, tools, models]`` (descriptor head: ``[P, slots, tools, E]``) /
    ``[P, slots, tools, targets]``; the descriptor head adds each member's embedding (weight, bias), and a policy
    that reads the router signal its per-(slot, tool) weight on it."""

    layers: list[list[tuple[torch.Tensor, torch.Tensor]]]
    tool_model: torch.Tensor
    tool_target: torch.Tensor
    embed: list[tuple[torch.Tensor, torch.Tensor]] | None = None
    router_model: torch.Tensor | None = None  # [P, slots, tools]: each model's logit + this times its router signal


@dataclass(frozen=True)
class Group:
    """Action dimensions of one size, read together as one choice-major block ``[size, len(dims), rows]``."""

    name: str  # "stop", "tool", "model" or "target": the model and target groups are offset by their slot's tool
    dims: tuple[int, ...]  # the action dimensions, in order (one per slot, or stop alone)


def draw_uniforms(dims: int, counts: Sequence[int], generators: Sequence[torch.Generator | None],
                  greedy: Sequence[bool]) -> torch.Tensor:
    """One uniform per row and action dimension, float[dims, N], for sampling by inverting each row's CDF.

    Member ``m``'s rows are ``torch.rand(counts[m], dims, generator=generators[m])``, one call per member, so a
    member draws the same numbers in a population as alone; row ``j`` of the result is the ``j``-th dimension in the
    pass's group order (``_Heads.order``). Rows of greedy members get no draws (their uniforms are 0, unread).
    """
    rows = np.concatenate([[0], np.cumsum(counts)])
    u = torch.zeros(int(rows[-1]), dims)
    for m, gen in enumerate(generators):
        if counts[m] and not greedy[m]:
            u[rows[m]:rows[m + 1]].uniform_(generator=gen)
    return u.t().contiguous()


def _sum0(x: torch.Tensor) -> torch.Tensor:
    """``x.sum(0)`` as elementwise additions in index order: every lane sums its terms in the same order wherever
    it sits in the tensor (a reduction kernel's order may depend on the lane's position), and so does autograd's
    backward, which gives each term the incoming gradient as it is."""
    total = x[0]
    for term in x[1:]:
        total = total + term
    return total


def _softmax_terms(x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """The log-softmax of a choice-major block over its choices (dimension 0, each lane on its own), the
    exponentials of the block shifted by each lane's maximum, and their sum (``_sum0``). Outside autograd's graph
    (sampling, ``_LogSoftmax0``): the shifted block is turned into the log-softmax in place, one large temporary
    fewer."""
    z = x - x.amax(0)
    e = z.exp()
    total = _sum0(e)
    return z.sub_(total.log()), e, total


class _Tanh(torch.autograd.Function):
    """tanh as ``2 sigmoid(2x) - 1``, in place, with tanh's own backward ``g (1 - y^2)``: torch's CPU ``tanh_`` ran
    at 2.3 ns an element against 0.6 ns for this form (one thread, ``[1000, 128]`` float32), and the trunk's
    activations were a sixth of an act pass. The form is within 3e-7 of ``torch.tanh`` and elementwise, so a
    member's floats stay the same alone and in a population."""

    @staticmethod
    def forward(ctx: torch.autograd.function.FunctionCtx, x: torch.Tensor) -> torch.Tensor:  # type: ignore[override]
        y = x.mul_(2.0).sigmoid_().mul_(2.0).sub_(1.0)
        ctx.mark_dirty(x)
        ctx.save_for_backward(y)
        return y

    @staticmethod
    def backward(ctx: torch.autograd.function.FunctionCtx,  # type: ignore[override]
                 grad: torch.Tensor) -> torch.Tensor:
        (y,) = ctx.saved_tensors
        return grad * (1.0 - y * y)


def tanh_(x: torch.Tensor) -> torch.Tensor:
    """The policy's activation (``_Tanh``), overwriting ``x``: only for a tensor whose producer's backward does not
    read it (a linear layer's output)."""
    return _Tanh.apply(x)


class _LogSoftmax0(torch.autograd.Function):
    """``_softmax_terms``'s log-softmax with its backward written elementwise, ``g - softmax * sum_choices(g)``
    by ``_sum0``: autograd's own backward of the broadcast subtraction reduces over the choices with a kernel whose
    summation order depends on where a lane sits, so a member's gradients would differ in their last bits between a
    pass alone and a pass in a population."""

    @staticmethod
    def forward(ctx: torch.autograd.function.FunctionCtx, x: torch.Tensor) -> torch.Tensor:  # type: ignore[override]
        out = _softmax_terms(x)[0]
        ctx.save_for_backward(out)
        return out

    @staticmethod
    def backward(ctx: torch.autograd.function.FunctionCtx,  # type: ignore[override]
                 grad: torch.Tensor) -> torch.Tensor:
        (out,) = ctx.saved_tensors
        return torch.sub(grad, out.exp().mul_(_sum0(grad)))


def _inverse_cdf(e: torch.Tensor, total: torch.Tensor, u: torch.Tensor) -> torch.Tensor:
    """Sample each lane of a block of exponentials ``e`` ``[size, dims, rows]`` (``_softmax_terms``) by its uniform
    ``u`` ``[dims, rows]``: the first choice whose cumulative sum exceeds ``u * total``, i.e. the number of partial
    sums at or below it. The partial sums add the choices in ``_sum0``'s order, so the last one is ``total`` bit for
    bit; ``u * total`` is kept below it, and the first partial sum above it adds a positive exponential, so a masked
    choice (``exp`` exactly 0) is never drawn."""
    v = torch.minimum(u * total, torch.nextafter(total, torch.zeros_like(total)))
    partial = e[0]
    chosen = (partial <= v).long()
    for term in e[1:-1]:
        partial = partial + term
        chosen += partial <= v
    return chosen


class _Heads:
    """The action layout shared by one policy and a stack: dimension sizes, call slots, where each head starts, and
    the groups of equally sized dimensions that a pass reads choice-major."""

    nvec: list[int]
    num_agent_tools: int
    slots: int
    model_head: str
    trunk_dim: int  # the features the trunk reads: all but the router signal's last M columns
    reads_router: bool  # the features end with the router signal (``ROUTER_KEY``), read by the model head
    head_sizes: list[int]  # the heads' output per dimension: nvec, or the embedding width for the descriptor head's
    groups: list[Group]  # stop; the tools; the models; the targets: tools before what is conditioned on them
    order: list[int]  # the action dimensions in group order
    _order: torch.Tensor  # order, as an index
    _unorder: torch.Tensor  # its inverse: dimension d sits at row _unorder[d] of a group-ordered [D, N] tensor
    _head_order: torch.Tensor  # the heads' output columns, group by group, each choice-major
    _head_rows: list[int]  # how many of them each group reads
    _mask_orders: dict[tuple[int, ...], torch.Tensor]  # the same for the action mask, per pass size

    def _layout(self, nvec: Sequence[int], num_agent_tools: int, model_head: str = "index", embed: int = 0) -> None:
        self.nvec = [int(n) for n in nvec]
        self.num_agent_tools = num_agent_tools
        if (len(self.nvec) - 1) % 3:
            raise ValueError(f"action nvec {self.nvec}: expected [stop] + 3 dims per call slot")
        if model_head not in MODEL_HEADS:
            raise ValueError(f"model_head: expected one of {', '.join(MODEL_HEADS)}, got {model_head!r}")
        self.slots = (len(self.nvec) - 1) // 3
        self.model_head = model_head
        self.head_sizes = self._with_models(embed) if model_head == "descriptor" else self.nvec
        self.groups = [Group("stop", (0,))]
        if self.slots:
            self.groups += [Group(name, tuple(slot_column(s) + part for s in range(self.slots)))
                            for part, name in enumerate(("tool", "model", "target"))]
        self.order = [d for g in self.groups for d in g.dims]
        self._order = torch.as_tensor(self.order)
        self._unorder = torch.as_tensor(np.argsort(self.order))
        self._head_order = self._choice_major(self.head_sizes)
        self._head_rows = [self.head_sizes[g.dims[0]] * len(g.dims) for g in self.groups]
        self._mask_orders = {}

    def _with_models(self, size: int) -> list[int]:
        """``nvec`` with every slot's model dimension set to ``size``."""
        return [size if d > 0 and slot_of_dimension(d)[1] == 1 else n for d, n in enumerate(self.nvec)]

    def _choice_major(self, sizes: Sequence[int]) -> torch.Tensor:
        """The columns of a row laid out dimension by dimension (``sizes`` each), read group by group, and within a
        group choice by choice, then dimension by dimension: ``index_select`` of the transposed rows by it gives
        every group's ``[size, dims, rows]`` block, one after the other."""
        starts = np.concatenate([[0], np.cumsum(sizes)[:-1]])
        return torch.as_tensor([int(starts[d]) + c for g in self.groups for c in range(sizes[g.dims[0]])
                                for d in g.dims])

    def _dims(self, models: torch.Tensor | None) -> list[int]:
        """The action sizes of a pass: the descriptor head's model dimension is the number of descriptor rows
        ``models`` of the pass's pool."""
        if self.model_head == "index":
            if models is not None and self.slots and len(models) != self.nvec[2]:
                raise ValueError(f"models: {len(models)} descriptor rows, but the index head has one logit per model "
                                 f"of its training pool ({self.nvec[2]}); evaluating on another pool needs "
                                 "model_head='descriptor'")
            return self.nvec
        if models is None:
            raise ValueError("models: the descriptor head scores the pool's model descriptor rows; pass the env's "
                             "descriptors.models as models= (float[M, F])")
        return self._with_models(len(models))

    def _mask_order(self, nvec: list[int]) -> torch.Tensor:
        """``_choice_major`` of the action mask of a pass with sizes ``nvec`` (kept per size)."""
        key = tuple(nvec)
        if key not in self._mask_orders:
            self._mask_orders[key] = self._choice_major(nvec)
        return self._mask_orders[key]

    def relevance(self, actions: torch.Tensor) -> torch.Tensor:
        """Which dimensions of each action changed what the env did (bool[N, D])."""
        return relevance(actions, self.nvec, self.num_agent_tools)

    def _grouped(self, rows: torch.Tensor) -> list[torch.Tensor]:
        """Per-dimension rows ``[N, D]`` (actions, relevance) as group-ordered ``[dims, N]`` pieces, one per group."""
        return list(rows.t().index_select(0, self._order).split([len(g.dims) for g in self.groups]))

    def _pass(self, w: Weights, x: torch.Tensor, mask: torch.Tensor, counts: Sequence[int],
              actions: torch.Tensor | None, uniforms: torch.Tensor | None = None, greedy: Sequence[bool] = (),
              models: torch.Tensor | None = None) -> tuple[torch.Tensor, list[torch.Tensor]]:
        """One block ``[size, dims, N]`` per group for rows grouped by member (``counts[m]`` rows of member ``m``,
        in member order): the masked logits, model and target conditioned on the tools in ``actions``; or, when
        ``actions`` is None, each group sampled in turn (by ``uniforms``, greedy members by the argmax, everyone
        when ``uniforms`` is None) and the blocks are the log-softmax that sampling computed. ``models`` are the
        pool's descriptor rows (read by the descriptor head only)."""
        nvec = self._dims(models)
        members = [m for m, c in enumerate(counts) if c]
        # the descriptor head's model embeddings, one per member (every member: the offset table indexes them all)
        embs = None if w.embed is None else [tanh_(functional.linear(models, *e)) for e in w.embed]
        pieces: list[list[torch.Tensor]] = [[] for _ in self.groups]
        for m, xm in zip(members, x.split([counts[m] for m in members])):
            # MKL multiplies a batch of 2 or 3 rows differently when it starts off a 16-byte boundary, as a member's
            # rows inside the population's features can; a member alone always gets a fresh, aligned tensor (and so
            # does every member when the trunk reads the features without the router signal's columns)
            if self.reads_router:
                h = xm[:, :self.trunk_dim].clone(memory_format=torch.contiguous_format)
            else:
                h = xm.clone() if xm.data_ptr() % 16 else xm
            for weight, bias in w.layers[m][:-1]:
                # in place: the product's backward reads its inputs, not its output, so tanh may overwrite it
                h = tanh_(functional.linear(h, weight, bias))
            out = functional.linear(h, *w.layers[m][-1])
            # choice-major, the member's rows innermost: a fresh tensor, so the heads' backward reads a fresh,
            # aligned gradient alone and in a population alike
            read = out.t().index_select(0, self._head_order).split(self._head_rows)
            for g, (group, block) in enumerate(zip(self.groups, read)):
                if embs is not None and group.name == "model":
                    # every slot's query [E, slots * rows] scored against the models' embeddings in one product
                    block = (embs[m] @ block.view(embs[m].shape[1], -1)).view(-1, len(xm))
                pieces[g].append(block)
        n = len(x)
        blocks = [(p[0] if len(p) == 1 else torch.cat(p, dim=1)).view(nvec[g.dims[0]], len(g.dims), n)
                  for g, p in zip(self.groups, pieces)]
        # transposed whole first: a bool tensor's strided gather is several times slower than a transpose and a copy
        illegal = mask.t().contiguous().index_select(0, self._mask_order(nvec)).logical_not_()
        illegal_blocks = illegal.split([nvec[g.dims[0]] * len(g.dims) for g in self.groups])
        tables = {}
        if self.slots:
            tool_model = w.tool_model if embs is None else torch.stack([t @ e.t() for t, e in zip(w.tool_model, embs)])
            # choice-major too: row r's offsets of slot s for tool t sit at column (member(r) * slots + s) * tools + t
            tables = {"model": tool_model.reshape(-1, tool_model.shape[-1]).t().contiguous(),
                      "target": w.tool_target.reshape(-1, w.tool_target.shape[-1]).t().contiguous()}
            first = torch.repeat_interleave(torch.arange(len(counts)) * (self.slots * self.nvec[1]),
                                            torch.as_tensor(counts))
            at = first + (torch.arange(self.slots) * self.nvec[1]).unsqueeze(1)  # [slots, N], plus the tool
        given = None if actions is None else self._grouped(actions)
        u = None if uniforms is None else uniforms.split([len(g.dims) for g in self.groups])
        mixed = uniforms is not None and any(greedy)
        greedy_rows = torch.repeat_interleave(torch.as_tensor(list(greedy), dtype=torch.bool),
                                              torch.as_tensor(counts)) if mixed else None
        out: list[torch.Tensor] = []
        picked: list[torch.Tensor] = []
        tools = None
        for g, (group, lg) in enumerate(zip(self.groups, blocks)):
            if group.name in tables:
                lg = lg + tables[group.name].index_select(1, (at + tools).flatten()).view(lg.shape)
            if group.name == "model" and w.router_model is not None:
                # each model's logit plus the (slot, chosen tool)'s weight times the model's signal
                weight = w.router_model.reshape(-1).index_select(0, (at + tools).flatten()).view(1, self.slots, n)
                lg = lg + weight * x[:, self.trunk_dim:].t().unsqueeze(1)
            # in place outside the graph (sampling): the block is this pass's own, one large temporary fewer
            fill = lg.masked_fill if torch.is_grad_enabled() else lg.masked_fill_
            lg = fill(illegal_blocks[g].view(lg.shape), MIN_LOGIT)
            if given is not None:
                out.append(lg)
                chosen = given[g]
            else:
                lsm, e, total = _softmax_terms(lg)
                out.append(lsm)
                if u is None:
                    chosen = lg.argmax(0)
                else:
                    chosen = _inverse_cdf(e, total, u[g])
                    if greedy_rows is not None:
                        chosen = torch.where(greedy_rows, lg.argmax(0), chosen)
            picked.append(chosen)
            if group.name == "tool":
                tools = chosen
        if actions is None:
            # dimension order first, then transposed: gathering columns of a transposed tensor is ~10x slower
            actions = torch.cat(picked).index_select(0, self._unorder).t().contiguous()
        return actions, out

    def _score(self, lsm: list[torch.Tensor], actions: torch.Tensor,
               entropy: str = "grad") -> tuple[torch.Tensor, torch.Tensor | None]:
        """Log-probability of ``actions`` and entropy over their relevant dimensions, per row, from each group's
        log-softmax block. ``entropy``: "grad" (differentiable), "value" (the same floats, outside the graph: its
        backward, a third of a PPO update's, would only add zeros to the gradient when no loss weighs the entropy)
        or "none" (not computed: None). Sums over choices and dimensions are ``_sum0``'s, so a row's floats do not
        depend on where it sits."""
        rel = torch.cat(self._grouped(self.relevance(actions))).float()
        chosen = self._grouped(actions)
        logp = _sum0(torch.cat([b.gather(0, c.unsqueeze(0)).squeeze(0) for b, c in zip(lsm, chosen)]) * rel)
        if entropy == "none":
            return logp, None
        blocks = lsm if entropy == "grad" else [b.detach() for b in lsm]
        ent = -_sum0(torch.cat([_sum0(b.exp() * b) for b in blocks]) * rel)
        return logp, ent

    def _evaluate(self, w: Weights, x: torch.Tensor, mask: torch.Tensor, counts: Sequence[int],
                  actions: torch.Tensor, entropy: str, models: torch.Tensor | None) -> tuple[torch.Tensor,
                                                                                          torch.Tensor | None]:
        """Log-probability and entropy (``_score``) of ``actions`` for rows grouped by member, differentiable."""
        logits = self._pass(w, x, mask, counts, actions, models=models)[1]
        return self._score([_LogSoftmax0.apply(lg) for lg in logits], actions, entropy)

    def _act(self, w: Weights, x: torch.Tensor, mask: torch.Tensor, counts: Sequence[int],
             generators: Sequence[torch.Generator | None], greedy: Sequence[bool],
             models: torch.Tensor | None = None) -> tuple[torch.Tensor, torch.Tensor]:
        """Sample every member's rows (by its own generator's uniforms, or its argmax where greedy): actions
        int64[N, D] and their log-probabilities."""
        uniforms = None if all(greedy) else draw_uniforms(len(self.nvec), counts, generators, greedy)
        with torch.no_grad():
            actions, lsm = self._pass(w, x, mask, counts, None, uniforms, greedy, models)
            return actions, self._score(lsm, actions, "none")[0]


class ManagerPolicy(nn.Module, _Heads):
    """MLP trunk, one categorical head per action dimension, model and target conditioned on the tool.

    Slots are factorized (each has its own heads) but within a slot the model and target logits get a
    learned per-tool offset, because the protocol couples them: only ``critical_reviewer`` may target
    the leading answer for verification, and the best model depends on the tool. A fully factorized
    head could not put all its probability on legal (tool, target) pairs. With ``cfg.model_head="descriptor"``
    the model logits score the pool's descriptor rows (see the module docstring), passed as ``models``.
    """

    def __init__(self, obs_dim: int, nvec: np.ndarray | list[int], obs_keys: tuple[str, ...],
                 num_agent_tools: int, cfg: PolicyConfig = PolicyConfig()) -> None:
        super().__init__()
        self._layout(nvec, num_agent_tools, cfg.model_head, cfg.model_embed)
        self.obs_keys = tuple(obs_keys)
        self.reads_router = ROUTER_KEY in self.obs_keys
        if self.reads_router and self.obs_keys[-1] != ROUTER_KEY:
            raise ValueError(f"obs_keys: the router signal must be the last key (trunk_keys), got {self.obs_keys}")
        self.trunk_dim = obs_dim - (self.nvec[2] if self.reads_router and self.slots else 0)
        layers: list[nn.Module] = []
        width = self.trunk_dim
        for _ in range(cfg.layers):
            layers += [nn.Linear(width, cfg.hidden), nn.Tanh()]
            width = cfg.hidden
        self.trunk = nn.Sequential(*layers)
        self.heads = nn.Linear(width, sum(self.head_sizes))
        tools, models, targets = self.head_sizes[1:4] if self.slots else (1, 1, 1)
        self.tool_model = nn.Parameter(torch.zeros(self.slots, tools, models))
        self.tool_target = nn.Parameter(torch.zeros(self.slots, tools, targets))
        if self.model_head == "descriptor":
            self.model_embed = nn.Linear(len(MODEL_FEATURES), cfg.model_embed)
        if self.reads_router and self.slots:
            # zero at the start: the signal moves a model's logit only once training has found it worth reading
            self.router_model = nn.Parameter(torch.zeros(self.slots, self.nvec[1]))

    def linear_names(self) -> list[tuple[str, str]]:
        """The (weight, bias) parameter names of the trunk's layers and then the heads, in the order of a pass."""
        names = [f"trunk.{i}" for i, m in enumerate(self.trunk) if isinstance(m, nn.Linear)] + ["heads"]
        return [(f"{n}.weight", f"{n}.bias") for n in names]

    def weights(self) -> Weights:
        """This policy as a population of one."""
        params = dict(self.named_parameters())
        embed = [(params["model_embed.weight"], params["model_embed.bias"])] if self.model_head == "descriptor" \
            else None
        router = params["router_model"].unsqueeze(0) if "router_model" in params else None
        return Weights([[(params[w], params[b]) for w, b in self.linear_names()]], self.tool_model.unsqueeze(0),
                       self.tool_target.unsqueeze(0), embed, router)

    def logits(self, x: torch.Tensor, mask: torch.Tensor, actions: torch.Tensor,
               models: torch.Tensor | None = None) -> list[torch.Tensor]:
        """Masked logits per dimension (float[N, n_d] each, in dimension order), model and target conditioned on the
        tools in ``actions``; ``models``: the pool's descriptor rows (the descriptor head's input)."""
        blocks = self._pass(self.weights(), x, mask, [len(x)], actions, models=models)[1]
        per_dim = {d: b[:, i].t() for g, b in zip(self.groups, blocks) for i, d in enumerate(g.dims)}
        return [per_dim[d] for d in range(len(self.nvec))]

    def evaluate(self, x: torch.Tensor, mask: torch.Tensor, actions: torch.Tensor,
                 models: torch.Tensor | None = None) -> tuple[torch.Tensor, torch.Tensor]:
        """Log-probability and entropy of ``actions`` (int[N, D]) over their relevant dimensions.

        The entropy is that of each relevant dimension's conditional distribution (given the sampled
        tool), summed: what the PPO entropy bonus and the logs use.
        """
        return self._evaluate(self.weights(), x, mask, [len(x)], actions, "grad", models)

    def act(self, x: torch.Tensor, mask: torch.Tensor, generator: torch.Generator | None,
            greedy: bool = False, models: torch.Tensor | None = None) -> tuple[torch.Tensor, torch.Tensor]:
        """Sample (or take the argmax of) every dimension; returns actions int64[N, D] and their log-probs."""
        return self._act(self.weights(), x, mask, [len(x)], [generator], [greedy], models)


class PolicyStack(nn.Module, _Heads):
    """P members of one architecture, each parameter stacked ``[P, ...]`` (in ``ManagerPolicy``'s order).

    ``counts`` says how many rows of a pass belong to each member (rows grouped by member, in member order); a
    member with no rows is left out of the pass and gets a zero gradient.
    """

    def __init__(self, members: Sequence[ManagerPolicy]) -> None:
        super().__init__()
        first = members[0]
        self._layout(first.nvec, first.num_agent_tools, first.model_head, first.head_sizes[2] if first.slots else 0)
        self.obs_keys = first.obs_keys
        self.reads_router, self.trunk_dim = first.reads_router, first.trunk_dim
        self.names = [n for n, _ in first.named_parameters()]
        self._linear_names = first.linear_names()
        shapes = {n: p.shape for n, p in first.named_parameters()}
        for i, m in enumerate(members):
            theirs = {n: p.shape for n, p in m.named_parameters()}
            if theirs != shapes or m.nvec != first.nvec:
                raise ValueError(f"members[{i}]: parameter shapes {theirs} differ from members[0]'s {shapes}; a "
                                 "stack needs one architecture (same env and policy config)")
        self.stacked = nn.ParameterList(
            [nn.Parameter(torch.stack([dict(m.named_parameters())[n].detach() for m in members])) for n in self.names])
        self.size = len(members)

    def param(self, name: str) -> torch.Tensor:
        """The stacked parameter ``name`` (a ``ManagerPolicy`` parameter name), ``[P, ...]``."""
        return self.stacked[self.names.index(name)]

    def weights(self) -> Weights:
        """Per-member views of the stacked parameters (one ``unbind`` each, so the backward is one ``stack``)."""
        views = {n: p.unbind(0) for n, p in zip(self.names, self.stacked)
                 if n not in ("tool_model", "tool_target", "router_model")}
        layers = [[(views[w][m], views[b][m]) for w, b in self._linear_names] for m in range(self.size)]
        embed = [(views["model_embed.weight"][m], views["model_embed.bias"][m]) for m in range(self.size)] \
            if self.model_head == "descriptor" else None
        router = self.param("router_model") if "router_model" in self.names else None
        return Weights(layers, self.param("tool_model"), self.param("tool_target"), embed, router)

    def member_state(self, m: int) -> OrderedDict[str, torch.Tensor]:
        """Member ``m``'s parameters as a ``ManagerPolicy.state_dict()``."""
        return OrderedDict((n, p[m].detach().clone()) for n, p in zip(self.names, self.stacked))

    def load_member(self, m: int, state: Mapping[str, torch.Tensor]) -> None:
        """Set member ``m`` from a ``ManagerPolicy.state_dict()``."""
        with torch.no_grad():
            for n, p in zip(self.names, self.stacked):
                p[m].copy_(state[n])

    def evaluate(self, x: torch.Tensor, mask: torch.Tensor, actions: torch.Tensor, counts: Sequence[int],
                 entropy: str = "grad", models: torch.Tensor | None = None) -> tuple[torch.Tensor, torch.Tensor | None]:
        """Log-probability and entropy of ``actions`` per row (see ``ManagerPolicy.evaluate``; ``entropy`` as in
        ``_score``; ``models`` the pool's descriptor rows)."""
        return self._evaluate(self.weights(), x, mask, counts, actions, entropy, models)

    def act(self, x: torch.Tensor, mask: torch.Tensor, counts: Sequence[int],
            generators: Sequence[torch.Generator | None], greedy: Sequence[bool],
            models: torch.Tensor | None = None) -> tuple[torch.Tensor, torch.Tensor]:
        """Sample each member's rows with its own generator (or its argmax where ``greedy``); actions, log-probs."""
        return self._act(self.weights(), x, mask, counts, generators, greedy, models)


def member_runs(active: np.ndarray, keys: Sequence[object]) -> list[tuple[int, int]]:
    """Maximal ranges ``[lo, hi)`` of consecutive active members with equal ``keys``: the slices a per-member
    update can treat as one tensor."""
    runs: list[tuple[int, int]] = []
    for m in np.flatnonzero(active):
        if runs and runs[-1][1] == m and keys[m] == keys[runs[-1][0]]:
            runs[-1] = (runs[-1][0], m + 1)
        else:
            runs.append((m, m + 1))
    return runs


class MemberAdam:
    """``torch.optim.Adam`` (no weight decay) for each member of a ``PolicyStack``, on the stacked tensors.

    Adam is elementwise, so a member's slice goes through exactly the operations ``torch.optim.Adam`` applies to
    the member's own tensors alone (lerp, mul, addcmul, sqrt, div, add, addcdiv, with the same Python scalars),
    and the floats are the same; each member keeps its own step count and learning rate, and ``step(active)``
    moves only the active members (a member that had no minibatch in an update is not stepped, as alone).
    ``member_state`` / ``load_member`` read and write one member's state as a ``torch.optim.Adam`` state dict, so
    checkpoints are those of a run alone.
    """

    def __init__(self, stack: PolicyStack, lrs: Sequence[float], eps: float) -> None:
        self.params = list(stack.stacked)
        self.lrs = [float(lr) for lr in lrs]
        self.eps = eps
        self.exp_avg = [torch.zeros_like(p) for p in self.params]
        self.exp_avg_sq = [torch.zeros_like(p) for p in self.params]
        self.steps = np.zeros(stack.size, np.int64)

    def zero_grad(self) -> None:
        """Drop the gradients (``set_to_none``, as ``Optimizer.zero_grad``)."""
        for p in self.params:
            p.grad = None

    @torch.no_grad()
    def step(self, active: np.ndarray) -> None:
        """One Adam step of the members where ``active`` (bool[P]) is set, from the stacked ``.grad``."""
        self.steps[active] += 1
        beta1, beta2 = ADAM_BETAS
        for lo, hi in member_runs(active, list(zip(self.steps.tolist(), self.lrs))):
            step = float(self.steps[lo])
            bias_correction1 = 1 - beta1**step
            bias_correction2 = 1 - beta2**step
            step_size = self.lrs[lo] / bias_correction1
            bias_correction2_sqrt = bias_correction2**0.5
            for p, m1, m2 in zip(self.params, self.exp_avg, self.exp_avg_sq):
                grad = p.grad[lo:hi]
                exp_avg, exp_avg_sq = m1[lo:hi], m2[lo:hi]
                exp_avg.lerp_(grad, 1 - beta1)
                exp_avg_sq.mul_(beta2).addcmul_(grad, grad, value=1 - beta2)
                denom = (exp_avg_sq.sqrt() / bias_correction2_sqrt).add_(self.eps)
                p[lo:hi].addcdiv_(exp_avg, denom, value=-step_size)

    def member_state(self, m: int) -> dict:
        """Member ``m``'s state as ``torch.optim.Adam(policy.parameters(), lr, eps=eps).state_dict()``."""
        state = {} if self.steps[m] == 0 else {
            i: {"step": torch.tensor(float(self.steps[m])), "exp_avg": a[m].clone(), "exp_avg_sq": s[m].clone()}
            for i, (a, s) in enumerate(zip(self.exp_avg, self.exp_avg_sq))}
        group = {"lr": self.lrs[m], "betas": ADAM_BETAS, "eps": self.eps, "weight_decay": 0, "amsgrad": False,
                 "maximize": False, "foreach": None, "capturable": False, "differentiable": False, "fused": None,
                 "decoupled_weight_decay": False, "params": list(range(len(self.params)))}
        return {"state": state, "param_groups": [group]}

    def load_member(self, m: int, state: Mapping) -> None:
        """Set member ``m`` from a ``member_state`` (or a ``torch.optim.Adam`` state dict of the member alone)."""
        entries = state["state"]
        self.steps[m] = int(entries[0]["step"]) if entries else 0
        for i, (a, s) in enumerate(zip(self.exp_avg, self.exp_avg_sq)):
            a[m] = entries[i]["exp_avg"] if entries else 0.0
            s[m] = entries[i]["exp_avg_sq"] if entries else 0.0


@torch.no_grad()
def clip_member_grads(stack: PolicyStack, max_norms: np.ndarray) -> None:
    """``torch.nn.utils.clip_grad_norm_`` per member: member ``m``'s gradients are scaled so that their total norm
    is at most ``max_norms[m]`` (0: not clipped). Same floats as the member alone: per-tensor norms, their norm,
    ``max_norm / (norm + 1e-6)`` clamped at 1, one multiplication."""
    if not (max_norms > 0).any():
        return
    grads = [p.grad for p in stack.stacked]
    norms = torch.stack([torch.linalg.vector_norm(g.reshape(len(g), -1), dim=1) for g in grads], dim=1)
    total = torch.linalg.vector_norm(norms, dim=1)
    coef = torch.clamp((total + 1e-6).reciprocal() * torch.as_tensor(max_norms, dtype=total.dtype), max=1.0)
    coef = torch.where(torch.as_tensor(max_norms > 0), coef, torch.ones_like(coef))
    for g in grads:
        g.mul_(coef.view(-1, *[1] * (g.dim() - 1)))
