"""What a module that fully_shard sharded holds, read back: its units, the memory and overlap counters of
their process groups, and its full parameters and state dicts (gathered from the shards, or loaded into
them). fully_shard.py makes the units; this module only reads and writes them."""
import collections

import torch
import torch.distributed as dist


def _units(module):
    """(qualified prefix, unit state) for every unit in `module`, in module order."""
    for prefix, sub in module.named_modules():
        state = getattr(sub, "_fsdp_state", None)
        if state is not None:
            yield prefix, state


def _trackers(module):
    return {id(s.groups): s.groups for _, s in _units(module)}.values()


def memory(module):
    """{category: (current bytes, peak bytes)} of the runtime's memory trackers of the units in
    `module` (one per process group and reshard group, summed; shared with other modules sharded over
    the same groups)."""
    return _summed_pairs(groups.memory() for groups in _trackers(module))


def reset_memory_peaks(module):
    for groups in _trackers(module):
        groups.reset_peaks()


def overlap(module):
    """{kind: share of its flight time hidden behind compute} for the collectives of the units in `module`
    since clear_overlap(): what fsdp-train reports as "overlap", measured here as the time each collective
    was in flight while the training thread was not waiting for it. Kinds: all_gather, reduce_scatter,
    all_reduce (HSDP)."""
    return {kind: (h / f if f > 0 else 0.0) for kind, (f, h) in _overlap_seconds(module).items()}


def overlap_seconds(module):
    """(seconds in flight, seconds hidden) of all the collectives of the units in `module` since
    clear_overlap(): the difference over a step gives the step's hidden share (metrics.jsonl's comm_hidden)."""
    pairs = _overlap_seconds(module).values()
    return sum(f for f, _ in pairs), sum(h for _, h in pairs)


def _overlap_seconds(module):
    return _summed_pairs(groups.overlap() for groups in _trackers(module))


def _summed_pairs(dicts):
    """{key: (a, b)} summed pair by pair over the dicts (one per set of process groups)."""
    out = {}
    for d in dicts:
        for key, (a, b) in d.items():
            x, y = out.get(key, (0, 0))
            out[key] = (x + a, y + b)
    return out


def clear_overlap(module):
    for groups in _trackers(module):
        groups.clear_overlap()


def _gather_master(state):
    """The unit's full float32 parameters from the master shards (one all-gather over the group), for
    a param_dtype unit whose own all-gather rounds them: rank r's chunk holds, parameter after
    parameter, rows [r * rows_per_rank, (r + 1) * rows_per_rank) of each (sharding/shard_layout.h)."""
    chunk = state.shard.numel()
    world = state.groups.shard_degree  # under HSDP replica 0's ranks, the first `world`, hold every row
    flat = torch.empty(chunk * state.pg.size())
    dist.all_gather_into_tensor(flat, state.shard.detach(), group=state.pg)
    chunks = flat.view(-1, chunk)[:world]
    out, offset = [], 0
    for shape in state.shapes:
        rows = shape[0] if shape else 1
        row_numel = max(1, int(torch.Size(shape[1:]).numel())) if shape else 1
        per_rank = -(-rows // world) * row_numel
        full = chunks[:, offset:offset + per_rank].reshape(-1)[:rows * row_numel]
        out.append(full.clone().view(shape))
        offset += per_rank
    return out


def full_parameters(module):
    """{qualified name: full parameter (a copy)} for every unit in `module`; collective (all-gathers).
    The float32 master values, also under a MixedPrecisionPolicy."""
    out = {}
    for prefix, state in _units(module):
        if state.param_dtype is not None:
            values = _gather_master(state)
        else:
            was_unsharded = state.unit.unsharded
            values = [v.clone() for v in state.unit.unshard()]
            if not was_unsharded:
                state.unit.reshard()
        for name, value in zip(state.names, values):
            out[f"{prefix}.{name}" if prefix else name] = value
    return out


def _state_entries(module):
    """(key, unit state and parameter index | tensor) in the order Module.state_dict gives the unsharded
    module: each module's parameters (as they were before fully_shard), its persistent buffers, then its
    children."""
    in_units = {}
    for prefix, state in _units(module):
        for i, name in enumerate(state.names):
            in_units[f"{prefix}.{name}" if prefix else name] = (state, i)

    def visit(m, prefix):
        for name in m.__dict__.get("_fsdp_param_order", list(m._parameters.keys())):
            key = prefix + name
            if key in in_units:
                yield key, in_units[key]
            elif name != "_fsdp_shard" and m._parameters.get(name) is not None:
                yield key, m._parameters[name]
        for name, b in m._buffers.items():
            if b is not None and name not in m._non_persistent_buffers_set:
                yield prefix + name, b
        for child_name, child in m._modules.items():
            if child is not None:
                yield from visit(child, prefix + child_name + ".")

    return list(visit(module, ""))


def full_state_dict(module, rank0_only=False):
    """The state dict of the unsharded module (same names, same order) with full tensors: the units'
    parameters all-gathered (copies), the rest as Module.state_dict gives them. Collective over the
    units' groups; with rank0_only the other ranks get an empty dict."""
    full = full_parameters(module)
    out = collections.OrderedDict()
    for key, entry in _state_entries(module):
        out[key] = full[key] if isinstance(entry, tuple) else entry.detach()
    if rank0_only and dist.get_rank() != 0:
        return collections.OrderedDict()
    return out


def load_full_state_dict(module, state_dict, strict=True):
    """Loads a full state dict (full_state_dict's names and shapes, e.g. the unsharded module's) into
    the shards: each rank keeps its slice of every unit's parameters. Every rank passes the full dict.
    Not during a step (the units must be resharded). Returns (missing_keys, unexpected_keys) like
    Module.load_state_dict; strict raises on either."""
    entries = _state_entries(module)
    keys = {k for k, _ in entries}
    missing = [k for k, _ in entries if k not in state_dict]
    unexpected = [k for k in state_dict if k not in keys]
    if strict and (missing or unexpected):
        raise RuntimeError(f"load_full_state_dict: missing keys {missing}, unexpected keys {unexpected}")
    by_unit = collections.OrderedDict()
    with torch.no_grad():
        for key, entry in entries:
            if key not in state_dict:
                continue
            value = state_dict[key]
            if isinstance(entry, tuple):
                state, i = entry
                if tuple(value.shape) != state.shapes[i]:
                    raise ValueError(f"load_full_state_dict: {key} has shape {tuple(value.shape)}, the unit "
                                     f"holds {state.shapes[i]}")
                by_unit.setdefault(state, {})[i] = value
            else:
                entry.copy_(value)
    for state, values in by_unit.items():
        if state.unit.unsharded or len(values) != len(state.names):
            # A partial load keeps the unit's other parameters: gather them first.
            full = [v.clone() for v in state.unit.unshard()]
            state.reshard()
        else:
            full = [None] * len(state.names)
        for i, v in values.items():
            full[i] = v
        state.unit.load_full(torch.cat([v.detach().reshape(-1).to(torch.float32) for v in full]))
    return torch.nn.modules.module._IncompatibleKeys(missing, unexpected)
