#!/usr/bin/env python3
"""make_tokens.py — turns a text corpus into the token files `tlm train` reads: a flat array of
uint16 token ids, raw (.bin, the np.memmap(path, dtype=np.uint16) convention of CS336) or .npy.

Tokenizers:
  bytes (default)  byte-level: each UTF-8 byte is one id, vocab 256 (`tlm train --vocab-size 256`).
                   Pure standard library, so CI can run it.
  bpe              a byte-level BPE trained on the corpus with the `tokenizers` package (pip install
                   tokenizers) to --vocab-size ids; the tokenizer is saved beside the tokens.

The corpus: text files or directories (their regular files, sorted by name; a fortune file's "%"
separator lines are dropped). With no input it reads the small English corpus Debian's
`fortunes-min` package installs (/usr/share/games/fortunes: fortunes, literature, riddles).
Documents (files) are joined with a blank line; the LAST --val-fraction of the tokens is the
validation split (held-out text, not random rows of the training text).

  python3 tools/make_tokens.py --out data/fortunes        # data/fortunes-train.bin, -val.bin
  python3 tools/make_tokens.py corpus/ --tokenizer bpe --vocab-size 1024 --out data/c --format npy

Prints the token counts, the vocabulary size to train with, and the unigram entropy of the training
tokens in nats (the loss a model that ignores context cannot beat).
"""

import argparse
import array
import math
import os
import sys
import tempfile
from collections import Counter

DEFAULT_CORPUS = "/usr/share/games/fortunes"


def corpus_files(paths):
    files = []
    for p in paths:
        if os.path.isdir(p):
            for name in sorted(os.listdir(p)):
                f = os.path.join(p, name)
                # fortune's index files (*.dat) and its .u8 links are not text
                if os.path.isfile(f) and not os.path.islink(f) and not name.endswith(".dat"):
                    files.append(f)
        elif os.path.isfile(p):
            files.append(p)
        else:
            raise SystemExit(f"make_tokens.py: {p}: no such file or directory")
    if not files:
        raise SystemExit("make_tokens.py: the corpus holds no files")
    return files


def read_text(files) -> str:
    docs = []
    for f in files:
        with open(f, "rb") as fh:
            text = fh.read().decode("utf-8", errors="replace")
        lines = [ln for ln in text.splitlines() if ln.strip() != "%"]  # fortune separators
        docs.append("\n".join(lines).strip())
    return "\n\n".join(d for d in docs if d) + "\n"


def encode_bytes(text: str):
    return list(text.encode("utf-8")), 256, None


def encode_bpe(text: str, vocab_size: int, out_prefix: str):
    try:
        from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
    except ImportError:
        raise SystemExit("make_tokens.py: --tokenizer bpe needs the tokenizers package (pip install tokenizers)")
    if not 257 <= vocab_size <= 65536:
        raise SystemExit("make_tokens.py: --vocab-size for bpe must be in [257, 65536] (uint16 ids)")
    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(vocab_size=vocab_size, initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
                                  special_tokens=[])
    tok.train_from_iterator(text.split("\n\n"), trainer=trainer)
    ids = tok.encode(text).ids
    path = out_prefix + "-tokenizer.json"
    tok.save(path)
    return ids, tok.get_vocab_size(), path


def write_tokens(path: str, ids, fmt: str):
    """uint16, little-endian, through a temporary file and a rename (never a half-written file)."""
    a = array.array("H", ids)
    if sys.byteorder != "little":
        a.byteswap()
    d = os.path.dirname(os.path.abspath(path))
    fd, tmp = tempfile.mkstemp(dir=d, prefix="." + os.path.basename(path) + ".")
    mask = os.umask(0)
    os.umask(mask)
    os.fchmod(fd, 0o666 & ~mask)  # mkstemp made it 0600: the file gets the mode any other output has
    try:
        with os.fdopen(fd, "wb") as f:
            if fmt == "npy":  # format 1.0: magic, header padded to a multiple of 64 bytes
                header = "{'descr': '<u2', 'fortran_order': False, 'shape': (%d,), }" % len(a)
                header += " " * (63 - (10 + len(header)) % 64) + "\n"
                f.write(b"\x93NUMPY\x01\x00" + len(header).to_bytes(2, "little") + header.encode("latin1"))
            f.write(a.tobytes())
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException:
        if os.path.exists(tmp):
            os.unlink(tmp)
        raise


def unigram_entropy(ids) -> float:
    """-sum p log p over the ids' frequencies, in nats."""
    n = len(ids)
    return -sum(c / n * math.log(c / n) for c in Counter(ids).values())


def main(argv=None):
    p = argparse.ArgumentParser(description="Text corpus -> uint16 token files for `tlm train`.")
    p.add_argument("inputs", nargs="*", help=f"text files or directories (default: {DEFAULT_CORPUS}, "
                                              "Debian's fortunes-min)")
    p.add_argument("--out", required=True, help="output prefix: PREFIX-train.bin and PREFIX-val.bin (or .npy)")
    p.add_argument("--tokenizer", choices=("bytes", "bpe"), default="bytes")
    p.add_argument("--vocab-size", type=int, default=1024, help="bpe only (default 1024)")
    p.add_argument("--val-fraction", type=float, default=0.1, help="the last fraction held out (default 0.1)")
    p.add_argument("--format", choices=("bin", "npy"), default="bin")
    args = p.parse_args(argv)
    if not 0.0 <= args.val_fraction < 1.0:
        p.error("--val-fraction must be in [0, 1)")
    inputs = args.inputs or [DEFAULT_CORPUS]
    if not args.inputs and not os.path.isdir(DEFAULT_CORPUS):
        raise SystemExit(f"make_tokens.py: {DEFAULT_CORPUS} is missing: install Debian's fortunes-min "
                         "(apt-get install fortunes-min) or name a corpus")
    text = read_text(corpus_files(inputs))
    out_dir = os.path.dirname(os.path.abspath(args.out))
    os.makedirs(out_dir, exist_ok=True)
    if args.tokenizer == "bytes":
        ids, vocab, tok_path = encode_bytes(text)
    else:
        ids, vocab, tok_path = encode_bpe(text, args.vocab_size, args.out)
    n_val = int(len(ids) * args.val_fraction)
    train, val = ids[: len(ids) - n_val], ids[len(ids) - n_val:]
    ext = ".npy" if args.format == "npy" else ".bin"
    write_tokens(args.out + "-train" + ext, train, args.format)
    if n_val:
        write_tokens(args.out + "-val" + ext, val, args.format)
    print(f"corpus: {len(inputs)} input(s), {len(text.encode('utf-8'))} bytes; tokenizer {args.tokenizer}, "
          f"vocab {vocab}" + (f" (saved {tok_path})" if tok_path else ""))
    print(f"{args.out}-train{ext}: {len(train)} tokens; " + (f"{args.out}-val{ext}: {n_val} tokens" if n_val
                                                           else "no validation split"))
    print(f"unigram entropy of the training tokens: {unigram_entropy(train):.4f} nats "
          f"(train with --vocab-size {vocab})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
