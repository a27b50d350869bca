"""File formats: the only code that knows file layouts. Files in, config + canonical weights out.

`load_checkpoint(path)` reads any supported model (HF directory or file, llama2.c `.bin` v0/v1/v2,
GGUF with the optional `gguf` package) into a `Checkpoint`; `map_checkpoint(path)` maps it instead,
reading each weight when looked up (for models larger than memory); `save_checkpoint` writes one;
`read_tokenizer` / `write_tokenizer` handle llama2.c's `tokenizer.bin`. Every problem with a file
is a `CheckpointError`.
"""

from verifier.formats.checkpoint import Checkpoint, TensorInfo
from verifier.formats.errors import CheckpointError
from verifier.formats.llama2c_tokenizer import Tokenizer, read_tokenizer, write_tokenizer
from verifier.formats.load import checkpoint_config, detect_format, load_checkpoint, map_checkpoint, save_checkpoint

__all__ = [
    "Checkpoint",
    "CheckpointError",
    "TensorInfo",
    "Tokenizer",
    "checkpoint_config",
    "detect_format",
    "load_checkpoint",
    "map_checkpoint",
    "read_tokenizer",
    "save_checkpoint",
    "write_tokenizer",
]
