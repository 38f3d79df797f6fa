"""How an engine turns admissions into iterations: its prefill stage.

* :class:`WholePrefills` (vLLM v0 style, the engine the ODMA papers extend): the
  requests admitted together run one prefill iteration (running requests wait), which
  emits each one's next token; swapped-out requests admitted with them bring their KV
  back over the host link (or the lower tier's) in the same iteration.
* :class:`ChunkedPrefills` (vLLM's chunked prefill): prefills no longer pause decodes;
  while a prefill is under way every iteration is *mixed*, one decode token for each
  running request plus prefill chunks in admission order up to ``max_num_batched_tokens``
  tokens in all, priced by the tables' mixed-iteration table; a request whose last chunk
  ran emits its next token and joins the running requests. KV is granted for the whole
  prompt at admission (as vLLM does).

eLLM's stage (its Algorithm 1 with CPU offload, and Algorithm 2) is
:class:`~.ellm.ElasticPrefills`. A stage is a policy of the engine: it calls the
engine's primitives (admit, start, prefill, join, finish) and holds the requests it has
admitted but not yet handed to the running batch.
"""
from __future__ import annotations

from .request import Request, Status

__all__ = ["PrefillStage", "WholePrefills", "ChunkedPrefills"]


class PrefillStage:
    """The base stage: nothing held, no budget of its own, nothing before or after a
    decode window."""

    #: iterations mix decode tokens and prefill chunks
    chunked = False
    #: a chunked iteration's token budget (None: whole prefills)
    token_budget: int | None = None

    def attach(self, engine) -> None:
        """The stage serves ``engine``."""

    def run(self, engine) -> bool:
        """Admit and run what starts now; True if an iteration ran."""
        raise NotImplementedError

    def budget(self, engine) -> int:
        """Prompt tokens the next admission may take."""
        raise NotImplementedError

    def in_flight(self) -> int:
        """Requests admitted and not yet in the running batch."""
        return 0

    def busy(self) -> bool:
        """The stage holds requests still to serve."""
        return False

    def blocked_request(self, engine) -> Request:
        """The request that cannot start although nothing runs."""
        return engine.waiting[0]

    def room_for_decode(self, engine) -> bool:
        """Whatever a decode window needs beyond KV; False if nothing can run."""
        return True

    def after_decode(self, engine, dt: float) -> None:
        """Called after a decode window of ``dt`` seconds."""

    def record(self, engine) -> dict:
        """The stage's part of the engine's record."""
        return {}


class WholePrefills(PrefillStage):
    """Whole prefills of at most ``max_prefill_tokens`` tokens an iteration (a longer
    prompt is still admitted alone)."""

    def __init__(self, max_prefill_tokens: int):
        self.max_prefill_tokens = int(max_prefill_tokens)

    def budget(self, engine) -> int:
        return self.max_prefill_tokens

    def run(self, engine) -> bool:
        pre, swin = engine.admit()
        if not (pre or swin):
            return False
        self.iteration(engine, pre, swin)
        return True

    @staticmethod
    def iteration(engine, pre: list[Request], swin: list[Request]) -> None:
        """One prefill iteration of ``pre`` after the KV of the swapped-out ``swin``
        came back; each prefilled request emits its next token."""
        c, kv = engine.c, engine.kv
        both = pre + swin
        dt_pre, de_pre = engine.costs.prefill(pre)
        c.prefill_energy_j += de_pre
        dt_swap = sum(kv.swap_in(r) for r in swin)
        dt = dt_pre + dt_swap
        for r in both:
            engine.started(r)
        held = int(engine.batch.ctx[:engine.batch.m].sum())
        engine.pass_time(dt, held + sum(kv.tokens(r) for r in both), "prefill iteration",
                         len(both), sum(r.prompt + r.generated for r in pre))
        c.prefill_time_s += dt_pre
        c.swap_time_s += dt_swap
        if pre and dt_pre > 0:        # (requests arriving with their KV compute nothing)
            c.prefill_iterations += 1
        for r in swin:
            c.swap_bytes += kv.tokens(r) * kv.host_bpt
        for r in pre:
            engine.prefilled(r)
        for r in both:
            engine.join(r)
        engine.finish_done()


