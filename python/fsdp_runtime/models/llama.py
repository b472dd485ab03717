"""Llama 3 in PyTorch with TorchTitan's module tree and parameter names (tok_embeddings, layers.<i>.
{attention.{wq,wk,wv,wo}, feed_forward.{w1,w2,w3}, attention_norm, ffn_norm}, norm, output): the
names fsdp-train's reference model (sharding/model_presets.cc) and its safetensors files use. RMSNorm,
RoPE on interleaved pairs (with Llama 3.1's frequency scaling, as model/ops.cc), GQA, SwiGLU. Written
for torch 1.13 (no scaled_dot_product_attention). Needs no fsdp_runtime extension.

    model = Llama(LlamaArgs(dim=128, n_layers=4, n_heads=8, n_kv_heads=4, hidden=384, vocab=256, seq_len=128))
    logits = model(tokens)            # tokens (B, T) int64 -> (B, T, vocab)
"""
import dataclasses
import math

import torch
import torch.nn as nn
import torch.nn.functional as F
from torch.utils.checkpoint import checkpoint


@dataclasses.dataclass
class RopeScaling:
    """Llama 3.1's RoPE frequency scaling (model/ops.h RopeScaling, TorchTitan's RoPEScalingArgs)."""
    factor: float = 8.0
    low_freq_factor: float = 1.0
    high_freq_factor: float = 4.0
    original_context: float = 8192.0


@dataclasses.dataclass
class LlamaArgs:
    dim: int
    n_layers: int
    n_heads: int
    n_kv_heads: int
    hidden: int          # the FFN's width (TorchTitan: 2/3 of 4 dim, times ffn_dim_multiplier, rounded up to multiple_of)
    vocab: int
    seq_len: int         # the longest sequence the RoPE table covers
    norm_eps: float = 1e-5
    rope_theta: float = 500000.0
    rope_scaling: RopeScaling = None  # None: plain RoPE
    init_scheme: str = "normal"       # "normal": every matrix N(0, 0.02); "torchtitan": model/init.cc's


class RMSNorm(nn.Module):
    def __init__(self, dim, eps=1e-5):
        super().__init__()
        self.eps, self.weight = eps, nn.Parameter(torch.ones(dim))

    def forward(self, x):  # x (..., dim)
        return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + self.eps) * self.weight


def rope_frequency(i, head_dim, theta, scaling):
    """Rotation frequency of pair i (radians per position), in float64 as model/ops.cc computes it."""
    freq = theta ** (-2.0 * i / head_dim)
    if scaling is None:
        return freq
    wavelength = 2 * math.pi / freq
    if wavelength < scaling.original_context / scaling.high_freq_factor:
        return freq
    if wavelength > scaling.original_context / scaling.low_freq_factor:
        return freq / scaling.factor
    smooth = (scaling.original_context / wavelength - scaling.low_freq_factor) / (
        scaling.high_freq_factor - scaling.low_freq_factor)
    return (1 - smooth) * freq / scaling.factor + smooth * freq


