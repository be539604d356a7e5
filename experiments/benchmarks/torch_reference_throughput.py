"""What a user would pretrain with instead: a PyTorch model of a recipe's shape, its tokens/s and MFU.

    python experiments/benchmarks/recipe_shape.py configs/causal_14m.py > causal_14m.json   # in babylm_jax's python
    python experiments/benchmarks/torch_reference_throughput.py --shape causal_14m.json --out OUT/torch_causal_14m.json \
        [--batch_size 128] [--steps 10] [--repeats 2] [--no_compile]

The model is built from a config, no download: transformers' GPT2LMHeadModel for a recipe with a GELU
MLP (learned positions, LayerNorm: causal_14m's widths), LlamaForCausalLM for a SwiGLU one (RoPE,
RMSNorm: hybrid_100m's widths as a causal LM), embeddings tied as ours, dropout 0. It trains as the
transformers documentation and nanoGPT do it: float32 parameters, `torch.autocast` in bfloat16 on a
GPU, SDPA attention (flash on an H100/H200), `torch.compile` of the model, fused AdamW, the loss
that `model(input_ids, labels=...)` computes. Batches are random tokens in plain causal rows of
`seq_len` (no document boundaries: the favourable case for SDPA; ours attend within packed
documents). Timing: two untimed steps (compilation), then `--repeats` runs of `--steps` steps, the
device synchronised at each end; the best counts. MFU = tokens/s x the shape's training FLOPs per
token (recipe_shape.py: our convention, so the two MFUs compare) / 989 TFLOP/s on an H100/H200
(bf16 dense), or `--peak_flops`. Writes one JSON object; prints `torch_tokens_per_s[<name>]` and
`torch_mfu[<name>]` last.
"""
from __future__ import annotations

import argparse
import json
import pathlib
import time
from typing import Any

import torch

H100_H200_BF16_DENSE = 989e12  # the same table figure as babylm_jax.training.peaks


def build_model(shape: dict[str, Any]) -> torch.nn.Module:
    import transformers

    common = dict(vocab_size=shape["vocab_size"], tie_word_embeddings=True)
    if shape["mlp"] == "gelu":
        config = transformers.GPT2Config(
            n_embd=shape["d_model"], n_layer=shape["num_layers"], n_head=shape["num_heads"], n_inner=shape["d_ff"],
            n_positions=shape["max_len"], activation_function="gelu_new", resid_pdrop=0.0, embd_pdrop=0.0,
            attn_pdrop=0.0, **common)
        return transformers.GPT2LMHeadModel._from_config(config, attn_implementation="sdpa")
    config = transformers.LlamaConfig(
        hidden_size=shape["d_model"], num_hidden_layers=shape["num_layers"], num_attention_heads=shape["num_heads"],
        num_key_value_heads=shape["num_heads"], intermediate_size=shape["d_ff"], max_position_embeddings=shape["max_len"],
        attention_dropout=0.0, **common)
    return transformers.LlamaForCausalLM._from_config(config, attn_implementation="sdpa")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--shape", required=True, help="recipe_shape.py's JSON")
    parser.add_argument("--out", required=True)
    parser.add_argument("--batch_size", type=int, default=None, help="default: the recipe's train.batch_size")
    parser.add_argument("--seq_len", type=int, default=None, help="default: the recipe's train.seq_len")
    parser.add_argument("--steps", type=int, default=10)
    parser.add_argument("--repeats", type=int, default=2)
    parser.add_argument("--no_compile", action="store_true", help="eager PyTorch (a quick check of the plumbing)")
    parser.add_argument("--peak_flops", type=float, default=None, help="default: 989e12 on a GPU")
    args = parser.parse_args()
    shape = json.loads(pathlib.Path(args.shape).read_text())
    batch, length = args.batch_size or shape["batch_size"], args.seq_len or shape["seq_len"]
    cuda = torch.cuda.is_available()
    device = torch.device("cuda" if cuda else "cpu")
    torch.manual_seed(0)
    if cuda:
        torch.backends.cuda.matmul.allow_tf32 = True
        torch.backends.cudnn.allow_tf32 = True
    model = build_model(shape).to(device).train()
    params = sum(p.numel() for p in model.parameters())
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-4, betas=(0.9, 0.95), weight_decay=0.1, fused=cuda)
    result: dict[str, Any] = {"name": shape["name"], "class": type(model).__name__, "params": params,
                              "ours_params": shape["params"], "batch": [batch, length], "device": str(
                                  torch.cuda.get_device_name() if cuda else "cpu"), "torch": torch.__version__,
                              "autocast": "bfloat16" if cuda else "none (CPU: float32)", "attention": "sdpa"}
    step_model = model
    if not args.no_compile:
        step_model = torch.compile(model)
    result["compiled"] = not args.no_compile
    generator = torch.Generator().manual_seed(0)
    batches = [torch.randint(0, shape["vocab_size"], (batch, length), generator=generator).to(device) for _ in range(2)]

    def step(tokens: torch.Tensor) -> torch.Tensor:
        with torch.autocast(device.type, dtype=torch.bfloat16, enabled=cuda):
            loss = step_model(input_ids=tokens, labels=tokens).loss
        loss.backward()
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)
        return loss.detach()

    def sync() -> None:
        if cuda:
            torch.cuda.synchronize()

    start = time.perf_counter()
    for i in range(2):
        loss = step(batches[i % 2])
    sync()
    result["warmup_s"] = round(time.perf_counter() - start, 2)  # mostly torch.compile
    seconds = []
    for _ in range(args.repeats):
        sync()
        start = time.perf_counter()
        for i in range(args.steps):
            loss = step(batches[i % 2])
        sync()
        seconds.append(time.perf_counter() - start)
    if not torch.isfinite(loss):
        raise FloatingPointError(f"loss is {float(loss)}")
    best = min(seconds) / args.steps
    tokens_per_s = batch * length / best
    peak = args.peak_flops or (H100_H200_BF16_DENSE if cuda else None)
    result.update(step_ms=round(1e3 * best, 3), step_ms_repeats=[round(1e3 * s / args.steps, 3) for s in seconds],
                  tokens_per_s=round(tokens_per_s, 1), flops_per_token=shape["flops_per_token"], peak_flops=peak,
                  mfu=round(tokens_per_s * shape["flops_per_token"] / peak, 4) if peak else None,
                  max_memory_bytes=torch.cuda.max_memory_allocated() if cuda else None, loss=float(loss))
    pathlib.Path(args.out).write_text(json.dumps(result, indent=1))
    print(f"{shape['name']} in PyTorch ({result['class']}, {params / 1e6:.2f}M params; ours {shape['params'] / 1e6:.2f}M), "
          f"batch {batch} x {length}: step {result['step_ms']:.1f} ms, warm-up {result['warmup_s']:.1f} s")
    print(f"torch_tokens_per_s[{shape['name']}]: {tokens_per_s:,.0f}")
    print(f"torch_mfu[{shape['name']}]: {result['mfu'] if result['mfu'] is not None else 'n/a (no peak on a CPU)'}")


if __name__ == "__main__":
    main()
