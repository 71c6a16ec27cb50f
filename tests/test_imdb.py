"""IMDB sentiment: the aclImdb reader, the tokenizer, the masked LSTM and its scan, fit on XLA and CPU, predict on text."""

import re
import subprocess
import sys
from collections import Counter
from pathlib import Path

import numpy as np
import pytest
import torch

from helpers import SCRIPTS, cli_env, metrics_rows, run_cli, run_paced, save_checkpoint
from xla_train.cli.main import main
from xla_train.data import imdb
from xla_train.preprocess import text
from xla_train.data.imdb import IMDBDataModule, load_imdb
from xla_train.errors import DataError
from xla_train.models.lstm import MaskedLSTM, SentimentLSTM

POSITIVE = ["wonderful", "superb", "moving", "brilliant", "delightful", "masterpiece"]
NEGATIVE = ["awful", "boring", "dreadful", "terrible", "tedious", "mess"]
FILLER = ["the", "film", "plot", "actor", "scene", "story", "camera", "and", "a", "of", "it", "was", "this"]
BAD_BYTES = b"An \xff\xfe odd encoding, but a wonderful film \xe9t\xe9.<br /><br />Superb!"


def write_aclimdb(root: Path, per_class: int = 24, seed: int = 0) -> Path:
    """aclImdb/{train,test}/{pos,neg}/ID_RATING.txt, plus the real archive's other files, which must be ignored.

    Each review mixes filler with words of its class, so a model learns something in two
    epochs; lengths run past 64 tokens, so truncation happens. `trainonly` appears only in
    train, `testonly` only in test, `unsupword` only in train/unsup.
    """
    rng = np.random.default_rng(seed)
    base = root / "aclImdb"
    for split in ("train", "test"):
        for label, words in (("pos", POSITIVE), ("neg", NEGATIVE)):
            d = base / split / label
            d.mkdir(parents=True)
            for i in range(per_class):
                n = int(rng.integers(4, 100))
                toks = rng.choice(FILLER + words * 2, n).tolist()
                toks.insert(int(rng.integers(0, n)), "trainonly" if split == "train" else "testonly")
                review = " ".join(toks).capitalize() + ". <br /><br />" + str(rng.choice(words)).upper() + "!"
                rating = int(rng.integers(7, 11) if label == "pos" else rng.integers(1, 5))
                (d / f"{i}_{rating}.txt").write_text(review, encoding="utf-8")
            (base / split / f"urls_{label}.txt").write_text("http://www.imdb.com/title/tt0000001/usercomments\n")
        (base / split / "labeledBow.feat").write_text("0:9 1:1\n")
    (base / "train" / "pos" / "999_9.txt").write_bytes(BAD_BYTES)  # not UTF-8
    (base / "train" / "unsup").mkdir()
    for i in range(5):
        (base / "train" / "unsup" / f"{i}_0.txt").write_text("unsupword " * 50)
    (base / "imdb.vocab").write_text("the\nand\n")
    (base / "README").write_text("Large Movie Review Dataset v1.0\n")
    return root


@pytest.fixture(scope="module")
def imdb_root(tmp_path_factory) -> Path:
    return write_aclimdb(tmp_path_factory.mktemp("imdb"))


# --- data: layout, tokenizer, vocabulary, cache, bad input ----------------------------------------------------------


def test_vocabulary_comes_from_the_train_split_only(tmp_path):
    d = load_imdb(str(write_aclimdb(tmp_path)), download=False, maxlen=64, vocab_size=10000)
    vocab = text.tokenizer_from_json(d["tokenizer"]).get_vocab()
    assert vocab[text.PAD] == 0 and vocab[text.UNK] == 1
    assert {"trainonly", "wonderful", "awful", "!", "superb"} <= set(vocab)
    assert "testonly" not in vocab and "unsupword" not in vocab and "br" not in vocab
    assert "Superb" not in vocab  # lower-cased
    x, y = d["train"]
    assert x.dtype == np.int64 and x.shape == (2 * 24 + 1, 64) and sorted(set(y.tolist())) == [0, 1]
    assert (d["test"][0] == text.UNK_ID).sum() >= 24  # every test review has a word the vocabulary lacks
    small = load_imdb(str(tmp_path), download=False, maxlen=64, vocab_size=8)
    kept = set(text.tokenizer_from_json(small["tokenizer"]).get_vocab()) - {text.PAD, text.UNK}
    assert max(small["train"][0].max(), small["test"][0].max()) == 7
    counts = Counter()
    for f in sorted((tmp_path / "aclImdb" / "train").glob("*/*.txt")):
        if f.parent.name in ("pos", "neg"):
            review = f.read_bytes().decode("utf-8", "replace").replace("<br />", " ").lower()
            counts.update(re.findall(r"\w+|[^\w\s]+", review))
    top = sorted(counts, key=lambda w: (-counts[w], w))[:6]
    assert kept == set(top), (kept, top)


