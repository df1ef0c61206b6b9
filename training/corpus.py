"""A real-text corpus present on every machine: CPython's documentation topics.

``pydoc_data.topics.topics`` ships with every CPython installation (it backs
``help('assert')``): about 80 long help texts, ~0.45 MB of English prose and
code. Good enough for a loss curve that falls on real text, with no download.
"""

from __future__ import annotations

import json
import os
from pathlib import Path


def python_docs_topics() -> dict[str, str]:
    """``{topic: help text}`` from this interpreter's ``pydoc_data.topics`` (sorted by topic)."""
    from pydoc_data.topics import topics

    return {name: topics[name] for name in sorted(topics)}


def python_docs_corpus(path: str | os.PathLike[str], *, jsonl: bool = False) -> Path:
    """Write the CPython documentation topics as a text corpus.

    Args:
        path: output file; ``.jsonl`` (or ``jsonl=True``) writes one
            ``{"text": ..., "topic": ...}`` document per topic, anything else one
            plain-text file with the topics separated by blank lines (one document).

    Returns:
        The path written.
    """
    out = Path(path)
    out.parent.mkdir(parents=True, exist_ok=True)
    topics = python_docs_topics()
    if jsonl or out.suffix.lower() == ".jsonl":
        with open(out, "w", encoding="utf-8") as fh:
            for name, text in topics.items():
                fh.write(json.dumps({"text": text, "topic": name}) + "\n")
    else:
        out.write_text("\n\n".join(topics.values()), encoding="utf-8")
    return out


__all__ = ["python_docs_corpus", "python_docs_topics"]
