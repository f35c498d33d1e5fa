"""Completion scripts come from the parser tree: every subcommand and flag, valid shell."""

from __future__ import annotations

import shutil
import subprocess

import pytest

from podmand.cli import completion
from podmand.cli.parser import parser


def complete(script: str, *words: str) -> list[str]:
    """What bash offers after ``words`` (the last one being completed)."""
    line = " ".join(f"'{w}'" for w in words)
    probe = f'{script}\nCOMP_WORDS=({line}); COMP_CWORD={len(words) - 1}; _podmand_complete; echo "${{COMPREPLY[@]}}"'
    result = subprocess.run(["bash", "-c", probe], capture_output=True, text=True, check=True, cwd="/")
    return result.stdout.split()


def test_bash_script_is_valid_and_covers_the_tree() -> None:
    script = completion.bash(parser())
    subprocess.run(["bash", "-n"], input=script, text=True, check=True)
    tree = completion.tree(parser())
    assert {("ctl", c) for c in ("logs", "describe", "list", "watch", "create")} <= set(tree)
    for path, (subs, flags) in tree.items():
        for word in subs:
            assert word in complete(script, "podmand", *path, word[:-1] if len(word) > 1 else word), (path, word)
        offered = complete(script, "podmand", *path, "--")
        assert set(flags) <= set(offered), (path, set(flags) - set(offered))


def test_flags_and_their_values_do_not_derail_the_path() -> None:
    script = completion.bash(parser())
    assert complete(script, "podmand", "ctl", "--socket", "/x.sock", "de") == ["delete", "describe"]
    assert "--follow" in complete(script, "podmand", "ctl", "logs", "--f")
    assert "--retry" in complete(script, "podmand", "ctl", "-o", "wide", "watch", "--r")
    assert "--podman-autostart" in complete(script, "podmand", "serve", "--podman-a")


ZSH_CALL = """
autoload -U +X compinit && compinit -u -D
source /dev/stdin
print -r -- "registered: ${_comps[podmand]}"
setopt ksharrays
COMP_WORDS=(%s); COMP_CWORD=%d
_podmand_complete
print -l -- "${COMPREPLY[@]}"
"""


def zsh_offers(*words: str) -> list[str]:
    """What the script, sourced by zsh (through bashcompinit, as a user's .zshrc would), offers
    for ``words``; zsh's compadd filters these by the typed prefix, so this is a superset."""
    call = ZSH_CALL % (" ".join(words), len(words) - 1)
    out = subprocess.run(["zsh", "-f", "-c", call], input=completion.zsh(parser()), text=True,
                         capture_output=True, check=True).stdout.splitlines()
    assert out[0] == "registered: _bash_complete -o default -F _podmand_complete", out
    return out[1:]


@pytest.mark.skipif(shutil.which("zsh") is None, reason="zsh not installed (tests/setup-podman.sh installs it)")
def test_zsh_runs_the_completion() -> None:
    subprocess.run(["zsh", "-n"], input=completion.zsh(parser()), text=True, check=True)
    assert {"ctl", "serve", "doctor", "health", "completion"} <= set(zsh_offers("podmand", "''"))
    assert "--follow" in zsh_offers("podmand", "ctl", "logs", "--f")
    assert "describe" in zsh_offers("podmand", "ctl", "de")


def test_zsh_script_wraps_the_bash_one() -> None:
    script = completion.zsh(parser())
    assert "bashcompinit" in script and "complete -o default -F _podmand_complete podmand" in script
    subprocess.run(["bash", "-n"], input=script, text=True, check=True)
