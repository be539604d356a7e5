"""Exports a checkpoint as a Hugging Face model the official Chinese BabyLM pipeline can score.

    python -m babylm_jax.export --workdir runs/base --output runs/base/hf [--step N] \\
        [--use_ema [yes|no]] [--layer K] [--overwrite]

Writes config.json, model.safetensors (float32), a fast tokenizer (tokenizer.json,
tokenizer_config.json, special_tokens_map.json), the modelling code where no standard
architecture fits (configuration_babylm.py, modeling_babylm.py, loaded with
trust_remote_code=True) and a README.md model card with the run's results.json if present.
`--layer K` sets which hidden state AutoModel returns as last_hidden_state
(0 = embeddings ... N = final output; negative counts from the end).
Needs the export extra: pip install -e ".[export]".
"""
from __future__ import annotations

import argparse
import json
import pathlib
import sys
from typing import Any, Sequence

RESULTS_FILES = ("eval/results.json", "results.json")  # looked up in the workdir, in this order


def parse_args(argv: Sequence[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="python -m babylm_jax.export", description=__doc__.split("\n")[0])
    parser.add_argument("--workdir", required=True, help="training run directory (checkpoints + tokenizer)")
    parser.add_argument("--output", required=True, help="export directory to write")
    parser.add_argument("--step", type=int, default=None, help="checkpoint step (default: latest)")
    parser.add_argument("--use_ema", nargs="?", const="yes", choices=("auto", "yes", "no"), default="auto",
                        help="export EMA params ('auto': when the run kept them; bare flag = yes)")
    parser.add_argument("--layer", type=int, default=None,
                        help="hidden state AutoModel returns as last_hidden_state (default: the last)")
    parser.add_argument("--overwrite", action="store_true", help="replace a non-empty --output directory")
    return parser.parse_args(argv)


def read_results(workdir: pathlib.Path) -> dict[str, Any] | None:
    """The run's results.json (official shape), if there is one."""
    for name in RESULTS_FILES:
        path = workdir / name
        if path.is_file():
            try:
                return json.loads(path.read_text(encoding="utf-8"))
            except json.JSONDecodeError as error:
                raise ValueError(f"{path}: not valid JSON ({error})") from error
    return None


def export(args: argparse.Namespace) -> pathlib.Path:
    """Loads the checkpoint and writes the export; errors name the file or flag at fault."""
    from babylm_jax.hf import writer
    from babylm_jax.training.checkpoint import load_for_eval

    writer.check_output_dir(args.output, args.overwrite)  # fail before the slow load
    workdir = pathlib.Path(args.workdir)
    if not workdir.is_dir():
        raise FileNotFoundError(f"--workdir {workdir} does not exist")
    use_ema = {"auto": None, "yes": True, "no": False}[args.use_ema]
    loaded = load_for_eval(str(workdir), step=args.step, use_ema=use_ema)
    provenance = {
        "step": int(loaded.step),
        "tokens_seen": int(loaded.tokens_seen),
        "words_seen": float(loaded.words_seen),
        "used_ema": bool(loaded.used_ema),
    }
    return writer.write_export(
        args.output,
        loaded.model.config,
        loaded.params,
        loaded.tokenizer,
        provenance=provenance,
        run_config=loaded.config.to_dict(),
        results=read_results(workdir),
        layer=args.layer,
        overwrite=args.overwrite,
    )


def main(argv: Sequence[str] | None = None) -> int:
    args = parse_args(argv)
    try:
        output = export(args)
    except (FileNotFoundError, FileExistsError, ValueError, ImportError) as error:
        print(f"export failed: {error}", file=sys.stderr)
        return 2
    print(f"wrote {output}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