def test_sequences_are_cut_and_padded_at_the_front():
    tok = text.build_tokenizer(["one two three four five. <br />ONE"], vocab_size=100)
    ids = text.encode(tok, ["One two three four five", "five<br/>", "zebra"], maxlen=3)
    v = tok.get_vocab()
    assert ids.dtype == np.int64 and ids.shape == (3, 3)
    assert ids[0].tolist() == [v["three"], v["four"], v["five"]]  # the end of a long text is kept
    assert ids[1].tolist() == [0, 0, v["five"]] and ids[2].tolist() == [0, 0, text.UNK_ID]
    # The literal special-token text is just text: never the padding id.
    assert text.PAD_ID not in text.encode(tok, ["[PAD] [UNK]"], maxlen=8)[0][-6:]


@pytest.mark.parametrize("padding", ["pre", "post"])
@pytest.mark.parametrize("truncating", ["pre", "post"])
def test_sequences_are_cut_and_padded_where_keras_pad_sequences_would(padding, truncating):
    """padding and truncating as Keras' pad_sequences takes them: "pre" at the front, "post" at the back."""
    tok = text.build_tokenizer(["one two three four five"], vocab_size=100)
    v = tok.get_vocab()
    one, two, three, four, five = (v[w] for w in "one two three four five".split())
    ids = text.encode(tok, ["one two three four five", "five"], maxlen=3, padding=padding, truncating=truncating)
    assert ids[0].tolist() == ([three, four, five] if truncating == "pre" else [one, two, three])
    assert ids[1].tolist() == ([0, 0, five] if padding == "pre" else [five, 0, 0])
    with pytest.raises(ValueError, match="use pre .* or post"):
        text.encode(tok, ["one"], maxlen=3, padding="middle")


def test_a_review_that_is_not_utf8_is_decoded_with_replacement(imdb_root):
    files, labels, _ = imdb.list_split(imdb_root / "aclImdb", "train")
    i = [f.name for f in files].index("999_9.txt")
    review = list(imdb.read_reviews([files[i]]))[0]
    assert labels[i] == 1 and "\ufffd" in review and "wonderful film" in review
    tok = text.build_tokenizer(imdb.read_reviews(files), 10000)
    ids = text.encode(tok, [review], 64)[0]
    assert tok.get_vocab()["wonderful"] in ids and tok.get_vocab()["superb"] in ids


def test_tokenised_arrays_are_cached_and_rebuilt_when_settings_change(tmp_path, monkeypatch):
    root = str(write_aclimdb(tmp_path))
    first = load_imdb(root, download=False, maxlen=32, vocab_size=50)
    cache_dir = tmp_path / "aclImdb" / imdb.CACHE_DIR
    assert len(list(cache_dir.glob("*.npz"))) == 1
    monkeypatch.setattr(text, "build_tokenizer", lambda *a: pytest.fail("tokenised again despite a cache"))
    again = load_imdb(root, download=False, maxlen=32, vocab_size=50)
    assert again["tokenizer"] == first["tokenizer"]
    for split in ("train", "test"):
        np.testing.assert_array_equal(again[split][0], first[split][0])
        assert again[split][0].dtype == np.int64
    monkeypatch.undo()
    for changed in ({"maxlen": 40, "vocab_size": 50}, {"maxlen": 32, "vocab_size": 60}):
        assert load_imdb(root, download=False, **changed)["train"][0].shape[1] == changed["maxlen"]
    at_the_back = load_imdb(root, download=False, maxlen=32, vocab_size=50, sides=("post", "post"))["train"][0]
    assert (at_the_back[:, 0] != text.PAD_ID).all() and (first["train"][0][:, -1] != text.PAD_ID).all()
    (tmp_path / "aclImdb" / "train" / "neg" / "500_1.txt").write_text("a new awful review")
    grown = load_imdb(root, download=False, maxlen=32, vocab_size=50)
    assert len(grown["train"][0]) == len(first["train"][0]) + 1
    assert len(list(cache_dir.glob("*.npz"))) == 5
    for f in cache_dir.glob("*.npz"):  # a damaged cache is rebuilt, not trusted
        f.write_bytes(b"not a zip")
    np.testing.assert_array_equal(
        load_imdb(root, download=False, maxlen=32, vocab_size=50)["train"][0], grown["train"][0]
    )


