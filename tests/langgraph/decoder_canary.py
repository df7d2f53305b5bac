"""Imported by nothing: the decoder fuzz test names it in stored data and checks that no
read ever imports it (decoding must never import a module because a row names it)."""

IMPORTED = True


class Canary:
    def __init__(self, *args: object, **kwargs: object) -> None:
        raise AssertionError("a stored row made the decoder build a Canary")
