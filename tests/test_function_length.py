"""No function in the package is over 60 lines of code (issue 38): a reader follows each one
top to bottom without scrolling. A line of code is one that holds a token other than a comment;
blank lines, comment-only lines and the function's docstring do not count. A nested function's
lines count toward the function that holds it, and toward its own count too."""

import ast
import io
import textwrap
import tokenize
from pathlib import Path

LIMIT = 60
ROOT = Path(__file__).resolve().parent.parent
FOLDERS = ("trainer", "envs", "monitor", "shared", "cli", "compat")
_NOT_CODE = (
    tokenize.COMMENT,
    tokenize.NL,
    tokenize.NEWLINE,
    tokenize.INDENT,
    tokenize.DEDENT,
    tokenize.ENDMARKER,
)


def _code_lines(text: str) -> set[int]:
    """The lines of `text` that hold a token other than a comment (a multi-line token, such as a
    triple-quoted string, counts on every line it spans)."""
    lines: set[int] = set()
    for token in tokenize.generate_tokens(io.StringIO(text).readline):
        if token.type not in _NOT_CODE:
            lines.update(range(token.start[0], token.end[0] + 1))
    return lines


def _docstring_lines(node: ast.FunctionDef | ast.AsyncFunctionDef) -> set[int]:
    first = node.body[0] if node.body else None
    if (
        isinstance(first, ast.Expr)
        and isinstance(first.value, ast.Constant)
        and isinstance(first.value.value, str)
    ):
        assert first.end_lineno is not None
        return set(range(first.lineno, first.end_lineno + 1))
    return set()


def long_functions(text: str, limit: int = LIMIT) -> list[tuple[int, int, str]]:
    """(lines of code, line, name) of each function in the source `text` over `limit` lines of
    code, from its `def` line to its last (decorators not counted), docstring excluded."""
    code = _code_lines(text)
    found = []
    for node in ast.walk(ast.parse(text)):
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            assert node.end_lineno is not None
            span = set(range(node.lineno, node.end_lineno + 1))
            count = len((span & code) - _docstring_lines(node))
            if count > limit:
                found.append((count, node.lineno, node.name))
    return found


def test_no_function_in_the_package_is_over_60_lines_of_code():
    offenders = []
    for folder in FOLDERS:
        for path in sorted((ROOT / folder).rglob("*.py")):
            for count, line, name in long_functions(path.read_text()):
                offenders.append(f"{count} {path.relative_to(ROOT)}:{line} {name}")
    assert offenders == [], f"functions over {LIMIT} lines of code: split them:\n" + "\n".join(
        sorted(offenders, key=lambda offender: -int(offender.split()[0]))
    )


def _function(code_lines: int) -> str:
    """A function with a docstring, blank lines and comments around `code_lines` lines of
    code (its `def` line one of them)."""
    body = "\n".join(
        f"    x{i} = {i}  # comment\n\n    # a comment line" for i in range(1, code_lines)
    )
    return f'def long():\n    """A docstring\n    of two lines."""\n\n{body}\n'


def test_the_count_finds_a_61_line_function_and_passes_one_of_60():
    assert long_functions(_function(61)) == [(61, 1, "long")]
    assert long_functions(_function(60)) == []
    nested = "class Holder:\n" + textwrap.indent(_function(61), "    ")
    assert long_functions(nested) == [(61, 2, "long")]


def test_the_docstring_blank_lines_and_comments_are_not_code():
    text = textwrap.dedent(
        '''\
        def short():
            """One
            two
            three."""
            # a comment

            return 1
        '''
    )
    assert long_functions(text, limit=1) == [(2, 1, "short")]