@pytest.mark.parametrize(
    "damage,message",
    [
        (lambda a: None, "IMDB is missing at"),
        (lambda a: [f.unlink() for f in (a / "test" / "neg").iterdir()], "test/neg holds no reviews"),
        (lambda a: __import__("shutil").rmtree(a / "test"), "has no test/neg folder"),
    ],
)
def test_bad_data_is_refused_in_one_line(tmp_path, capsys, damage, message):
    if message.startswith("IMDB is missing"):
        root = tmp_path
    else:
        root = write_aclimdb(tmp_path)
        damage(root / "aclImdb")
    rc = main(
        [
            "fit",
            "recipe=imdb",
            "accelerator=cpu",
            f"data_dir={root}",
            "download=false",
            f"--runs_dir={tmp_path / 'runs'}",
        ]
    )
    err = capsys.readouterr().err.strip().splitlines()
    assert rc == 2 and len(err) == 1 and message in err[0] and str(tmp_path) in err[0], err
    if message.startswith("IMDB is missing"):
        assert imdb.URL in err[0]
    assert not (tmp_path / "runs").exists()


def test_download_failure_leaves_no_partial_folder(tmp_path, monkeypatch):
    import torchvision.datasets.utils as tvu

    def broken(url, root, filename, md5):
        Path(root, filename).write_bytes(b"half an archive")
        raise ConnectionError("network unreachable")

    monkeypatch.setattr(tvu, "download_url", broken)
    with pytest.raises(DataError, match="could not download IMDB"):
        load_imdb(str(tmp_path), download=True, maxlen=32, vocab_size=50)
    from xla_train.data.download import LOCK_FILE  # the lock that serialises downloads stays, on purpose

    assert sorted(p.name for p in tmp_path.iterdir() if p.name != LOCK_FILE) == []


def test_inference_info_carries_everything_a_text_checkpoint_needs(imdb_root):
    dm = IMDBDataModule(data_dir=str(imdb_root), download=False, maxlen=64, batch_size=16)
    info = dm.inference_info()
    assert info["kind"] == "text" and info["labels"] == ["neg", "pos"] and info["maxlen"] == 64
    assert text.tokenizer_from_json(info["tokenizer"]).get_vocab()["wonderful"] > 1
    x, y = next(iter(dm.train_dataloader()))
    assert x.dtype == torch.int64 and x.shape == (16, 64) and y.shape == (16,)
    held = IMDBDataModule(data_dir=str(imdb_root), download=False, maxlen=64, val_fraction=0.25, batch_size=16)
    assert len(held.arrays("val")[0]) == 12 and len(held.arrays("train")[0]) == 49 - 12


def test_predict_feeds_the_lstm_the_ids_training_built(imdb_root, tmp_path):
    """The same reviews, read as predict reads them (files, one review each) and as serve reads them (JSON text),
    become the very ids the data module trains and tests on, on the training split and on the test split, tokenised
    afresh and read back from the token cache: same shape, same values. The fixture's reviews run past maxlen=56, so
    a cut or a pad that differs shows; probabilities would not (a small LSTM barely moves)."""
    from xla_train.serve.http import decode_item
    from xla_train.serve.inputs import read_texts
    from xla_train.serve.predictor import load_for_inference

    cache = imdb.find_folder(str(imdb_root)) / imdb.CACHE_DIR
    before = set(cache.glob("*.npz")) if cache.is_dir() else set()
    # val_fraction=0: the training split is every training file, in the reader's order; maxlen=56 no other test's
    fresh, cached = (IMDBDataModule(data_dir=str(imdb_root), download=False, maxlen=56, val_fraction=0) for _ in "ab")
    fresh.setup()
    assert len(set(cache.glob("*.npz")) - before) == 1  # tokenised and cached; the second module reads the cache
    args = {"vocab_size": fresh.vocab_size, "embed_dim": 4, "hidden_size": 4}
    save_checkpoint(tmp_path / "t.ckpt", SentimentLSTM(**args), args, fresh.inference_info())
    predictor = load_for_inference(tmp_path / "t.ckpt")
    for split in ("train", "test"):
        files, _, _ = imdb.list_split(imdb.find_folder(str(imdb_root)), split)  # the data module's order
        _, reviews = read_texts([str(f) for f in files])
        fed = predictor.preprocess(reviews).numpy()
        served = np.concatenate([decode_item(predictor, {"text": r}).numpy() for r in reviews])
        for dm in (fresh, cached):
            trained, _ = dm.arrays(split)
            assert fed.shape == trained.shape == (len(files), 56) and fed.dtype == trained.dtype, split
            np.testing.assert_array_equal(fed, trained, err_msg=split)
            np.testing.assert_array_equal(served, trained, err_msg=split)
            assert (text.token_counts(trained) == 56).sum() >= 10, split  # many reviews were cut: the cut is tested
    assert len(set(cache.glob("*.npz")) - before) == 1


