"""Tokenizers: llama2.c's encoder against sentencepiece's ids, GPT-2's against OpenAI's and against
transformers' on drawn text, and how they are found.

The expected ids are not ours: the llama2.c ones are sentencepiece's for Llama 2's vocabulary (the
expectations of llama2.c's own `test.c`), GPT-2's are those `shared/README.md` records.
"""

from __future__ import annotations

import functools
import hashlib
import itertools
import json
import os
import shutil
from pathlib import Path
from typing import Any

import pytest
from hypothesis import example, given, settings
from hypothesis import strategies as st

from tests import needs
from verifier.cli import main
from verifier.formats import CheckpointError, write_tokenizer
from verifier.formats import Tokenizer as FormatsTokenizer
from verifier.formats.data import DATA_DIR_ENV, PACKAGED_DATA_DIR
from verifier.formats.tokenizer import (
    LLAMA_BOS,
    GPT2Tokenizer,
    Llama2cTokenizer,
    TokenizerError,
    TokenizerNotFound,
    byte_alphabet,
    find_tokenizer,
    load_gpt2_tokenizer,
)
from verifier.model.presets import preset


def _ids(text: str) -> list[int]:
    return [int(i) for i in text.split()]


SENTENCEPIECE_IDS = [
    ("I believe the meaning of life is", [1, 306, 4658, 278, 6593, 310, 2834, 338]),
    (
        "Simply put, the theory of relativity states that ",
        [1, 3439, 17632, 1925, 29892, 278, 6368, 310, 14215, 537, 5922, 393, 29871],
    ),
    (
        "A brief message congratulating the team on the launch:\n\n        Hi everyone,\n\n        I just ",
        _ids(
            "1 319 11473 2643 378 629 271 18099 278 3815 373 278 6826 29901 13 13 4706 6324 14332 29892 13 13 4706 "
            "306 925 29871"
        ),
    ),
    ("Once upon a time", [1, 9038, 2501, 263, 931]),
]


@pytest.mark.parametrize(("text", "expected"), SENTENCEPIECE_IDS, ids=["meaning", "relativity", "newlines", "story"])
def test_llama2c_encoder_gives_sentencepieces_ids(llama_tokenizer: Llama2cTokenizer, text: str, expected: list[int]):
    assert llama_tokenizer.encode(text) == expected


def test_llama2c_encoder_falls_back_to_byte_pieces(llama_tokenizer: Llama2cTokenizer) -> None:
    ids = llama_tokenizer.encode("☃", bos=False)  # U+2603, UTF-8 E2 98 83, has no piece of its own
    assert [llama_tokenizer.piece(i) for i in ids] == [" ", "<0xE2>", "<0x98>", "<0x83>"]


def test_gpt2_tokenizer_gives_openais_ids(gpt2_tokenizer) -> None:
    assert gpt2_tokenizer.encode("The capital of France is") == [464, 3139, 286, 4881, 318]
    assert gpt2_tokenizer.encode(" Paris") == [6342]
    assert gpt2_tokenizer.vocab_size == 50257


# ---- the merge loop on small vocabularies -------------------------------------------------------


def _tokenizer(pieces: dict[str, float]) -> Llama2cTokenizer:
    return Llama2cTokenizer([p.encode() for p in pieces], list(pieces.values()), "test vocabulary")


def test_the_best_scored_merge_wins_then_the_leftmost() -> None:
    tok = _tokenizer({" ": 0, "a": 0, "b": 0, "c": 0, "ab": 1.0, "bc": 2.0, " a": -1.0})
    # " abc": " a" (-1), "ab" (1), "bc" (2) are candidates; "bc" scores best, then " a" merges.
    assert [tok.pieces[i] for i in tok.encode("abc", bos=False)] == [b" a", b"bc"]
    tied = _tokenizer({" ": 0, "a": 0, "aa": 1.0})
    assert [tied.pieces[i] for i in tied.encode("aaa", bos=False)] == [b" ", b"aa", b"a"]


def test_bos_comes_first_and_empty_text_is_bos_alone() -> None:
    tok = _tokenizer({" ": 0, "<s>": 0, "a": 0})
    assert tok.encode("") == [LLAMA_BOS]
    assert tok.encode("a") == [LLAMA_BOS, 0, 2]


def test_a_character_without_piece_or_byte_piece_is_an_error() -> None:
    with pytest.raises(TokenizerError, match="no piece for 'z'"):
        _tokenizer({" ": 0, "a": 0}).encode("az")


