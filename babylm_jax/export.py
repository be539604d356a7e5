"""Exports a checkpoint as a Hugging Face model the official Chinese BabyLM pipeline can score.

    python -m babylm_jax.export --workdir runs/base --output runs/base/hf [--step N] \\
        [--use_ema=auto|yes|no] [--layer K] [--overwrite]

Writes config.json, model.safetensors (float32), a fast tokenizer (tokenizer.json,
tokenizer_config.json, special_tokens_map.json), the modelling code where no standard
architecture fits (configuration_babylm.py, modeling_babylm.py, loaded with
trust_remote_code=True) and a README.md model card with the run's results.json if present.
`--layer K` sets which hidden state AutoModel returns as last_hidden_state
(0 = embeddings ... N = final output; negative counts from the end).
Needs the export extra: pip install -e ".[export]". A user error is one line and exit
status 2 (`babylm_jax.config.cli`).
"""
from __future__ import annotations

import pathlib
from typing import Any, Sequence

from absl import flags

from babylm_jax.config import cli
from babylm_jax.core import outputs, remote, rundir
from babylm_jax.core.jsonl import read_json

COMMAND = cli.Command("export", __doc__)
_CHECKPOINT = cli.CheckpointFlags.define(COMMAND, "Export")
_OUTPUT = flags.DEFINE_string("output", None, "Export directory to write.", flag_values=COMMAND.flags)
_LAYER = flags.DEFINE_integer("layer", None, "Hidden state AutoModel returns as last_hidden_state "
                              "(default: the last).", flag_values=COMMAND.flags)
_OVERWRITE = flags.DEFINE_boolean("overwrite", False, "Replace an earlier export in --output (only what it wrote).",
                                  flag_values=COMMAND.flags)
flags.mark_flags_as_required(["output"], flag_values=COMMAND.flags)


def read_results(workdir: pathlib.Path) -> dict[str, Any] | None:
    """The run's results.json (official shape), if there is one (`rundir.find_results`)."""
    path = rundir.find_results(workdir)
    return None if path is None else read_json(path, "rerun evaluate to rewrite it, or move it aside")


def export(run: str | pathlib.Path, output: pathlib.Path, step: int | None = None, use_ema: bool | None = None,
           layer: int | None = None, overwrite: bool = False) -> pathlib.Path:
    """Loads the checkpoint of the run in `run` (a local folder or a remote workdir's URL) and
    writes the export; errors name the file or flag at fault."""
    from babylm_jax.hf import writer

    if not remote.is_remote(run) and not pathlib.Path(run).exists():
        raise FileNotFoundError(f"--workdir {run} does not exist")
    place = remote.readable_run(run, rundir.READ_BY_EVALUATION)  # a file there is named as one
    workdir = pathlib.Path(place.local)
    output = outputs.check_output_path(output, "--output", run=workdir, inside_run="hf")
    outputs.check_writable(output.parent, "--output")  # the export is built beside it, then renamed
    with outputs.output_lock(output, "export"):
        outputs.remove_temporaries(output.parent, of=output.name)  # of an export killed mid-write
        writer.check_output_dir(output, overwrite)  # fail before the slow load
        return _export(workdir, output, step, use_ema, layer, overwrite, place.checkpoints_at)


def _export(workdir: pathlib.Path, output: pathlib.Path, step: int | None, use_ema: bool | None,
            layer: int | None, overwrite: bool, checkpoints_at: str) -> pathlib.Path:
    import jax

    from babylm_jax.hf import writer
    from babylm_jax.training.checkpoints import load_for_eval

    loaded = load_for_eval(str(workdir), step=step, use_ema=use_ema, checkpoints_at=checkpoints_at)
    provenance = {
        "step": int(loaded.step),
        "tokens_seen": int(loaded.tokens_seen),
        "words_seen": float(loaded.words_seen),
        "used_ema": bool(loaded.used_ema),
    }
    needed = lambda: f"about {sum(leaf.nbytes for leaf in jax.tree.leaves(loaded.params)) / 1e6:,.1f} MB (the weights)"
    fix = "free some space (or give --output on another disk) and run the same command; nothing half-written is kept"
    with outputs.full_disk_errors(output.parent, "the export", needed, fix):
        return writer.write_export(output, loaded.model.config, loaded.params, loaded.tokenizer, provenance=provenance,
                                   run_config=loaded.config.to_dict(), results=read_results(workdir), layer=layer,
                                   overwrite=overwrite)


def main(argv: Sequence[str]) -> pathlib.Path:
    """Parses `argv` (program name first) and writes the export; returns its directory."""
    COMMAND.parse(argv)
    output = export(_CHECKPOINT.workdir.value, pathlib.Path(rundir.local_path(_OUTPUT.value, "--output")),
                    _CHECKPOINT.step.value, _CHECKPOINT.ema(), _LAYER.value, _OVERWRITE.value)
    print(f"wrote {output}")
    return output


if __name__ == "__main__":
    COMMAND.run(main)
