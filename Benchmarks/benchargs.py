"""Command-line pieces the benchmark scripts share."""
import argparse
import os
import re
import shlex


def positive(text):
    """An argparse type: a whole number of at least 1."""
    value = int(text)
    if value < 1:
        raise argparse.ArgumentTypeError(f"{text} is not a positive number")
    return value


def positive_list(text):
    """An argparse type: whole numbers of at least 1, comma-separated ("1,2,4,8"), each once, in
    the order given."""
    values = []
    for word in text.split(","):
        value = positive(word.strip())
        if value not in values:
            values.append(value)
    if not values:
        raise argparse.ArgumentTypeError(f"{text}: no number")
    return values


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


class _Anchor(argparse.Action):
    """--anchor NAME=PATH: a column of its own, appended to the list of anchors."""
    def __call__(self, parser, namespace, value, option_string=None):
        name, equals, path = value.partition("=")
        if not equals or not re.fullmatch(r"[A-Za-z0-9._+-]+", name) or not path:
            parser.error(f"--anchor {value}: give NAME=PATH, NAME of letters, digits and ._+-")
        anchors = list(getattr(namespace, self.dest, None) or [])
        anchors.append({"name": name, "path": path, "options": ""})
        setattr(namespace, self.dest, anchors)


class _AnchorOptions(argparse.Action):
    """--anchor-options OPTIONS: the options of the --anchor given before it."""
    def __call__(self, parser, namespace, value, option_string=None):
        anchors = list(getattr(namespace, self.dest, None) or [])
        if not anchors:
            parser.error("--anchor-options: give it after the --anchor it belongs to")
        anchors[-1] = dict(anchors[-1], options=value)
        setattr(namespace, self.dest, anchors)


def add_anchor_arguments(parser):
    """--anchor NAME=PATH and --anchor-options OPTIONS: another FUSE passthrough as a column of its
    own (libfuse's passthrough_hp, built as docs/performance.md says; nothing builds it here)."""
    parser.add_argument("--anchor", metavar="NAME=PATH", dest="anchors", action=_Anchor, default=[],
                        help="another passthrough filesystem as a column named NAME, mounted as "
                             "`PATH [OPTIONS] BACKING MOUNTPOINT` (it must put itself in the background once "
                             "mounted, as libfuse's examples do); may be given more than once, e.g. "
                             "--anchor hp=/path/to/passthrough_hp")
    parser.add_argument("--anchor-options", metavar="OPTIONS", dest="anchors", action=_AnchorOptions,
                        default=argparse.SUPPRESS,
                        help="the options of the --anchor given just before, split as a shell would "
                             "(--anchor-options='-o io_uring'); where they name {backing} or {point}, those "
                             "stand for the two directories and nothing is appended "
                             "(--anchor-options='-o source={backing} {point}' for passthrough_ll)")


def anchor_commands(parser, arguments, taken=()):
    """The anchors given on the command line as (name, argument list), {backing} and {point} in the
    list standing for the two directories; a clear error for a name in `taken` (another column's),
    a name given twice, or a path that is not an executable file."""
    commands = []
    for anchor in arguments.anchors:
        name = anchor["name"]
        if name in taken or name in [other for other, _ in commands]:
            parser.error(f"--anchor {name}=...: that column's name is taken")
        program = executable(parser, arguments, anchor["path"], named="--anchor %s=" % name)
        options = shlex.split(anchor["options"])
        if not any("{backing}" in option or "{point}" in option for option in options):
            options += ["{backing}", "{point}"]
        commands.append((name, [program.replace("{", "{{").replace("}", "}}")] + options))
    return commands
