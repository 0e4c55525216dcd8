"""The one error type codegen raises for programs or targets it cannot compile."""


class CodegenError(Exception):
    """A tensor program or target that codegen cannot compile; the message names the culprit
    (the loop, buffer, intrinsic or target string) and what was expected."""