@st.composite
def vocabularies(draw: st.DrawFn) -> dict[str, float]:
    """Every single character of a small alphabet and the space, plus random merges with random scores."""
    alphabet = "abc"
    singles = {c: 0.0 for c in " " + alphabet}
    merged = draw(st.lists(st.text(" " + alphabet, min_size=2, max_size=4), max_size=12, unique=True), label="merges")
    scores = draw(st.lists(st.floats(-10, 10), min_size=len(merged), max_size=len(merged)), label="scores")
    return singles | dict(zip(merged, scores, strict=True))


@given(vocabulary=vocabularies(), text=st.text("abc ", max_size=20))
@example(vocabulary={" ": 0, "a": 0, "b": 0, "c": 0, "ab": 1.0, " a": 2.0}, text="ab")
def test_encoding_spells_the_text_and_leaves_no_pair_to_merge(vocabulary: dict[str, float], text: str) -> None:
    tok = _tokenizer(vocabulary)
    ids = tok.encode(text, bos=False)
    assert b"".join(tok.pieces[i] for i in ids) == (b" " + text.encode() if text else b"")
    for a, b in itertools.pairwise(ids):
        merged = tok.pieces[a] + tok.pieces[b]
        assert merged.decode() not in vocabulary, f"{merged!r} is in the vocabulary but was not merged: {ids}"


# ---- reading tokenizer.bin (through verifier.formats) -------------------------------------------------


def _write_tokenizer_bin(path: Path, pieces: list[bytes], scores: list[float]) -> Path:
    write_tokenizer(path, FormatsTokenizer(tuple(pieces), tuple(scores), max(map(len, pieces))))
    return path


def test_tokenizer_bin_is_read_piece_by_piece(tmp_path: Path) -> None:
    path = _write_tokenizer_bin(tmp_path / "tokenizer.bin", [b"<unk>", b"", b" the", b"\xe2"], [0.0, -1.5, 2.25, 0.0])
    tok = find_tokenizer("llama", 4, path)
    assert isinstance(tok, Llama2cTokenizer)
    assert tok.pieces == (b"<unk>", b"", b" the", b"\xe2")
    assert tok.scores == (0.0, -1.5, 2.25, 0.0)


def test_a_truncated_tokenizer_bin_is_the_formats_error(tmp_path: Path) -> None:
    path = _write_tokenizer_bin(tmp_path / "tokenizer.bin", [b"<unk>", b"abc"], [0.0, 1.0])
    path.write_bytes(path.read_bytes()[:-2])
    with pytest.raises(CheckpointError, match="piece 1 bytes"):
        find_tokenizer("llama", 2, tmp_path)


# ---- finding tokenizers -----------------------------------------------------------------------------


def test_nothing_found_lists_where_the_suite_looked(no_tokenizers: Path) -> None:
    with pytest.raises(TokenizerNotFound, match=r"no gpt2 tokenizer with 50257 tokens; looked in: .*\(absent\)"):
        find_tokenizer("gpt2", 50257)
    with pytest.raises(TokenizerNotFound, match=r"llama2c/tokenizer.bin \(absent\)"):
        find_tokenizer("llama", 32000)


def test_a_tokenizer_of_another_vocabulary_size_is_passed_over(llama_tokenizer, monkeypatch) -> None:
    with pytest.raises(TokenizerNotFound, match=r"\(32000 tokens\)"):
        find_tokenizer("llama", 512)
    with pytest.raises(TokenizerError, match="32000 tokens, but the model's vocab_size is 512"):
        find_tokenizer("llama", 512, llama_tokenizer.source)


def test_gpt2_tokenizer_is_found_in_the_hugging_face_cache(gpt2_tokenizer, no_tokenizers: Path) -> None:
    snapshot = no_tokenizers / "hf" / "models--openai-community--gpt2" / "snapshots" / "0123abcd"
    snapshot.mkdir(parents=True)
    (snapshot.parents[1] / "refs").mkdir()
    (snapshot.parents[1] / "refs" / "main").write_text("0123abcd")
    for name in ("vocab.json", "merges.txt"):
        shutil.copy(Path(gpt2_tokenizer.source) / name, snapshot / name)
    found = find_tokenizer("gpt2", 50257)
    assert found.source == str(snapshot)
    assert found.encode(" Paris") == [6342]


