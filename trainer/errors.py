"""What a one-line refusal or run reason quotes of an exception: its first line."""


def first_line(error: BaseException, limit: int | None = None) -> str:
    """`error`'s message, first line only (else its type's name), cut to `limit` characters."""
    text = str(error).strip()
    line = text.splitlines()[0] if text else type(error).__name__
    if limit is not None and len(line) > limit:
        return line[: limit - 3] + "..."
    return line