def test_imdb_validation_is_held_out_of_train_and_the_vocabulary_never_sees_test(imdb_root):
    dm = IMDBDataModule(data_dir=str(imdb_root), download=False, maxlen=64, batch_size=16)  # val_fraction=0.1
    raw = load_imdb(str(imdb_root), download=False, maxlen=64, vocab_size=10000)
    (xt, yt), (xv, yv), (xs, ys) = (dm.arrays(s) for s in ("train", "val", "test"))
    assert (len(xv), len(xt)) == (5, 44)  # 10% of the fixture's 49 training reviews
    assert np.array_equal(xs, raw["test"][0]) and np.array_equal(ys, raw["test"][1])
    rows = lambda x: {r.tobytes() for r in x}  # noqa: E731
    assert not rows(xt) & rows(xv) and rows(xt) | rows(xv) == rows(raw["train"][0])
    assert set(yv) == {0, 1}  # stratified: both classes in a validation set of 5
    vocab = text.tokenizer_from_json(dm.inference_info()["tokenizer"]).get_vocab()
    assert "trainonly" in vocab and "testonly" not in vocab
    assert (
        dm.test_is_held_out
        and not IMDBDataModule(data_dir=str(imdb_root), download=False, maxlen=64, val_fraction=0).test_is_held_out
    )


# --- the model: masking, padding invariance, the scan on XLA -------------------------------------------------------


def masked_reference(lstm, x, mask):
    """The recurrence written out: a masked step leaves (h, c) as they were."""
    h = c = torch.zeros(x.shape[0], lstm.hidden_size)
    outs = []
    for t in range(x.shape[1]):
        i, f, g, o = (
            x[:, t] @ lstm.weight_ih_l0.T + lstm.bias_ih_l0 + h @ lstm.weight_hh_l0.T + lstm.bias_hh_l0
        ).chunk(4, 1)
        c2 = torch.sigmoid(f) * c + torch.sigmoid(i) * torch.tanh(g)
        h2 = torch.sigmoid(o) * torch.tanh(c2)
        m = mask[:, t, None]
        h, c = torch.where(m, h2, h), torch.where(m, c2, c)
        outs.append(torch.where(m, h2, torch.zeros_like(h2)))
    return torch.stack(outs, 1), h, c


def test_masked_lstm_skips_masked_steps_exactly():
    torch.manual_seed(0)
    lstm = MaskedLSTM(5, 7, batch_first=True)
    x = torch.randn(4, 9, 5)
    mask = torch.ones(4, 9, dtype=torch.bool)
    mask[0, :3] = False  # front padding
    mask[1] = False  # nothing at all
    mask[2, [1, 4]] = False
    out, (h, c) = lstm(x, mask=mask)
    ref_out, ref_h, ref_c = masked_reference(lstm, x, mask)
    torch.testing.assert_close(out, ref_out, atol=1e-6, rtol=0)
    torch.testing.assert_close(h[0], ref_h, atol=1e-6, rtol=0)
    torch.testing.assert_close(c[0], ref_c, atol=1e-6, rtol=0)
    assert h[0, 1].abs().max() == 0


