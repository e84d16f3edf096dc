"""How a load run drives its workers, with the stall watchdog beside them: requests in flight and no token for timeouts.stall seconds end it.

Why apart: a hung server (sglang#30760, #42465) otherwise holds a point until every request's own timeout;
this fails it within a tick of the threshold, with the window and the in-flight count (`stalled`).
"""

from __future__ import annotations

import asyncio
import time
from typing import Any

from harness.loadgen.tally import StallEvidence

_mono = time.monotonic


async def watch_stall(run: Any, workers: list[asyncio.Task[None]]) -> None:
    """Fail the run when requests are in flight and none has had a token (or ended) for timeouts.stall
    seconds: the workers are cancelled and the evidence kept in res.stall (the `stalled` verdict)."""
    limit = run.timeouts.stall
    step = min(0.25, limit / 4)
    while True:
        await asyncio.sleep(step)
        live = run.live
        if not live:
            continue
        last = run.last_done
        for rec in live.values():
            t = rec.token_mono[-1] if rec.token_mono else (rec.first_byte_mono or rec.sent_mono or 0.0)
            last = max(last, t)
        now = _mono()
        if now - last >= limit:
            run.res.stall = StallEvidence(
                since_mono=last, detected_mono=now, in_flight=len(live), limit_s=limit
            )
            for w in workers:
                w.cancel()
            return


async def drive(session: Any, run: Any, concurrency: int, progress: Any) -> None:
    """Run the workers (and the progress ticker); on cancellation cancel them all and wait for them."""
    loop = asyncio.get_running_loop()
    res = run.res
    workers = [loop.create_task(run.worker(session)) for _ in range(concurrency)]
    ticker = loop.create_task(progress.run(res, run.recent_ttft)) if progress else None
    watch = loop.create_task(watch_stall(run, workers))
    lag = loop.create_task(run.lag.run())  # the loop's own lag (harness.loadgen.client_load)
    try:
        await asyncio.gather(*workers)
    except (asyncio.CancelledError, KeyboardInterrupt, SystemExit) as e:
        stalled = res.stall is not None and isinstance(e, asyncio.CancelledError)
        if stalled and not asyncio.current_task().cancelling():  # type: ignore[union-attr]
            # the stall watchdog cancelled the workers (their in-flight requests recorded as stalled):
            # the run ends here and the point fails (harness.sweep.point)
            await asyncio.gather(*workers, return_exceptions=True)
            run.time_up = True
            run.drop_queued("stalled", f"not sent: {res.stall.reason()}")
            return
        # KeyboardInterrupt here: a signal handler raised it inside a worker (it has already left the
        # loop); stop the rest the same way, and end cancelled rather than with an unretrieved error
        res.interrupted = True
        for w in workers:
            w.cancel()
        await asyncio.gather(*workers, return_exceptions=True)
        if not isinstance(e, asyncio.CancelledError):
            raise asyncio.CancelledError from e
        raise
    finally:
        watch.cancel()
        lag.cancel()
        if ticker and progress:
            ticker.cancel()
            await asyncio.gather(ticker, return_exceptions=True)
            progress.finish(res, run.recent_ttft)
