"""postmortem.parsers.envdump: per-node environment dumps and the env-dump classifier."""
from __future__ import annotations

import random
from pathlib import Path

import polars as pl

from postmortem.parsers import envdump
from tests.parse_helpers import REAL, _env, bare







def as_dict(env: pl.DataFrame) -> dict:
    return {(r["section"], r["key"]): r["value"] for r in env.to_dicts()}


def test_every_sample_line_is_consumed():
    lines = _env(("\n".join(envdump.SAMPLE_LINES) + "\n").encode())
    result = envdump.parse(lines)
    consumed = set(result.consumed.to_list())
    missing = [t for n, t in lines.select("line_no", "text").iter_rows() if n not in consumed and t.strip()]
    assert not missing, missing
    env = result.tables["env"]
    assert dict(env.schema) == envdump.ENV_SCHEMA
    values = as_dict(env)
    assert values[("node01", "NCCL_SOCKET_IFNAME")] == "eth0,eth1"
    assert values[("node01", "LAUNCH_CMD")] == "torchrun --nnodes=5 --node-rank=0 train.py"
    assert values[("node01", "EMPTY_VALUE")] == ""
    assert values[("node01", "BASH_FUNC_module%%")] == "() {  eval `/usr/bin/modulecmd bash $*`\n}"
    assert values[("node01", "BASH_FUNC_ml()")] == '() {  module ml "$@"\n}'
    assert values[("node01", "_")] == "/usr/bin/env"
    assert values[("node02", "NCCL_IB_HCA")] == "mlx5_0,mlx5_1"
    assert values[("node02", "TORCH_NCCL_ASYNC_ERROR_HANDLING")] == "3"
    assert values[("node02", "CUDA_DEVICE_MAX_CONNECTIONS")] == "1"
    assert values[("node02", "PS1")] == "[\\u@\\h \\W]$ "
    assert values[("node02", "MULTI")] == "first line\nsecond line"
    assert values[("node02", "OLDPWD")] is None
    assert envdump.looks_like_env_dump(lines)


SORTED_DUMP = """\
==> env.node03 <==
BASH_FUNC_which%%=() {  ( alias;
    eval ${which_declare} ) | /usr/bin/which --tty-only --read-alias --read-functions "$@"
}
CUDA_VISIBLE_DEVICES=0,1,2,3,4,5,6,7
HOSTNAME=node03
NCCL_ALGO=Ring
NCCL_NET_GDR_LEVEL=PHB
SLURM_JOB_ID=4242
TORCH_NCCL_TRACE_BUFFER_SIZE=2000
URL=https://example.org/?a=1&b=2

==> env.node04 <==
HOSTNAME=node04
NCCL_ALGO=Tree
"""


def test_sorted_dump_with_sections_and_functions():
    result = envdump.parse(bare(SORTED_DUMP.encode()))
    env = result.tables["env"]
    values = as_dict(env)
    assert values[("env.node03", "NCCL_ALGO")] == "Ring"
    assert values[("env.node04", "NCCL_ALGO")] == "Tree"
    assert values[("env.node03", "URL")] == "https://example.org/?a=1&b=2"
    func = values[("env.node03", "BASH_FUNC_which%%")]
    assert func.startswith("() {  ( alias;\n    eval ${which_declare} )") and func.endswith("\n}")
    # the function body did not become keys, and the variables after it are all there
    assert env.filter(section="env.node03")["key"].to_list() == [
        "BASH_FUNC_which%%", "CUDA_VISIBLE_DEVICES", "HOSTNAME", "NCCL_ALGO", "NCCL_NET_GDR_LEVEL",
        "SLURM_JOB_ID", "TORCH_NCCL_TRACE_BUFFER_SIZE", "URL"]
    assert env.filter(key="CUDA_VISIBLE_DEVICES")["line_no"].to_list() == [5]
    assert len(result.consumed) == len(SORTED_DUMP.strip().splitlines()) - 1  # all but the blank line


def test_srun_label_env_interleaved():
    # `srun -l env` on two tasks: a multi-line function of each task interleaves.
    text = "\n".join([
        "0: NCCL_DEBUG=INFO",
        "1: NCCL_DEBUG=WARN",
        "0: BASH_FUNC_module%%=() {  eval `/usr/bin/modulecmd bash $*`",
        "1: BASH_FUNC_module%%=() {  eval `/usr/bin/modulecmd bash $*`",
        "1: }",
        "0: }",
        "0: NCCL_IB_HCA=mlx5_0",
        "1: NCCL_IB_HCA=mlx5_1",
    ]) + "\n"
    lines = _env(text.encode())
    result = envdump.parse(lines)
    env = result.tables["env"].join(lines.select("line_no", "srun_task"), on="line_no", maintain_order="left")
    got = {(r["srun_task"], r["key"]): r["value"] for r in env.to_dicts()}
    assert got[(0, "NCCL_DEBUG")] == "INFO" and got[(1, "NCCL_DEBUG")] == "WARN"
    assert got[(0, "NCCL_IB_HCA")] == "mlx5_0" and got[(1, "NCCL_IB_HCA")] == "mlx5_1"
    assert got[(0, "BASH_FUNC_module%%")].endswith("$*`\n}")
    assert got[(1, "BASH_FUNC_module%%")].endswith("$*`\n}")
    assert len(env) == 6
    assert set(result.consumed.to_list()) == set(range(1, 9))
    assert envdump.looks_like_env_dump(lines)


