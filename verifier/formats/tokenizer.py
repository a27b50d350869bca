"""Tokenizers for text given to the suite: GPT-2's byte-level BPE and llama2.c's `tokenizer.bin`.

GPT-2's is its byte-level BPE over `vocab.json` + `merges.txt` as OpenAI published them: text
is split into words by GPT-2's pattern (contractions, letters, digits, other symbols, each with at
most one leading space, and runs of whitespace); each word's UTF-8 bytes are spelled in GPT-2's
byte alphabet (a printable character for each of the 256 bytes); then the adjacent pair ranked
first in `merges.txt` merges, everywhere in the word, until no ranked pair is left.
`<|endoftext|>` in the text is that one token, as `transformers`' GPT-2 tokenizers treat it; the
tests check the ids against `transformers.GPT2TokenizerFast` on drawn text.

llama2.c's is its encoder written over (pieces, scores): a dummy-prefix space, one piece per UTF-8
character (bytes as `<0xXX>` pieces when a character has none), then the merge loop of `run.c`:
merge the adjacent pair whose concatenation is the piece with the highest score, until no pair
merges. That is what sentencepiece gives for Llama 2's vocabulary on ordinary text.

`tokenizer.bin` is read by `verifier.formats` (whose CheckpointError reports a malformed file).
A tokenizer is looked for where `find_tokenizer` says; when there is none the caller says so
(`TokenizerNotFound`) instead of guessing ids.
"""

from __future__ import annotations

import functools
import itertools
from collections.abc import Sequence
from pathlib import Path
from typing import Protocol

import regex

from verifier.formats import read_tokenizer
from verifier.formats.data import data_dir
from verifier.formats.errors import CheckpointError
from verifier.formats.fileio import is_regular, read_small
from verifier.formats.hf_cache import cached_file
from verifier.formats.jsonio import read_json
from verifier.messages import BoundedMessage, quoted
from verifier.model.config import Family

# llama2.c feeds token 1 (BOS) at position 0, as Llama 2's sentencepiece model does.
LLAMA_BOS = 1
# run.c starts its best merge score here, so a piece scored at or below it never merges.
_NO_MERGE = -1e10
GPT2_HF_REPOS = ("openai-community/gpt2", "gpt2")
END_OF_TEXT = "<|endoftext|>"
# GPT-2's word pattern (\p{L} letters, \p{N} digits of any script).
_WORDS = regex.compile(r"""'s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+""")

# GPT-2's vocab.json is 1.0 MB for 50,257 pieces (merges.txt 0.46 MB): 32 MiB is 30 times that.
MAX_VOCAB_BYTES = 2**25


class TokenizerError(BoundedMessage, ValueError):
    """A tokenizer that cannot be read, or that does not fit the model; the message says which and why."""


class TokenizerNotFound(TokenizerError):
    """No tokenizer for a model was found; the message lists where the suite looked."""


class Tokenizer(Protocol):
    """Text to the token ids a model is fed, and ids back to their pieces."""

    source: str

    @property
    def vocab_size(self) -> int: ...

    def encode(self, text: str) -> list[int]:
        """The ids of `text` as the model is fed them (llama2.c's BOS first)."""
        ...

    def piece(self, token: int) -> str:
        """The text of one token id."""
        ...


@functools.cache
def byte_alphabet() -> tuple[str, ...]:
    """The character that stands for each byte: printable Latin-1 bytes for themselves, the other
    68 (controls, space, ...) for U+0100, U+0101, ... in byte order, so no piece holds a space."""
    printable = {*range(ord("!"), ord("~") + 1), *range(ord("¡"), ord("¬") + 1), *range(ord("®"), ord("ÿ") + 1)}
    others = iter(range(256, 512))
    return tuple(chr(b) if b in printable else chr(next(others)) for b in range(256))


