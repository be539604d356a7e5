"""Fine-tuning settings from and to the official config.yaml, and the named protocols."""
import pytest
import yaml

from babylm_jax.config import finetune_protocols as protocols

UPSTREAM_SHAPE = """
models:
  - path: someone/model
    backend: causal
tasks:
  finetune: [afqmc, ocnli, tnews, cluewsc2020]
eval_dir: evaluation_data
finetune_hparams:
  lr: 3.0e-5
  batch_size: 32
  max_epochs: 10
  sequence_length: 128
  seed: 42
  task_overrides:
    afqmc: {lr: 3.0e-5, batch_size: 32, max_epochs: 10}
    ocnli: {lr: 3.0e-5, batch_size: 32, max_epochs: 10}
    tnews: {lr: 3.0e-5, batch_size: 32, max_epochs: 10}
    cluewsc2020: {lr: 3.0e-5, batch_size: 32, max_epochs: 30}
"""


def _official(epochs, wsc_epochs, batch=32, max_len=128):
    return {t: {"learning_rate": 3e-5, "batch_size": batch, "epochs": wsc_epochs if t == "cluewsc2020" else epochs,
                "max_len": max_len, "seed": 42} for t in protocols.OFFICIAL_TASKS}


def test_the_upstream_config_and_the_named_protocols(tmp_path):
    path = tmp_path / "config.yaml"
    path.write_text(UPSTREAM_SHAPE, encoding="utf-8")
    assert protocols.read_config(path) == _official(10, 30)
    assert protocols.protocol_settings("official") == _official(10, 30)
    assert protocols.protocol_settings("eval_finetuning_sh") == _official(5, 5, batch=64, max_len=512)
    # merged as the pipeline merges: no cluewsc2020 override -> the global 10 epochs; missing keys -> its defaults
    path.write_text("finetune_hparams:\n  batch_size: 16\n", encoding="utf-8")
    assert protocols.read_config(path) == {t: {**s, "batch_size": 16} for t, s in _official(10, 10).items()}
    path.write_text("models: []\n", encoding="utf-8")
    assert protocols.read_config(path) == _official(10, 10)
    # a hidden task may be given its own overrides
    path.write_text("finetune_hparams:\n  task_overrides:\n    c3: {max_epochs: 3}\n", encoding="utf-8")
    assert protocols.read_config(path, ("afqmc", "c3"))["c3"]["epochs"] == 3


@pytest.mark.parametrize("settings", [
    protocols.protocol_settings("official"),
    protocols.protocol_settings("eval_finetuning_sh"),
    {**protocols.protocol_settings("official"),
     "tnews": {"learning_rate": 5e-5, "batch_size": 16, "epochs": 4, "max_len": 64, "seed": 7}},
])
def test_the_written_config_reproduces_the_settings(tmp_path, settings):
    path = protocols.write_config(tmp_path / "config.yaml", settings, model_path="team/model", backend="mlm")
    assert protocols.read_config(path) == settings
    config = yaml.safe_load(path.read_text(encoding="utf-8"))
    assert config["models"] == [{"path": "team/model", "backend": "mlm"}]
    assert config["tasks"]["finetune"] == list(protocols.OFFICIAL_TASKS)


def test_bad_config_values_are_named(tmp_path):
    path = tmp_path / "config.yaml"
    path.write_text("finetune_hparams:\n  learning_rate: 1.0e-5\n", encoding="utf-8")
    with pytest.raises(ValueError, match=r"config.yaml: finetune_hparams: unknown key 'learning_rate'"):
        protocols.read_config(path)
    path.write_text("finetune_hparams:\n  task_overrides:\n    tnews: {max_epochs: 2.5}\n", encoding="utf-8")
    with pytest.raises(ValueError, match=r"finetune_hparams.task_overrides.tnews.max_epochs: 2.5 is not an integer"):
        protocols.read_config(path)
    path.write_text("finetune_hparams: [1, 2]\n", encoding="utf-8")
    with pytest.raises(ValueError, match="expected a mapping"):
        protocols.read_config(path)
    with pytest.raises(ValueError, match="unknown fine-tuning protocol 'offical'"):
        protocols.protocol_settings("offical")
    with pytest.raises(FileNotFoundError, match="does not exist"):
        protocols.read_config(tmp_path / "missing.yaml")
