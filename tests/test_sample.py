"""Sampling: the cached decode against a full recompute of the prefix, token for token, and the `sample`
command on a causal, a hybrid and an mlm run (text, the same text for one seed, fills, user errors)."""
import json
import pathlib

import flax.linen as nn
import jax
import jax.numpy as jnp
import numpy as np
import pytest

import configs.base
from babylm_jax import sample
from babylm_jax.config.schema import RunConfig
from babylm_jax.config.training import TrainConfig
from babylm_jax.core.vocab import BOS_ID, CLS_ID, EOS_ID, SEP_ID
from babylm_jax.model import decode
from babylm_jax.training import loop, state
from conftest import tiny_config
from fixtures.cli import user_error
from fixtures.run import make_run

PROMPTS = ([10, 11, 12], [20], [30, 31, 32, 33, 34, 35])  # ragged: rows with 5, 0 and 3 padding slots ... and none


def tiny_model(family: str, scan_layers: bool):
    """A 2-layer model with its weights scaled up, so that greedy choices are far from ties."""
    config = configs.base.get_config()
    config.model.update(family=family, vocab_size=50, d_model=32, num_layers=2, num_heads=2, d_ff=64, max_len=32,
                        scan_layers=scan_layers)
    config.train.update(seq_len=16, hybrid_causal_share=0.25)
    model = state.build_model(RunConfig.from_config(config).model)
    params = nn.meta.unbox(model.init(jax.random.key(1), jnp.ones((1, 8), jnp.int32)))
    return model, jax.tree.map(lambda x: x * 20 if x.ndim >= 2 else x, params)


def recomputed(model, params, ids: list[int], new: int, stop_id: int) -> list[int]:
    """Greedy tokens, the whole prefix run through the model again for each one (the slow, obvious way;
    the row is right-padded to the model's length, which causal attention never reads, to compile once)."""
    logits = jax.jit(lambda p, row: model.apply(p, row[None], causal=True)[0])
    ids, out = list(ids), []
    for _ in range(new):
        row = np.zeros(model.config.max_len, np.int32)
        row[: len(ids)] = ids
        token = int(jnp.argmax(logits(params, row)[len(ids) - 1]))
        out.append(token)
        ids.append(token)
        if token == stop_id:
            break
    return out


@pytest.mark.parametrize("family,scan_layers,opener,stop_id", [("causal", False, BOS_ID, EOS_ID),
                                                               ("hybrid", True, CLS_ID, SEP_ID)])
def test_cached_greedy_decode_equals_the_full_recompute(family, scan_layers, opener, stop_id):
    model, params = tiny_model(family, scan_layers)
    rows = [[opener, *p] for p in PROMPTS]
    width = max(map(len, rows))
    tokens = np.zeros((len(rows), width), np.int32)
    for row, ids in zip(tokens, rows):
        row[width - len(ids):] = ids
    pads = np.asarray([width - len(ids) for ids in rows], np.int32)
    generate = decode.make_generate(model, decode.Sampling(max_new_tokens=12, temperature=0.0), stop_id, 50)
    new = np.asarray(generate(params, tokens, pads, jax.random.key(0)))
    for ids, row in zip(rows, new.tolist()):
        expected = recomputed(model, params, ids, 12, stop_id)
        assert row[: len(expected)] == expected
        assert all(t == 0 for t in row[len(expected):])  # padding after the stop id


def test_draws_follow_the_seed_and_the_filters():
    logits = jax.random.normal(jax.random.key(3), (64, 20)) * 3
    greedy = decode.next_tokens(logits, jax.random.key(0), decode.Sampling(temperature=0.0))
    hot = decode.Sampling(temperature=1.0)
    same = [decode.next_tokens(logits, jax.random.key(7), hot) for _ in range(2)]
    assert (same[0] == same[1]).all()
    assert (same[0] != decode.next_tokens(logits, jax.random.key(8), hot)).any()
    assert (same[0] != greedy).any()
    for narrow in (decode.Sampling(top_k=1), decode.Sampling(top_p=1e-6)):  # only the most likely token is left
        assert (decode.next_tokens(logits, jax.random.key(7), narrow) == greedy).all()
    top3 = jnp.argsort(logits, axis=-1)[:, -3:]
    drawn = decode.next_tokens(logits, jax.random.key(9), decode.Sampling(top_k=3))
    assert (top3 == drawn[:, None]).any(axis=-1).all()


@pytest.fixture(scope="module")
def runs(tmp_path_factory) -> dict[str, pathlib.Path]:
    root = tmp_path_factory.mktemp("sample_runs")
    for family in ("causal", "hybrid", "mlm"):
        make_run(root / family, family)
    return root


