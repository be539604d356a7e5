"""The train step of this tree against an older revision's, compiled and timed in one process.

    python experiments/benchmarks/train_step_vs_revision.py --rev 2d1e54e [--configs configs/base.py ...]
        [--repeats 7] [--config.train.batch_size=32]

A speed-up measured as two runs minutes apart on a shared machine says more about the load
than about the change. Here the revision's `model/layers.py`, `model/objectives.py` and its
train step (`training/step.py`; `training/train_step.py` or `training/trainer.py` before; read with
`git show REV:...`) are loaded beside this tree's, each
config's step is compiled once with each (as `train_throughput.py` builds it), and the two
are timed interleaved, with the matmul peak probed before each repeat (`conditions.py`);
the best repeat of each counts. Each side reads its own version of the config file (the
revision's `configs/` from `git archive`; a config the revision lacks is this tree's), so a
change of a recipe's speed settings counts too; `--same_config` gives both this tree's.
The revision's step module must still import against this tree (true back to the issue-17
work; older revisions may need other modules swapped too): the modules issue 34 moved are
found under their old names while it loads (MOVED).
Last lines: `tree_over_rev[<family>]: X` (tokens/s over tokens/s), one per config.
"""
from __future__ import annotations

import argparse
import contextlib
import importlib
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
# name -> the file at the revision, the first of these it has
SWAPPED = {"layers": ("babylm_jax/model/layers.py",), "objectives": ("babylm_jax/model/objectives.py",),
           "train_step": ("babylm_jax/training/step.py", "babylm_jax/training/train_step.py",
                          "babylm_jax/training/step/train_step.py", "babylm_jax/training/trainer.py")}
# Modules issue 34 moved (name at older revisions -> name in this tree) that a revision's swapped files import.
MOVED = {
    "babylm_jax.config.train": "babylm_jax.config.training",
    **{f"babylm_jax.core.{m}": f"babylm_jax.core.{m}" for m in ("atomic", "outputs", "remote", "rundir", "writers")},
    **{f"babylm_jax.core.{m}": f"babylm_jax.core.{m}" for m in ("jsonl", "text")},
    **{f"babylm_jax.core.{m}": f"babylm_jax.core.{m}" for m in ("attention_backends", "families", "vocab")},
    **{f"babylm_jax.core.{m}": f"babylm_jax.core.{m}" for m in ("platforms", "progress", "workers")},
    "babylm_jax.training.curricula": "babylm_jax.training.step",
    "babylm_jax.training.optim": "babylm_jax.training.optimizer",
    "babylm_jax.training.checkpoint": "babylm_jax.training.checkpoints",
    "babylm_jax.training.milestones": "babylm_jax.training.checkpoints",
    "babylm_jax.training.task_curves": "babylm_jax.training.in_run_eval",
}
# Names issue 54 moved out of a module (module -> its old names -> their module now) that a revision's files import.
MOVED_NAMES = {"babylm_jax.training.state": dict.fromkeys(
    ("OPTAX_OPTIMIZERS", "effective_warmup", "make_schedule", "make_train_optimizer"), "babylm_jax.training.optimizer")}


@contextlib.contextmanager
def old_module_names():
    """MOVED's old names in sys.modules, pointing at this tree's modules, and MOVED_NAMES's names in their
    old modules, while a revision's files load."""
    added = [old for old in MOVED if old not in sys.modules]
    for old in added:
        sys.modules[old] = importlib.import_module(MOVED[old])
    names = [(importlib.import_module(module), name, importlib.import_module(now))
             for module, moved in MOVED_NAMES.items() for name, now in moved.items()]
    names = [(module, name, now) for module, name, now in names if not hasattr(module, name)]
    for module, name, now in names:
        setattr(module, name, getattr(now, name))
    try:
        yield
    finally:
        for old in added:
            del sys.modules[old]
        for module, name, _ in names:
            delattr(module, name)


def revision_source(rev: str, paths: tuple[str, ...]) -> str:
    """The text of the first of `paths` that revision `rev` has."""
    for path in paths:
        shown = subprocess.run(["git", "-C", str(ROOT), "show", f"{rev}:{path}"], capture_output=True, text=True)
        if shown.returncode == 0:
            return shown.stdout
    raise FileNotFoundError(f"{rev} has none of {', '.join(paths)}")


def revision_modules(rev: str, directory: str) -> dict[str, types.ModuleType]:
    """The revision's versions of SWAPPED as modules named rev_<name>, wired to each other."""
    modules = {}
    for name, paths in SWAPPED.items():
        file = pathlib.Path(directory) / f"rev_{name}.py"
        file.write_text(revision_source(rev, paths), encoding="utf-8")
        spec = importlib.util.spec_from_file_location(f"rev_{name}", file)
        module = importlib.util.module_from_spec(spec)
        sys.modules[spec.name] = module  # dataclasses look their module up
        with old_module_names():
            spec.loader.exec_module(module)
        modules[name] = module
    modules["train_step"].objectives = modules["objectives"]
    if hasattr(modules["train_step"], "LossSettings"):  # the revision's settings (built by LossSettings.from_run_config in older revisions)
        modules["train_step"].LossSettings = modules["objectives"].LossSettings
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
        tree = {"layers": transformer.layers, "train_step": tt.step_lib}
        pairs = []
        for path in args.configs:
            benches = {}
            for label, modules, configs in (("rev", rev, rev_configs), ("tree", tree, None)):
                transformer.layers, tt.step_lib = modules["layers"], modules["train_step"]
                config = tt.load_config(config_path(path, configs), overrides)
                benches[label] = tt.Bench(path, config, config.train.seq_len, seed=0).compile()
                benches[label].start()
            transformer.layers, tt.step_lib = tree["layers"], tree["train_step"]
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