class PackedLSTM(torch.nn.LSTM):
    """The formulation MaskedLSTM replaced (a packed sequence, two host syncs), kept here as a reference."""

    def forward(self, input, hx=None, mask=None):  # noqa: A002
        from torch.nn.utils.rnn import pack_padded_sequence, pad_packed_sequence

        x = input if self.batch_first else input.transpose(0, 1)
        t = x.shape[1]
        lengths = mask.sum(1)
        order = torch.argsort((~mask).to(torch.int8), dim=1, stable=True)
        packed = pack_padded_sequence(
            x.gather(1, order[..., None].expand_as(x)),
            lengths.clamp(min=1).cpu(),
            batch_first=True,
            enforce_sorted=False,
        )
        out, (h, c) = super().forward(packed, hx)
        out, _ = pad_packed_sequence(out, batch_first=True, total_length=t)
        out = torch.zeros_like(out).scatter(1, order[..., None].expand_as(out), out)
        empty = (lengths == 0)[None, :, None]
        if empty.any():
            h0, c0 = hx if hx is not None else (torch.zeros_like(h), torch.zeros_like(c))
            h, c = torch.where(empty, h0, h), torch.where(empty, c0, c)
        out = out * mask[..., None].to(out.dtype)
        return (out if self.batch_first else out.transpose(0, 1)), (h, c)


def _outputs_and_grads(lstm, x, mask, hx):
    x = x.clone().requires_grad_()
    hx = tuple(s.clone().requires_grad_() for s in hx) if hx is not None else None
    out, (h, c) = lstm(x if lstm.batch_first else x.transpose(0, 1), hx, mask=mask)
    out = out if lstm.batch_first else out.transpose(0, 1)
    w = torch.linspace(-1, 1, out.numel()).view_as(out)
    ((out * w).sum() + (h * 1.5).sum() + (c * -0.7).sum()).backward()
    grads = [x.grad] + ([s.grad for s in hx] if hx is not None else []) + [p.grad for p in lstm.parameters()]
    return [out, h, c] + grads


@pytest.mark.parametrize("batch_first", [True, False])
@pytest.mark.parametrize("with_state", [False, True])
def test_masked_lstm_equals_the_packed_formulation(batch_first, with_state):
    """Outputs, final (h, c) and every gradient within 1e-5, over 300 steps, with rows that are all padding."""
    torch.manual_seed(1)
    n, t = 9, 300
    new, old = MaskedLSTM(6, 8, batch_first=batch_first), PackedLSTM(6, 8, batch_first=batch_first)
    old.load_state_dict(new.state_dict())
    x = torch.randn(n, t, 6)
    lengths = torch.tensor([300, 0, 1, 17, 150, 299, 0, 64, 2])
    mask = torch.arange(t)[None] >= (t - lengths)[:, None]  # front padding, as the data has
    mask[4, 200:210] = False  # and holes in the middle
    hx = (torch.randn(1, n, 8), torch.randn(1, n, 8)) if with_state else None
    names = ["out", "h", "c", "dx"] + (["dh0", "dc0"] if with_state else []) + [k for k, _ in new.named_parameters()]
    for name, a, b in zip(names, _outputs_and_grads(new, x, mask, hx), _outputs_and_grads(old, x, mask, hx)):
        torch.testing.assert_close(a, b, atol=1e-5, rtol=1e-5, msg=name)
    out, (h, c) = new(x if batch_first else x.transpose(0, 1), hx, mask=mask)
    for row in (1, 6):  # all padding: the initial state, untouched, and no output
        assert torch.equal(h[0, row], hx[0][0, row] if with_state else torch.zeros(8))
        assert torch.equal(c[0, row], hx[1][0, row] if with_state else torch.zeros(8))
    new.final_cell = False  # as SentimentLSTM, which reads h only: the same out and h, and no c
    out_h, (h_only, no_c) = new(x if batch_first else x.transpose(0, 1), hx, mask=mask)
    assert no_c is None and torch.equal(out_h, out) and torch.equal(h_only, h)