def test_unclosed_function_does_not_swallow_the_dump():
    text = "BASH_FUNC_x%%=() {  echo hi\n### node09\nNCCL_ALGO=Ring\n"
    env = envdump.parse(bare(text.encode())).tables["env"]
    assert env.select("key", "value", "section").rows() == [
        ("BASH_FUNC_x%%", "() {  echo hi", None), ("NCCL_ALGO", "Ring", "node09")]


def test_declare_escapes_and_quotes():
    text = (
        'declare -x A="say \\"hi\\" for \\$5 and \\\\ and \\`x\\`"\n'
        "export B='single quoted = value'\n"
        'export C="unterminated\n'
        "NEXT=1\n"
        'D="env keeps quotes"\n'
    )
    env = envdump.parse(bare(text.encode())).tables["env"]
    values = dict(env.select("key", "value").iter_rows())
    assert values["A"] == 'say "hi" for $5 and \\ and `x`'
    assert values["B"] == "single quoted = value"
    assert values["C"] == '"unterminated'      # never closed: kept as printed, nothing swallowed
    assert values["NEXT"] == "1"
    assert values["D"] == '"env keeps quotes"'  # plain `env` output is not unquoted


def test_classifier_on_logs():
    log = "\n".join([
        "node01:1234:5678 [0] NCCL INFO NCCL_SOCKET_IFNAME set by environment to eth0",
        " iteration 10/ 100 | lm loss: 1.0 |",
        "NCCL_DEBUG=INFO",
        "Traceback (most recent call last):",
        "RuntimeError: boom",
    ])
    assert not envdump.looks_like_env_dump(bare(log.encode()))
    assert not envdump.looks_like_env_dump(bare(b""))
    assert not envdump.looks_like_env_dump(bare(b"lower=case\nkeys=only\nhere=too\n"))
    assert envdump.looks_like_env_dump(bare(SORTED_DUMP.encode()))
    if REAL.is_dir():
        for path in sorted(REAL.glob("*/*.log")):
            assert not envdump.looks_like_env_dump(bare(path.read_bytes())), path.name


def test_garbage_returns_empty_tables():
    rng = random.Random(3)
    junk = rng.randbytes(100_000) + b"\n" + b"x" * (1 << 20)
    for frame in (_env(b""), _env(junk), bare(b"=" * 100_000), bare(b"\n" * 100), bare(b"() {\n}" * 1000)):
        result = envdump.parse(frame)
        assert result.tables["env"].is_empty() and dict(result.tables["env"].schema) == envdump.ENV_SCHEMA
        assert not envdump.looks_like_env_dump(frame)
    assert envdump.parse(_env(junk)).consumed.to_list() == []


def test_many_inputs_at_once_are_classified_as_each_alone():
    """``env_dump_inputs`` (ingest asks it once per chunk) keeps inputs apart: each one's first
    ``HEAD_LINES`` lines, an open quote at the end of one input that the next cannot close."""
    samples = sorted(Path(__file__).resolve().parents[1].glob("sample_logs/*/env/*.env"))[:6]
    texts = [
        SORTED_DUMP.encode(),
        b"lower=case\nkeys=only\nhere=too\n",
        b"# NCCL reads this file\nNCCL_IB_GID_INDEX=3\n",
        b"#!/bin/bash\n#SBATCH -N 2\nexport A=1\nexport B=2\n",
        b'A=1\nB=2\ndeclare -x C="open and never closed\n',
        b'closes it"\nA=1\nB=2\na log line\n',      # read as the quote's end, it would be a dump
        b"just a log\n" * (envdump.HEAD_LINES + 10) + b"A=1\nB=2\nC=3\n" * 4000,   # dump past the head
        *(p.read_bytes() for p in samples),
        *(p.read_bytes() for p in (sorted(REAL.glob("*/*.log"))[:40] if REAL.is_dir() else [])),
    ]
    frames = [bare(t) for t in texts]
    alone = {i for i, frame in enumerate(frames) if envdump.looks_like_env_dump(frame)}
    together = envdump.env_dump_inputs(pl.concat(
        [f.with_columns(input_id=pl.lit(i, dtype=pl.UInt32)) for i, f in enumerate(frames)]))
    assert together == alone
    assert {0, 2, 4, *range(7, 7 + len(samples))} <= alone and not alone & {1, 3, 5, 6}
