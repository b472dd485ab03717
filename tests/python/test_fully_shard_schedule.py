"""fully_shard follows the runtime's schedule (runtime/fsdp_schedule.h), as FsdpModel does: the
collectives a fully_shard'ed model issues and finishes, in order (all-gathers, prefetches, the one
reduce-scatter in flight), equal FsdpModel's over as many units with the same prefetch and reshard
(_C.fsdp_model_trace, the same run with no compute between the hooks).

A root R wrapping 3 inner units runs them as FsdpModel runs 4 units: R's pre-forward order (R, inner
0..2) is FsdpModel's 0..3 in forward; its post-forward order (inner 0..2, R) is FsdpModel's 0..3 in
backward, the root keeping its parameters as FsdpModel's last unit does. Each event's unit is mapped to
its place in that order. The first forward differs by design: fully_shard records its order there, so it
prefetches nothing yet (FsdpModel's fixed order prefetches from the start): it equals FsdpModel's
schedule at prefetch 0."""
import copy

import torch
import torch.distributed as dist

from compare import ChainNet
from spawn import main

STEPS = 3


def python_trace(reference, prefetch, reshard):
    import fsdp_runtime

    model = copy.deepcopy(reference)
    for layer in model.inner:
        fsdp_runtime.fully_shard(layer, prefetch=prefetch, reshard_after_forward=reshard)
    fsdp_runtime.fully_shard(model, prefetch=prefetch, reshard_after_forward=reshard)
    groups = model._fsdp_state.groups
    groups.record_events(True)
    groups.events()  # whatever an earlier model left
    x = torch.randn(4, 5, generator=torch.Generator().manual_seed(7))
    phases = []
    try:
        for step in range(1, STEPS + 1):
            loss = model(x).square().sum()
            phases.append((step, "f", groups.events()))
            loss.backward()
            phases.append((step, "b", groups.events()))
    finally:
        groups.record_events(False)
    schedule = model._fsdp_state.root_ctx.schedule
    place = {"f": {u: i for i, u in enumerate(schedule.order)},
             "b": {u: i for i, u in enumerate(schedule.post_order)}}
    assert len(schedule.order) == 4 and schedule.post_order[-1] == schedule.order[0], (schedule.order,
                                                                                       schedule.post_order)
    return [(step, phase, what, place[phase][unit]) for step, phase, events in phases for what, unit in events]


def schedule_matches_fsdp_model(rank, n):
    from fsdp_runtime import _C

    pg = dist.distributed_c10d._get_default_group()
    reference = ChainNet(47)
    for reshard, text in ((True, "default"), (False, "never"), (1, "1")):
        for prefetch in (0, 1, 2):
            got = python_trace(reference, prefetch, reshard)
            want = _C.fsdp_model_trace(pg, units=4, prefetch=prefetch, reshard=text, steps=STEPS)
            first = _C.fsdp_model_trace(pg, units=4, prefetch=0, reshard=text, steps=1)
            want = [e for e in first if e[1] == "f"] + [e for e in want if e[:2] != (1, "f")]
            got_by = {(s, p): [e for e in got if e[:2] == (s, p)] for s in range(1, STEPS + 1) for p in "fb"}
            want_by = {(s, p): [e for e in want if e[:2] == (s, p)] for s in range(1, STEPS + 1) for p in "fb"}
            for key in got_by:
                assert got_by[key] == want_by[key], (reshard, prefetch, key, got_by[key], want_by[key])
            if rank == 0 and reshard is True and prefetch == 1:
                print("step 2 as fully_shard and FsdpModel ran it:",
                      ", ".join(f"{p} {w} {u}" for s, p, w, u in got if s == 2), flush=True)


if __name__ == "__main__":
    main(schedule_matches_fsdp_model)