def test_masked_lstm_makes_no_host_sync():
    """The net traces as one graph (a host sync or a data-dependent shape would break it); the old one did not."""
    torch.manual_seed(0)
    net = SentimentLSTM(vocab_size=50, embed_dim=8, hidden_size=6).eval()
    ids = torch.nn.functional.pad(torch.randint(2, 50, (4, 12)), (5, 0))
    ids[1] = 0
    torch._dynamo.reset()
    with torch._dynamo.config.patch(allow_rnn=True):  # dynamo leaves nn.LSTM to eager unless told
        got = torch.compile(net, fullgraph=True, backend="eager")(ids)
        torch.testing.assert_close(got, net(ids), atol=1e-6, rtol=0)
        old = PackedLSTM(8, 6, batch_first=True)
        old.load_state_dict(net.lstm.state_dict())
        net.lstm = old
        torch._dynamo.reset()
        with pytest.raises(torch._dynamo.exc.Unsupported, match="pack_padded_sequence"):
            torch.compile(net, fullgraph=True, backend="eager")(ids)
    torch._dynamo.reset()


SYNCS = ("cpu", "item", "tolist", "numpy", "__bool__", "__int__", "__float__", "__index__")


@pytest.mark.parametrize("lstm_class,syncs", [(MaskedLSTM, False), (PackedLSTM, True)])
def test_a_training_step_reads_nothing_back_from_the_device(monkeypatch, lstm_class, syncs):
    """Count the calls that copy a value to the host (each one stalls a GPU): none in a step; the old one made some."""
    torch.manual_seed(0)
    net = SentimentLSTM(vocab_size=50, embed_dim=8, hidden_size=6)
    net.lstm = lstm_class(8, 6, batch_first=True)
    ids = torch.nn.functional.pad(torch.randint(2, 50, (4, 12)), (5, 0))
    ids[1] = 0
    calls = []
    for name in SYNCS:
        original = getattr(torch.Tensor, name)
        monkeypatch.setattr(
            torch.Tensor, name, lambda self, *a, _f=original, _n=name, **k: calls.append(_n) or _f(self, *a, **k)
        )
    net(ids).sum().backward()
    monkeypatch.undo()
    assert bool(calls) == syncs, calls


def scramble_padding(net: SentimentLSTM) -> SentimentLSTM:
    """Non-zero LSTM biases (as training leaves them) and a non-zero padding embedding: with Keras' initial weights
    (zero biases, zero padding row) a padding step leaves the zero state as it was, masked or not, so a test on them
    could not tell padding skipped from padding processed."""
    with torch.no_grad():
        for p in (net.lstm.bias_ih_l0, net.lstm.bias_hh_l0):
            p.uniform_(-1.0, 1.0)
        net.embedding.weight[0].uniform_(-0.5, 0.5)
    return net


def test_padding_does_not_change_the_prediction():
    torch.manual_seed(0)
    tok = text.build_tokenizer([" ".join(POSITIVE + NEGATIVE + FILLER)] * 3, 100)
    net = scramble_padding(SentimentLSTM(vocab_size=100, embed_dim=16, hidden_size=8)).eval()
    reviews = ["A wonderful film", "the plot was a tedious mess and the actor was awful " * 3, "moving"]
    short, long = (torch.from_numpy(text.encode(tok, reviews, n)) for n in (50, 80))

    def unmasked(ids):  # the same LSTM stepping through the padding
        return net.head(torch.nn.LSTM.forward(net.lstm, net.embedding(ids))[1][0][-1])

    with torch.no_grad():
        assert net(short).shape == (3, 1)
        torch.testing.assert_close(net(short), net(long), atol=1e-5, rtol=0)
        for i, review in enumerate(reviews):  # each review alone, with no padding at all, predicts the same
            alone = torch.from_numpy(text.encode(tok, [review], int(text.token_counts(short.numpy())[i])))
            torch.testing.assert_close(net(alone), net(short)[i : i + 1], atol=1e-5, rtol=0)
            if len(review) < 20:  # the data are hard: stepping through the padding would predict otherwise (the
                # long review's 33 words wash out any start the LSTM had, so its prediction could not tell)
                assert (unmasked(alone) - unmasked(short[i : i + 1])).abs().item() > 1e-3, review


def test_scan_lstm_matches_nn_lstm_on_xla():
    proc = run_paced([sys.executable, str(SCRIPTS / "imdb_scan_check.py")], 300, env=cli_env(1))
    assert proc.returncode == 0 and proc.stdout.strip().endswith("ok"), proc.stderr[-3000:]


# --- fit on XLA and CPU, then predict from the checkpoint on a plain CPU ----------------------------------------------

FIT = ("fit", "recipe=imdb", "maxlen=64", "model.net.embed_dim=32", "lr=0.01", "download=false")


def per_epoch(run, key):
    return {int(r["epoch"]): float(r[key]) for r in metrics_rows(run) if r.get(key)}