def rope_table(head_dim, seq_len, theta, scaling=None):
    """(T, hd/2) complex64: e^(i t freq_j); angles and their cos/sin in float64, then rounded to float32."""
    freqs = torch.tensor([rope_frequency(i, head_dim, theta, scaling) for i in range(head_dim // 2)],
                         dtype=torch.float64)
    angles = torch.outer(torch.arange(seq_len, dtype=torch.float64), freqs)
    return torch.complex(torch.cos(angles).float(), torch.sin(angles).float())


def apply_rope(x, freqs):  # x (B, T, heads, hd): pair (2i, 2i+1) as one complex number; freqs (>= T, hd/2)
    xc = torch.view_as_complex(x.float().reshape(*x.shape[:-1], -1, 2))
    return torch.view_as_real(xc * freqs[None, :x.shape[1], None, :]).flatten(3).type_as(x)


class Attention(nn.Module):
    def __init__(self, a):
        super().__init__()
        self.h, self.kv, self.hd = a.n_heads, a.n_kv_heads, a.dim // a.n_heads
        self.wq = nn.Linear(a.dim, self.h * self.hd, bias=False)
        self.wk = nn.Linear(a.dim, self.kv * self.hd, bias=False)
        self.wv = nn.Linear(a.dim, self.kv * self.hd, bias=False)
        self.wo = nn.Linear(self.h * self.hd, a.dim, bias=False)

    def forward(self, x, freqs, mask):  # x (B, T, dim)
        b, t, _ = x.shape
        q = apply_rope(self.wq(x).view(b, t, self.h, self.hd), freqs)
        k = apply_rope(self.wk(x).view(b, t, self.kv, self.hd), freqs)
        v = self.wv(x).view(b, t, self.kv, self.hd)
        rep = self.h // self.kv  # GQA: each KV head serves rep query heads
        k, v = k.repeat_interleave(rep, dim=2), v.repeat_interleave(rep, dim=2)
        q, k, v = (y.transpose(1, 2) for y in (q, k, v))  # (B, H, T, hd)
        att = torch.softmax(q @ k.transpose(-2, -1) / math.sqrt(self.hd) + mask[:t, :t], dim=-1)
        return self.wo((att @ v).transpose(1, 2).reshape(b, t, -1))


class FeedForward(nn.Module):
    def __init__(self, a):
        super().__init__()
        self.w1 = nn.Linear(a.dim, a.hidden, bias=False)
        self.w2 = nn.Linear(a.hidden, a.dim, bias=False)
        self.w3 = nn.Linear(a.dim, a.hidden, bias=False)

    def forward(self, x):
        return self.w2(F.silu(self.w1(x)) * self.w3(x))


class TransformerBlock(nn.Module):
    def __init__(self, a):
        super().__init__()
        self.attention, self.feed_forward = Attention(a), FeedForward(a)
        self.attention_norm, self.ffn_norm = RMSNorm(a.dim, a.norm_eps), RMSNorm(a.dim, a.norm_eps)

    def forward(self, x, freqs, mask):
        h = x + self.attention(self.attention_norm(x), freqs, mask)
        return h + self.feed_forward(self.ffn_norm(h))


class Llama(nn.Module):
    def __init__(self, a):
        super().__init__()
        self.args = a
        self.tok_embeddings = nn.Embedding(a.vocab, a.dim)
        self.layers = nn.ModuleList(TransformerBlock(a) for _ in range(a.n_layers))
        self.norm, self.output = RMSNorm(a.dim, a.norm_eps), nn.Linear(a.dim, a.vocab, bias=False)
        # Plain attributes, not buffers: DDP's gloo broadcast of buffers rejects complex tensors, and
        # they are not state (a function of the arguments).
        self.freqs = rope_table(a.dim // a.n_heads, a.seq_len, a.rope_theta, a.rope_scaling)
        self.mask = torch.full((a.seq_len, a.seq_len), float("-inf")).triu(1)
        self.checkpointed = [False] * a.n_layers  # set_activation_checkpointing
        self.init_weights(a.init_scheme)

    @torch.no_grad()
    def init_weights(self, scheme):
        """From torch's global generator, in named_parameters() order. "normal": matrices N(0, 0.02),
        norm weights 1; "torchtitan" (model/init.cc): embeddings N(0, 1), output N(0, dim^-1/2) cut at
        3 sd, layer l's wo, w2, w3 N(0, 0.02 / sqrt(2 (l + 1))), other matrices N(0, 0.02)."""
        if scheme not in ("normal", "torchtitan"):
            raise ValueError(f"init scheme '{scheme}' is not normal or torchtitan")
        for name, p in self.named_parameters():
            if p.dim() < 2:
                p.fill_(1.0)
                continue
            std, cut = 0.02, None
            if scheme == "torchtitan":
                if name == "tok_embeddings.weight":
                    std = 1.0
                elif name == "output.weight":
                    std = p.shape[-1] ** -0.5
                    cut = 3 * std
                elif name.startswith("layers.") and name.endswith((".attention.wo.weight", ".w2.weight", ".w3.weight")):
                    std = 0.02 / math.sqrt(2 * (int(name.split(".")[1]) + 1))
            if cut is None:
                nn.init.normal_(p, std=std)
            else:
                nn.init.trunc_normal_(p, std=std, a=-cut, b=cut)

    def forward(self, tokens):  # tokens (B, T) int64 -> logits (B, T, vocab)
        h = self.tok_embeddings(tokens)
        for layer, recompute in zip(self.layers, self.checkpointed):
            if recompute:  # keeps the block's input only; its forward reruns inside its backward
                h = checkpoint(layer, h, self.freqs, self.mask, use_reentrant=False)
            else:
                h = layer(h, self.freqs, self.mask)
        return self.output(self.norm(h))

    def set_activation_checkpointing(self, modes):
        """modes[i] for block i, as spec::block_ac gives it: "none", "full", or "selective" (TorchTitan's
        op-level policy). torch 1.13 has no selective policy for torch.utils.checkpoint (TorchTitan's
        needs create_selective_checkpoint_contexts, torch 2.4), so a "selective" block recomputes its
        whole forward here: more recompute than TorchTitan's op policy, the same values."""
        self.checkpointed = [m != "none" for m in modes]


def flops_per_token(a):
    """TorchTitan's estimate: 6 x non-embedding parameters + 12 L H hd T."""
    hd, kvd = a.dim // a.n_heads, a.n_kv_heads * a.dim // a.n_heads
    layer = 2 * a.dim * a.dim + 2 * a.dim * kvd + 3 * a.dim * a.hidden + 2 * a.dim
    params = a.n_layers * layer + a.dim + a.dim * a.vocab
    return 6 * params + 12 * a.n_layers * a.n_heads * hd * a.seq_len
