"""The export CLI on a real (tiny, hand-made) checkpoint, and its refusals of bad input."""
import json

import numpy as np
import pytest

pytest.importorskip("safetensors")
pytest.importorskip("tokenizers")

from babylm_jax import export  # noqa: E402
from fixtures.cli import user_error  # noqa: E402
from fixtures.run import make_run  # noqa: E402


def test_export_real_checkpoint(tmp_path):
    train_state = make_run(tmp_path / "run")
    (tmp_path / "run" / "eval").mkdir()
    (tmp_path / "run" / "eval" / "results.json").write_text(json.dumps({"zhoblimp": {"accuracy": 0.61}}))
    out = tmp_path / "hf"
    assert export.main(["export", "--workdir", str(tmp_path / "run"), "--output", str(out)]) == out
    config = json.loads((out / "config.json").read_text())
    assert config["model_type"] == "llama"
    assert config["babylm_jax"] == {"family": "causal", "output_layer": 1, "step": 3, "tokens_seen": 96,
                                    "words_seen": 40.0, "used_ema": False}
    card = (out / "README.md").read_text()
    assert "| zhoblimp | accuracy | 0.6100 |" in card and "| words seen (jieba) | 40 |" in card
    from safetensors.numpy import load_file

    embedding = load_file(out / "model.safetensors")["model.embed_tokens.weight"]
    np.testing.assert_array_equal(embedding, np.asarray(train_state.params["params"]["embed"]["embedding"]))

    # --overwrite replaces only what export wrote: a user's notes there refuse it, named, and stay.
    (out / "notes.txt").write_text("mine")
    before = sorted(p.name for p in out.iterdir())
    with pytest.raises(FileExistsError, match=r"holds notes\.txt, which export did not write: --overwrite replaces "
                       "only an export's own files"):
        export.main(["export", "--workdir", str(tmp_path / "run"), "--output", str(out), "--overwrite"])
    assert sorted(p.name for p in out.iterdir()) == before and (out / "notes.txt").read_text() == "mine"
    (out / "notes.txt").unlink()

    # --layer makes AutoModel return an inner hidden state, which needs our own modelling code.
    export.main(["export", "--workdir", str(tmp_path / "run"), "--output", str(out), "--layer", "0", "--overwrite"])
    config = json.loads((out / "config.json").read_text())
    assert config["model_type"] == "babylm" and config["output_layer"] == 0
    assert (out / "modeling_babylm.py").is_file()
    assert sorted(p.name for p in tmp_path.iterdir()) == ["hf", "run"]  # no temporary directories left


def test_refuses_bad_input(tmp_path, capsys):
    run = tmp_path / "run"
    out = tmp_path / "hf"
    assert "does not exist" in user_error(capsys, export, ["export", "--workdir", str(tmp_path / "missing"),
                                                           "--output", str(out)])

    make_run(run)
    assert "no checkpoint for step 9" in user_error(capsys, export, ["export", "--workdir", str(run),
                                                                     "--output", str(out), "--step", "9"])

    empty = tmp_path / "empty_run"
    empty.mkdir()
    (empty / "config.json").write_text((run / "config.json").read_text())
    (empty / "tokenizer").mkdir()
    (empty / "tokenizer" / "tokenizer.json").write_text((run / "tokenizer" / "tokenizer.json").read_text())
    assert "no checkpoint in" in user_error(capsys, export, ["export", "--workdir", str(empty), "--output", str(out)])

    config = json.loads((run / "config.json").read_text())
    config["model"]["family"] = "seq2seq"
    (run / "config.json").write_text(json.dumps(config))
    err = user_error(capsys, export, ["export", "--workdir", str(run), "--output", str(out)])
    assert "model.family" in err and "seq2seq" in err
    assert not out.exists()

    out.mkdir()
    (out / "keep.txt").write_text("mine")
    assert "--overwrite" in user_error(capsys, export, ["export", "--workdir", str(run), "--output", str(out)])
    assert [p.name for p in out.iterdir()] == ["keep.txt"]
    assert sorted(p.name for p in tmp_path.iterdir()) == ["empty_run", "hf", "run"]
