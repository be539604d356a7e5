"""The train step of this tree against an older revision's, compiled and timed in one process.

    python experiments/benchmarks/train_step_vs_revision.py --rev 2d1e54e [--configs configs/base.py ...]
        [--repeats 7] [--config.train.batch_size=32]

A speed-up measured as two runs minutes apart on a shared machine says more about the load
than about the change. Here the revision's `model/layers.py`, `model/objectives.py` and
`training/loop/trainer.py` (read with `git show REV:...`) are loaded beside this tree's, each
config's step is compiled once with each (as `train_throughput.py` builds it), and the two
are timed interleaved, with the matmul peak probed before each repeat (`conditions.py`);
the best repeat of each counts. Each side reads its own version of the config file (the
revision's `configs/` from `git archive`; a config the revision lacks is this tree's), so a
change of a recipe's speed settings counts too; `--same_config` gives both this tree's.
The revision's trainer must still import against this tree (true back to the issue-17
work; older revisions may need other modules swapped too).
Last lines: `tree_over_rev[<family>]: X` (tokens/s over tokens/s), one per config.
"""
from __future__ import annotations

import argparse
import importlib.util
import pathlib
import subprocess
import sys
import tempfile
import types

import train_throughput as tt
from conditions import Conditions

from babylm_jax.model import transformer

ROOT = pathlib.Path(__file__).resolve().parents[2]
SWAPPED = ("babylm_jax/model/layers.py", "babylm_jax/model/objectives.py", "babylm_jax/training/loop/trainer.py")


def revision_modules(rev: str, directory: str) -> dict[str, types.ModuleType]:
    """The revision's versions of SWAPPED as modules named rev_<stem>, wired to each other."""
    modules = {}
    for path in SWAPPED:
        stem = pathlib.Path(path).stem
        source = subprocess.run(["git", "-C", str(ROOT), "show", f"{rev}:{path}"], check=True,
                                capture_output=True, text=True).stdout
        file = pathlib.Path(directory) / f"rev_{stem}.py"
        file.write_text(source, encoding="utf-8")
        spec = importlib.util.spec_from_file_location(f"rev_{stem}", file)
        module = importlib.util.module_from_spec(spec)
        sys.modules[spec.name] = module  # dataclasses look their module up
        spec.loader.exec_module(module)
        modules[stem] = module
    modules["trainer"].objectives = modules["objectives"]
    return modules


def revision_configs(rev: str, directory: str) -> pathlib.Path:
    """The revision's configs/ directory, extracted under `directory`."""
    archive = subprocess.run(["git", "-C", str(ROOT), "archive", rev, "configs"], check=True, capture_output=True).stdout
    subprocess.run(["tar", "-x", "-C", directory], input=archive, check=True)
    return pathlib.Path(directory) / "configs"


def config_path(path: str, configs: pathlib.Path | None) -> str:
    """`path` in the revision's configs/ when it has that file, else `path` itself."""
    if configs is None:
        return path
    candidate = configs / pathlib.Path(path).name
    return str(candidate) if pathlib.Path(path).parent.name == "configs" and candidate.is_file() else path


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--rev", required=True, help="git revision to compare against")
    parser.add_argument("--configs", nargs="+", default=list(tt.CPU_CONFIGS))
    parser.add_argument("--repeats", type=int, default=7)
    parser.add_argument("--steps", type=int, default=1, help="timed steps per repeat")
    parser.add_argument("--same_config", action="store_true",
                        help="give the revision this tree's config files (default: the revision's own)")
    args, overrides = parser.parse_known_args()
    unknown = [arg for arg in overrides if not arg.startswith("--config.")]
    if unknown:
        parser.error(f"unrecognized arguments: {' '.join(unknown)}")

    conditions = Conditions.start()
    with tempfile.TemporaryDirectory(prefix="train_step_vs_revision_") as directory:
        rev = revision_modules(args.rev, directory)
        rev_configs = None if args.same_config else revision_configs(args.rev, directory)
        tree = {"layers": transformer.layers, "trainer": tt.trainer}
        pairs = []
        for path in args.configs:
            benches = {}
            for label, modules, configs in (("rev", rev, rev_configs), ("tree", tree, None)):
                transformer.layers, tt.trainer = modules["layers"], modules["trainer"]
                config = tt.load_config(config_path(path, configs), overrides)
                benches[label] = tt.Bench(path, config, config.train.seq_len, seed=0)  # compiles
                benches[label].start()
            transformer.layers, tt.trainer = tree["layers"], tree["trainer"]
            pairs.append((path, benches))
            print(f"{args.rev}: " + benches["rev"].describe())
            print("this tree: " + benches["tree"].describe())

    for _ in range(args.repeats):
        conditions.probe()
        for _, benches in pairs:
            for bench in benches.values():
                bench.seconds.append(bench.run(args.steps))
    conditions.report()
    labels = tt.labels_for([benches["tree"] for _, benches in pairs])
    ratios = []
    for label, (path, benches) in zip(labels, pairs):
        rates = {k: args.steps * b.tokens_per_step / min(b.seconds) for k, b in benches.items()}
        print(f"{label} ({path}): tokens/s {args.rev} {rates['rev']:,.0f}, this tree {rates['tree']:,.0f} "
              f"(best of {args.repeats})")
        ratios.append((label, rates["tree"] / rates["rev"]))
    for label, ratio in ratios:
        print(f"tree_over_rev[{label}]: {ratio:.2f}")


if __name__ == "__main__":
    main()
