"""What the auxiliary character heads cost a train step: each config with and without them, timed interleaved.

    python experiments/benchmarks/aux_heads_cost.py                      # configs/base.py, base_hanzi.py's heads
    python experiments/benchmarks/aux_heads_cost.py --configs configs/causal_14m.py \
        --config.train.loss_kernel=xla --config.model.norm_kernel=xla --config.train.batch_size=8

Each config is built twice as the trainer builds it (`train_throughput.Bench`, which trains the heads a
config names): with HEADS (configs/base_hanzi.py's weights; a config's own non-zero weights kept) and with
every head at 0. The two steps are timed in turns on the same random packed batches, with the matmul
peak probed before each repeat (`conditions.py`); the best repeat of each counts. The heads' FLOPs (a
matmul of d_model into their classes at every position, forward and backward: `training.metrics`) are printed
beside the model's, which do not count them.

Last lines, per config: `heads_flops_share[<config>]` (the heads' FLOPs over the model's) and
`heads_over_none_step_time[<config>]` (step time with the heads over without).
"""
from __future__ import annotations

import argparse
import pathlib
import sys

sys.path[:0] = [str(pathlib.Path(__file__).resolve().parent), str(pathlib.Path(__file__).resolve().parents[1])]
import train_throughput as tt  # noqa: E402
from conditions import Conditions  # noqa: E402
from recipe_study import base_hanzi_heads  # noqa: E402
from babylm_jax.config import cli  # noqa: E402
from babylm_jax.config.training import AUX_HEADS  # noqa: E402
from babylm_jax.training import metrics  # noqa: E402

HEADS = base_hanzi_heads()


def head_flags(config_heads: dict[str, float]) -> tuple[list[str], list[str]]:
    """(--config flags with the heads: the config's own weights where set, else HEADS'; flags with none)."""
    with_heads = {head: config_heads[head] or HEADS.get(head, 0.0) for head in AUX_HEADS}
    return ([f"--config.train.aux_heads.{head}={weight}" for head, weight in with_heads.items()],
            [f"--config.train.aux_heads.{head}=0.0" for head in AUX_HEADS])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--configs", nargs="+", default=["configs/base.py"])
    parser.add_argument("--steps", type=int, default=4, help="timed steps per repeat")
    parser.add_argument("--repeats", type=int, default=7)
    parser.epilog = "Any --config.a.b=v is an override for every config."
    args, overrides = parser.parse_known_args()
    if unknown := [arg for arg in overrides if not arg.startswith("--config.")]:
        parser.error(f"unrecognized arguments: {' '.join(unknown)}")

    conditions = Conditions.start()
    pairs = []
    for path in args.configs:
        own = tt.load_config(path, overrides).train.aux_heads
        with_flags, none_flags = head_flags({head: getattr(own, head) for head in AUX_HEADS})
        heads, none = (tt.Bench(path, config, config.train.seq_len, seed=0) for config in
                       (tt.load_config(path, [*overrides, *flags]) for flags in (with_flags, none_flags)))
        pairs.append((path, heads, none))
    for path, heads, none in pairs:
        for bench, name in ((heads, "heads"), (none, "none")):
            bench.compile().start()
            print(f"{name}: {bench.describe()}\n  {tt.memory_line(bench.memory)}", flush=True)

    for _ in range(args.repeats):
        conditions.probe()
        for _, heads, none in pairs:
            for bench in (heads, none):
                bench.seconds.append(bench.run(args.steps))
    conditions.report()
    for path, heads, none in pairs:
        config = heads.config
        names = [head for head in AUX_HEADS if getattr(config.train.aux_heads, head) > 0]
        share = metrics.aux_heads_flops_per_token(config.model.d_model, config.train.aux_heads) / heads.flops_per_token
        for bench, name in ((heads, "heads"), (none, "none")):
            print(f"{path} {name}: step best {1e3 * min(bench.seconds) / args.steps:,.1f} ms (repeats: "
                  + ", ".join(f"{1e3 * s / args.steps:,.1f}" for s in bench.seconds) + ")")
        print(f"heads_flops_share[{path}]: {share:.3f} ({', '.join(names)})")
        print(f"heads_over_none_step_time[{path}]: {min(heads.seconds) / min(none.seconds):.3f}")


if __name__ == "__main__":
    cli.report_errors("aux_heads_cost", main)