class GPT2Tokenizer:
    """Text to GPT-2 ids and ids back to their text, over a vocabulary {piece: id} and ranked merges."""

    def __init__(self, vocab: dict[str, int], merges: list[tuple[str, str]], source: str) -> None:
        self.source = source
        self._ids = vocab
        self._pieces = {i: piece for piece, i in vocab.items()}
        self._ranks = {pair: rank for rank, pair in enumerate(merges)}
        self._bytes = {char: byte for byte, char in enumerate(byte_alphabet())}
        self._words: dict[str, list[int]] = {}

    @property
    def vocab_size(self) -> int:
        return len(self._ids)

    def encode(self, text: str) -> list[int]:
        ids: list[int] = []
        parts = text.split(END_OF_TEXT) if END_OF_TEXT in self._ids else [text]
        for n, part in enumerate(parts):
            if n:
                ids.append(self._ids[END_OF_TEXT])
            for word in _WORDS.findall(part):
                if word not in self._words:
                    self._words[word] = self._merge(word)
                ids += self._words[word]
        return ids

    def _merge(self, word: str) -> list[int]:
        alphabet = byte_alphabet()
        symbols = [alphabet[b] for b in word.encode("utf-8")]
        while len(symbols) > 1:
            ranked = [(self._ranks.get(pair, len(self._ranks)), pair) for pair in itertools.pairwise(symbols)]
            rank, (left, right) = min(ranked)
            if rank == len(self._ranks):
                break
            merged: list[str] = []
            for symbol in symbols:
                if merged and merged[-1] == left and symbol == right:
                    merged[-1] = left + right
                else:
                    merged.append(symbol)
            symbols = merged
        return [self._ids[s] for s in symbols]

    def piece(self, token: int) -> str:
        """The text of one id (a lone part of a multi-byte character shows as U+FFFD)."""
        return bytes(self._bytes[c] for c in self._pieces[token]).decode("utf-8", errors="replace")


def _read_vocab(path: Path) -> dict[str, int]:
    try:
        vocab = read_json(path, "vocabulary", MAX_VOCAB_BYTES)
    except CheckpointError as e:  # this module's errors are TokenizerErrors
        raise TokenizerError(str(e)) from None
    if not isinstance(vocab, dict) or not vocab:
        found = "{}" if isinstance(vocab, dict) else type(vocab).__name__
        raise TokenizerError(f"{path}: must be a non-empty object {{piece: id}}, found {found}")
    n = len(vocab)
    bad = next(((k, v) for k, v in vocab.items() if type(v) is not int or not 0 <= v < n), None)
    if bad is not None:
        piece, id_ = quoted(bad[0], literal=True), quoted(bad[1], literal=True)  # a hostile file's piece: 20 MB
        raise TokenizerError(f"{path}: piece {piece} has id {id_}; the ids must be integers 0 .. {n - 1}")
    if len(set(vocab.values())) != n:
        raise TokenizerError(f"{path}: {n - len(set(vocab.values()))} ids are given to more than one piece")
    absent = [c for c in byte_alphabet() if c not in vocab]
    if absent:
        raise TokenizerError(
            f"{path}: not a byte-level BPE vocabulary: {len(absent)} of the 256 byte pieces are missing "
            f"(first: {absent[0]!r})"
        )
    return vocab


def _read_merges(path: Path, vocab: dict[str, int]) -> list[tuple[str, str]]:
    try:
        lines = read_small(path, "merges", MAX_VOCAB_BYTES).decode("utf-8").splitlines()
    except CheckpointError as e:  # this module's errors are TokenizerErrors
        raise TokenizerError(str(e)) from None
    except UnicodeDecodeError as e:
        raise TokenizerError(f"{path}: not readable text: {e}") from None
    merges = []
    for number, line in enumerate(lines, 1):
        if line.startswith("#version") or not line.strip():
            continue
        pair = line.split(" ")
        if len(pair) != 2 or not all(pair):
            raise TokenizerError(
                f"{path}:{number}: expected two pieces separated by one space, found {quoted(line, literal=True)}"
            )
        left, right = pair
        unknown = next((p for p in (left, right, left + right) if p not in vocab), None)
        if unknown is not None:
            merge, piece = quoted(line, literal=True), quoted(unknown, literal=True)
            raise TokenizerError(f"{path}:{number}: merge {merge}: {piece} is not in vocab.json")
        merges.append((left, right))
    return merges


def load_gpt2_tokenizer(directory: str | Path) -> GPT2Tokenizer:
    """GPT-2's tokenizer from a directory holding `vocab.json` and `merges.txt`."""
    directory = Path(directory)
    missing = [name for name in ("vocab.json", "merges.txt") if not _present(directory / name)]
    if missing:
        raise TokenizerError(f"{directory}: not a GPT-2 tokenizer directory: {', '.join(missing)} missing")
    vocab = _read_vocab(directory / "vocab.json")
    return GPT2Tokenizer(vocab, _read_merges(directory / "merges.txt", vocab), str(directory))


