"""The lockstep header (`X-Harness-Lockstep`): what the load generator tells the sim about its loop.

Both ends speak it, so it lives here, below both: the load generator (harness.loadgen.run) writes a
ClientHint into every request, the sim (harness.sim.server) parses it and its virtual clock
(harness.sim.lockstep) holds while the client owes requests. Why the sim needs it: harness.sim.lockstep.
"""

from __future__ import annotations

from dataclasses import dataclass

HEADER = "X-Harness-Lockstep"
_KEYS = {"run", "concurrency", "seq", "ready", "followed", "follow", "index", "offset", "next"}


class BadHint(ValueError):
    """The lockstep header is malformed: answered with HTTP 400 naming the header and the value."""


@dataclass(frozen=True)
class ClientHint:
    """One request's view of the client's loop, as the load generator sends it.

    run: names the client's run (a new name starts a new loop; requests of one run may land out of
    send order); concurrency: the client's cap on requests in flight; seq: this request's send number in its run
    (1 = the first); ready: requests ready to send after this one (sent as soon as a slot frees);
    followed: requests sent with follow that ended well, their next turn queued by then (so the engine
    knows which of its finishes `ready` already counts); follow: finishing this request (not aborted)
    makes one more ready at once (a session's next turn); index: its schedule
    index (requests arriving at the same virtual time are queued in index order, as the virtual-time
    replay queues them); offset / next (open loop only): this request's and the next request's
    scheduled arrival, seconds after the run start.
    """

    concurrency: int
    seq: int
    ready: int
    followed: int = 0
    follow: bool = False
    index: int | None = None
    offset: float | None = None
    next: float | None = None
    run: str = ""

    def header(self) -> str:
        """`run=..;concurrency=..;seq=..;ready=..;followed=..;follow=0|1[;index=..][;offset=..][;next=..]`
        (run only when set): one format per request, on the client's event loop."""
        text = (
            f"concurrency={self.concurrency};seq={self.seq};ready={self.ready};"
            f"followed={self.followed};follow={int(self.follow)}"
        )
        if self.run:
            text = f"run={self.run};{text}"
        if self.index is not None:
            text = f"{text};index={self.index}"
        if self.offset is not None:
            text = f"{text};offset={self.offset!r}"
        if self.next is not None:
            text = f"{text};next={self.next!r}"
        return text


def parse_hint(value: str | None) -> ClientHint | None:
    """`run=a1;concurrency=8;seq=3;ready=20;followed=2;follow=1[;index=7][;offset=0.5;next=0.75]`."""
    if value is None or not value.strip():
        return None
    fields: dict[str, str] = {}
    for part in value.split(";"):
        key, sep, val = part.partition("=")
        key = key.strip().lower()
        if not sep or key not in _KEYS:
            raise BadHint(f"{HEADER}: bad field {part.strip()!r} (expected {', '.join(sorted(_KEYS))})")
        fields[key] = val.strip()
    try:
        hint = ClientHint(
            concurrency=int(fields["concurrency"]),
            seq=int(fields["seq"]),
            ready=int(fields.get("ready", "0")),
            followed=int(fields.get("followed", "0")),
            follow=fields.get("follow", "0") not in ("0", "", "false"),
            index=int(fields["index"]) if "index" in fields else None,
            offset=float(fields["offset"]) if "offset" in fields else None,
            next=float(fields["next"]) if "next" in fields else None,
            run=fields.get("run", ""),
        )
    except KeyError as e:
        raise BadHint(f"{HEADER}: missing {e.args[0]!r} in {value!r}") from None
    except ValueError:
        raise BadHint(f"{HEADER}: not a number in {value!r}") from None
    if hint.concurrency < 1 or hint.seq < 1 or hint.ready < 0 or hint.followed < 0:
        raise BadHint(f"{HEADER}: concurrency and seq must be >= 1, ready and followed >= 0, got {value!r}")
    return hint