def test_gpt2_directory_without_usable_files_is_an_error_not_an_empty_tokenizer(tmp_path: Path) -> None:
    with pytest.raises(TokenizerError, match=r"merges\.txt missing"):
        load_gpt2_tokenizer(tmp_path)
    (tmp_path / "vocab.json").write_text("{}")
    (tmp_path / "merges.txt").write_text("")
    with pytest.raises(TokenizerError, match=r"vocab\.json: must be a non-empty object \{piece: id\}, found \{\}"):
        load_gpt2_tokenizer(tmp_path)


@pytest.mark.parametrize("name", ["vocab.json", "merges.txt"])
def test_a_named_pipe_in_a_tokenizer_file_s_place_is_named_not_called_missing_or_passed_over(
    tmp_path: Path, name: str
) -> None:
    for file in ("vocab.json", "merges.txt"):
        (tmp_path / file).write_text("{}" if file == "vocab.json" else "")
    (tmp_path / name).unlink()
    os.mkfifo(tmp_path / name)
    with pytest.raises(TokenizerError, match=rf"{name}: {name}: not a regular file: it is a named pipe \(FIFO\)"):
        load_gpt2_tokenizer(tmp_path)
    if name == "vocab.json":  # the model's own folder is not passed over for the packaged tokenizer
        with pytest.raises(TokenizerError, match="named pipe"):
            find_tokenizer("gpt2", 50257, model_dir=tmp_path)


def _gpt2_files(tmp_path: Path, vocab: object, merges: str) -> Path:
    tmp_path.mkdir(exist_ok=True)
    (tmp_path / "vocab.json").write_text(json.dumps(vocab))
    (tmp_path / "merges.txt").write_text(merges)
    return tmp_path


BYTES = {char: i for i, char in enumerate(byte_alphabet())}  # the 256 byte pieces alone


@pytest.mark.parametrize(
    ("vocab", "merges", "message"),
    [
        ([1, 2], "", r"vocab\.json: must be a non-empty object \{piece: id\}, found list"),
        (BYTES | {"xy": "256"}, "", r"piece 'xy' has id '256'; the ids must be integers 0 \.\. 256"),
        (BYTES | {"xy": 300}, "", r"piece 'xy' has id 300; the ids must be integers 0 \.\. 256"),
        (BYTES | {"xy": 0, "zw": 257}, "", r"1 ids are given to more than one piece"),
        ({"ab": 0}, "", r"not a byte-level BPE vocabulary: 256 of the 256 byte pieces are missing \(first: 'Ā'\)"),
        (BYTES, "#version: 0.2\na b c\n", r"merges\.txt:2: expected two pieces separated by one space, found 'a b c'"),
        (BYTES, "a b\n", r"merges\.txt:1: merge 'a b': 'ab' is not in vocab\.json"),
    ],
    ids=["not an object", "string id", "id out of range", "id twice", "no byte pieces", "three pieces", "unknown"],
)
def test_malformed_gpt2_files_are_errors_naming_the_file_and_what_is_wrong(
    tmp_path: Path, vocab: object, merges: str, message: str
) -> None:
    with pytest.raises(TokenizerError, match=message):
        load_gpt2_tokenizer(_gpt2_files(tmp_path, vocab, merges))


HUGE = 10_000_000  # characters of a hostile file's piece (the were 10 to 20 MB)


@pytest.mark.parametrize(
    ("vocab", "merges", "words"),
    [
        (
            BYTES | {"y" * HUGE: 10**6},
            "",
            (
                "vocab.json: piece 'yyyy",
                "... (10,000,000 characters) has id 1000000; the ids must be integers 0 .. 256",
            ),
        ),
        (
            BYTES,
            "z" * HUGE + " a\n",
            (
                "merges.txt:1: merge 'zzzz",
                "... (10,000,002 characters): 'zzzz",
                "... (10,000,000 characters) is not in",
            ),
        ),
        (BYTES, "a b " + "c" * HUGE, ("merges.txt:1: expected two pieces separated by one space, found 'a b cccc",)),
    ],
    ids=["vocab-piece", "merge", "merge-line"],
)
def test_a_huge_piece_is_quoted_by_a_bounded_prefix_in_one_line(
    tmp_path: Path, vocab: object, merges: str, words: tuple[str, ...], capsys: pytest.CaptureFixture[str]
) -> None:
    # The whole piece was quoted: a 20 MB line (40 MB for a merge, quoted twice).
    config = preset("gpt2").replace(vocab_size=300, n_ctx=16, d_model=8, n_layers=1, n_heads=2, n_kv_heads=2, d_ff=12)
    (tmp_path / "config.json").write_text(json.dumps(config.to_hf_dict()))
    directory = _gpt2_files(tmp_path / "tokenizer", vocab, merges)
    assert main(["trace", str(tmp_path / "config.json"), "--text", "hi", "--tokenizer", str(directory)]) == 2
    lines = capsys.readouterr().err.splitlines()
    assert len(lines) == 1 and len(lines[0]) <= 1000, f"{len(lines)} lines, the first {len(lines[0]):,} long"
    assert all(w in lines[0] for w in words), lines[0]


