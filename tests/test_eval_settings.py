"""The evaluation config (configs/eval.py): typed settings per track, per-task fine-tuning
overrides, and errors that name the config key, in the same --config.x=v grammar as train."""
import dataclasses

import pytest

from babylm_jax import evaluate
from babylm_jax.config import cli
from babylm_jax.config.files import load_config_file
from babylm_jax.tasks.formats import COGBENCH_ROIS
from babylm_jax.tasks.registry import task_names
from babylm_jax.config.evaluation import DEFAULT_CONFIG, EvalSettings, default_settings
from babylm_jax.config.model import ModelConfig
from fixtures.cli import user_error
from fixtures.run import make_run


def _config():
    return load_config_file(DEFAULT_CONFIG)


def test_defaults_are_the_official_protocol():
    settings = default_settings()
    assert set(settings.finetune) == set(task_names("finetune"))
    epochs = {task: options.epochs for task, options in settings.finetune.items()}
    assert epochs == {**{task: 10 for task in task_names("finetune")}, "cluewsc2020": 30}
    afqmc = settings.finetune["afqmc"]
    assert (afqmc.learning_rate, afqmc.batch_size, afqmc.max_len, afqmc.warmup_ratio, afqmc.weight_decay,
            afqmc.seed) == (3e-5, 32, 128, 0.06, 0.01, 42)
    assert settings.fmri.rois == COGBENCH_ROIS and settings.fmri.layers is None and settings.fmri_layer == -1
    assert (settings.scoring.batch_size, settings.scoring.row_len, settings.scoring.within_word_l2r) == (256, 32, False)


def test_a_task_key_wins_over_the_global_key_only_for_that_task():
    config = _config()
    config.finetune.learning_rate = 1e-4
    config.finetune.epochs = 3
    config.finetune.tasks.c3.learning_rate = 2e-5
    settings = EvalSettings.from_config(config, limit=7)
    assert settings.finetune["c3"].learning_rate == 2e-5 and settings.finetune["afqmc"].learning_rate == 1e-4
    assert settings.finetune["afqmc"].epochs == 3 and settings.finetune["cluewsc2020"].epochs == 30
    assert {options.limit for options in settings.finetune.values()} == {7} and settings.limit == 7


@pytest.mark.parametrize("key,value,message", [
    ("finetune.tasks.c3.epochs", 0, "config key finetune.tasks.c3.epochs=0: must be >= 1"),
    ("finetune.learning_rate", -1.0, "config key finetune.learning_rate=-1.0: must be > 0"),
    ("finetune.warmup_ratio", 1.5, "config key finetune.warmup_ratio=1.5: must be in [0, 1)"),
    ("scoring.batch_size", 0, "config key scoring.batch_size=0: must be >= 1"),
    ("fmri.fmri.context", "page", "config key fmri.fmri.context='page': must be 'sentence' or 'story'"),
    ("fmri.fmri.oversampling", 70, "config key fmri.fmri.oversampling=70: oversampling / tr must equal grid_hz"),
    ("fmri.word_fmri.layers", "0,x", "config key fmri.word_fmri.layers='0,x': use 'all' or comma-separated"),
    ("fmri.fmri.rois", ("Language", "Smell"), "config key fmri.fmri.rois=('Language', 'Smell'): must name regions"),
])
def test_bad_values_are_named_by_key(key, value, message):
    config = _config()
    *parents, leaf = key.split(".")
    section = config
    for part in parents:
        section = section[part]
    section[leaf] = value
    with pytest.raises(ValueError) as error:
        EvalSettings.from_config(config)
    assert message in str(error.value)


def test_a_hand_written_config_with_an_unknown_or_missing_key_is_named():
    config = _config().to_dict()
    config["fmri"]["fmri"]["hrf"] = 1
    with pytest.raises(ValueError, match=r"unknown config key\(s\) fmri.fmri.hrf"):
        EvalSettings.from_config(config)
    config = _config().to_dict()
    del config["finetune"]["seed"]
    with pytest.raises(ValueError, match=r"missing config key\(s\) finetune.seed"):
        EvalSettings.from_config(config)
    config = _config().to_dict()
    config["finetune"]["tasks"]["cmrc"] = {}
    with pytest.raises(ValueError, match="config key finetune.tasks.cmrc: not a fine-tuning task"):
        EvalSettings.from_config(config)


def test_settings_the_model_cannot_run_name_the_key_that_fixes_them():
    settings = default_settings()
    model = ModelConfig(family="causal", vocab_size=300, d_model=16, num_layers=2, num_heads=2, d_ff=32, max_len=64)
    settings.check_model(model, ["zhoblimp"])  # nothing fine-tuned: max_len 128 does not matter
    with pytest.raises(ValueError, match=r"finetune.max_len \(or finetune.tasks.afqmc.max_len\)=128 is longer"):
        settings.check_model(model, ["zhoblimp", "afqmc"])
    with pytest.raises(ValueError, match="config key fmri.layer: layer 3 is out of range for the model's 3 hidden"):
        dataclasses.replace(settings, fmri_layer=3).check_model(model, ["fmri"])


