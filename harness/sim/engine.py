"""The scheduler and timing model: SGLang's continuous batching over the radix cache and a card profile.

The engine never reads a clock itself. `schedule(now)` picks the next forward (a prefill batch or a
decode step) and says how long it takes on the card; `complete(batch, end)` applies its results.
Both clocks are virtual: the live server (live.py) adds the duration to its clock and paces it to
--time-scale in wall time; `simulate.simulate()` just adds it, so the same code replays traces offline
far faster than real time, with the same results as a live run driven in lockstep. The records it
works on are in sched_records.py, the pool's books in kv_pool.py.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Callable
from typing import Any

from harness.sim.decode_run import fast_forward, new_slots, step_kv
from harness.sim.kv_pool import KvPool
from harness.sim.priority import by_priority, preempt_for, queue_full, requeue, unset_priority
from harness.sim.sched_records import (
    CLIP_MAX_NEW_TOKENS,
    INIT_NEW_TOKEN_RATIO,
    MIN_NEW_TOKEN_RATIO,
    NEW_TOKEN_RATIO_DECAY,
    Batch,
    EngineConfig,
    EngineLog,
    EngineStats,
    PrefillBudget,
    PrefillPlan,
    SchedulerStuck,
    SimRequest,
    stuck_message,
)
from harness.sim.storage_tier import PREFETCHING, StorageTier, chunk_part, prefetch_poll
from harness.sim.tier_time import HostTierClock, prefill_s


class Engine(KvPool):
    """SGLang's scheduler loop over a device pool of `pool_tokens` KV slots."""

    def __init__(
        self,
        config: EngineConfig,
        *,
        clock: Callable[[], float] | None = None,
        log: EngineLog | None = None,
    ) -> None:
        self.config = config
        self.card = config.profile
        self.pool = int(config.pool_tokens or 0)
        self.page = max(1, config.page_size)
        self.log = log
        self.now = 0.0
        self._last_stamp = 0.0
        self._clock = clock or self._virtual_clock
        self.waiting: deque[SimRequest] = deque()
        self.running: list[SimRequest] = []
        self.chunked: SimRequest | None = None
        self.private_total = 0
        self.new_token_ratio = INIT_NEW_TOKEN_RATIO
        self.stats = EngineStats()
        self.decode_steps = 0
        self._decode_tokens_since_log = 0
        self._last_decode_log = 0.0
        self._last_prefill_log = 0.0
        self._last_prefill_tokens = 0
        self.tree: Any = self._make_tree()
        self.l3 = StorageTier(config, self.stats, self.tree) if config.storage_backend else None
        self.hclock = HostTierClock.of(config) if config.hicache and self.caching else None
        if self.l3 is not None:
            self.tree.backup_log = []
        self.on_finish: Callable[[SimRequest], None] | None = None

    # --- queue state ----------------------------------------------------------------------
    def busy(self) -> bool:
        return bool(self.waiting or self.running or self.chunked)

    def pending_counts(self) -> tuple[int, int]:
        """(#queue-req, #running-req) as the flush refusal reports them."""
        return len(self.waiting), len(self.running) + (1 if self.chunked else 0)

    # --- requests ---------------------------------------------------------------------------
    def max_input_len(self) -> int:
        """Longest prompt the server takes (SGLang rejects longer ones before scheduling)."""
        return min(int(self.config.context_length or 0) // max(1, self.config.key_tokens), self.pool) - 1

    def add(self, req: SimRequest) -> None:
        self.stats.num_requests += 1
        if len(req.input_ids) + len(req.output_ids) > self.max_input_len():
            req.finish_reason = "abort"
            req.finish_time = self.now
            if req.on_event is not None:
                req.on_event(req)
            if self.on_finish is not None:
                self.on_finish(req)
            return
        if self.config.priority_scheduling and req.priority is None:
            req.priority = unset_priority(self.config.low_priority_values_first)
        if queue_full(self, req):  # --max-queued-requests: this one, or a lower-priority one, aborted
            return
        self.waiting.append(req)
        if self.l3 is not None:
            self.l3.lookup(req)  # _prefetch_kvcache: the L3 lookup starts when the scheduler receives it

    def abort(self, req: SimRequest) -> None:
        """A client went away: drop it from the queue now, or finish it at its next step."""
        req.aborted = True
        if req in self.waiting:
            self.waiting.remove(req)
            req.finish_time = self.now
            req.finish_reason = "abort"

    def flush(self) -> bool:
        if self.busy():
            return False
        self.tree.reset()
        self.private_total = 0
        if self.hclock is not None:
            self.hclock.reset()
        return True

    # --- scheduling -------------------------------------------------------------------------
    def schedule(self, now: float) -> Batch | None:
        """Pick the next forward at time `now`; None when there is nothing to do."""
        self.now = now
        # aborted requests leave first, so they neither hold batch slots nor block admission
        # (iterate over a copy: _finish removes from self.running)
        for req in [r for r in self.running if r.aborted and not r.finished]:
            self._finish(req, now, reason="abort")
        while self.waiting and self.waiting[0].aborted:
            self._drop_waiting(self.waiting.popleft(), now)
        hc = self.hclock
        if hc is not None:  # check_hicache_events: the host copies that landed by now are acknowledged
            self.tree.ack_transfers(backups_upto=hc.step(self.tree, now))
            if self.l3 is not None:
                self.l3.write_backups(self.tree)  # acked backups go on to storage
        batch = self._schedule_prefill(now)
        if batch is None and self.running:
            batch = self._schedule_decode(now)
            if batch is None:  # decode retracted every running request: their prefill goes next
                batch = self._schedule_prefill(now)
        if batch is None and self.busy() and hc is not None and self.tree.pending_backups():
            batch = hc.after_copies(self.tree, now, self._schedule_prefill)  # spin until they land
        if batch is None and self.busy():
            batch = prefetch_poll(self.waiting, now)  # an idle loop polling a prefetch still landing
            if batch is None:
                raise SchedulerStuck(stuck_message(self))
        if batch is not None and hc is not None:
            batch.duration += hc.blocked_s(self.tree) + hc.write_steal_s(now, batch.duration)
        return batch

    def _drop_waiting(self, req: SimRequest, now: float) -> None:
        if not req.finished:
            req.finish_reason, req.finish_time = "abort", now
            if self.on_finish is not None:
                self.on_finish(req)

    def _room(self) -> int:
        """available + evictable (SGLang's rem_total_tokens before reservations)."""
        return self.pool - self.private_total - self.tree.protected_size()

    def _reserved(self) -> float:
        ratio = self.new_token_ratio
        if self.config.key_tokens <= 1:  # token requests (the hot path): the answer's ids left, clipped
            return sum(
                min(len(r.output_ids) - r.generated, CLIP_MAX_NEW_TOKENS) * ratio for r in self.running
            )
        return sum(r.out_reserve() * ratio for r in self.running)

    def _chunk_budget(self) -> int:
        """Tokens one prefill may compute: --chunked-prefill-size in whole pages (unbounded when off)."""
        cap = self.config.chunked_prefill_size
        if not cap or cap <= 0:
            return 1 << 62
        cap //= max(1, self.config.key_tokens)
        return max(self.page, cap // self.page * self.page)

    def _schedule_prefill(self, now: float) -> Batch | None:
        """SGLang's get_new_batch_prefill: the chunked request's next chunk, then admit from the queue."""
        if not self.waiting and self.chunked is None:
            return None
        budget = PrefillBudget(
            chunk=self._chunk_budget(),
            input=max(self.page, self.config.max_prefill_tokens // max(1, self.config.key_tokens)),
            offset=self._reserved(),  # SGLang's rem_total_token_offset; room itself is read live
        )
        plan = PrefillPlan(running_bs=len(self.running))
        if self.config.priority_scheduling:
            self.waiting = by_priority(self.waiting, self.config.low_priority_values_first)
        self._continue_chunked(now, budget, plan)
        self._admit_waiting(budget, plan)
        requeue(self, plan.preempted)
        if not plan.parts:
            return None
        return self._launch_prefill(now, plan)

    def _continue_chunked(self, now: float, budget: PrefillBudget, plan: PrefillPlan) -> None:
        """The chunked request goes first: its next chunk, or it leaves if it was aborted."""
        req = self.chunked
        if req is None:
            return
        if req.aborted:
            self.chunked = None
            self._finish(req, now, reason="abort")
            return
        left = len(req.fill_ids) - req.kv_len
        take = min(left, budget.chunk)
        if take < left:
            take = take // self.page * self.page
        if take > 0:
            plan.parts.append((req, take, req.kv_len))
            budget.spend(take, take)
        self.chunked = None if take == left else req

    def _admit_waiting(self, budget: PrefillBudget, plan: PrefillPlan) -> None:
        """Admit in queue order while batch slots, the chunk and the pool allow; a request whose L3
        prefetch is still landing stays queued and the ones behind it pass (_get_new_batch_prefill_raw)."""
        limit = int(self.config.max_running_requests or 1)
        i = 0
        while i < len(self.waiting) and self.chunked is None:
            req = self.waiting[i]
            if req.aborted:
                del self.waiting[i]
                continue
            if plan.running_bs + len(plan.parts) >= limit and not preempt_for(self, req, budget, plan):
                break
            got = self._admit_one(req, i, budget, plan)
            if got is PREFETCHING:  # it stays queued
                i += 1
            elif not got or self.chunked is not None or budget.chunk <= 0 or budget.input <= 0:
                break

    def _admit_one(self, req: SimRequest, index: int, budget: PrefillBudget, plan: PrefillPlan) -> object:
        """Match the queued request's prefix, check it fits (prefix + new tokens + output reservation), load
        its host hit back and add it to the batch; False / PREFETCHING (unlocked) when it does not fit / waits."""
        fill = req.fill_ids
        dev_len, host_len, match = 0, 0, None
        if self.caching:
            match = self.tree.match_prefix(fill[: len(fill) - 1])
            dev_len = match.device_len
            host_len = match.host_len if self.config.hicache else 0
            self._lock(req, match.last_device_node, dev_len)
        load = host_len if host_len and host_len >= self.config.load_back_units else 0
        if self.l3 is not None and self.l3.pending(req, dev_len + load, self.now) is not None:
            self._unlock(req)
            return PREFETCHING
        extend = len(fill) - dev_len - load
        out_reserve = req.out_reserve()  # in key elements (a block trace's answer: its blocks)
        fits_total = extend + load + out_reserve < self._room() - budget.offset
        take = min(extend, budget.chunk)
        if take < extend:
            take = take // self.page * self.page
        if not fits_total or take <= 0 or (budget.input <= 0 and plan.parts):
            self._unlock(req)
            return False
        del self.waiting[index]  # the request is admitted
        host_hit = 0
        if load:
            dev_len, host_hit = self._load_back(req, match, dev_len)
            plan.load_back += host_hit
            extend = len(fill) - dev_len
            take = min(extend, budget.chunk)
            if take < extend:
                take = max(self.page, take // self.page * self.page)
        storage = self.l3.take(req, dev_len, self.now, plan) if self.l3 is not None else 0
        if storage:  # L3 tokens need slots, not compute: the chunk budget covers the rest
            extend = len(fill) - dev_len
            take = storage + chunk_part(extend - storage, budget, self.page)
        req.kv_len = req.tree_len  # the prefix's KV lives in the tree
        self._count_hits(req, dev_len, host_hit, storage)
        plan.cached_hits += dev_len + storage
        plan.parts.append((req, take, req.kv_len))
        budget.spend(take - storage, take + out_reserve)
        if take < extend:
            self.chunked = req
        return True

    def _load_back(self, req: SimRequest, match: Any, dev_len: int) -> tuple[int, int]:
        """Copy a host hit back to the device; (device prefix length after it, tokens loaded back)."""
        # load_back locks the host path, evicts for its shortfall and refuses without room
        loaded = self.tree.load_back(match, available=self.available)
        if not loaded:
            return dev_len, 0
        fill = req.fill_ids
        m2 = self.tree.match_prefix(fill[: len(fill) - 1])
        self._lock(req, m2.last_device_node, m2.device_len)
        return m2.device_len, loaded

    def _count_hits(self, req: SimRequest, dev_len: int, host_hit: int, storage: int = 0) -> None:
        """A request's cached tokens are counted on its first admission only (not after a retraction)."""
        if req.counted:
            return
        req.counted = True
        req.cached_host = host_hit
        req.cached_device = dev_len - host_hit
        req.cached_storage = storage
        self.stats.prompt_tokens += len(req.input_ids)
        self.stats.cached_device += req.cached_device
        self.stats.cached_host += req.cached_host
        self.stats.cached_storage += storage

    def _launch_prefill(self, now: float, plan: PrefillPlan) -> Batch:
        """Take the batch's slots (evicting as needed), time it on the card and log it."""
        parts = plan.parts
        need = sum([p[1] for p in parts])
        if not self._ensure_free(need):
            # admission counted room as available + evictable, so this is an accounting bug
            raise SchedulerStuck(f"prefill out of memory: {need} tokens admitted; " + stuck_message(self))
        for req, take, _ in parts:
            self._set_kv(req, req.kv_len + take)
        # the exact tokens computed, as 0.5.23 logs them (adder.log_input_tokens sums raw_extend_input_len;
        # real SGLang at page 16 prints `#new-token: 12, #cached-token: 288` for a 300-token prompt)
        l3 = plan.storage  # L3 tokens land in host memory first, then load to the device like a host hit
        k = max(1, self.config.key_tokens)  # tokens per key element (kv_bytes_per_token already counts them)
        got = [l3.get(id(r), 0) for r, _, _ in parts] if l3 else [0] * len(parts)
        new_tokens = need - sum(got)
        timed = [((t - g) * k, (c + g) * k) for (_, t, c), g in zip(parts, got, strict=True)]  # new, cached
        kv_bytes = self.config.kv_bytes_per_token
        duration = plan.storage_wait_s + prefill_s(
            self.hclock, self.card, timed, plan.load_back + sum(l3.values()), kv_bytes
        )
        total = new_tokens + plan.cached_hits
        self.stats.last_cache_hit_rate = plan.cached_hits / total if total else 0.0
        if self.log is not None:
            self._log_prefill(now, len(parts), new_tokens, plan)
        return Batch(
            "prefill",
            now,
            duration,
            parts=[(r, t) for r, t, _ in parts],
            new_tokens=new_tokens,
            cached_tokens=plan.cached_hits,
            load_back_tokens=plan.load_back,
        )

    def _log_prefill(self, now: float, new_seq: int, new_tokens: int, plan: PrefillPlan) -> None:
        assert self.log is not None
        gap = max(now - self._last_prefill_log, 1e-9)
        throughput = self._last_prefill_tokens / gap if self._last_prefill_log else 0.0
        self._last_prefill_log, self._last_prefill_tokens = now, new_tokens
        pending = sum(len(r.fill_ids) for r in self.waiting)
        if self.chunked is not None:
            pending += len(self.chunked.fill_ids) - self.chunked.kv_len
        self.log.prefill(
            new_seq=new_seq,
            new_token=new_tokens,
            cached_token=plan.cached_hits,
            token_usage=self.token_usage(),
            running_req=plan.running_bs,
            queue_req=len(self.waiting),
            pending_token=pending,
            input_throughput=throughput,
        )

    def _schedule_decode(self, now: float) -> Batch | None:
        # every running request needs one more slot; retract the least advanced ones if it cannot fit
        retracted, ratio_before, k = 0, self.new_token_ratio, max(1, self.config.key_tokens)
        while self.running and not self._ensure_free(
            len(self.running) if k == 1 else new_slots(self.running)
        ):
            self._retract_one()
            retracted += 1
        if retracted and self.log is not None and hasattr(self.log, "warning"):
            self.log.warning(
                f"KV cache pool is full. Retract requests. #retracted_reqs: {retracted}, "
                f"#new_token_ratio: {ratio_before:.4f} -> {self.new_token_ratio:.4f}"
            )
        if not self.running:
            return None
        ctx, added = step_kv(self.running, k)  # the new KV is private to the request until it is cached
        self.private_total += added
        duration = self.card.decode_time(len(self.running), ctx)
        self.decode_steps += 1
        if self.log is not None and self.decode_steps % self.config.decode_log_interval == 0:
            # SGLang logs the decode batch as it launches it, with the throughput since the last line
            gap = max(now - self._last_decode_log, 1e-9)
            self.stats.gen_throughput = self._decode_tokens_since_log / gap
            self._decode_tokens_since_log = 0
            self._last_decode_log = now
            self.log.decode(
                running_req=len(self.running),
                token=self.used_tokens(),
                token_usage=self.token_usage(),
                gen_throughput=self.stats.gen_throughput,
                queue_req=len(self.waiting),
            )
        return Batch("decode", now, duration, reqs=list(self.running))

    def _retract_one(self) -> None:
        """SGLang's retract_decode: give back the request with the fewest outputs (longest input)."""
        victim = min(self.running, key=lambda r: (r.generated, -len(r.input_ids)))
        self.running.remove(victim)
        self._release(victim)
        self.stats.num_retracted += 1
        self.new_token_ratio = min(1.0, self.new_token_ratio + 0.1)
        self.waiting.appendleft(victim)

    def fast_forward(self, t: float, horizon: float) -> float:
        """Run the decode steps that `schedule`/`complete` would run, at once (decode_run.fast_forward)."""
        return fast_forward(self, t, horizon)

    # --- results ----------------------------------------------------------------------------
    def complete(self, batch: Batch, end: float) -> None:
        """Apply a forward's results at time `end`: first tokens, decoded tokens, finished requests."""
        self.now = end
        if batch.kind == "prefill":
            for req, _take in batch.parts:
                if req is self.chunked:
                    if self.caching:
                        self._cache_tokens(req, req.computed)
                    continue
                if req.aborted:
                    self._finish(req, end, reason="abort")
                    continue
                if req.generated == 0 or req.first_token_time is None:
                    req.first_token_time = end if req.first_token_time is None else req.first_token_time
                self._emit_token(req, end)
                if not req.finished:
                    if self.caching:
                        self._cache_tokens(req, req.computed)
                    self.running.append(req)
        else:
            self.new_token_ratio = max(MIN_NEW_TOKEN_RATIO, self.new_token_ratio - NEW_TOKEN_RATIO_DECAY)
            live = set(self.running)  # a set: batches of hundreds made this loop quadratic
            for req in batch.reqs:
                if req.finished or req not in live:
                    continue
                if req.aborted:
                    self._finish(req, end, reason="abort")
                    continue
                self._emit_token(req, end)
            self.running = [r for r in self.running if not r.finished]
        if self.hclock is not None:
            self.hclock.after_forward(self.tree, end)
        if self.l3 is not None:
            self.l3.write_backups(self.tree)

    def _emit_token(self, req: SimRequest, t: float) -> None:
        req.generated += 1
        self.stats.generation_tokens += 1
        self._decode_tokens_since_log += 1
        if req.generated >= (len(req.output_ids) if req.output_tokens is None else req.output_tokens):
            self._finish(req, t, reason=None)
        elif req.on_event is not None:
            req.on_event(req)

    def _finish(self, req: SimRequest, t: float, *, reason: str | None) -> None:
        """cache_finished_req: insert prompt + output (all but the last token; a block answer: the prompt
        alone, SimRequest.computed) and release the rest."""
        if reason is not None:
            req.finish_reason = reason
        if self.caching and req.kv_len > 0:
            self._cache_tokens(req, req.computed)
        self._set_kv(req, req.tree_len)
        self._unlock(req)
        req.kv_len = 0
        req.finish_time = t
        if req in self.running:
            self.running.remove(req)
        if req.on_event is not None:
            req.on_event(req)
        if self.on_finish is not None:
            self.on_finish(req)