def test_the_lowest_ranked_pair_merges_everywhere_then_the_next(tmp_path: Path) -> None:
    vocab = BYTES | {"ab": 256, "aab": 257, "aa": 258}
    tokenizer = load_gpt2_tokenizer(_gpt2_files(tmp_path, vocab, "#version: 0.2\na b\na ab\na a\n"))
    # a-b merges first (rank 0), then a-ab (rank 1); a-a (rank 2) is then no pair of "a", "aab".
    assert tokenizer.encode("aaab") == [BYTES["a"], 257]
    assert tokenizer.encode("aaaa") == [258, 258]  # a-a merges left to right, without overlap
    assert [tokenizer.piece(i) for i in tokenizer.encode(" aab")] == [" ", "aab"]


@needs.transformers
@settings(max_examples=200, deadline=None)
@given(
    text=st.lists(
        st.one_of(st.text(), st.sampled_from(["<|endoftext|>", "'s", "'LL", " ", "  ", "\n\n", "\t", "123", "٣", "Ⅻ"])),
        max_size=8,
    ).map("".join)
)
def test_gpt2_tokenizer_gives_transformers_ids_and_pieces_on_any_text(gpt2_tokenizer: GPT2Tokenizer, text: str) -> None:
    hf = _transformers_gpt2(gpt2_tokenizer.source)
    ids = gpt2_tokenizer.encode(text)
    assert ids == hf.encode(text)
    assert [gpt2_tokenizer.piece(i) for i in ids] == [hf.decode([i], clean_up_tokenization_spaces=False) for i in ids]


@functools.cache
def _transformers_gpt2(directory: str) -> Any:
    from transformers import GPT2TokenizerFast

    return GPT2TokenizerFast.from_pretrained(directory, local_files_only=True)


def test_the_data_dir_variable_is_where_shared_data_is_found(tmp_path: Path, monkeypatch) -> None:
    (tmp_path / "llama2c").mkdir()
    _write_tokenizer_bin(tmp_path / "llama2c" / "tokenizer.bin", [b"<unk>", b"<s>", b" "], [0.0] * 3)
    monkeypatch.setenv(DATA_DIR_ENV, str(tmp_path))
    assert find_tokenizer("llama", 3).source == str(tmp_path / "llama2c" / "tokenizer.bin")


def test_the_packaged_tokenizers_are_found_by_default_with_their_licenses(monkeypatch) -> None:
    monkeypatch.delenv(DATA_DIR_ENV, raising=False)
    gpt2, llama = find_tokenizer("gpt2", 50257), find_tokenizer("llama", 32000)
    assert gpt2.encode("The capital of France is") == [464, 3139, 286, 4881, 318]
    assert llama.source == str(PACKAGED_DATA_DIR / "llama2c" / "tokenizer.bin")
    # The provenance hashes of ../shared/README.md: the files shipped are the published ones.
    expected = {
        "gpt2-tokenizer/vocab.json": "196139668be63f3b5d6574427317ae82f612a97c5d1cdaf36ed2256dbf636783",
        "gpt2-tokenizer/merges.txt": "1ce1664773c50f3e0cc8842619a93edc4624525b728b188a9e0be33b7726adc5",
        "llama2c/tokenizer.bin": "50a52ef822ee9e83de5ce9d0be0a025a773d019437f58b5ff9dcafb063ece361",
    }
    for name, sha256 in expected.items():
        assert hashlib.sha256((PACKAGED_DATA_DIR / name).read_bytes()).hexdigest() == sha256, name
    for folder in ("gpt2-tokenizer", "llama2c"):
        assert "MIT License" in (PACKAGED_DATA_DIR / folder / "LICENSE").read_text()