@pytest.fixture(scope="module")
def cli_root(tmp_path_factory) -> Path:
    """145 training reviews: two steps of a global batch of 64 per epoch."""
    return write_aclimdb(tmp_path_factory.mktemp("imdb_cli"), per_class=72)


@pytest.fixture(scope="module")
def xla_run(cli_root, tmp_path_factory):
    work = tmp_path_factory.mktemp("imdb_xla")
    proc = run_cli(*FIT, "accelerator=xla", "devices=1", "batch_size=64", "epochs=2", f"data_dir={cli_root}", cwd=work)
    return work / "runs" / "imdb" / "version_0", proc


@pytest.fixture(scope="module")
def cpu_run(cli_root, tmp_path_factory):
    work = tmp_path_factory.mktemp("imdb_cpu")
    # precision=32: compared with the XLA run's float32 losses (the CPU's default may be bf16, runtime/eager/fast_path.py)
    run_cli(
        *FIT,
        "accelerator=cpu",
        "precision=32",
        "batch_size=64",
        "epochs=1",
        "test_after_fit=false",
        f"data_dir={cli_root}",
        cwd=work,
    )
    return work / "runs" / "imdb" / "version_0"


@pytest.fixture(scope="module")
def cpu_ckpt(cpu_run):
    return cpu_run / "checkpoints" / "last.ckpt"


def test_xla_fit_compiles_once_and_learns(xla_run):
    run, proc = xla_run
    compiles = per_epoch(run, "xla_compiles")
    assert compiles[0] >= 1 and compiles[1] == 0, compiles
    acc = per_epoch(run, "val_acc")
    assert len(acc) == 2 and acc[1] > 0.75, acc
    assert "held-out test accuracy:" in proc.stdout
    assert "XLA: net.lstm runs as a scan over time" in proc.stdout


def test_xla_and_cpu_train_alike_and_save_the_same_keys(xla_run, cpu_run):
    for key in ("train_loss", "val_loss"):  # same seed, same two Adam steps: the scan trains as nn.LSTM does
        xla, cpu = per_epoch(xla_run[0], key)[0], per_epoch(cpu_run, key)[0]
        assert abs(xla - cpu) < 1e-4, (key, xla, cpu)
    xla = torch.load(xla_run[0] / "checkpoints" / "last.ckpt", weights_only=True)
    cpu = torch.load(cpu_run / "checkpoints" / "last.ckpt", weights_only=True)
    assert list(xla["state_dict"]) == list(cpu["state_dict"])
    assert "net.lstm.weight_hh_l0" in cpu["state_dict"]
    assert xla["xla_train"]["kind"] == "text" and xla["xla_train"]["arch"] == "lstm"  # a built-in net: by its key


@pytest.mark.slow  # default-suite time; SPMD equality stays in test_spmd.py
def test_eight_device_spmd_fit_matches_one_device(xla_run, cli_root, tmp_path):
    """8 x 8 reviews per step under SPMD is the 1-device step on 64, loss for loss."""
    run_cli(
        *FIT,
        "accelerator=xla",
        "devices=8",
        "batch_size=8",
        "epochs=2",
        "test_after_fit=false",
        f"data_dir={cli_root}",
        cwd=tmp_path,
        devices=8,
    )
    run = tmp_path / "runs" / "imdb" / "version_0"
    assert per_epoch(run, "xla_compiles")[1] == 0
    for key in ("train_loss", "val_loss", "val_acc"):
        spmd, one = per_epoch(run, key), per_epoch(xla_run[0], key)
        assert spmd.keys() == one.keys() == {0, 1}
        assert all(abs(spmd[e] - one[e]) < 1e-5 for e in spmd), (key, spmd, one)


