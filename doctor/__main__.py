"""`python -m doctor` runs the CLI."""

from doctor.cli import main

if __name__ == "__main__":
    main()
