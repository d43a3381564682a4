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


def executable(parser, arguments, path=None, named=""):
    """The executable named on the command line (`path`, or the first argument), as an absolute
    path; a clear error otherwise (`named`: the option that named it)."""
    path = path or arguments.binary
    if not (os.path.isfile(path) and os.access(path, os.X_OK)):
        parser.error(f"{named + ' ' if named else ''}{path}: not an executable file")
    return os.path.abspath(path)
