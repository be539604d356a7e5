"""The export CLI on a real (tiny, hand-made) checkpoint, and its refusals of bad input."""
import json

import flax.linen as nn
import grain
import jax
import numpy as np
import pytest

pytest.importorskip("safetensors")
pytest.importorskip("tokenizers")

import configs.base  # noqa: E402
from babylm_jax import export  # noqa: E402
from babylm_jax.data import tokenizer as tokenizer_lib  # noqa: E402
from babylm_jax.training import checkpoint, optim, state  # noqa: E402

TEXT = "今天天气很好我们去公园散步吧他把杯子打碎了。"


def _make_run(workdir, family="causal"):
    """A run directory with config.json, tokenizer/ and one checkpoint at step 3."""
    tokenizer = tokenizer_lib.char_tokenizer_from_counts({c: 1 for c in TEXT}, 300, 1, byte_fallback=True)
    config = configs.base.get_config()
    config.model.update(family=family, vocab_size=tokenizer.vocab_size, d_model=16, num_layers=1, num_heads=2,
                        d_ff=32, max_len=32)
    config.train.seq_len = 16
    workdir.mkdir(parents=True)
    checkpoint.check_or_write_config(str(workdir), config)
    tokenizer.save(workdir / "tokenizer")
    model = state.build_model(config)
    train_state = nn.meta.unbox(state.boxed_init_fn(config, model, optim.make_optimizer(config.train))(
        jax.random.key(0)))
    checkpointer = checkpoint.Checkpointer(str(workdir), max_to_keep=1)
    data_iterator = iter(grain.MapDataset.range(4).to_iter_dataset())
    checkpointer.save(3, train_state, data_iterator, {"tokens_seen": 96, "words_seen": 40.0})
    checkpointer.wait()
    checkpointer.close()
    return train_state


def test_export_real_checkpoint(tmp_path):
    train_state = _make_run(tmp_path / "run")
    (tmp_path / "run" / "eval").mkdir()
    (tmp_path / "run" / "eval" / "results.json").write_text(json.dumps({"zhoblimp": {"accuracy": 0.61}}))
    out = tmp_path / "hf"
    assert export.main(["--workdir", str(tmp_path / "run"), "--output", str(out)]) == 0
    config = json.loads((out / "config.json").read_text())
    assert config["model_type"] == "llama"
    assert config["babylm_jax"] == {"family": "causal", "output_layer": 1, "step": 3, "tokens_seen": 96,
                                    "words_seen": 40.0, "used_ema": False}
    card = (out / "README.md").read_text()
    assert "| zhoblimp | accuracy | 0.6100 |" in card and "| words seen (jieba) | 40 |" in card
    from safetensors.numpy import load_file

    embedding = load_file(out / "model.safetensors")["model.embed_tokens.weight"]
    np.testing.assert_array_equal(embedding, np.asarray(train_state.params["params"]["embed"]["embedding"]))

    # --layer makes AutoModel return an inner hidden state, which needs our own modelling code.
    assert export.main(["--workdir", str(tmp_path / "run"), "--output", str(out), "--layer", "0",
                        "--overwrite"]) == 0
    config = json.loads((out / "config.json").read_text())
    assert config["model_type"] == "babylm" and config["output_layer"] == 0
    assert (out / "modeling_babylm.py").is_file()
    assert sorted(p.name for p in tmp_path.iterdir()) == ["hf", "run"]  # no temporary directories left


def test_refuses_bad_input(tmp_path, capsys):
    run = tmp_path / "run"
    out = tmp_path / "hf"
    assert export.main(["--workdir", str(tmp_path / "missing"), "--output", str(out)]) == 2
    assert "does not exist" in capsys.readouterr().err

    _make_run(run)
    assert export.main(["--workdir", str(run), "--output", str(out), "--step", "9"]) == 2
    assert "no checkpoint for step 9" in capsys.readouterr().err

    empty = tmp_path / "empty_run"
    empty.mkdir()
    (empty / "config.json").write_text((run / "config.json").read_text())
    (empty / "tokenizer").mkdir()
    (empty / "tokenizer" / "tokenizer.json").write_text((run / "tokenizer" / "tokenizer.json").read_text())
    assert export.main(["--workdir", str(empty), "--output", str(out)]) == 2
    assert "no checkpoint in" in capsys.readouterr().err

    config = json.loads((run / "config.json").read_text())
    config["model"]["family"] = "seq2seq"
    (run / "config.json").write_text(json.dumps(config))
    assert export.main(["--workdir", str(run), "--output", str(out)]) == 2
    err = capsys.readouterr().err
    assert "model.family" in err and "seq2seq" in err
    assert not out.exists()

    out.mkdir()
    (out / "keep.txt").write_text("mine")
    assert export.main(["--workdir", str(run), "--output", str(out)]) == 2
    assert "--overwrite" in capsys.readouterr().err
    assert [p.name for p in out.iterdir()] == ["keep.txt"]
    assert sorted(p.name for p in tmp_path.iterdir()) == ["empty_run", "hf", "run"]
