#!/usr/bin/env python3
"""The PyTorch side of bench/compare_pytorch.sh (bench/README.md, "Against PyTorch"):
transformers' Olmo2ForCausalLM in eager PyTorch (no torch.compile) on the CPU, timed the
way build/bench/olmo2_inference_bench and build/bench/olmo2_train_bench time ours.

  pytorch_reference.py info  [--threads N]
      versions, threads, torch's CPU capability and the oneDNN kernel a bf16 and an fp32
      linear run (ONEDNN_VERBOSE in a child process), and torch's own 2048^3 matmul rates.
  pytorch_reference.py infer --model DIR --precision fp32|bf16 [--threads N]
      [--prefill 128,512] [--reps 3] [--warmup 1] [--decode-prompt 128]
      [--decode-steps 64] [--decode-reps 1] [--attn sdpa|eager]
      prefill: one sequence of T random ids with a fresh cache (use_cache, logits_to_keep=1:
      the last token's logits, as a server's prefill); decode: a prompt's prefill
      (untimed), one untimed step, then N greedy batch-1 steps on the DynamicCache.
  pytorch_reference.py train --config CONFIG.json --precision fp32|bf16 [--threads N]
      [--steps 3] [--seq-len 128] [--batch 8] [--micro-batch B] [--attn sdpa|eager]
      one warm-up and --steps timed training steps on random ids: zero grads, forward and
      backward per micro-batch (CE + z-loss 1e-5 * lse^2, token-weighted mean, fp32 loss
      from the fp32-cast logits), clip_grad_norm_(1.0), AdamW (lr 3e-4, betas 0.9/0.95,
      eps 1e-8, weight decay 0.1 except the embedding). fp32: the model is fp32. bf16,
      written out explicitly (no autocast): fp32 master parameters and AdamW state, a bf16
      copy of every parameter for the forward and backward, its bf16 gradients summed
      into fp32 gradients, the update on the master weights, then the master weights
      copied (rounded to nearest even) into the bf16 copy — what olmo2 train --precision
      bf16 does (docs/architecture.md §3.2).

Each mode prints one JSON line per figure ("bench": "pytorch_reference") on stdout,
progress on stderr. Set OMP_NUM_THREADS/MKL_NUM_THREADS before starting it (the compare
script does); --threads also calls torch.set_num_threads.
"""
import argparse
import json
import os
import subprocess
import sys
import time


def log(*a):
    print(*a, file=sys.stderr, flush=True)


def setup_torch(threads):
    import torch
    if threads:
        torch.set_num_threads(threads)
    try:
        torch.set_num_interop_threads(1)
    except RuntimeError:
        pass  # already set
    return torch


def base(args, torch, **kw):
    import transformers
    d = {"bench": "pytorch_reference", "threads": torch.get_num_threads(), "torch": torch.__version__,
         "transformers": transformers.__version__}
    d.update(kw)
    return d


def onednn_kernel(dtype):
    """The oneDNN primitive (implementation name) a 256x2048 @ 2048x2048 linear in `dtype`
    runs, from ONEDNN_VERBOSE in a child process; None when nothing is printed (the
    product did not go through oneDNN)."""
    code = ("import torch; torch.set_num_threads(1); d=getattr(torch, %r); "
            "x=torch.ones(256, 2048, dtype=d); w=torch.ones(2048, 2048, dtype=d); "
            "torch.nn.functional.linear(x, w)" % dtype)
    env = dict(os.environ, ONEDNN_VERBOSE="1", DNNL_VERBOSE="1")
    try:
        out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True,
                             timeout=300).stdout
    except (OSError, subprocess.SubprocessError):
        return None
    isa, impl = None, None
    for line in out.splitlines():
        f = line.split(",")
        if "isa:" in line and isa is None:
            isa = line.split("isa:", 1)[1].strip()
        if len(f) > 5 and "exec" in f and impl is None:
            # onednn_verbose,[timestamp,]primitive,exec,cpu,<kind>,<impl>,...
            i = f.index("exec")
            impl = f"{f[i + 2]}:{f[i + 3]}" if len(f) > i + 3 else None
    if impl is None and isa is None:
        return None
    return {"isa": isa, "primitive": impl}


