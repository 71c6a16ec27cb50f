"""Run by tests/test_pods.py in a fresh process (XLA's device count and mode are fixed for a process's life)."""

import sys
import xla_train.data.imdb as imdb

imdb.URL, imdb.MD5 = sys.argv[2], sys.argv[3]
d = imdb.load_imdb(sys.argv[1], download=True, maxlen=32, vocab_size=50)
print(len(d["train"][1]), len(d["test"][1]), d["tokenizer"][:40])
