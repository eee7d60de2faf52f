"""Bytes autograd keeps for the backward pass per token and layer of drmas's update
forward (host/src/model/decoder.rs, op for op: RMSNorm in float32, q/k/v, RoPE, SDPA
with a boolean mask and grouped kv heads, o, the SiLU MLP), counted by torch's own hooks
on saved tensors, beside the count `pool::placement::saved_per_token_layer` makes.

    .venv/bin/python scripts/py/saved_activations.py [LAYERS]    # SmolLM2-135M's dims

Random weights: what is saved depends on the shapes and the ops, not on the values. The
parameters themselves (saved by the linears) are left out; the RoPE tables and the mask,
shared by every layer, are in.
"""
import sys

import torch

H, I, HEADS, KV, D = 576, 1536, 9, 3, 64  # SmolLM2-135M-Instruct
LAYERS = int(sys.argv[1]) if len(sys.argv) > 1 else 2


def counted(e=4):
    norm = 4 * H + 4 + 2 * H * e
    attention = (2 * HEADS * D + 2 * KV * D) * e + 4 * HEADS
    return 2 * norm + attention + 4 * I * e


def rms(w, x):
    # As drmas: normalize in float32, scale in the weights' dtype.
    x32 = x.to(torch.float32)
    var = x32.pow(2).mean(-1, keepdim=True)
    return w * (x32 * (var + 1e-5).rsqrt()).to(w.dtype)


def rope(x, cos, sin):
    half = x.shape[3] // 2
    x1, x2 = x.narrow(3, 0, half), x.narrow(3, half, half)
    return x * cos + torch.cat([x2.neg(), x1], 3) * sin


def main():
    for dtype in (torch.float32, torch.bfloat16):
        measure(dtype)


def measure(dtype):
    torch.manual_seed(0)
    e = torch.tensor([], dtype=dtype).element_size()

    def lin(o, i):
        return (torch.randn(o, i) * 0.02).to(dtype).requires_grad_()

    def ones():
        return torch.ones(H, dtype=dtype, requires_grad=True)

    layers = [
        dict(n1=ones(), q=lin(HEADS * D, H), k=lin(KV * D, H), v=lin(KV * D, H),
             o=lin(H, HEADS * D), n2=ones(), g=lin(I, H), u=lin(I, H), d=lin(H, I))
        for _ in range(LAYERS)
    ]
    params = sum(t.numel() * e for p in layers for t in p.values())
    print(f"{dtype}: counted (saved_per_token_layer): {counted(e)} B per token and layer")
    for b, t in [(1, 512), (8, 128), (16, 64)]:
        saved = {}

        def pack(x):
            s = x.untyped_storage()
            saved[s.data_ptr()] = s.nbytes()
            return x

        x = torch.randn(b, t, H, dtype=dtype, requires_grad=True)
        cos = torch.randn(b, 1, t, D, dtype=dtype)
        sin = torch.randn(b, 1, t, D, dtype=dtype)
        mask = torch.ones(t, t, dtype=torch.bool).tril().view(1, 1, t, t).expand(b, 1, t, t)
        with torch.autograd.graph.saved_tensors_hooks(pack, lambda x: x):
            for p in layers:
                a = rms(p["n1"], x)
                q = (a @ p["q"].t()).view(b, t, HEADS, D)
                k = (a @ p["k"].t()).view(b, t, KV, D)
                v = (a @ p["v"].t()).view(b, t, KV, D).transpose(1, 2)
                q, k = rope(q.transpose(1, 2), cos, sin), rope(k.transpose(1, 2), cos, sin)
                out = torch.nn.functional.scaled_dot_product_attention(
                    q, k, v, attn_mask=mask, scale=D**-0.5, enable_gqa=True)
                x = x + out.transpose(1, 2).reshape(b, t, HEADS * D) @ p["o"].t()
                c = rms(p["n2"], x)
                x = x + (torch.nn.functional.silu(c @ p["g"].t()) * (c @ p["u"].t())) @ p["d"].t()
        total = sum(saved.values()) - params
        print(f"  {b} rows × {t} tokens: torch saved {total / (b * t * LAYERS):.0f} B per token and layer")


if __name__ == "__main__":
    main()
