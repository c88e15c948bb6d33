"""The wording of one-line messages: an exception's first line, a count with its noun."""


def first_line(error: BaseException, limit: int | None = None) -> str:
    """`error`'s message, first line only (else its type's name), cut to `limit` characters."""
    text = str(error).strip()
    line = text.splitlines()[0] if text else type(error).__name__
    if limit is not None and len(line) > limit:
        return line[: limit - 3] + "..."
    return line


def load_error_line(error: BaseException) -> str:
    """One line for torch's `load_state_dict` refusal: its first detail ('size mismatch for
    critic.0.weight: copying a param with shape torch.Size([64, 4]) from checkpoint, ...',
    'Missing key(s) in state_dict: ...'), where its first line only says that there are
    errors; else `first_line`."""
    lines = [line.strip() for line in str(error).strip().splitlines()]
    if len(lines) > 1 and lines[0].startswith("Error(s) in loading state_dict"):
        return f"{lines[0].rstrip(':')}: {lines[1]}"
    return first_line(error)


def counted(count: int, noun: str) -> str:
    """`count` and its noun, singular for one: "1 update", "4,096 updates"."""
    return f"{count:,} {noun}" + ("" if count == 1 else "s")