def test_command_line_overrides_reach_the_settings_in_the_train_grammar(capsys):
    config = cli.load_config(str(DEFAULT_CONFIG), ["--config.finetune.tasks.tnews.batch_size=8",
                                                   "--config.fmri.fmri.rois=('Language',)",
                                                   "--config.scoring.within_word_l2r=True"])
    settings = EvalSettings.from_config(config)
    assert settings.finetune["tnews"].batch_size == 8 and settings.finetune["ocnli"].batch_size == 32
    assert settings.fmri.rois == ("Language",) and settings.scoring.within_word_l2r
    with pytest.raises(cli.UserError, match="did you mean finetune.tasks.tnews.batch_size"):
        cli.load_config(str(DEFAULT_CONFIG), ["--config.finetune.tasks.tnews.batchsize=8"])


def test_evaluate_refuses_bad_input_before_loading_the_model(capsys, tmp_path):
    run = tmp_path / "run"
    make_run(run)
    data = tmp_path / "data"
    (data / "afqmc").mkdir(parents=True)
    for split in ("train", "dev"):
        (data / "afqmc" / f"{split}.json").write_text('{"sentence1": "甲", "sentence2": "乙", "label": "1"}\n')
    argv = ["evaluate", f"--workdir={run}", f"--data_dir={data}", "--tasks=afqmc"]
    line = user_error(capsys, evaluate, [*argv, "--config.finetune.epoch=1"])
    assert "no config key finetune.epoch; did you mean finetune.epochs?" in line
    assert "config key finetune.tasks.afqmc.batch_size=0" in user_error(
        capsys, evaluate, [*argv, "--config.finetune.tasks.afqmc.batch_size=0"])
    assert "--output" in user_error(capsys, evaluate, [*argv, f"--output={tmp_path}"])
    line = user_error(capsys, evaluate, argv)  # the run's model has max_len 32
    assert "finetune.max_len (or finetune.tasks.afqmc.max_len)=128 is longer than the model's max_len=32" in line
    (run / "config.json").write_text("{")
    assert f"{run / 'config.json'}:1: not valid JSON" in user_error(capsys, evaluate, argv)
    assert not (run / "eval").exists()


def test_a_fine_tuning_protocol_by_name_or_config_yaml(tmp_path):
    config = _config()
    config.finetune.protocol = "eval_finetuning_sh"
    settings = EvalSettings.from_config(config)
    assert {(o.batch_size, o.epochs, o.max_len) for o in settings.finetune.values()} == {(64, 5, 512)}
    assert settings.finetune_protocol == "eval_finetuning_sh" and settings.finetune["afqmc"].warmup_ratio == 0.06
    yaml_path = tmp_path / "config.yaml"
    yaml_path.write_text("finetune_hparams:\n  max_epochs: 4\n  task_overrides:\n    cluewsc2020: {max_epochs: 8}\n")
    config.finetune.protocol = str(yaml_path)
    settings = EvalSettings.from_config(config)
    assert settings.finetune["cluewsc2020"].epochs == 8 and settings.finetune["c3"].epochs == 4
    assert settings.finetune["afqmc"].max_len == 128  # the pipeline's default for a missing key
    config.finetune.protocol = str(tmp_path / "missing.yaml")
    with pytest.raises(ValueError, match=r"config key finetune.protocol=.*missing.yaml.*does not exist"):
        EvalSettings.from_config(config)
    config.finetune.protocol = "offical"
    with pytest.raises(ValueError, match=r"finetune.protocol='offical': .*use one of \['eval_finetuning_sh', 'official', 'quick'\]"):
        EvalSettings.from_config(config)
    config.finetune.protocol = "quick"
    quick = EvalSettings.from_config(config).finetune
    assert {(o.epochs, o.train_examples, o.batch_size) for t, o in quick.items() if t != "cluewsc2020"} == {(2, 3000, 32)}
    assert (quick["cluewsc2020"].epochs, quick["cluewsc2020"].train_examples) == (6, 3000)
    yaml_path.write_text("finetune_hparams:\n  max_epochs: 3\n  wsc_epochs: 12\n")  # the pipeline's key before 2026-06-05
    config.finetune.protocol = str(yaml_path)
    legacy = EvalSettings.from_config(config).finetune
    assert (legacy["cluewsc2020"].epochs, legacy["afqmc"].epochs, legacy["afqmc"].train_examples) == (12, 3, 0)
    yaml_path.write_text("finetune_hparams:\n  batch_size: 0\n")
    config.finetune.protocol = str(yaml_path)
    with pytest.raises(ValueError, match=r"finetune_hparams.batch_size: 0 must be positive"):
        EvalSettings.from_config(config)
