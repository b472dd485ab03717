"""Each rank holds 1/N: the tiny Llama of the training tests, fully_shard'ed per block and at the root,
after a few AdamW steps holds on every rank exactly its padded dim-0 shards (FSDP2's rows per rank,
rounded up), in its parameters, their gradients and AdamW's two moments (tensor storage), and the
runtime's memory tracker counts the same bytes for the parameter and gradient shards, and no full
parameter or gradient left between steps."""
import torch
import torch.nn.functional as F

from spawn import main


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
    if rank == 0:
        print(f"at {n} ranks each holds {held} of {total} parameters ({held / total:.3f}), as many gradient values "
              f"and 2 x as many AdamW moments; tracker: {mem['param_shards'][0]} B parameter shards, "
              f"{mem['grad_shards'][0]} B gradient shards, nothing full between steps", flush=True)


if __name__ == "__main__":
    main(held_one_nth)
