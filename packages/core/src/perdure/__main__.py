"""``python -m perdure`` is the ``perdure`` CLI."""

from perdure._cli import main

if __name__ == "__main__":
    main()