def cmd_info(args):
    torch = setup_torch(args.threads)

    def mm_rate(dtype, n=2048, reps=3):
        a = torch.rand(n, n, dtype=dtype)
        b = torch.rand(n, n, dtype=dtype)
        torch.mm(a, b)
        best = 1e300
        for _ in range(reps):
            t0 = time.perf_counter()
            torch.mm(a, b)
            best = min(best, time.perf_counter() - t0)
        return 2.0 * n ** 3 / best * 1e-9

    d = base(args, torch, kind="info", python=sys.version.split()[0],
             cpu_capability=torch.backends.cpu.get_cpu_capability(),
             mkldnn=torch.backends.mkldnn.is_available(), mkl=torch.backends.mkl.is_available(),
             onednn_bf16_linear=onednn_kernel("bfloat16"), onednn_fp32_linear=onednn_kernel("float32"),
             mm_2048_fp32_gflops=mm_rate(torch.float32), mm_2048_bf16_gflops=mm_rate(torch.bfloat16))
    print(json.dumps(d), flush=True)


def load_model(args, torch):
    from transformers import Olmo2ForCausalLM
    dtype = torch.bfloat16 if args.precision == "bf16" else torch.float32
    t0 = time.perf_counter()
    model = Olmo2ForCausalLM.from_pretrained(args.model, dtype=dtype, attn_implementation=args.attn)
    model.eval()
    load_s = time.perf_counter() - t0
    assert next(model.parameters()).dtype == dtype
    return model, load_s


