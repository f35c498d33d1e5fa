"""``podmand completion bash|zsh``: shell completion generated from the argparse tree,
so every subcommand and flag is offered and a new one needs no edit here.

Use it with ``source <(podmand completion bash)`` (bash) or
``source <(podmand completion zsh)`` (zsh, through bashcompinit).
"""

from __future__ import annotations

import argparse
import sys

from .parser import parser


def add_parser(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    p = sub.add_parser(
        "completion",
        help="print a shell completion script",
        description="Print a completion script for bash or zsh; load it with: source <(podmand completion bash)",
    )
    p.add_argument("shell", choices=("bash", "zsh"), help="the shell to complete for")


def _subparsers(parser: argparse.ArgumentParser) -> dict[str, argparse.ArgumentParser]:
    for action in parser._actions:  # argparse keeps no public view of its tree
        if isinstance(action, argparse._SubParsersAction):
            return dict(action.choices)
    return {}


Tree = dict[tuple[str, ...], tuple[list[str], list[str]]]


def tree(parser: argparse.ArgumentParser, path: tuple[str, ...] = ()) -> Tree:
    """Each command path (``()``, ``("ctl",)``, ``("ctl", "logs")``…) -> (its subcommands, its flags)."""
    flags = sorted({opt for a in parser._actions for opt in a.option_strings if opt.startswith("--")})
    subs = _subparsers(parser)
    out = {path: (sorted(subs), flags)}
    for name, child in subs.items():
        out.update(tree(child, (*path, name)))
    return out


def _case_key(path: tuple[str, ...]) -> str:
    return " ".join(path) or "-"


def bash(parser: argparse.ArgumentParser, prog: str = "podmand") -> str:
    """A bash completion function: the words typed so far pick the command path
    (flags and their values skipped), which offers its subcommands and flags."""
    entries = tree(parser)
    cases = []
    for path, (subs, flags) in sorted(entries.items()):
        cases.append(f'        "{_case_key(path)}") subs="{" ".join(subs)}"; flags="{" ".join(flags)}" ;;')
    func = f"_{prog.replace('-', '_')}_complete"
    return f"""# bash completion for {prog}; load with: source <({prog} completion bash)
{func}() {{
    local cur="${{COMP_WORDS[COMP_CWORD]}}" path="" word i subs flags
    for ((i = 1; i < COMP_CWORD; i++)); do
        word="${{COMP_WORDS[i]}}"
        [[ "$word" == -* || "$word" == "--" ]] && continue
        case "${{path:--}}" in
{_known_paths(entries)}
        esac
    done
    case "${{path:--}}" in
{chr(10).join(cases)}
        *) subs=""; flags="" ;;
    esac
    if [[ "$cur" == -* ]]; then
        COMPREPLY=($(compgen -W "$flags" -- "$cur"))
    else
        COMPREPLY=($(compgen -W "$subs" -- "$cur"))
        [[ ${{#COMPREPLY[@]}} -eq 0 ]] && COMPREPLY=($(compgen -f -- "$cur"))
    fi
    return 0
}}
complete -o default -F {func} {prog}
"""


def _known_paths(entries: Tree) -> str:
    """A word extends the path only when it names a subcommand of the path so far."""
    lines = []
    for path, (subs, _) in sorted(entries.items()):
        if subs:
            alts = "|".join(subs)
            target = f"{' '.join(path)} " if path else ""
            lines.append(f'            "{_case_key(path)}") case "$word" in {alts}) path="{target}$word" ;; esac ;;')
    return "\n".join(lines)


def zsh(parser: argparse.ArgumentParser, prog: str = "podmand") -> str:
    """zsh runs the bash function through bashcompinit."""
    return (
        f"# zsh completion for {prog}; load with: source <({prog} completion zsh)\n"
        "autoload -U +X compinit && compinit\n"
        "autoload -U +X bashcompinit && bashcompinit\n" + bash(parser, prog).split("\n", 1)[1]
    )


def run(args: argparse.Namespace) -> int:

    sys.stdout.write(bash(parser()) if args.shell == "bash" else zsh(parser()))
    return 0
