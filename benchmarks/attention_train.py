"""A small transformer block trained with ``attention()`` against the same block on SDPA (issue
36's done-when: "a loss curve that matches SDPA's over 200 steps").

  python3 benchmarks/attention_train.py [--steps 200] [--causal top_left|bottom_right|none]
                                        [--kv-heads N] [--out DIR]

One process, bf16 (torch.autocast over fp32 master weights, so every attention call gets bf16
q, k, v), fixed seeds: both runs start from the same weights and see the same batches, a
synthetic copy task (each sequence's second half repeats its first, so the loss falls only as
attention learns to look back).  Each step prints one JSON line with both losses; the last
line is the summary: the max relative gap |ours - sdpa| / sdpa over the steps, the first and
last losses of each, and whether a run failed (one line, the other still reported).
"""
from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
for extra in (ROOT, ROOT / "plugins" / "nvidia_h100", ROOT / "plugins" / "schedules_attention"):
    if str(extra) not in sys.path:  # a checkout on PYTHONPATH without installed plugins
        sys.path.insert(0, str(extra))

LINES: list[dict] = []


def emit(record: dict) -> None:
    LINES.append(record)
    print(json.dumps(record), flush=True)


def model(torch, vocab: int, width: int, heads: int, kv_heads: int, attend):
    """Embedding, one pre-norm block (attention with grouped-query K and V, then an MLP),
    the output head; ``attend(q, k, v)`` is the attention under test ([B, H, S, D])."""
    nn = torch.nn
    d = width // heads

    class Block(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.embed = nn.Embedding(vocab, width)
            self.norm1, self.norm2 = nn.LayerNorm(width), nn.LayerNorm(width)
            self.qkv = nn.Linear(width, (heads + 2 * kv_heads) * d, bias=False)
            self.proj = nn.Linear(width, width, bias=False)
            self.mlp = nn.Sequential(nn.Linear(width, 4 * width), nn.GELU(),
                                     nn.Linear(4 * width, width))
            self.head = nn.Linear(width, vocab, bias=False)

        def forward(self, tokens):
            b, s = tokens.shape
            x = self.embed(tokens)
            q, k, v = self.qkv(self.norm1(x)).split(
                [heads * d, kv_heads * d, kv_heads * d], dim=-1)
            q, k, v = (t.view(b, s, -1, d).transpose(1, 2).contiguous() for t in (q, k, v))
            a = attend(q, k, v).transpose(1, 2).reshape(b, s, width)
            x = x + self.proj(a)
            x = x + self.mlp(self.norm2(x))
            return self.head(x)

    return Block()


def batches(torch, steps: int, batch: int, seq: int, vocab: int, seed: int):
    """Fixed-seed copy-task batches (the second half of each sequence repeats its first)."""
    g = torch.Generator(device="cpu").manual_seed(seed)
    for _ in range(steps):
        half = torch.randint(0, vocab, (batch, seq // 2), generator=g)
        yield torch.cat([half, half], dim=1).cuda()


def train(torch, attend, args) -> list[float]:
    torch.manual_seed(args.seed)
    net = model(torch, args.vocab, args.width, args.heads, args.kv_heads, attend).cuda()
    opt = torch.optim.AdamW(net.parameters(), lr=args.lr)
    losses = []
    for tokens in batches(torch, args.steps, args.batch, args.seq, args.vocab, args.seed):
        with torch.autocast("cuda", dtype=torch.bfloat16):
            logits = net(tokens[:, :-1])
        loss = torch.nn.functional.cross_entropy(logits.float().reshape(-1, args.vocab),
                                                 tokens[:, 1:].reshape(-1))
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()
        losses.append(float(loss))
    return losses


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--steps", type=int, default=200)
    ap.add_argument("--batch", type=int, default=16)
    ap.add_argument("--seq", type=int, default=512)
    ap.add_argument("--vocab", type=int, default=256)
    ap.add_argument("--width", type=int, default=512)
    ap.add_argument("--heads", type=int, default=8)
    ap.add_argument("--kv-heads", type=int, default=4)
    ap.add_argument("--lr", type=float, default=1e-3)
    ap.add_argument("--causal", default="top_left", choices=("none", "top_left", "bottom_right"))
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--out", default="")
    args = ap.parse_args()
    import torch
    import torch.nn.functional as F

    from pipeline_core_schedules_attention import attention

    causal = {"none": False, "top_left": True, "bottom_right": "bottom_right"}[args.causal]
    # the same sequence length for q and k: bottom-right and top-left are one diagonal here
    runs = {"ours": lambda q, k, v: attention(q, k, v, causal=causal),
            "sdpa": lambda q, k, v: F.scaled_dot_product_attention(
                q, k, v, is_causal=bool(causal), enable_gqa=k.shape[1] != q.shape[1])}
    emit({"kind": "device", "name": torch.cuda.get_device_name(), "torch": torch.__version__,
          "config": vars(args)})
    curves: dict[str, list[float]] = {}
    for name, attend in runs.items():
        try:
            curves[name] = train(torch, attend, args)
        except Exception as exc:  # noqa: BLE001 - one line, and the other run goes on
            emit({"kind": "train-error", "name": name,
                  "error": f"{type(exc).__name__}: {str(exc).splitlines()[0][:300]}"})
    ours, sdpa = curves.get("ours"), curves.get("sdpa")
    for step in range(args.steps):
        emit({"kind": "step", "step": step,
              **{n: c[step] for n, c in curves.items() if step < len(c)}})
    summary: dict = {"kind": "train-summary", "steps": args.steps, "runs": sorted(curves)}
    if ours and sdpa:
        gaps = [abs(a - b) / abs(b) for a, b in zip(ours, sdpa)]
        summary.update(max_rel_gap=max(gaps), max_rel_gap_step=gaps.index(max(gaps)),
                       mean_rel_gap=sum(gaps) / len(gaps), first={"ours": ours[0],
                                                                   "sdpa": sdpa[0]},
                       last={"ours": ours[-1], "sdpa": sdpa[-1]},
                       nan=any(x != x for x in ours))
    emit(summary)
    if args.out:
        Path(args.out).mkdir(parents=True, exist_ok=True)
        with open(Path(args.out) / "attention_train.jsonl", "a") as f:
            f.writelines(json.dumps(r) + "\n" for r in LINES)


if __name__ == "__main__":
    main()
