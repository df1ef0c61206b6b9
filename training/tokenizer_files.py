"""The tokenizer of a run's data, carried with the data and written into the export as Hugging Face files.

``trainctl prepare-data`` (:mod:`training.prepare`) copies the ``tokenizer.json`` it used beside each split's
manifest as :data:`TOKENIZER_FILE`, so the trainer has it offline in its channel. The byte-level fallback has
no file to copy: its ``tokenizer.json`` is built here (:func:`byte_level_tokenizer_json`).

At the end of a run the export (:func:`training.model.save_pretrained`) writes, beside the weights:

* ``tokenizer.json``: the data's tokenizer with every post-processor that adds special tokens removed
  (``TemplateProcessing``, ``BertProcessing``, ``RobertaProcessing``; a ``ByteLevel`` one, which only trims
  offsets, stays). prepare-data encodes with ``add_special_tokens=False``: the shards hold no BOS at a
  document's start, so a tokenizer that prepends one (Llama 3's ``<|begin_of_text|>`` template) would feed the
  model a token it never saw there.
* ``tokenizer_config.json``: ``tokenizer_class`` ``PreTrainedTokenizerFast`` (the generic class, which takes
  ``tokenizer.json`` as it is) and ``bos_token``, ``eos_token`` and ``pad_token`` all the data's document
  separator (the token every document but a shard's first follows and ends with, as GPT-2's ``<|endoftext|>``
  is all three); the byte-level tokenizer adds ``split_special_tokens`` true, so a text holding its
  separator's name is encoded as bytes, as the byte-level fallback does. No ``add_bos_token``: transformers
  5.24's generic class ignores its value (a true one prepends nothing), and its mere presence makes that
  class replace ``tokenizer.json``'s post-processor with a template of its own (dropping a ``ByteLevel``
  one); ``tokenizer.json``'s post-processor is what decides.

transformers 5.24 loads a ``model_type`` ``qwen2`` export's tokenizer with its own ``Qwen2Tokenizer``, whatever
``tokenizer_class`` says (``MODELS_WITH_INCORRECT_HUB_TOKENIZER_CLASS``), which rebuilds a BPE with Qwen2's
pre-tokenizer from the vocabulary and merges: the byte-level fallback (no merges) keeps its ids, a tokenizer
of another kind (WordLevel, WordPiece) or another pre-tokenizer may not.

The separator's id is ``eos_token_id`` (also bos and pad) of ``config.json`` and ``generation_config.json``.
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass
from typing import Any

from platform_spec.processing import TOKENIZER_FILE
from training.data import BYTE_LEVEL, BYTE_LEVEL_EOD, EOD_CANDIDATES, TokenDataset

TOKENIZER_CONFIG_FILE = "tokenizer_config.json"
TOKENIZER_FILES = (TOKENIZER_FILE, TOKENIZER_CONFIG_FILE)
"""The files the export writes for the tokenizer (and removes when it has none, so none is left stale)."""
BYTE_LEVEL_SEPARATOR = EOD_CANDIDATES[0]
"""The name of the byte-level tokenizer's end-of-document id 256 in its exported ``tokenizer.json``."""
_ADDS_SPECIAL_TOKENS = ("TemplateProcessing", "BertProcessing", "RobertaProcessing")


def byte_level_tokenizer_json() -> str:
    """The byte-level fallback (:class:`training.data.ByteTokenizer`) as a ``tokenizers`` ``tokenizer.json``:
    each UTF-8 byte ``b`` is id ``b`` (GPT-2's byte-to-character map, a BPE with no merges) and id 256
    (:data:`training.data.BYTE_LEVEL_EOD`) is the special token :data:`BYTE_LEVEL_SEPARATOR`."""
    from tokenizers import AddedToken, Tokenizer, decoders, models, pre_tokenizers

    tok = Tokenizer(models.BPE(vocab={char: b for b, char in _byte_chars().items()}, merges=[]))
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False)
    tok.decoder = decoders.ByteLevel()
    tok.add_special_tokens([AddedToken(BYTE_LEVEL_SEPARATOR, special=True, normalized=False)])
    assert tok.token_to_id(BYTE_LEVEL_SEPARATOR) == BYTE_LEVEL_EOD
    return str(tok.to_str())


