"""A block trace's answers in the scheduler: one decode step per output token, KV in whole key elements."""

from __future__ import annotations

import pytest

from harness.sim.engine import Engine, EngineConfig, SimRequest
from harness.sim.simulate import simulate

K = 512  # tokens per key element, as a Mooncake trace's blocks


def block_req(rid: str, prompt: list[int], out_tokens: int, at: float = 0.0) -> SimRequest:
    """A what-if block request as harness.whatif.serve.closed_loop builds it: fresh answer elements."""
    units = -(-out_tokens // K)
    answer = [-1_000 * (int(rid) + 1) - j for j in range(units)]
    return SimRequest(
        rid=rid, input_ids=prompt, output_ids=answer, arrival=at, output_tokens=out_tokens, out_unit=K
    )


def config(pool: int) -> EngineConfig:
    return EngineConfig(pool_tokens=pool, card="h100", key_tokens=K, context_length=10_000_000)


def check_kv(e: Engine) -> None:
    """After every forward: the pool never overdraws, and a running answer holds ceil((g - 1) / K) blocks."""
    assert e.available() >= 0
    for r in e.running:
        assert r.kv_len == len(r.input_ids) + -(-(r.generated - 1) // K)


@pytest.mark.parametrize("n", [1, 2, 300, 1200])
def test_a_block_answer_finishes_n_minus_1_decode_steps_after_its_first_token(n: int) -> None:
    prompt = list(range(10))
    cfg = config(1_000)
    (done,) = simulate([block_req("0", prompt, n)], cfg, on_step=check_kv)
    assert done.generated == n and done.finish_reason == "length"
    assert done.first_token_time is not None and done.finish_time is not None
    # decode step g (g = 1 .. n-1) attends over the prompt's tokens and the g answer tokens before it
    steps = [cfg.profile.decode_time(1, len(prompt) * K + g) for g in range(1, n)]
    assert done.finish_time - done.first_token_time == pytest.approx(sum(steps), rel=1e-12, abs=1e-12)
    assert done.kv_len == 0


def test_jumping_decode_runs_gives_the_same_results_as_stepping_and_fewer_steps() -> None:
    def workload() -> list[SimRequest]:
        return [
            block_req(
                str(i), [i % 3, 100 + i % 5] + list(range(200 + 10 * i, 206 + 10 * i)), 50 + 97 * i, i * 0.4
            )
            for i in range(12)
        ]

    for pool in (40, 400):  # 40 blocks: answers' blocks compete with prompts (evictions, retractions)
        a = simulate(workload(), config(pool), jump=False, on_step=check_kv)
        steps: list[int] = []

        def on_step(e: Engine, seen: list[int] = steps) -> None:
            check_kv(e)
            seen.append(e.decode_steps)

        b = simulate(workload(), config(pool), on_step=on_step)
        key = lambda rs: sorted((r.rid, r.first_token_time, r.finish_time, r.generated) for r in rs)  # noqa: E731
        assert key(a) == key(b)
        assert all(r.generated == 50 + 97 * int(r.rid) for r in b)
        assert len(steps) < sum(r.generated for r in b) // 4


def test_decode_competes_with_prefill_for_the_pool_in_blocks() -> None:
    """Long answers' blocks hold the pool: a later request waits for them, which prompt-only replay hides."""
    prompt = list(range(8))

    def ttft_of_last(out_tokens: int) -> float:
        reqs = [block_req(str(i), [1000 + i] + prompt, out_tokens) for i in range(3)]
        reqs.append(block_req("3", [2000] + prompt, 1, at=0.01))
        done = {r.rid: r for r in simulate(reqs, config(30), on_step=check_kv)}
        last = done["3"]
        assert last.first_token_time is not None
        return last.first_token_time - last.arrival

    # 3 prompts of 9 blocks + 3 answers growing to 2 blocks each: the 4th prompt fits only after one ends
    assert ttft_of_last(4 * K) > 5 * ttft_of_last(1)


def test_the_tree_caches_a_block_answers_prompt_alone() -> None:
    """As the one-at-a-time replay (harness.whatif.serve.sequential) caches a block trace: no answer."""
    prompt = list(range(20))
    e = Engine(config(100))
    r = block_req("0", prompt, 3 * K)
    e.add(r)
    t = 0.0
    while e.busy():
        batch = e.schedule(t)
        assert batch is not None
        t += batch.duration
        e.complete(batch, t)
    assert r.finished and r.generated == 3 * K
    assert e.tree.device_size() == len(prompt)
    assert e.tree.match_prefix(tuple(prompt + r.output_ids)).device_len == len(prompt)
    assert e.private_total == 0


def test_the_pool_rejects_a_prompt_whose_answer_blocks_do_not_fit() -> None:
    # pool 20 blocks: the server takes prompt + answer up to 19 key elements (max_input_len)
    prompt = list(range(15))
    fits = block_req("0", prompt, 4 * K)  # 15 + 4 = 19 blocks
    too_long = block_req("1", prompt, 4 * K + 1)  # 15 + 5 = 20 blocks
    done = {r.rid: r for r in simulate([fits, too_long], config(20), on_step=check_kv)}
    assert done["1"].finish_reason == "abort" and done["1"].first_token_time is None
    assert done["0"].finish_reason == "length" and done["0"].generated == 4 * K


@pytest.mark.parametrize("card", ["h100", "l4-8b"])
def test_a_long_decode_run_timed_at_once_gives_the_loops_floats(card: str, monkeypatch) -> None:
    """decode_run times long runs with numpy (CardProfile.decode_times): the same floats as step by step."""
    from harness.sim import decode_run
    from harness.sim.timing import get_profile

    prof = get_profile(card)
    for horizon in (float("inf"), 0.3, 1.7):
        monkeypatch.setattr(decode_run, "VECTOR_FROM", 1 << 30)
        loop = decode_run._advance(prof, 7, 90_001, 7, 1500, 0.125, horizon, 0.7)
        monkeypatch.setattr(decode_run, "VECTOR_FROM", 3)
        vec = decode_run._advance(prof, 7, 90_001, 7, 1500, 0.125, horizon, 0.7)
        assert vec == loop
        assert 0 < loop[0] <= 1500 and (loop[0] == 1500 or loop[1] >= horizon)


def test_answers_outgrowing_the_pool_retract_one_and_it_prefills_its_blocks_again() -> None:
    """Two 8-block prompts admitted on a decayed reservation, each answer growing to 8 blocks: 32 > 30."""

    def run(jump: bool) -> list[SimRequest]:
        reqs = [block_req(str(i), [1000 * i + j for j in range(8)], 4000, i * 0.01) for i in range(3)]
        return simulate(reqs, config(30), jump=jump, on_step=check_kv)

    stepped, jumped = run(False), run(True)
    assert sum(r.retractions for r in stepped) == 1
    assert all(r.generated == 4000 and r.finish_reason == "length" for r in stepped)
    key = lambda rs: sorted((r.rid, r.first_token_time, r.finish_time, r.retractions) for r in rs)  # noqa: E731
    assert key(stepped) == key(jumped)
