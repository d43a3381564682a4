"""Command-line pieces the benchmark scripts share."""
import argparse
import os


def positive(text):
    """An argparse type: a whole number of at least 1."""
    value = int(text)
    if value < 1:
        raise argparse.ArgumentTypeError(f"{text} is not a positive number")
    return value


def coordfs_parser(description):
    """A parser whose first argument is the coordfs executable to mount with."""
    parser = argparse.ArgumentParser(description=description)
    parser.add_argument("binary", help="the coordfs executable to mount with")
    return parser


def executable(parser, arguments):
    """The executable named on the command line, as an absolute path; a clear error otherwise."""
    if not (os.path.isfile(arguments.binary) and os.access(arguments.binary, os.X_OK)):
        parser.error(f"{arguments.binary}: not an executable file")
    return os.path.abspath(arguments.binary)
