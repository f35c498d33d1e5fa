"""Unit tests for podmand.sandbox.requestchecks: the bounds of the environment, the command and
the recorded request, through spec.validate as a create meets them."""

from __future__ import annotations

from typing import Any

import pytest

from podmand import names
from podmand._proto import compute_driver_pb2 as pb
from podmand.config import Settings
from podmand.errors import InvalidArgument
from podmand.pair import specs
from podmand.sandbox import envvars, requestchecks, spec
from podmand.sandbox.identity import Resolved
from podmand.sandbox.plan import Plan
from tests.jwt import make_launch

KIB = 1024
SECRET = "s3cr3t-"  # in every oversized value: no message may contain it
TEMPLATE_ENV = "sandbox.spec.template.environment"
SPEC_ENV = "sandbox.spec.environment"


def make_sandbox(**spec_fields: Any) -> pb.DriverSandbox:
    """A minimal valid request, its launch bundle included; keyword arguments go to DriverSandboxSpec."""
    spec_fields.setdefault("launch_authentication", make_launch("abc123", "g0000000000000001"))
    return pb.DriverSandbox(id="abc123", name="demo", workspace="ws", spec=pb.DriverSandboxSpec(**spec_fields))


def value(size: int, fill: str = "v") -> str:
    """A value of exactly ``size`` bytes, marked as a secret."""
    return SECRET + fill * (size - len(SECRET))


def refused(sandbox: pb.DriverSandbox, *needles: str) -> str:
    with pytest.raises(InvalidArgument) as exc:
        spec.validate(sandbox, Settings())
    message = exc.value.message
    assert SECRET not in message and "vvvv" not in message, message
    for needle in needles:
        assert needle in message, message
    return message


def execve_strings(plan: Plan) -> list[bytes]:
    """The supervisor's environment as the runtime execs it, KEY=VALUE with its NUL."""
    identity = Resolved(uid=1000, gid=1000, supplementary=(), source="image", digest="sha256:f")
    env = specs.supervisor_env(plan, Settings(), "", identity)
    return [f"{k}={v}".encode() + b"\0" for k, v in env.items()]


# ---------------------------------------------------------------- environment


def test_an_env_value_over_its_bound_is_refused_naming_its_key() -> None:
    at_bound = make_sandbox(environment={"CA_BUNDLE": value(requestchecks.MAX_ENV_VALUE)})
    assert spec.validate(at_bound, Settings()).user_env["CA_BUNDLE"].startswith(SECRET)
    for where, field in ((SPEC_ENV, "environment"), (TEMPLATE_ENV, "template")):
        box = make_sandbox()
        env = box.spec.environment if field == "environment" else box.spec.template.environment
        env["CA_BUNDLE"] = value(requestchecks.MAX_ENV_VALUE + 1)
        refused(box, f"{where}[CA_BUNDLE]: value is {32 * KIB + 1} bytes, more than 32 KiB")
    multibyte = make_sandbox(environment={"NAME": "é" * (16 * KIB + 1)})  # bytes, not characters
    refused(multibyte, f"{SPEC_ENV}[NAME]: value is {32 * KIB + 2} bytes")


