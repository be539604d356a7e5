"""Fine-tuning: packed rows against one example at a time, the official head and schedule, learning
separable tasks, multiple choice, determinism, and the registry runner end to end on the fixtures."""
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
from babylm_jax.eval.finetune import classifier, clue, example_packing as packing
from babylm_jax.eval import runner
from babylm_jax.config.evaluation import DEFAULT_CONFIG, EvalSettings, default_settings
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
                           max_len=24, warmup_ratio=0.1, eval_rows=8, progress=False)


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
    model = classifier.FinetuneModel(body.config, num_outputs=num_outputs, multiple_choice=multiple_choice)
    head = classifier.ClassifierHead(num_outputs).init(jax.random.PRNGKey(1), jnp.zeros((1, 32)))["params"]
    return body, model, {"params": {"body": body_params["params"], "head": head}}


def alone_logits(body, params, row: list[int], last: bool) -> np.ndarray:
    """The slow reference: one input row alone, unpadded, through the body and the head."""
    tokens = jnp.asarray([row])
    hidden, _ = body.apply({"params": params["params"]["body"]}, tokens, jnp.ones_like(tokens),
                           method=Transformer.encode)
    pooled = hidden[0, len(row) - 1 if last else 0]
    return np.asarray(classifier.ClassifierHead(3).apply({"params": params["params"]["head"]}, pooled[None])[0])


def random_rows(count: int, options: int, seed: int) -> clue.EncodedSplit:
    rng = np.random.default_rng(seed)
    ids = [[list(rng.integers(7, 20, size=rng.integers(3, 12))) for _ in range(options if options == 1 else 2 + i % 3)]
           for i in range(count)]
    return clue.EncodedSplit(ids, [0] * count, 0)


@pytest.mark.slow
@pytest.mark.parametrize("family", ["causal", "mlm"])
def test_packed_rows_give_every_example_the_logits_it_gets_alone(family):
    body, model, params = model_and_params(family, 3, False)
    split, last = random_rows(12, 1, 0), family == "causal"
    batches = [*packing.eval_batches(split, 32, 4, 16, 1, last),
               *packing.TrainPlan(split, 6, 32, 2, seed=0, epochs=1).batches(0, 1, last)]
    apply = jax.jit(lambda b: classifier._logits(model, params["params"], b))
    for batch in batches:
        assert batch["tokens"].shape[0] < (batch["index"] >= 0).sum()  # several examples share a row
        logits = np.asarray(apply(batch))
        for slot, i in enumerate(batch["index"]):
            if i >= 0:
                np.testing.assert_allclose(logits[slot], alone_logits(body, params, split.ids[i][0], last), atol=2e-5)


@pytest.mark.slow
def test_multiple_choice_scores_each_option_as_it_scores_alone():
    """An option's score depends neither on the other options nor on its neighbours in the row; missing options lose."""
    body, model, params = model_and_params("mlm", 1, True)
    split = random_rows(9, 4, 1)
    (batch,) = packing.eval_batches(split, 64, 8, 9, 4, last=False)
    logits = np.asarray(jax.jit(lambda b: classifier._logits(model, params["params"], b))(batch))
    head_1 = classifier.ClassifierHead(1)
    for slot, i in enumerate(batch["index"]):
        options = split.ids[i]
        assert (logits[slot, len(options):] <= classifier.NEG_INF).all()
        for c, row in enumerate(options):
            tokens = jnp.asarray([row])
            hidden, _ = body.apply({"params": params["params"]["body"]}, tokens, jnp.ones_like(tokens),
                                   method=Transformer.encode)
            alone = head_1.apply({"params": params["params"]["head"]}, hidden[:, 0])[0, 0]
            np.testing.assert_allclose(logits[slot, c], alone, atol=2e-5)


def test_the_official_head_and_schedule():
    head = classifier.ClassifierHead(3).init(jax.random.PRNGKey(0), jnp.zeros((1, 64)))["params"]
    assert set(head) == {"dense", "out"}  # LayerNorms without scale or bias
    bound = 1 / np.sqrt(64)  # nn.Linear's U(-1/sqrt(fan_in), 1/sqrt(fan_in)), weights and biases
    for leaf in jax.tree.leaves(head):
        assert np.abs(leaf).max() <= bound and np.abs(leaf).max() > 0.8 * bound
    options = dataclasses.replace(FAST, learning_rate=1.0, warmup_ratio=0.06, min_lr_ratio=0.1)
    rates = classifier.learning_rates(options, 100)
    # evaluation_pipeline/finetune/utils.py's lambda, written out: warmup int(0.06 * 100) = 6 steps
    expected = [s / 6 if s < 6 else max(0.1, 0.1 + 0.9 * 0.5 * (1 + np.cos(np.pi * (s - 6) / 94))) for s in range(100)]
    np.testing.assert_allclose(rates, expected, rtol=1e-6)
    assert rates[0] == 0 and rates[6] == 1 and abs(rates[-1] - 0.1) < 1e-3


def run(family: str, train, dev, options=FAST):
    body, params = tiny_body(family, TOKENIZER.vocab_size)
    kind = "multiple_choice" if len(train[0].choices) > 1 else "classification"
    labels = ("0", "1", "2") if kind == "classification" else ()
    task = clue.ClueTask("fixture", kind, labels, train, dev, {})
    return classifier.finetune(body, params, task, TOKENIZER, options)


@pytest.mark.slow
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


@pytest.mark.slow
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


@pytest.mark.slow
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
    result = runner.run_registry_task(spec, loaded, FIXTURES, EvalSettings.from_config(config))
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
