"""The typed config end to end: the commands build `RunConfig` (or `EvalSettings`) once; all below takes it.

- no function parameter or field below the command modules is a ConfigDict, and only config/ and
  the commands import ml_collections (an ast scan of the package, as test_import_layers.py scans imports);
- `RunConfig.from_config` runs in the commands and where a run's saved config is read back;
- a bad schedule, optimizer or tokenizer kind is one error line naming the key, before any work;
- a run's config round-trips through config.json; a resume takes a key the saved config lacks
  as the schema's default.
"""
from __future__ import annotations

import ast
import copy
import functools
import json
import pathlib

import pytest
from conftest import tiny_config
from fixtures.cli import user_error
from fixtures.run import make_run

from babylm_jax import prepare, train
from babylm_jax.config import cli
from babylm_jax.config.evaluation import EvalSettings
from babylm_jax.config.files import load_config_file
from babylm_jax.config.schema import RunConfig, default_config
from babylm_jax.config.typed import defaults
from babylm_jax.training import run_config
from babylm_jax.training.run_config import CheckpointError

PACKAGE = pathlib.Path(__file__).resolve().parents[1] / "babylm_jax"
# Where RunConfig.from_config may run: the commands, and the one place a saved run's config is read.
BUILDERS = {"train.py", "aot.py", "prepare.py", "training/run_config.py"}


def below_the_commands() -> dict[str, ast.Module]:
    """Path (relative to the package) -> parsed module, for every module outside config/ and the commands."""
    modules = {}
    for path in sorted(PACKAGE.rglob("*.py")):
        relative = path.relative_to(PACKAGE)
        if len(relative.parts) > 1 and relative.parts[0] != "config":
            modules[relative.as_posix()] = ast.parse(path.read_text(), str(path))
    return modules


def config_dict_annotations(tree: ast.Module) -> list[str]:
    """`function(parameter)` and `field` names annotated with a ConfigDict in `tree`."""
    found = []
    for node in ast.walk(tree):
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            arguments = node.args.posonlyargs + node.args.args + node.args.kwonlyargs
            found += [f"{node.name}({a.arg})" for a in arguments if a.annotation is not None
                      and "ConfigDict" in ast.unparse(a.annotation)]
        elif isinstance(node, ast.AnnAssign) and "ConfigDict" in ast.unparse(node.annotation):
            found.append(ast.unparse(node.target))
    return found


def test_the_scan_finds_a_config_dict_parameter_and_field():
    tree = ast.parse("import ml_collections\n\ndef f(a: int, config: ml_collections.ConfigDict): ...\n\n"
                     "class Run:\n    config: 'ConfigDict'\n")
    assert config_dict_annotations(tree) == ["f(config)", "config"]


def test_no_config_dict_parameter_or_field_below_the_commands():
    found = {path: names for path, tree in below_the_commands().items() if (names := config_dict_annotations(tree))}
    assert not found, f"take RunConfig or EvalSettings (config/), or their parts, not a ConfigDict: {found}"


def test_only_config_and_the_commands_import_ml_collections():
    importers = sorted(path for path, tree in below_the_commands().items() for node in ast.walk(tree)
                       if isinstance(node, (ast.Import, ast.ImportFrom)) and "ml_collections" in ast.unparse(node))
    assert importers == []


def test_run_config_is_built_by_the_commands_and_where_a_saved_config_is_read():
    callers = set()
    for path in sorted(PACKAGE.rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Call) and ast.unparse(node.func).endswith("RunConfig.from_config"):
                callers.add(path.relative_to(PACKAGE).as_posix())
    assert callers == BUILDERS


def test_train_and_evaluate_given_a_config_dict_says_what_it_takes(tmp_path):
    """A notebook passing the config file's ConfigDict, as nanodo's train_and_evaluate takes: it was
    AttributeError "'compute_dtype'" from deep in the model's setup."""
    from babylm_jax.training import loop

    with pytest.raises(TypeError, match=r"takes a RunConfig, not a ConfigDict: pass RunConfig.from_config\(config\)"):
        loop.train_and_evaluate(default_config(), str(tmp_path / "run"))
    assert not (tmp_path / "run").exists()


@pytest.mark.parametrize("command, override, message", [
    (train, "--config.train.schedule=linear", "config key train.schedule='linear': must be one of ('cosine', 'wsd')"),
    (train, "--config.train.optimizer=sgd", "config key train.optimizer='sgd': must be one of ('adamw', 'lamb')"),
    (train, "--config.data.tokenizer.kind=wordpiece",
     "config key data.tokenizer.kind: 'wordpiece' is not one of ('unigram', 'bpe', 'char', 'words')"),
    (prepare, "--config.data.tokenizer.kind=wordpiece",
     "config key data.tokenizer.kind: 'wordpiece' is not one of ('unigram', 'bpe', 'char', 'words')"),
])
def test_a_bad_schedule_optimizer_or_tokenizer_is_one_line_naming_the_key(capsys, tmp_path, command, override,
                                                                         message):
    workdir = tmp_path / "run"
    line = user_error(capsys, command, [command.COMMAND.name, "--config=configs/base.py", f"--workdir={workdir}",
                                        override])
    assert line == f"{command.COMMAND.name}: error: {message}"
    assert not workdir.exists()  # refused before the workdir is made