@pytest.mark.parametrize("family", ["causal", "hybrid"])
def test_sample_prints_text_and_one_seed_gives_the_same_text(runs, capsys, family):
    argv = ["sample", f"--workdir={runs / family}", "--prompt=今天天气", "--prompt=他把", "--num_samples=2",
            "--max_new_tokens=6", "--seed=4"]
    first = sample.main(argv)
    out = capsys.readouterr().out
    assert [(r["prompt"], r["sample"]) for r in first] == [("今天天气", 0), ("今天天气", 1), ("他把", 0), ("他把", 1)]
    assert all(r["text"] for r in first) and f"今天天气 → {first[0]['text']}" in out
    assert sample.main(argv) == first
    assert sample.main([*argv[:-1], "--seed=5"]) != first


def test_sample_lists_the_fills_of_an_mlm_run(runs, capsys):
    results = sample.main(["sample", f"--workdir={runs / 'mlm'}", "--prompt=今天[MASK]气很[MASK]", "--top_k=3"])
    fills = results[0]["fills"]
    assert len(fills) == 2 and all(len(f) == 3 for f in fills)
    assert all(p1 >= p2 for f in fills for (_, p1), (_, p2) in zip(f, f[1:]))
    assert "[MASK] 2:" in capsys.readouterr().out


def test_what_users_get_wrong_is_one_line(runs, capsys, tmp_path):
    causal = f"--workdir={runs / 'causal'}"
    assert "an empty prompt" in user_error(capsys, sample, ["sample", causal, "--prompt="])
    assert "--top_p 1.5: must be in (0, 1]" in user_error(capsys, sample, ["sample", causal, "--prompt=好",
                                                                         "--top_p=1.5"])
    assert "--top_p 0.0" in user_error(capsys, sample, ["sample", causal, "--prompt=好", "--top_p=0"])
    assert "no prompt" in user_error(capsys, sample, ["sample", causal])
    assert "does not exist" in user_error(capsys, sample, ["sample", f"--workdir={tmp_path / 'nope'}", "--prompt=好"])
    empty = tmp_path / "empty"
    make_run(empty)
    for step in (empty / "checkpoints").iterdir():
        for path in sorted(step.rglob("*"), reverse=True):
            path.unlink() if path.is_file() else path.rmdir()
        step.rmdir()
    assert "no checkpoint in" in user_error(capsys, sample, ["sample", f"--workdir={empty}", "--prompt=好"])
    assert "no [MASK]" in user_error(capsys, sample, ["sample", f"--workdir={runs / 'mlm'}", "--prompt=今天"])
    assert "--max_new_tokens 99" in user_error(capsys, sample, ["sample", causal, "--prompt=好", "--max_new_tokens=99"])


def test_unknown_characters_and_long_prompts_are_said(runs, capsys):
    tokenizer = make_run.__globals__["tokenizer_training"].char_tokenizer_from_counts({"好": 1}, 300, 1,
                                                                                        byte_fallback=False)
    assert decode.unknown_characters(tokenizer, "好猫狗猫") == ["猫", "狗"]
    prompts = decode.encode_prompts(tokenizer, ["好猫"], "causal", room=8)
    assert "'猫' not in the vocabulary" in prompts.notes[0]
    long = decode.encode_prompts(tokenizer, ["好" * 20], "causal", room=8)
    assert long.tokens_BxP.shape == (1, 8) and "kept its last 8" in long.notes[0]
    sample.main(["sample", f"--workdir={runs / 'causal'}", f"--prompt={'今天' * 20}", "--max_new_tokens=4"])
    assert "kept its last 28" in capsys.readouterr().out


def test_a_training_run_writes_samples_at_each_eval(tiny_corpus_dir, tmp_path):
    pytest.importorskip("tensorboard", reason="the tensorboard extra is not installed")
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    config = tiny_config(tiny_corpus_dir)
    config.train.update(num_steps=20, writers=("tensorboard",), sample_prompts=TrainConfig().sample_prompts,
                        sample_max_new_tokens=8)
    summary = loop.train_and_evaluate(RunConfig.from_config(config), str(tmp_path))
    rows = [json.loads(line) for line in (tmp_path / "samples.jsonl").read_text(encoding="utf-8").splitlines()]
    prompts = list(TrainConfig().sample_prompts)
    assert [(r["step"], r["prompt"]) for r in rows] == [(step, p) for step in (10, 20) for p in prompts]
    assert all(isinstance(r["text"], str) for r in rows) and any(r["text"] for r in rows)
    events = EventAccumulator(str(tmp_path / "tensorboard"), size_guidance={"tensors": 0})
    events.Reload()
    tables = {event.step: event.tensor_proto.string_val[0].decode() for event in events.Tensors("samples")}
    assert sorted(tables) == [10, 20] and all(f"| {p} |" in tables[20] for p in prompts)
    assert summary["sample_compile_seconds"] > 0
    records = [json.loads(line) for line in (tmp_path / "metrics.jsonl").read_text().splitlines()]
    assert [r["step"] for r in records if "sample_seconds" in r] == [10, 20]