def cmd_infer(args):
    torch = setup_torch(args.threads)
    model, load_s = load_model(args, torch)
    cfg = model.config
    g = torch.Generator().manual_seed(42)
    hi = min(cfg.vocab_size, 50000)

    def ids(n):
        return torch.randint(0, hi, (1, n), generator=g)

    common = dict(model=args.model, precision=args.precision, attn=args.attn, load_seconds=load_s)
    # transformers 5.x names the cache argument `cache` (past_key_values is deprecated), 4.x
    # past_key_values.
    import inspect
    cache_kw = "cache" if "cache" in inspect.signature(model.forward).parameters else "past_key_values"
    with torch.inference_mode():
        for t in args.prefill:
            runs = []
            for r in range(args.warmup + args.reps):
                x = ids(t)
                t0 = time.perf_counter()
                out = model(input_ids=x, use_cache=True, logits_to_keep=1)
                nxt = int(out.logits[0, -1].argmax())
                s = time.perf_counter() - t0
                log(f"prefill T={t} {'warm-up' if r < args.warmup else 'rep'} {r}: {s:.3f} s (next id {nxt})")
                if r >= args.warmup:
                    runs.append(s)
                del out
            mean = sum(runs) / len(runs)
            print(json.dumps(base(args, torch, kind="prefill", tokens=t, seconds=mean, best_seconds=min(runs),
                                  runs=runs, tokens_per_s=t / mean, **common)), flush=True)
        if args.decode_steps > 0:
            runs, steps = [], []
            for _ in range(args.decode_reps):
                out = model(input_ids=ids(args.decode_prompt), use_cache=True, logits_to_keep=1)
                cache = out.past_key_values
                nxt = out.logits[:, -1].argmax(-1, keepdim=True)
                out = model(input_ids=nxt, **{cache_kw: cache}, use_cache=True, logits_to_keep=1)  # untimed
                nxt = out.logits[:, -1].argmax(-1, keepdim=True)
                t0 = time.perf_counter()
                for _ in range(args.decode_steps):
                    ts = time.perf_counter()
                    out = model(input_ids=nxt, **{cache_kw: cache}, use_cache=True, logits_to_keep=1)
                    nxt = out.logits[:, -1].argmax(-1, keepdim=True)
                    steps.append(time.perf_counter() - ts)
                s = time.perf_counter() - t0
                log(f"decode {args.decode_steps} steps after {args.decode_prompt}: {s:.3f} s, "
                    f"{args.decode_steps / s:.2f} tokens/s")
                runs.append(s)
                del cache, out
            mean = sum(runs) / len(runs)
            steps.sort()
            print(json.dumps(base(args, torch, kind="decode", prompt=args.decode_prompt, steps=args.decode_steps,
                                  seconds=mean, runs=runs, tokens_per_s=args.decode_steps / mean,
                                  step_ms_median=1e3 * steps[len(steps) // 2], **common)), flush=True)


def train_step_flops(cfg, sequences, t):
    """B*T * (6*N + 12*L*H*hd*(T+1)/2), N = matmul weights incl. lm_head (as
    bench/train_bench_common.h's train_step_flops)."""
    h, hd = cfg.hidden_size, cfg.hidden_size // cfg.num_attention_heads
    q, kv = cfg.num_attention_heads * hd, cfg.num_key_value_heads * hd
    n = cfg.num_hidden_layers * (2 * h * q + 2 * h * kv + 3 * h * cfg.intermediate_size) + cfg.vocab_size * h
    attn = 12.0 * cfg.num_hidden_layers * cfg.num_attention_heads * hd * (t + 1) / 2.0
    return sequences * t * (6.0 * n + attn), n


def cmd_train(args):
    torch = setup_torch(args.threads)
    import torch.nn.functional as F
    from transformers import Olmo2Config, Olmo2ForCausalLM
    cfg = Olmo2Config.from_json_file(args.config)
    cfg._attn_implementation = args.attn
    torch.manual_seed(1234)
    t0 = time.perf_counter()
    master = Olmo2ForCausalLM(cfg).to(torch.float32)
    master.train()
    names = [n for n, _ in master.named_parameters()]
    params = dict(master.named_parameters())
    bf16 = args.precision == "bf16"
    if bf16:
        # The bf16 compute copy: the same modules, every parameter bf16 (buffers such as
        # RoPE's inv_freq stay fp32, as in a bf16 checkpoint loaded by transformers).
        compute = Olmo2ForCausalLM(cfg)
        compute.train()
        with torch.no_grad():
            for n, p in compute.named_parameters():
                p.data = params[n].detach().to(torch.bfloat16)
        cparams = dict(compute.named_parameters())
    else:
        compute, cparams = master, params
    no_decay = {n for n in names if "embed_tokens" in n}
    groups = [{"params": [params[n] for n in names if n not in no_decay], "weight_decay": 0.1},
              {"params": [params[n] for n in names if n in no_decay], "weight_decay": 0.0}]
    try:
        opt = torch.optim.AdamW(groups, lr=3e-4, betas=(0.9, 0.95), eps=1e-8, fused=True)
        opt_kind = "fused"
    except (RuntimeError, TypeError, ValueError):
        opt = torch.optim.AdamW(groups, lr=3e-4, betas=(0.9, 0.95), eps=1e-8, foreach=True)
        opt_kind = "foreach"
    build_s = time.perf_counter() - t0
    flops, n_matmul = train_step_flops(cfg, args.batch, args.seq_len)
    n_params = sum(p.numel() for p in master.parameters())
    log(f"[torch {args.precision}] {n_params} parameters, AdamW {opt_kind}, attention {args.attn}")

    g = torch.Generator().manual_seed(42)
    micro = args.micro_batch or args.batch
    if args.batch % micro:
        raise SystemExit("--micro-batch must divide --batch")
    count = args.batch * (args.seq_len - 1)
    z_coef = 1e-5
    times, fwd_bwd, opt_s, loss = [], [], [], 0.0
    for step in range(args.steps + 1):  # step 0: warm-up
        x_all = torch.randint(0, cfg.vocab_size, (args.batch, args.seq_len), generator=g)
        y_all = torch.cat([x_all[:, 1:], torch.full((args.batch, 1), -100)], dim=1)
        t0 = time.perf_counter()
        for p in compute.parameters():
            p.grad = None
        if bf16:
            for n in names:
                params[n].grad = None
        ce_total = 0.0
        for m0 in range(0, args.batch, micro):
            x, y = x_all[m0:m0 + micro], y_all[m0:m0 + micro]
            logits = compute(input_ids=x, use_cache=False).logits.float()
            flat, tgt = logits.reshape(-1, logits.shape[-1]), y.reshape(-1)
            mask = tgt != -100
            lse = torch.logsumexp(flat, dim=-1)
            ce = F.cross_entropy(flat, tgt, ignore_index=-100, reduction="sum")
            z = (lse[mask] ** 2).sum()
            ((ce + z_coef * z) / count).backward()
            ce_total += float(ce)
            del logits, flat, lse
            if bf16:  # the bf16 gradients summed into fp32 ones
                for n in names:
                    gr = cparams[n].grad
                    if params[n].grad is None:
                        params[n].grad = gr.float()
                    else:
                        params[n].grad += gr
                    cparams[n].grad = None
        t1 = time.perf_counter()
        norm = torch.nn.utils.clip_grad_norm_(master.parameters(), 1.0)
        opt.step()
        if bf16:
            with torch.no_grad():
                for n in names:
                    cparams[n].copy_(params[n])  # rounds to nearest even
        t2 = time.perf_counter()
        loss = ce_total / count
        log(f"[torch {args.precision}] {'step' if step else 'warm-up'} {step}: {t2 - t0:.3f} s "
            f"(fwd+bwd {t1 - t0:.3f}, opt {t2 - t1:.3f}) loss {loss:.4f} grad norm {float(norm):.4f}")
        if step:
            times.append(t2 - t0)
            fwd_bwd.append(t1 - t0)
            opt_s.append(t2 - t1)
    mean = sum(times) / len(times)
    tokens = args.batch * args.seq_len
    print(json.dumps(base(args, torch, kind="train", config=args.config, precision=args.precision, attn=args.attn,
                          adamw=opt_kind, params=n_params, matmul_params=n_matmul, seq_len=args.seq_len,
                          batch=args.batch, micro_batch=micro, steps=args.steps, tokens_per_step=tokens,
                          model_flops_per_step=flops, step_s=mean, best_step_s=min(times),
                          fwd_bwd_s=sum(fwd_bwd) / len(fwd_bwd), opt_s=sum(opt_s) / len(opt_s),
                          tokens_per_s=tokens / mean, model_gflops=flops / mean * 1e-9, loss=loss,
                          build_s=build_s)), flush=True)


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = p.add_subparsers(dest="cmd", required=True)

    def common(sp):
        sp.add_argument("--threads", type=int, default=0)
        sp.add_argument("--attn", choices=["sdpa", "eager"], default="sdpa")

    def lens(s):
        return [int(v) for v in s.split(",") if v]

    i = sub.add_parser("info")
    common(i)
    f = sub.add_parser("infer")
    common(f)
    f.add_argument("--model", required=True)
    f.add_argument("--precision", choices=["fp32", "bf16"], required=True)
    f.add_argument("--prefill", type=lens, default=[128, 512])
    f.add_argument("--reps", type=int, default=3)
    f.add_argument("--warmup", type=int, default=1)
    f.add_argument("--decode-prompt", type=int, default=128)
    f.add_argument("--decode-steps", type=int, default=64)
    f.add_argument("--decode-reps", type=int, default=1)
    t = sub.add_parser("train")
    common(t)
    t.add_argument("--config", required=True)
    t.add_argument("--precision", choices=["fp32", "bf16"], required=True)
    t.add_argument("--steps", type=int, default=3)
    t.add_argument("--seq-len", type=int, default=128)
    t.add_argument("--batch", type=int, default=8)
    t.add_argument("--micro-batch", type=int, default=0)
    args = p.parse_args()
    {"info": cmd_info, "infer": cmd_infer, "train": cmd_train}[args.cmd](args)


if __name__ == "__main__":
    main()