@pytest.mark.parametrize("override, message", [
    ("--config.model.num_heads=0", "config key model.num_heads=0: must be >= 1"),  # was a ZeroDivisionError
    ("--config.model.d_model=-64", "config key model.d_model=-64: must be >= 1"),
    ("--config.model.d_ff=0", "config key model.d_ff=0: must be >= 1"),  # was refused by orbax only after training
    ("--config.model.vocab_size=-5", "config key model.vocab_size=-5: must be >= 1"),
    ("--config.model.dropout=1.5", "config key model.dropout=1.5: must be in [0, 1)"),  # was trained with
])
def test_a_model_size_or_rate_out_of_range_is_one_line_naming_the_key(capsys, tmp_path, override, message):
    workdir = tmp_path / "run"
    line = user_error(capsys, train, ["train", "--config=configs/base.py", f"--workdir={workdir}", override])
    assert line == f"train: error: {message}"
    assert not workdir.exists()


def _numeric_keys(config, prefix=""):
    for key, value in config.items():
        if hasattr(value, "items"):
            yield from _numeric_keys(value, f"{prefix}{key}.")
        elif isinstance(value, (int, float)) and not isinstance(value, bool):
            yield prefix + key


@pytest.mark.parametrize("path, build", [("configs/base.py", RunConfig.from_config),
                                         ("configs/eval.py", EvalSettings.from_config)])
def test_every_numeric_key_at_an_odd_value_is_taken_or_refused_naming_it(path, build):
    """0, -1 or nan in any numeric key: built, or one ValueError naming the key; never another
    error from a rule's own arithmetic (fmri.fmri.tr=0 divided by zero)."""
    base = load_config_file(path)
    for key in _numeric_keys(base):
        for odd in (0, -1, float("nan")):  # a divisor, a negative, a float no rule compares
            config = copy.deepcopy(base)
            *groups, leaf = key.split(".")
            group = functools.reduce(lambda c, name: c[name], groups, config)
            with group.ignore_type():
                group[leaf] = odd
            try:
                build(config)
            except ValueError as error:
                assert str(error).startswith("config key") and leaf in str(error), (key, odd, str(error))
            else:
                assert isinstance(odd, int), (key, odd)  # nan is never a setting


def test_a_float_key_is_finite_a_seed_fits_32_bits_and_a_rule_that_divides_is_checked_after_its_divisor():
    config = load_config_file("configs/eval.py")
    config.fmri.fmri.tr = 0.0
    with pytest.raises(ValueError, match=r"^config key fmri.fmri.tr=0.0: must be > 0$"):
        EvalSettings.from_config(config)
    config = default_config()
    with config.train.ignore_type():
        config.train.learning_rate = float("nan")
    with pytest.raises(ValueError, match=r"^config key train.learning_rate=nan: must be a finite number$"):
        RunConfig.from_config(config)
    config = default_config()
    for seed in (-1, 2**32):  # grain's shuffle refused them after prepare, naming no key; jax's key folds 2**32 to 0
        config.train.seed = seed
        with pytest.raises(ValueError, match=rf"^config key train.seed={seed}: must be in \[0, 2\*\*32\)"):
            RunConfig.from_config(config)


def test_a_run_config_round_trips_through_config_json(tiny_corpus_dir, tmp_path):
    config = RunConfig.from_config(tiny_config(tiny_corpus_dir))
    run_config.write_run_config(str(tmp_path), config)
    assert run_config.load_run_config(str(tmp_path)) == config
    saved = json.loads((tmp_path / "config.json").read_text())
    saved["train"]["optimizer"] = "sgd"
    (tmp_path / "config.json").write_text(json.dumps(saved))
    with pytest.raises(ValueError, match=r"config.json: config key train.optimizer='sgd': must be one of"):
        run_config.load_run_config(str(tmp_path))


def test_default_config_holds_every_key_at_its_field_default_and_base_py_overrides_any_of_them():
    assert RunConfig.from_config(default_config()) == RunConfig()
    keys = sorted(_leaves(default_config().to_dict()))
    assert keys == sorted(_leaves(cli.load_config("configs/base.py").to_dict()))
    run = RunConfig.from_config(cli.load_config("configs/base.py", ["--config.train.num_steps=7",
                                                                    "--config.data.leakage.ngram=9"]))
    assert (run.train.num_steps, run.data.leakage.ngram) == (7, 9)
    # only the optional fields' defaults stand in for a key a saved config lacks
    optional_sections = ("model.", "train.aux_heads.", "data.hanzi_facts.")
    assert set(defaults(RunConfig)) == {k for k in keys if k.startswith(optional_sections)} | {
        "train.deterministic", "train.loss_logits_dtype", "train.loss_kernel", "train.rng_impl"}


def _leaves(values: dict, prefix: str = "") -> list[str]:
    return [leaf for key, value in values.items() for leaf in (
        _leaves(value, f"{prefix}{key}.") if isinstance(value, dict) else [prefix + key])]


def test_a_resume_takes_a_key_the_saved_config_lacks_as_its_schema_default(tmp_path):
    make_run(tmp_path / "run")  # config.json and a checkpoint
    path = tmp_path / "run" / "config.json"
    config = run_config.load_run_config(str(tmp_path / "run"))
    saved = json.loads(path.read_text())
    del saved["model"]["residual_dtype"], saved["train"]["aux_heads"]  # keys a run of an older version lacks
    path.write_text(json.dumps(saved))
    assert run_config.check_config(str(tmp_path / "run"), config) == {}
    saved["model"]["d_model"] = 32  # a key that must match
    path.write_text(json.dumps(saved))
    with pytest.raises(CheckpointError, match="config key model.d_model=32"):
        run_config.check_config(str(tmp_path / "run"), config)
