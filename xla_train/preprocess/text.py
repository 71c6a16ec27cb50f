"""Text to fixed-shape token ids, shared by training and inference.

One Hugging Face `tokenizers` WordLevel tokenizer does both jobs and travels inside the checkpoint as JSON, so a
checkpoint predicts on exactly the ids it was trained on. It lower-cases, drops IMDB's `<br />` breaks and splits
words from punctuation; id 0 is padding, id 1 every word outside the vocabulary. Sequences are cut and padded to
`maxlen` (so every batch has one shape and XLA compiles once), at the front by default as Keras' pad_sequences does,
or at the back (`padding`, `truncating`: "pre" or "post"), which a net that packs its batch needs
(docs/own_model.md). Only numpy and tokenizers: inference imports this.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence

import numpy as np

PAD, UNK = "[PAD]", "[UNK]"
PAD_ID, UNK_ID = 0, 1
# Bump when normalisation or splitting changes: cached token arrays are keyed on it.
PIPELINE_VERSION = 1
CHUNK = 4096  # texts per encode_batch call: bounds memory, keeps every core busy
SIDES = ("pre", "post")  # where padding and truncating act, as Keras' pad_sequences names them


def _configure(tokenizer):
    from tokenizers import Regex, normalizers, pre_tokenizers

    tokenizer.normalizer = normalizers.Sequence(
        [normalizers.Replace(Regex(r"<br\s*/?>"), " "), normalizers.Lowercase()]
    )
    tokenizer.pre_tokenizer = pre_tokenizers.Whitespace()  # \w+|[^\w\s]+, in Rust
    return tokenizer


def build_tokenizer(texts: Iterable[str], vocab_size: int):
    """A tokenizer whose vocabulary is [PAD], [UNK] and the vocab_size - 2 most frequent words of `texts`.

    vocab_size counts the two reserved ids, as Keras' num_words does, so it is the
    number of rows the embedding needs. Ties in frequency are broken alphabetically.
    """
    from tokenizers import Tokenizer
    from tokenizers.models import WordLevel
    from tokenizers.trainers import WordLevelTrainer

    if vocab_size < 3:
        raise ValueError(f"vocab_size={vocab_size} leaves no room for words beside {PAD} and {UNK}")
    counter = _configure(Tokenizer(WordLevel(unk_token=UNK)))
    counter.train_from_iterator(
        texts, WordLevelTrainer(vocab_size=vocab_size, special_tokens=[PAD, UNK], show_progress=False)
    )
    # Rebuilt without "added tokens": otherwise the literal text "[PAD]" in a review would become id 0.
    return _configure(Tokenizer(WordLevel(counter.get_vocab(), unk_token=UNK)))


def tokenizer_to_json(tokenizer) -> str:
    return tokenizer.to_str()


def tokenizer_from_json(text: str):
    from tokenizers import Tokenizer

    return Tokenizer.from_str(text)


def tokenizer_version() -> str:
    import tokenizers

    return f"tokenizers-{tokenizers.__version__}/pipeline-{PIPELINE_VERSION}"


def check_sides(padding: str, truncating: str) -> None:
    for key, value in (("padding", padding), ("truncating", truncating)):
        if value not in SIDES:
            raise ValueError(f"{key}={value!r}; use pre (at the front, Keras' default) or post (at the back)")


def fit_to_length(
    rows: Sequence[Sequence[int]], maxlen: int, padding: str = "pre", truncating: str = "pre"
) -> np.ndarray:
    """Variable-length id lists -> int64 (N, maxlen): each cut to maxlen ids (its last ones with truncating="pre",
    its first with "post"), padding before them ("pre") or after ("post")."""
    check_sides(padding, truncating)
    out = np.full((len(rows), maxlen), PAD_ID, dtype=np.int64)
    for i, ids in enumerate(rows):
        ids = ids[-maxlen:] if truncating == "pre" else ids[:maxlen]
        if len(ids):
            if padding == "pre":
                out[i, maxlen - len(ids) :] = ids
            else:
                out[i, : len(ids)] = ids
    return out


def encode(tokenizer, texts: Sequence[str], maxlen: int, padding: str = "pre", truncating: str = "pre") -> np.ndarray:
    """Texts -> int64 (N, maxlen) ids, padded and truncated at the front, or where `padding` and `truncating` say."""
    if maxlen < 1:
        raise ValueError(f"maxlen={maxlen} must be at least 1")
    parts = [
        fit_to_length(
            [e.ids for e in tokenizer.encode_batch_fast(list(texts[i : i + CHUNK]))], maxlen, padding, truncating
        )
        for i in range(0, len(texts), CHUNK)
    ]
    return np.concatenate(parts) if parts else np.zeros((0, maxlen), dtype=np.int64)


def tokenise(
    texts: dict[str, Sequence[str]],
    maxlen: int,
    vocab_size: int,
    tokenizer_json: str | None = None,
    padding: str = "pre",
    truncating: str = "pre",
):
    """({split: int64 (N, maxlen) ids}, the tokenizer's JSON): with a given tokenizer (a checkpoint's), or one built
    from the training texts only, never from another split's."""
    if tokenizer_json is not None:
        tokenizer = tokenizer_from_json(tokenizer_json)
    else:
        tokenizer = build_tokenizer(texts["train"], vocab_size)
        tokenizer_json = tokenizer_to_json(tokenizer)
    return {split: encode(tokenizer, t, maxlen, padding, truncating) for split, t in texts.items()}, tokenizer_json


def token_counts(ids: np.ndarray) -> np.ndarray:
    """Real (non-padding) tokens per row."""
    return (np.asarray(ids) != PAD_ID).sum(axis=1)