class Llama2cTokenizer:
    """llama2.c's tokenizer over its pieces (bytes) and merge scores, one of each per id."""

    def __init__(self, pieces: Sequence[bytes], scores: Sequence[float], source: str) -> None:
        if len(pieces) != len(scores):
            raise TokenizerError(f"{source}: {len(pieces)} pieces but {len(scores)} scores")
        self.pieces = tuple(pieces)
        self.scores = tuple(float(s) for s in scores)
        self.source = source
        self._ids: dict[bytes, int] = {}
        for i, p in enumerate(self.pieces):
            self._ids.setdefault(p, i)  # run.c's lookup returns the first id with that piece

    @property
    def vocab_size(self) -> int:
        return len(self.pieces)

    def piece(self, token: int) -> str:
        return self.pieces[token].decode("utf-8", errors="replace")

    def encode(self, text: str, *, bos: bool = True) -> list[int]:
        """The ids of `text`: [BOS] (if `bos`) + the merged pieces of " " + text."""
        ids = self._characters(" " + text) if text else []
        while True:
            best_score, best_at, best_id = _NO_MERGE, -1, -1
            for at in range(len(ids) - 1):
                merged = self._ids.get(self.pieces[ids[at]] + self.pieces[ids[at + 1]])
                if merged is not None and self.scores[merged] > best_score:
                    best_score, best_at, best_id = self.scores[merged], at, merged
            if best_at < 0:
                break
            ids[best_at : best_at + 2] = [best_id]
        return [LLAMA_BOS, *ids] if bos else ids

    def _characters(self, text: str) -> list[int]:
        """One id per character, or one `<0xXX>` id per byte of a character without a piece."""
        ids = []
        for char in text:
            encoded = char.encode("utf-8")
            if encoded in self._ids:
                ids.append(self._ids[encoded])
                continue
            for byte in encoded:
                byte_piece = f"<0x{byte:02X}>".encode()
                if byte_piece not in self._ids:
                    raise TokenizerError(f"{self.source}: no piece for {char!r} and no byte piece {byte_piece!r}")
                ids.append(self._ids[byte_piece])
        return ids


def _load(family: Family, path: Path) -> Tokenizer:
    if family == "gpt2":
        return load_gpt2_tokenizer(path)
    file = path / "tokenizer.bin" if path.is_dir() else path
    read = read_tokenizer(file)
    return Llama2cTokenizer(read.pieces, read.scores, str(file))


def _present(path: Path) -> bool:
    """Whether a tokenizer file is at `path`; TokenizerError naming what is there instead of one (a named pipe,
    a device, a directory), which `is_file()` called absent: "vocab.json missing", or passed over for another."""
    try:
        return is_regular(path, path.name)
    except CheckpointError as e:
        raise TokenizerError(str(e)) from None


def _candidates(family: Family, model_dir: Path | None) -> list[Path]:
    """Where a tokenizer of `family` may be, most specific first."""
    found = []
    if model_dir is not None and _present(model_dir / ("vocab.json" if family == "gpt2" else "tokenizer.bin")):
        found.append(model_dir)
    data = data_dir()
    found.append(data / "gpt2-tokenizer" if family == "gpt2" else data / "llama2c" / "tokenizer.bin")
    if family == "gpt2":
        found += [vocab.parent for repo in GPT2_HF_REPOS if (vocab := cached_file(repo, "vocab.json")) is not None]
    return found


def find_tokenizer(
    family: Family, vocab_size: int, path: str | Path | None = None, *, model_dir: str | Path | None = None
) -> Tokenizer:
    """The tokenizer of a `family` model with `vocab_size` ids.

    `path` (a GPT-2 tokenizer directory, or llama2.c's `tokenizer.bin` or its directory) is used
    if given; otherwise the model's own directory `model_dir` (if it holds tokenizer files), the
    data directory ($VERIFIER_DATA_DIR, else the files shipped in the package) and, for GPT-2, the
    Hugging Face cache are searched.
    Raises TokenizerNotFound, or TokenizerError for a `path` that does not fit.
    """
    if path is not None:
        tokenizer = _load(family, Path(path))
        if tokenizer.vocab_size != vocab_size:
            raise TokenizerError(f"{path}: {tokenizer.vocab_size} tokens, but the model's vocab_size is {vocab_size}")
        return tokenizer
    looked = []
    for candidate in _candidates(family, Path(model_dir) if model_dir is not None else None):
        if not candidate.exists():
            looked.append(f"{candidate} (absent)")
            continue
        tokenizer = _load(family, candidate)
        if tokenizer.vocab_size == vocab_size:
            return tokenizer
        looked.append(f"{candidate} ({tokenizer.vocab_size} tokens)")
    raise TokenizerNotFound(f"no {family} tokenizer with {vocab_size} tokens; looked in: {'; '.join(looked)}")