def _byte_chars() -> dict[int, str]:
    """GPT-2's byte-to-character map (``bytes_to_unicode`` of openai/gpt-2 ``src/encoder.py``), which the
    ``ByteLevel`` pre-tokenizer applies: printable bytes are their own character, the other 68 are
    ``chr(256 + n)`` in byte order."""
    printable = [*range(ord("!"), ord("~") + 1), *range(ord("\u00a1"), ord("\u00ac") + 1), *range(ord("\u00ae"), 256)]
    others = [b for b in range(256) if b not in printable]
    return {**{b: chr(b) for b in printable}, **{b: chr(256 + n) for n, b in enumerate(others)}}


@dataclass(frozen=True)
class DataTokenizer:
    """The tokenizer a run's data was made with, as the export needs it.

    ``tokenizer_json`` is None when the data does not carry its tokenizer; ``missing`` says why (it goes into
    the export's log line and its ``config.json``'s platform key).
    """

    name: str
    eod_token_id: int | None
    tokenizer_json: str | None
    byte_level: bool = False
    missing: str | None = None

    @classmethod
    def of_dataset(cls, dataset: TokenDataset | None) -> DataTokenizer:
        """The tokenizer of ``dataset``'s shards: the byte-level one built, else the :data:`TOKENIZER_FILE`
        under the dataset's folder whose SHA-256 is the shards' ``tokenizer_sha256`` (a file of another
        tokenizer is not taken)."""
        if dataset is None:
            return cls("synthetic", None, None, missing="the run trained on synthetic tokens: no tokenizer")
        header = dataset.headers[0]
        if header.tokenizer == BYTE_LEVEL:
            return cls(BYTE_LEVEL, header.eod_token_id, byte_level_tokenizer_json(), byte_level=True)
        for path in sorted(dataset.directory.rglob(TOKENIZER_FILE)):
            data = path.read_bytes()
            if hashlib.sha256(data).hexdigest() == header.tokenizer_sha256:
                return cls(header.tokenizer, header.eod_token_id, data.decode("utf-8"))
        return cls(
            header.tokenizer,
            header.eod_token_id,
            None,
            missing=(
                f"the data carries no {TOKENIZER_FILE} of its tokenizer {header.tokenizer!r} (sha256 "
                f"{header.tokenizer_sha256}) beside its shards (prepared before prepare-data copied it); re-run "
                "`trainctl prepare-data` to export one"
            ),
        )

    def files(self) -> dict[str, bytes]:
        """``tokenizer.json`` and ``tokenizer_config.json`` of the export (module docstring); empty when the
        tokenizer is missing."""
        if self.tokenizer_json is None:
            return {}
        from tokenizers import Tokenizer

        spec = json.loads(self.tokenizer_json)
        spec["post_processor"] = _without_special_tokens(spec.get("post_processor"))
        separator = None  # an added token or one of the vocabulary (prepare-data takes either)
        if self.eod_token_id is not None:
            separator = Tokenizer.from_str(self.tokenizer_json).id_to_token(self.eod_token_id)
        config: dict[str, Any] = {
            "tokenizer_class": "PreTrainedTokenizerFast",
            "bos_token": separator,
            "eos_token": separator,
            "pad_token": separator,
        }
        if self.byte_level:
            config["split_special_tokens"] = True
        return {
            TOKENIZER_FILE: (json.dumps(spec, ensure_ascii=False, indent=2) + "\n").encode("utf-8"),
            TOKENIZER_CONFIG_FILE: (json.dumps(config, indent=2) + "\n").encode("utf-8"),
        }


def _without_special_tokens(processor: dict[str, Any] | None) -> dict[str, Any] | None:
    """``processor`` (a ``tokenizer.json`` post-processor) without the parts that add special tokens."""
    if processor is None or processor.get("type") in _ADDS_SPECIAL_TOKENS:
        return None
    if processor.get("type") == "Sequence":
        kept = [p for p in map(_without_special_tokens, processor.get("processors", [])) if p is not None]
        return {**processor, "processors": kept} if kept else None
    return processor


__all__ = [
    "BYTE_LEVEL_SEPARATOR",
    "TOKENIZER_CONFIG_FILE",
    "TOKENIZER_FILE",
    "TOKENIZER_FILES",
    "DataTokenizer",
    "byte_level_tokenizer_json",
]
