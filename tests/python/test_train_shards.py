"""Each rank holds 1/N: the tiny Llama of the training tests, fully_shard'ed per block and at the root,
after a few AdamW steps holds on every rank exactly its padded dim-0 shards (FSDP2's rows per rank,
rounded up), in its parameters, their gradients and AdamW's two moments (tensor storage), and the
runtime's memory tracker counts the same bytes for the parameter and gradient shards, and no full
parameter or gradient left between steps; and the planner (fsdp-plan on a model spec written from the
same units) predicts exactly those bytes for parameter shards, gradient shards and optimizer state."""
import json
import os
import subprocess
import tempfile

import torch
import torch.nn.functional as F

from spawn import main


def planned_memory(model, n):
    """fsdp-plan's per-rank memory for the FSDP units test_train_shards gives `model` (not sharded) (each block, then the root's own parameters)
    in fp32 over n ranks, from a model spec written here (docs/planner.md's format)."""
    def params(pairs):
        return ", ".join(f'{{ name = "{name}", shape = {list(p.shape)}, kind = "{"embedding" if "tok_embeddings" in name else "dense"}" }}'
                         for name, p in pairs)
    in_blocks = set()
    spec = ['[model]\nname = "tiny"\n']
    for i, block in enumerate(model.layers):
        pairs = [(f"layers.{i}.{name}", p) for name, p in block.named_parameters(recurse=True)]
        in_blocks.update(name for name, _ in pairs)
        spec.append(f'[[units]]\nname = "layers.{i}"\nlayer = true\nparams = [ {params(pairs)} ]\n')
    root = [(name, p) for name, p in model.named_parameters() if name not in in_blocks]
    spec.append(f'[[units]]\nname = "root"\nparams = [ {params(root)} ]\n')
    plan_bin = os.path.join(os.path.dirname(os.environ["FSDP_PYTHON_PATH"]), "sharding", "fsdp-plan")
    with tempfile.NamedTemporaryFile("w", suffix=".toml") as f:
        f.write("\n".join(spec))
        f.flush()
        out = subprocess.run([plan_bin, "--model", f.name, "--chip", "cpu", "--chips-per-node", str(n),
                              "--param-dtype", "fp32", "--reduce-dtype", "fp32", "--seq-len", "8", "--json"],
                             capture_output=True, text=True, check=True).stdout
    return json.loads(out)["memory"]


def held_one_nth(rank, n):
    import fsdp_runtime
    from fsdp_runtime.models.llama import Llama, LlamaArgs

    torch.manual_seed(5)
    args = LlamaArgs(dim=32, n_layers=2, n_heads=4, n_kv_heads=2, hidden=96, vocab=64, seq_len=8)
    full = {name: p.shape for name, p in Llama(args).named_parameters()}
    torch.manual_seed(5)
    model = Llama(args)
    for block in model.layers:
        fsdp_runtime.fully_shard(block)
    fsdp_runtime.fully_shard(model)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
    g = torch.Generator().manual_seed(9 + rank)
    for _ in range(2):
        tokens = torch.randint(0, args.vocab, (2, args.seq_len + 1), generator=g)
        logits = model(tokens[:, :-1])
        F.cross_entropy(logits.reshape(-1, args.vocab), tokens[:, 1:].reshape(-1)).backward()
        opt.step()
        opt.zero_grad(set_to_none=False)

    # Per unit, parameter after parameter: ceil(rows / n) rows of each (dim-0 shards with padding).
    expected = sum(-(-shape[0] // n) * (shape[1:].numel() if len(shape) > 1 else 1) for shape in full.values())
    total = sum(shape.numel() for shape in full.values())
    params = list(model.parameters())
    held = sum(p.numel() for p in params)
    grads = sum(p.grad.numel() for p in params)
    moments = sum(s[k].numel() for s in opt.state.values() for k in ("exp_avg", "exp_avg_sq"))
    assert held == expected and grads == expected and moments == 2 * expected, (held, grads, moments, expected)
    mem = fsdp_runtime.memory(model)
    assert mem["param_shards"][0] == 4 * expected, (mem["param_shards"], expected)
    assert mem["grad_shards"][0] == 4 * expected, (mem["grad_shards"], expected)
    for cat in ("unsharded_params", "unsharded_grads", "all_gather_buffers", "reduce_scatter_buffers"):
        assert mem[cat][0] == 0, (cat, mem[cat])
    plan = planned_memory(Llama(args), n)  # the unsharded module tree: full shapes
    assert int(plan["param_shards"]) == mem["param_shards"][0], (plan["param_shards"], mem["param_shards"])
    assert int(plan["grad_shards"]) == mem["grad_shards"][0], (plan["grad_shards"], mem["grad_shards"])
    assert int(plan["optimizer_state"]) == 4 * moments, (plan["optimizer_state"], 4 * moments)
    if rank == 0:
        print(f"the planner predicts the same {plan['param_shards']} B of parameter shards, {plan['grad_shards']} B "
              f"of gradient shards and {plan['optimizer_state']} B of AdamW state", flush=True)
        print(f"at {n} ranks each holds {held} of {total} parameters ({held / total:.3f}), as many gradient values "
              f"and 2 x as many AdamW moments; tracker: {mem['param_shards'][0]} B parameter shards, "
              f"{mem['grad_shards'][0]} B gradient shards, nothing full between steps", flush=True)


if __name__ == "__main__":
    main(held_one_nth)
