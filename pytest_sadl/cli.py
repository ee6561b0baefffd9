"""The ``sadl`` command."""


def main(argv=None) -> int:  # pragma: no cover - replaced by the CLI issue
    raise SystemExit("sadl: not implemented yet")