def test_text_checkpoint_predicts_without_lightning_or_xla(xla_run, tmp_path):
    ckpt = xla_run[0] / "checkpoints" / "last.ckpt"
    (tmp_path / "one.txt").write_text("A wonderful, superb and moving film.<br />A masterpiece!")
    (tmp_path / "many.lines").write_text("awful boring mess\n\n" + "dreadful tedious terrible " * 400 + "\n")
    code = (
        "import sys; from xla_train.cli.main import main; rc = main(sys.argv[1:]);"
        "assert 'torch_xla' not in sys.modules and 'lightning' not in sys.modules; sys.exit(rc)"
    )
    proc = subprocess.run(
        [
            sys.executable,
            "-c",
            code,
            "predict",
            f"ckpt={ckpt}",
            "text=Brilliant, delightful.",
            f"inputs={tmp_path / 'one.txt'},{tmp_path / 'many.lines'}",
            "--lines",
            "batch_size=1",
        ],
        capture_output=True,
        text=True,
    )
    assert proc.returncode == 0, proc.stderr
    lines = [ln.split("\t") for ln in proc.stdout.strip().splitlines()]
    assert [ln[0] for ln in lines] == [
        "text",
        f"{tmp_path / 'one.txt'}:1",
        f"{tmp_path / 'many.lines'}:1",
        f"{tmp_path / 'many.lines'}:3",
    ]
    for _name, label, prob, probs in lines:
        neg, pos = (float(kv.split("=")[1]) for kv in probs.split())
        assert probs.startswith("neg=") and abs(neg + pos - 1) < 1e-3
        assert label == ("pos" if pos > 0.5 else "neg") and float(prob) == pytest.approx(max(neg, pos), abs=1e-4)


def test_text_predictions_do_not_depend_on_batch_size_or_length(cpu_ckpt):
    from xla_train.serve.predictor import load_for_inference

    p = load_for_inference(cpu_ckpt)
    assert p.kind == "text" and p.labels == ["neg", "pos"]
    reviews = ["superb", "a tedious mess " * 500, "the film was wonderful and moving", "awful.<br />Awful!"] * 5
    ref = p.probabilities(reviews, batch_size=len(reviews))
    assert ref.shape == (20, 2)
    for bs in (1, 3, 8):
        torch.testing.assert_close(p.probabilities(reviews, batch_size=bs), ref, atol=1e-6, rtol=0)
    torch.testing.assert_close(p.probabilities(reviews[1]), ref[1:2])  # a single string
    ids = p.preprocess(reviews[:4]).numpy()
    torch.testing.assert_close(p.probabilities(ids), ref[:4])  # token ids, as after_fit passes them


@pytest.mark.parametrize(
    "args,message",
    [
        (["text="], "text= is empty"),
        (["text=   "], "text= is empty"),
        (["text=<br /><br />"], "has no words"),
        (["inputs={d}/empty.txt"], "empty.txt is empty"),
        (["inputs={d}/blank.lines", "--lines"], "holds no reviews"),
        (["inputs={d}/image.png"], "is not a text file"),
        (["inputs={d}/nothing"], "holds no reviews (.txt files)"),
    ],
)
def test_bad_text_inputs_are_refused_in_one_line(cpu_ckpt, tmp_path, capsys, args, message):
    (tmp_path / "empty.txt").write_text("")
    (tmp_path / "blank.lines").write_text("\n  \n\n")
    (tmp_path / "image.png").write_bytes(b"\x89PNG\r\n\x1a\n\x00\x00\x00\rIHDR")
    (tmp_path / "nothing").mkdir()
    argv = ["predict", f"ckpt={cpu_ckpt}"] + [a.format(d=tmp_path) for a in args]
    assert main(argv) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and message in err[0], err


def test_a_model_that_is_too_small_for_the_vocabulary_is_refused(imdb_root, tmp_path, capsys):
    rc = main(
        [
            "fit",
            "recipe=imdb",
            "accelerator=cpu",
            f"data_dir={imdb_root}",
            "download=false",
            "maxlen=64",
            "data.vocab_size=20000",
            "model.net.vocab_size=50",
            f"--runs_dir={tmp_path / 'runs'}",
        ]
    )
    err = capsys.readouterr().err.strip().splitlines()
    assert rc == 2 and "model.net.vocab_size=20000" in err[-1], err
    assert list(tmp_path.iterdir()) == []  # refused before the run folder exists


def test_an_image_checkpoint_refuses_text(tmp_path, capsys):
    from xla_train.models import CifarCNN

    info = {
        "kind": "image",
        "labels": [str(i) for i in range(10)],
        "image_size": 32,
        "mean": [0.5] * 3,
        "std": [0.25] * 3,
    }
    save_checkpoint(tmp_path / "cnn.ckpt", CifarCNN(), {}, info)
    assert main(["predict", f"ckpt={tmp_path / 'cnn.ckpt'}", "text=A wonderful film"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "classifies images" in err[0], err
