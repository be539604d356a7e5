"""Fine-tuning: pooling with left/right padding, learning separable tasks, multiple choice,
determinism, and the registry runner end to end on the fixtures."""
import dataclasses
import pathlib
import types

import flax.linen as nn
import jax
import jax.numpy as jnp
import numpy as np
import pytest

from babylm_jax.corpus.tokenizer import CharTokenizer
from babylm_jax.config.files import load_config_file
from babylm_jax.eval import clue, finetune, runner
from babylm_jax.eval.settings import DEFAULT_CONFIG, EvalSettings, default_settings
from babylm_jax.config.model import ModelConfig
from babylm_jax.model.transformer import Transformer

FIXTURES = pathlib.Path(__file__).parent / "fixtures" / "clue"
FILLER = "天地人你我他上下大小山水"


def tiny_body(family: str, vocab_size: int, seed: int = 0) -> tuple[Transformer, dict]:
    config = ModelConfig(family=family, vocab_size=vocab_size, d_model=32, num_layers=1, num_heads=2, d_ff=64, max_len=64)
    model = Transformer(config)
    params = nn.meta.unbox(model.init(jax.random.PRNGKey(seed), jnp.zeros((1, 8), jnp.int32)))
    return model, params


# One tokenizer (so one vocabulary size) and one shape for every causal run: they share compiles.
TOKENIZER = CharTokenizer(sorted(set(
    FILLER + "甲乙丙好哪个" + "".join(p.read_text(encoding="utf-8") for p in sorted(FIXTURES.rglob("*.json")))
)), byte_fallback=False)
FAST = dataclasses.replace(default_settings().finetune["afqmc"], learning_rate=3e-3, batch_size=16, epochs=6,
                           max_len=24, warmup_ratio=0.1, length_buckets=(), progress=False)


def separable_pairs(n: int, seed: int) -> list[clue.Example]:
    """Label k when sentence a holds the k-th of 甲乙丙; everything else is noise."""
    rng = np.random.default_rng(seed)
    examples = []
    for i in range(n):
        a = list(rng.choice(list(FILLER), size=rng.integers(3, 9)))
        a.insert(int(rng.integers(0, len(a) + 1)), "甲乙丙"[i % 3])
        b = "".join(rng.choice(list(FILLER), size=rng.integers(2, 6)))
        examples.append(clue.Example((("".join(a), b),), i % 3))
    return examples


def choose_good_option(n: int, seed: int) -> list[clue.Example]:
    """Multiple choice with 2, 3 and 4 options; the right option always reads 好."""
    rng = np.random.default_rng(seed)
    examples = []
    for i in range(n):
        num_options = 2 + i % 3
        options = ["".join(rng.choice(list(FILLER), size=2)) for _ in range(num_options)]
        answer = int(rng.integers(num_options))
        options[answer] = "好"
        passage = "".join(rng.choice(list(FILLER), size=6))
        examples.append(clue.Example(tuple((passage, "哪个", o) for o in options), answer))
    return examples


def model_and_params(family: str, num_outputs: int, multiple_choice: bool):
    body, body_params = tiny_body(family, 20)
    model = finetune.FinetuneModel(body.config, num_outputs=num_outputs, multiple_choice=multiple_choice)
    head = finetune.ClassifierHead(num_outputs).init(jax.random.PRNGKey(1), jnp.zeros((1, 32)))["params"]
    return body, model, {"params": {"body": body_params["params"], "head": head}}


def test_pool_index_with_left_and_right_padding():
    mask = jnp.array([[1, 1, 1, 0, 0], [0, 0, 1, 1, 1], [1, 1, 1, 1, 1], [0, 1, 1, 0, 0]])
    assert finetune.pool_index(mask, last=True).tolist() == [2, 4, 4, 2]
    assert finetune.pool_index(mask, last=False).tolist() == [0, 2, 0, 1]
    assert finetune.positions_from_mask(mask)[1].tolist() == [0, 0, 0, 1, 2]


@pytest.mark.parametrize("family", ["causal", "mlm"])
def test_head_reads_the_right_token_with_left_and_right_padding(family):
    body, model, params = model_and_params(family, 3, False)
    row = [5, 9, 10, 11, 6]
    tokens = jnp.array([[row + [0, 0]], [[0, 0] + row]])
    mask = jnp.array([[[1] * 5 + [0, 0]], [[0, 0] + [1] * 5]], bool)

    @jax.jit
    def logits_and_reference(params):
        logits = model.apply(params, tokens, mask)
        # Reference: the right-padded row's hidden state at token 0 (encoders) or token 4 (causal).
        hidden, _ = body.apply({"params": params["params"]["body"]}, tokens[:, 0], mask[:, 0].astype(jnp.int32),
                               method=Transformer.encode)
        read = hidden[0, 4 if family == "causal" else 0]
        return logits, finetune.ClassifierHead(3).apply({"params": params["params"]["head"]}, read[None])[0]

    logits, expected = logits_and_reference(params)
    np.testing.assert_allclose(logits[0], logits[1], atol=1e-5)
    np.testing.assert_allclose(logits[0], expected, atol=1e-5)


