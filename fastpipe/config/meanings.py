"""Each key's meaning, read from its schema's source: the comment beside its field is its one home.

A field's comment is the one on its own line, or the comment lines right above it; a field with
neither, right below a field commented above, shares that comment (``mixup_alpha`` and
``cutmix_alpha``). ``--help`` prints each key's first sentence beside it (fastpipe/cli/help.py).
"""
from __future__ import annotations

import ast
import dataclasses
import functools
import inspect
import io
import tokenize
from pathlib import Path
from typing import Dict, Optional, Tuple

# Words ending in a full stop that do not end a sentence.
ABBREVIATIONS = ("e.g", "i.e", "al", "etc", "vs")


@functools.lru_cache(maxsize=None)
def _parsed(path: str) -> Tuple[ast.Module, Dict[int, Tuple[str, bool]]]:
    """A module's syntax tree and its comments: ``{line: (text, alone on its line)}``."""
    source = Path(path).read_text(encoding="utf-8")
    comments = {}
    for token in tokenize.generate_tokens(io.StringIO(source).readline):
        if token.type == tokenize.COMMENT:
            comments[token.start[0]] = (token.string.lstrip("#").strip(), not token.line[:token.start[1]].strip())
    return ast.parse(source), comments


def _declared_comments(kind: type) -> Dict[str, str]:
    """The comments of the fields ``kind`` itself declares (not those it inherits)."""
    try:
        tree, comments = _parsed(inspect.getsourcefile(kind) or "")
    except (OSError, TypeError, SyntaxError):  # a class made at run time, or without its source
        return {}
    body = next((c.body for c in ast.walk(tree) if isinstance(c, ast.ClassDef) and c.name == kind.__name__), [])
    found, shared, previous_end = {}, None, None
    for statement in body:
        if not (isinstance(statement, ast.AnnAssign) and isinstance(statement.target, ast.Name)):
            previous_end, shared = None, None
            continue
        above, line = [], statement.lineno - 1
        while line in comments and comments[line][1]:
            above.insert(0, comments[line][0])
            line -= 1
        beside = [comments[n][0] for n in range(statement.lineno, statement.end_lineno + 1)
                  if n in comments and not comments[n][1]]
        if above:
            shared = " ".join(above)
        elif beside or previous_end != statement.lineno - 1:
            shared = None
        text = " ".join(above + beside) or shared
        if text:
            found[statement.target.id] = text
        previous_end = statement.end_lineno
    return found


@functools.lru_cache(maxsize=None)
def field_comments(kind: type) -> Dict[str, str]:
    """``{field: its comment}`` of the dataclass ``kind``, inherited fields included (a subclass's own
    comment first)."""
    if not dataclasses.is_dataclass(kind):
        return {}
    names = {f.name for f in dataclasses.fields(kind)}
    found = {}
    for klass in reversed(kind.__mro__):
        found.update({k: v for k, v in _declared_comments(klass).items() if k in names})
    return found


def first_sentence(text: str) -> str:
    """``text`` up to its first full stop or semicolon outside brackets (an abbreviation's full stop
    does not count)."""
    depth = 0
    for i, char in enumerate(text):
        depth += char in "([{"
        depth -= char in ")]}"
        at_end = i + 1 == len(text) or text[i + 1] == " "
        if depth == 0 and at_end and char == ";":
            return text[:i]
        if depth == 0 and at_end and char == "." and not text[:i].endswith(ABBREVIATIONS):
            return text[:i]
    return text


def meaning(kind: type, key: str) -> Optional[str]:
    """The one-line meaning of ``kind``'s field ``key`` (its comment's first sentence, starting in lower
    case unless its first word is a name such as MixUp or NHWC), or None when it has no comment."""
    text = field_comments(kind).get(key)
    if not text:
        return None
    sentence = first_sentence(text)
    word = sentence.split(" ", 1)[0]
    return sentence[0].lower() + sentence[1:] if len(word) == 1 or word[1:].islower() else sentence
