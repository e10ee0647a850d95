"""Property: whatever mix of one-offs, manual triggers, results and partial drains, every
fire gets exactly one outcome and none fires early (the wheel's watermark loses nothing,
and a fast entry moved by an earlier entry of the same scan never fires twice)."""

from __future__ import annotations

from collections import Counter

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from services.timer import keys
from streams.records import Job
from tests.services.timer.test_timer_logic import T0, Timer, bump, one_off, reused_env

JOBS = 6
operations = st.lists(
    st.one_of(
        st.tuples(st.just("submit"), st.integers(0, JOBS - 1), st.integers(-3_000, 3_000)),
        st.tuples(st.just("manual"), st.integers(0, JOBS - 1), st.integers(-2_000, 2_000)),
        st.tuples(st.just("result"), st.integers(0, JOBS - 1), st.sampled_from(["S", "D"])),
        st.tuples(st.just("tick"), st.integers(0, 1_500), st.just(0)),
    ),
    max_size=40,
)


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(ops=operations, budget=st.integers(1, 4), overlap=st.sampled_from(["ALLOW", "SKIP"]))
def test_every_fire_happens_once_and_never_early(
    ops: list[tuple[str, int, int | str]], budget: int, overlap: str
) -> None:
    timer = Timer(env=reused_env(batch_size=budget))  # readers built once: reused_env
    now = T0
    jobs: dict[int, Job] = {}
    expected: Counter[tuple[str, int]] = Counter()
    for op, index, arg in ops:
        job_id = f"job-{index}"
        if op == "submit" and index not in jobs:
            assert isinstance(arg, int)
            job = one_off(job_id, now + arg, overlap=overlap, updated_at_ms=now)
            jobs[index] = job
            timer.submit(job, now)
            expected[(job_id, now + arg)] += 1
        elif op == "manual" and index in jobs:
            assert isinstance(arg, int)
            job, manual_ms = jobs[index], now + arg
            if (job_id, manual_ms) in expected or manual_ms <= (job.manual_fire_at_ms or 0):
                continue  # the same tick is the same execution; an older one is ignored
            jobs[index] = bump(job, version=job.version + 1, manual_fire_at_ms=manual_ms)
            timer.submit(jobs[index], now)
            expected[(job_id, manual_ms)] += 1
        elif op == "result" and index in jobs:
            fired = [d for d in timer.dues() if d["job_id"] == job_id]
            if fired:
                status = "SUCCEEDED" if arg == "S" else "STARTED"
                timer.result(job_id, fired[-1]["scheduled_for_ms"], status, now)
        elif op == "tick":
            assert isinstance(index, int)
            now += index
            timer.punctuate(now)
    for _ in range(40):  # far enough ahead, with small batches, to settle everything
        now += 5_000
        timer.punctuate(now)
    outcomes = Counter((d["job_id"], d["scheduled_for_ms"]) for d in timer.dues())
    outcomes += Counter((r["job_id"], r["scheduled_for_ms"]) for r in timer.results())
    assert outcomes == expected
    assert all(d["emitted_at_ms"] >= d["fire_at_ms"] for d in timer.dues())


@given(st.lists(st.integers(min_value=-(2**65), max_value=2**66), min_size=1, max_size=20))
def test_packed_times_keep_their_order_clamped_to_the_unsigned_range(times: list[int]) -> None:
    clamped = [min(max(t, 0), 2**64 - 1) for t in times]
    assert [keys.pack_ms(t) for t in times] == [t.to_bytes(8, "big") for t in clamped]
    assert sorted(keys.pack_ms(t) for t in times) == [keys.pack_ms(t) for t in sorted(times)]
