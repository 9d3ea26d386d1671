"""Wording shared by messages: a count with its noun."""


def counted(count: int, noun: str, plural: str = "") -> str:
    """"1 round", "3 rounds" (`plural`: the plural when it is not noun + "s")."""
    return f"{count} {noun if count == 1 else plural or noun + 's'}"
