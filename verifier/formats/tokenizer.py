"""Tokenizers for text given to the suite: GPT-2's byte-level BPE and llama2.c's `tokenizer.bin`.

GPT-2's is `transformers.GPT2TokenizerFast` loaded from a directory with `vocab.json` and
`merges.txt`. llama2.c's is its encoder written over (pieces, scores): a dummy-prefix space, one
piece per UTF-8 character (bytes as `<0xXX>` pieces when a character has none), then the merge loop
of `run.c`: merge the adjacent pair whose concatenation is the piece with the highest score, until
no pair merges. That is what sentencepiece gives for Llama 2's vocabulary on ordinary text.

`tokenizer.bin` is read by `verifier.formats` (whose CheckpointError reports a malformed file).
A tokenizer is looked for where `find_tokenizer` says; when there is none the caller says so
(`TokenizerNotFound`) instead of guessing ids.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any, Protocol

from verifier.formats import read_tokenizer
from verifier.formats.data import data_dir
from verifier.model.config import Family

# llama2.c feeds token 1 (BOS) at position 0, as Llama 2's sentencepiece model does.
LLAMA_BOS = 1
# run.c starts its best merge score here, so a piece scored at or below it never merges.
_NO_MERGE = -1e10
GPT2_HF_REPOS = ("openai-community/gpt2", "gpt2")


class TokenizerError(ValueError):
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


class GPT2Tokenizer:
    """GPT-2's byte-level BPE, through `transformers.GPT2TokenizerFast`."""

    def __init__(self, hf_tokenizer: Any, source: str) -> None:
        self._hf = hf_tokenizer
        self.source = source

    @property
    def vocab_size(self) -> int:
        return len(self._hf)

    def encode(self, text: str) -> list[int]:
        return list(self._hf.encode(text))

    def piece(self, token: int) -> str:
        return str(self._hf.decode([token]))


def load_gpt2_tokenizer(directory: str | Path) -> GPT2Tokenizer:
    """GPT-2's tokenizer from a directory holding `vocab.json` and `merges.txt`."""
    directory = Path(directory)
    missing = [name for name in ("vocab.json", "merges.txt") if not (directory / name).is_file()]
    if missing:
        raise TokenizerError(f"{directory}: not a GPT-2 tokenizer directory: {', '.join(missing)} missing")
    from transformers import GPT2TokenizerFast  # type: ignore[attr-defined]  # lazily exported

    hf_tokenizer = GPT2TokenizerFast.from_pretrained(str(directory), local_files_only=True)
    # transformers 5 returns an empty tokenizer, not an error, for files it cannot use.
    if len(hf_tokenizer) <= 1:
        raise TokenizerError(f"{directory}: vocab.json and merges.txt gave an empty tokenizer")
    return GPT2Tokenizer(hf_tokenizer, str(directory))


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


def _candidates(family: Family, model_dir: Path | None) -> list[Path]:
    """Where a tokenizer of `family` may be, most specific first."""
    found = []
    if model_dir is not None and (model_dir / ("vocab.json" if family == "gpt2" else "tokenizer.bin")).is_file():
        found.append(model_dir)
    data = data_dir()
    found.append(data / "gpt2-tokenizer" if family == "gpt2" else data / "llama2c" / "tokenizer.bin")
    if family == "gpt2":
        from huggingface_hub import try_to_load_from_cache

        for repo in GPT2_HF_REPOS:
            cached = try_to_load_from_cache(repo, "vocab.json")
            if isinstance(cached, str):
                found.append(Path(cached).parent)
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
