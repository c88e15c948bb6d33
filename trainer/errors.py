"""The wording of one-line messages: an exception's first line, a count with its noun."""


def first_line(error: BaseException, limit: int | None = None) -> str:
    """`error`'s message, first line only (else its type's name), cut to `limit` characters."""
    text = str(error).strip()
    line = text.splitlines()[0] if text else type(error).__name__
    if limit is not None and len(line) > limit:
        return line[: limit - 3] + "..."
    return line


def counted(count: int, noun: str) -> str:
    """`count` and its noun, singular for one: "1 update", "4,096 updates"."""
    return f"{count:,} {noun}" + ("" if count == 1 else "s")