def test_the_environment_is_bounded_with_both_maps_together() -> None:
    """60 KiB in the template and 40 KiB in the spec: each fits, together they do not."""
    def spread(prefix: str, total: int) -> dict[str, str]:
        return {f"{prefix}{i}": value(total // 4 - len(f"{prefix}{i}")) for i in range(4)}

    template_only = make_sandbox(template=pb.DriverSandboxTemplate(environment=spread("T", 60 * KIB)))
    spec.validate(template_only, Settings())
    spec.validate(make_sandbox(environment=spread("S", 40 * KIB)), Settings())
    both = make_sandbox(template=pb.DriverSandboxTemplate(environment=spread("T", 60 * KIB)),
                        environment=spread("S", 40 * KIB))
    refused(both, f"{TEMPLATE_ENV} + {SPEC_ENV}: {100 * KIB} bytes of keys and values together, more than 96 KiB")
    at_bound = make_sandbox(template=pb.DriverSandboxTemplate(environment=spread("T", 56 * KIB)),
                            environment=spread("S", 40 * KIB))
    assert len(spec.validate(at_bound, Settings()).user_env) == 8


def test_an_environment_that_escapes_past_one_execve_string_is_refused() -> None:
    """Within the byte bounds, but control characters take six bytes each in the JSON
    copy the supervisor gets: refused before it would fail the container's start."""
    box = make_sandbox(environment={f"K{i}": value(8 * KIB, "\x01") for i in range(3)})
    refused(box, f"{TEMPLATE_ENV} + {SPEC_ENV}: ", f"bytes once encoded as JSON for {names.ENV_USER_ENV}",
            "must fit in one execve string")


def test_the_environment_at_the_encoded_bound_fits_one_execve_string() -> None:
    """The headroom is real: the largest environment taken, as sandboxenv encodes it
    (sorted, with the variable's name), is one string Linux execs."""
    env = {f"K{i}": value(31 * KIB, "\\") for i in range(2)}  # a backslash takes two bytes as JSON
    env["PAD"] = ""
    env["PAD"] = "p" * (requestchecks.MAX_ENCODED - requestchecks._encoded(env))
    plan = spec.validate(make_sandbox(environment=env), Settings())
    [encoded] = [s for s in execve_strings(plan) if s.startswith(names.ENV_USER_ENV.encode() + b"=")]
    assert len(encoded) <= requestchecks.MAX_ARG_STRLEN
    env["PAD"] += "p"
    refused(make_sandbox(environment=env), f"bytes once encoded as JSON for {names.ENV_USER_ENV}")


# ---------------------------------------------------------------- command


def test_command_arguments_are_bounded() -> None:
    spec.validate(make_sandbox(command=["x"] * requestchecks.MAX_COMMAND_ARGS), Settings())
    refused(make_sandbox(command=["x"] * (requestchecks.MAX_COMMAND_ARGS + 1)),
            "sandbox.spec.command: 1025 arguments, more than 1024")
    spec.validate(make_sandbox(command=["sh", "-c", value(requestchecks.MAX_COMMAND_ARG)]), Settings())
    refused(make_sandbox(command=["sh", "-c", value(requestchecks.MAX_COMMAND_ARG + 1)]),
            f"sandbox.spec.command[2]: {32 * KIB + 1} bytes, more than 32 KiB")
    refused(make_sandbox(command=["ok", "bad\x00"]), "sandbox.spec.command[1]: must not contain NUL")


def test_the_command_is_bounded_as_a_whole() -> None:
    three = [value(32 * KIB) for _ in range(3)]
    assert spec.validate(make_sandbox(command=three), Settings()).command == three
    refused(make_sandbox(command=[*three, "x"]), f"sandbox.spec.command: {96 * KIB + 1} bytes of arguments, "
            "more than 96 KiB")
    escaped = [value(30 * KIB, '"') for _ in range(3)]  # a quote takes two bytes as JSON
    refused(make_sandbox(command=escaped), f"bytes once encoded as JSON for {names.ENV_MAIN_PROCESS}")


def test_the_command_at_its_bound_fits_one_execve_string() -> None:
    args = [value(32 * KIB) for _ in range(3)] + ["x"] * (requestchecks.MAX_COMMAND_ARGS - 3)
    args[0] = args[0][: -(requestchecks.MAX_COMMAND_ARGS - 3)]  # 96 KiB in all
    plan = spec.validate(make_sandbox(command=args), Settings())
    assert envvars.main_process_spec(plan).count('"x"') == requestchecks.MAX_COMMAND_ARGS - 3
    [main] = [s for s in execve_strings(plan) if s.startswith(names.ENV_MAIN_PROCESS.encode() + b"=")]
    assert len(main) <= requestchecks.MAX_ARG_STRLEN


# ---------------------------------------------------------------- the record


def test_every_field_at_its_bound_at_once_is_recorded_and_execs() -> None:
    """The bounds agree with each other: env, command and labels all at theirs is
    accepted (the record under its own bound), and the supervisor's execve fits."""
    env = {f"E{i}": value(32 * KIB - 2) for i in range(3)}
    labels = {f"l{i:02d}": value(4 * KIB - 3) for i in range(16)}  # 64 KiB
    box = make_sandbox(environment=env, command=[value(32 * KIB) for _ in range(3)],
                       template=pb.DriverSandboxTemplate(labels=labels))
    plan = spec.validate(box, Settings())
    assert 340 * KIB < len(plan.intent) < requestchecks.MAX_RECORD - 128 * KIB  # room for the rest
    strings = execve_strings(plan)
    assert max(map(len, strings)) <= requestchecks.MAX_ARG_STRLEN
    assert sum(map(len, strings)) + 8 * len(strings) < 2 * 1024 * KIB  # ARG_MAX with the usual 8 MiB stack


def test_a_record_over_its_bound_is_refused_naming_the_biggest_part() -> None:
    """What podmand bounds nowhere else (platform_config, the policy) still cannot
    grow the volume label past MAX_RECORD; the message names sizes and fields only."""
    box = make_sandbox(command=["python", "app.py"])
    box.spec.template.platform_config.update({"blob": value(600 * KIB)})
    box.spec.template.environment["SMALL"] = value(100)
    refused(box, "sandbox: ", "bytes as podmand records the request (secrets left out, base64), more than 512 KiB",
            "its biggest part is sandbox.spec.template.platform_config (")
    policy = make_sandbox()
    policy.spec.policy.filesystem.read_only.extend(value(KIB) for _ in range(400))
    refused(policy, "its biggest part is sandbox.spec.policy (")
    under = make_sandbox()
    under.spec.template.platform_config.update({"blob": value(380 * KIB)})
    assert len(spec.validate(under, Settings()).intent) <= requestchecks.MAX_RECORD