class ChunkedPrefills(PrefillStage):
    """Chunked prefill with a budget of ``token_budget`` tokens an iteration (decode
    tokens first, then chunks of the prefills in admission order)."""

    chunked = True

    def __init__(self, token_budget: int):
        self.token_budget = int(token_budget)
        self.filling: list[Request] = []     # admitted, prefill under way

    def in_flight(self) -> int:
        return len(self.filling)

    def busy(self) -> bool:
        return bool(self.filling)

    def budget(self, engine) -> int:
        """What the iteration's budget leaves after the decode tokens and the prefills
        under way."""
        return self.token_budget - engine.batch.m - sum(
            r.prompt + r.generated - r.computed for r in self.filling)

    def run(self, engine) -> bool:
        """Admit what the budget leaves room for, bring swapped-out requests back, and
        while a prefill is under way run one mixed iteration."""
        pre, swin = engine.admit()
        if swin:
            self.swap_in(engine, swin)
        for r in pre:
            self.start(engine, r)
        if not self.filling:
            return bool(swin)
        engine.grow()                  # every decode request needs room for its token
        self.mixed_iteration(engine)
        return True

    @staticmethod
    def swap_in(engine, swin: list[Request]) -> None:
        """The KV of the swapped-out requests ``swin`` comes back (the engine stalls);
        they rejoin the running requests."""
        kv, c = engine.kv, engine.c
        tokens = sum(kv.tokens(r) for r in swin)
        nbytes = tokens * kv.host_bpt
        dt = sum(kv.swap_in(r) for r in swin)
        engine.pass_time(dt, engine.batch.held() + tokens, "swap in", len(swin))
        c.swap_time_s += dt
        c.swap_bytes += nbytes
        for r in swin:
            engine.resumed(r)
            engine.join(r)

    def start(self, engine, req: Request) -> None:
        """Admitted ``req`` (KV granted) starts its chunked prefill; the tokens the prefix
        cache serves count as already prefilled."""
        engine.started(req)
        # a prompt served whole by the cache still computes its last token (its logits)
        req.computed = min(engine.kv.cached_tokens(req), req.prompt + req.generated - 1) \
            if engine.kv.prefix is not None else 0
        req.status = Status.PREFILLING
        self.filling.append(req)
        engine.c.prefill_tokens_total += req.prompt + req.generated

    def _chunks(self, left: int) -> list[tuple[Request, int, int]]:
        """(request, tokens prefilled before, chunk tokens) of the prefills under way, in
        admission order, within ``left`` tokens."""
        out = []
        for r in self.filling:
            if left <= 0:
                break
            take = min(r.prompt + r.generated - r.computed, left)
            out.append((r, r.computed, take))
            left -= take
        return out

    def mixed_iteration(self, engine) -> None:
        """A decode token for every running request and the chunks the budget leaves
        room for, as one iteration; a request whose last chunk ran emits its next token
        and joins the running requests."""
        run, c, kv = engine.batch, engine.c, engine.kv
        m = run.m
        chunks = self._chunks(self.token_budget - m)
        T = sum(ch[2] for ch in chunks)
        ctx_sum = run.held() if m else 0.0
        dt, de = engine.costs.mixed(m, ctx_sum, chunks)
        if kv.prefix is not None:     # waits for blocks promoted from the lower tier
            dt += kv.take_stall()
        engine.pass_time(dt, ctx_sum + sum(r.computed for r in self.filling),
                         "mixed iteration", m + len(chunks), m + T)
        t = engine.clock.t
        c.mixed_iterations += 1
        c.mixed_time_s += dt
        c.mixed_energy_j += de
        c.prefill_tokens_computed += T
        if m:
            engine.gaps.since(run.last[:m], t)
            run.last[:m] = t
            run.ctx[:m] += 1
            run.rem[:m] -= 1
            c.decode_steps += 1
            c.decode_token_steps += m
            c.max_decode_batch = max(c.max_decode_batch, m)
        for r, before, take in chunks:
            r.computed = before + take
            if r.computed < r.prompt + r.generated:
                continue
            self.filling.remove(r)
            kv.computed(r)
            engine.prefilled(r)
            engine.join(r)
        engine.finish_done()
