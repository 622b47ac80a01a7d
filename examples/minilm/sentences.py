"""Real English sentences available offline: taken from the docstrings of the Python
standard library's own source files, in a fixed order.

    from examples.minilm.sentences import stdlib_sentences
    sentences = stdlib_sentences(300)

Docstrings are read with `ast` (no module is imported), split at sentence ends, and
kept only when they read as prose: 6 to 40 words, starting with a capital letter, ending
with a period, and free of code (no `>>>`, `()`, `=`, backticks or underscores).
"""
from __future__ import annotations

import ast
import functools
import re
from typing import Iterator, List

from examples.gpt.data import source_files

_SENTENCE_END = re.compile(r"(?<=[.!?])\s+(?=[A-Z])")
_CODE = re.compile(r">>>|\(\)|=|`|_|\\|\||\{|\}|\[|\]|::|https?:|\$|%|\*")


def _docstrings(path: str) -> Iterator[str]:
    """Every docstring (module, class, function) of the source file `path`, in source order."""
    with open(path, encoding="utf-8", errors="replace") as f:
        try:
            tree = ast.parse(f.read(), filename=path)
        except (SyntaxError, ValueError):  # test fixtures with deliberately bad source
            return
    for node in ast.walk(tree):
        if isinstance(node, (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)):
            doc = ast.get_docstring(node)
            if doc:
                yield doc


def _is_prose(sentence: str) -> bool:
    words = sentence.split()
    return (6 <= len(words) <= 40 and sentence[0].isupper() and sentence.endswith(".")
            and sentence.isascii() and not _CODE.search(sentence))


@functools.lru_cache(maxsize=4)
def stdlib_sentences(count: int) -> List[str]:
    """The first `count` distinct prose sentences of the standard library's docstrings
    (files in `examples.gpt.data.source_files()` order). ValueError if the standard
    library has fewer."""
    seen, out = set(), []
    for path in source_files():
        for doc in _docstrings(path):
            for paragraph in doc.split("\n\n"):
                for sentence in _SENTENCE_END.split(" ".join(paragraph.split())):
                    if sentence not in seen and _is_prose(sentence):
                        seen.add(sentence)
                        out.append(sentence)
                        if len(out) == count:
                            return out
    raise ValueError(f"the standard library has only {len(out)} prose sentences, {count} asked")