def test_multiple_choice_scores_options_independently():
    """An option's score depends neither on the other options nor on their order; missing options lose."""
    _, model, params = model_and_params("mlm", 1, True)
    rng = np.random.default_rng(0)
    mask = np.ones((2, 4, 6), bool)
    mask[0, 2:] = False  # item 0 has 2 options
    mask[1, :, 4:] = False  # item 1 has 4 options of 4 tokens
    tokens = rng.integers(7, 20, size=(2, 4, 6)) * mask
    apply = jax.jit(lambda t, m: model.apply(params, t, m))
    logits = np.asarray(apply(tokens, mask))
    assert logits.shape == (2, 4) and (logits[0, 2:] <= finetune.NEG_INF).all()
    perm = [3, 1, 0, 2]
    permuted = np.asarray(apply(tokens[:, perm], mask[:, perm]))
    np.testing.assert_allclose(permuted[1], logits[1, perm], atol=1e-5)
    alone = mask.copy()
    alone[1, [0, 2, 3]] = False  # keep only option 1 of item 1
    np.testing.assert_allclose(apply(tokens * alone, alone)[1, 1], logits[1, 1], atol=1e-5)


def run(family: str, train, dev, options=FAST):
    body, params = tiny_body(family, TOKENIZER.vocab_size)
    kind = "multiple_choice" if len(train[0].choices) > 1 else "classification"
    labels = ("0", "1", "2") if kind == "classification" else ()
    task = clue.ClueTask("fixture", kind, labels, train, dev, {})
    return finetune.finetune(body, params, task, TOKENIZER, options)


def test_classification_learns_a_separable_task_and_is_deterministic():
    train, dev = separable_pairs(64, 0), separable_pairs(33, 1)
    first = run("causal", train, dev)
    assert first.best_accuracy >= 0.9, first.dev_accuracy
    assert first.train_loss[-1] < first.train_loss[0]
    assert first.num_steps == 6 * 4 and first.num_truncated == {"train": 0, "dev": 0}
    # The best epoch is the first one reaching the top accuracy.
    top = max(first.dev_accuracy)
    assert first.dev_accuracy[first.best_epoch - 1] == top
    assert all(a < top for a in first.dev_accuracy[: first.best_epoch - 1])
    # Its predictions are the ones scored: count hits against the labels by hand.
    labels = [e.label for e in dev]
    hits = sum(int(p) == y for p, y in zip(first.best_predictions, labels))
    assert len(first.best_predictions) == 33 and hits == round(first.best_accuracy * 33) and hits >= 30
    second = run("causal", train, dev)
    assert first.dev_accuracy == second.dev_accuracy and first.train_loss == second.train_loss
    other_seed = run("causal", train, dev, dataclasses.replace(FAST, seed=1))
    assert other_seed.train_loss != first.train_loss


def test_rows_longer_than_the_model_are_refused_by_name():
    train = separable_pairs(4, 0)
    with pytest.raises(ValueError, match="max_len=128 is longer than the model's max_len=64"):
        run("causal", train, train, dataclasses.replace(FAST, max_len=128))


def test_multiple_choice_with_two_three_and_four_options():
    train, dev = choose_good_option(48, 0), choose_good_option(30, 1)
    outcome = run("hybrid", train, dev, dataclasses.replace(FAST, epochs=5))
    assert outcome.best_accuracy >= 0.9, outcome.dev_accuracy
    # Predictions never name a missing option, and items of every option count are answered.
    counts = np.array([len(e.choices) for e in dev])
    assert (outcome.best_predictions < counts).all()
    labels = np.array([e.label for e in dev])
    for n in (2, 3, 4):
        assert np.mean(outcome.best_predictions[counts == n] == labels[counts == n]) >= 0.8


def test_registry_runner_on_fixture_files(tmp_path):
    from babylm_jax.tasks import registry as tasks

    body, params = tiny_body("causal", TOKENIZER.vocab_size)
    loaded = types.SimpleNamespace(model=body, params=params, tokenizer=TOKENIZER, step=0)
    spec = tasks.get_task("diagnostic_nli")
    # The same shapes as the causal runs above (batch 16, length 24, 3 labels): no new compile.
    config = load_config_file(DEFAULT_CONFIG)
    config.finetune.update(progress=False, max_len=24, batch_size=16, epochs=1)
    config.finetune.tasks.diagnostic_nli.epochs = 2  # a task's own key wins over the global one
    embedding_before = np.array(params["params"]["embed"]["embedding"])
    result = runner.run_task(spec, loaded, FIXTURES, EvalSettings.from_config(config))
    # The caller's pretrained params survive (fine-tuning trains a copy), so the next task can use them.
    np.testing.assert_array_equal(params["params"]["embed"]["embedding"], embedding_before)
    assert set(result.values) == {"accuracy"} and 0 <= result.values["accuracy"] <= 1
    details = result.details
    assert len(details["dev_accuracy_per_epoch"]) == 2 and details["best_epoch"] in (1, 2)
    per_epoch = details["dev_accuracy_per_epoch"]
    assert result.values["accuracy"] == max(per_epoch) == per_epoch[details["best_epoch"] - 1]
    assert all(a < max(per_epoch) for a in per_epoch[: details["best_epoch"] - 1])
    assert set(details["per_phenomenon"]) == {"negation", "quantifier", "modality"}
    assert details["num_truncated"] == {"train": 0, "dev": 0} and details["num_dropped"] == {"train": 1, "dev": 0}
    assert set(result.figures) == {"epochs"}
