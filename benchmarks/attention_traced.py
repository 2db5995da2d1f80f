"""``attention()`` traced: torch.compile(fullgraph=True) as a process's first call, forward and
backward, padded head dims and v's own head dim (fixed-length and packed) under torch.compile
and in a CUDA graph, each against eager, bit for bit (sessions 26 and 27; docs/guide/
attention.md, "Head dims").

  PYTHONPATH=$PWD:$PWD/plugins/nvidia_h100:$PWD/plugins/schedules_attention \\
  PIPELINE_CORE_CACHE_DIR=$PWD/benchmarks/_kitcache python3 benchmarks/attention_traced.py

Why: two faults this found.  A process whose first call was inside torch.compile(fullgraph=True)
stopped at the ops' registration (dynamo cannot trace it): the call modules now register where
torch is imported already (kit HostCall.register_if_torch_imported).  And the backward of a
compiled call failed at the kit's checks-once description (AOTAutograd traces the op's backward
under its fake mode, with is_compiling() False, and a fake tensor has no address): the checks
are the op's own there.  One JSON line per case; the last says whether all held.
"""
import json

import torch  # first: the call modules then register their ops as they are imported

from pipeline_core_schedules_attention.call import attention  # noqa: E402


def first_call_compiled() -> list[dict]:
    """torch.compile(fullgraph=True) as the first call at D 128 and a padded 80, with grads."""
    out = []
    for d in (128, 80):
        q, k, v = (torch.randn(2, h, s, d, device="cuda", dtype=torch.bfloat16,
                               requires_grad=True) for h, s in ((4, 300), (2, 257), (2, 257)))
        comp = torch.compile(lambda q, k, v: attention(q, k, v, causal=True), fullgraph=True)
        o = comp(q, k, v)
        g = torch.autograd.grad(o.float().sum(), (q, k, v))
        o2 = attention(q, k, v, causal=True)
        g2 = torch.autograd.grad(o2.float().sum(), (q, k, v))
        out.append({"kind": "first-call-compiled", "D": d, "forward_equal": bool(torch.equal(o, o2)),
                    "grad_equal": all(bool(torch.equal(a, b)) for a, b in zip(g, g2))})
    return out


def traced(call, tensors) -> dict:
    """``call(*tensors)`` compiled (fullgraph) against eager, and captured in a CUDA graph (warmed
    on a side stream first) replayed on new values of ``tensors`` against eager on them."""
    eager = call(*tensors)
    compiled = torch.compile(call, fullgraph=True)(*tensors)
    s = torch.cuda.Stream()
    s.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(s):
        call(*tensors)
    torch.cuda.current_stream().wait_stream(s)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        replayed = call(*tensors)
    for t in tensors:
        t.copy_(torch.randn_like(t))
    graph.replay()
    again = call(*tensors)
    torch.cuda.synchronize()
    return {"compile_equal": bool(torch.equal(compiled, eager)),
            "graph_equal": bool(torch.equal(replayed, again)), "shape": list(compiled.shape)}


def padded_traced() -> list[dict]:
    """Padded head dims and v's own: torch.compile and a CUDA graph, against eager."""
    out = []
    for dq, dv, causal in ((80, 80, True), (192, 128, False), (64, 128, "bottom_right"),
                           (192, 128, "bottom_right")):
        q = torch.randn(2, 4, 300, dq, device="cuda", dtype=torch.bfloat16)
        k = torch.randn(2, 2, 257, dq, device="cuda", dtype=torch.bfloat16)
        v = torch.randn(2, 2, 257, dv, device="cuda", dtype=torch.bfloat16)
        out.append({"kind": "padded-traced", "Dqk": dq, "Dv": dv, "causal": causal,
                    **traced(lambda q, k, v: attention(q, k, v, causal=causal), (q, k, v))})
    return out


def varlen_traced() -> list[dict]:
    """The packed call with v's own head dim (192 / 128, its own kernel since session 27) and a
    padded one (80): torch.compile and a CUDA graph replayed on new inputs, against eager."""
    from pipeline_core_schedules_attention.varlen_call import attention_varlen

    out = []
    lengths = [300, 1, 0, 257, 1000]
    cu = torch.tensor([0, *torch.tensor(lengths).cumsum(0).tolist()], dtype=torch.int32,
                      device="cuda")
    n, longest = sum(lengths), max(lengths)
    for dq, dv, causal in ((192, 128, False), (192, 128, "bottom_right"), (80, 80, True)):
        q = torch.randn(n, 4, dq, device="cuda", dtype=torch.bfloat16)
        k = torch.randn(n, 2, dq, device="cuda", dtype=torch.bfloat16)
        v = torch.randn(n, 2, dv, device="cuda", dtype=torch.bfloat16)
        out.append({"kind": "varlen-traced", "Dqk": dq, "Dv": dv, "causal": causal,
                    **traced(lambda q, k, v: attention_varlen(q, k, v, cu, cu, longest, longest,
                                                              causal=causal), (q, k, v))})
    return out


def main() -> None:
    torch.manual_seed(26)
    records = first_call_compiled() + padded_traced() + varlen_traced()
    for r in records:
        print(json.dumps(r), flush=True)
    ok = all(all(v for key, v in r.items() if key.endswith("_equal")) for r in records)
    print(json.dumps({"kind": "summary", "ok": ok}))


if __name__ == "__main__":
    main()
