"""Job configuration and software versions (``docs/formats/training-logs.md`` section 9.1).

Line kinds handled:

* ``python -m torch.utils.collect_env`` output: a block from ``Collecting environment
  information...`` (or ``PyTorch version:``) to the first line of another shape. Every
  ``Key: value`` line goes to ``job_config`` (source ``collect_env``; the ``lscpu`` lines under
  ``CPU:`` as ``cpu.<Key>``); versions (torch, CUDA build and runtime, driver, Python, cuDNN)
  and the ``[pip3] name==version`` / ``[conda] name version build channel`` lines to
  ``packages``; the ``GPU N: name`` lines under ``GPU models and configuration:`` to ``gpus``;
  cuDNN's ``Probably one of the following:`` library paths are consumed;
* ``pip freeze`` (``name==version``, ``name @ url``, ``-e git+...#egg=name``; read when the
  input has at least three such lines) and ``pip list`` (``Package Version`` table) ->
  ``packages`` (source ``pip freeze`` / ``pip list``);
* Slurm batch scripts: ``#SBATCH`` options (short forms mapped to long names) ->
  ``job_config`` (source ``sbatch``); in an input that has ``#SBATCH`` lines, the shebang,
  ``export K=V`` and ``K=V`` assignments are consumed too (source ``sbatch export`` /
  ``sbatch var``);
* launch command lines, joined over ``\\`` continuations and optionally behind a shell prompt,
  ``+ `` trace or ``VAR=value`` assignments: ``srun``, ``torchrun``, ``python -m
  torch.distributed.run|launch``, ``deepspeed``, ``accelerate launch``, ``mpirun``/``mpiexec``.
  Each launcher's options (``--nnodes``, ``--nproc-per-node``, ``--master-addr``,
  ``--rdzv-endpoint``, srun's ``-N``/``--ntasks-per-node`` ...) go to ``job_config`` with the
  launcher as source, option names normalised (dashes stripped, ``-`` -> ``_``), plus
  ``command`` (the joined text) and ``program`` (the script or binary the launcher runs).
  Options after the program are the program's and are not recorded.

Tables: ``job_config`` (line_no, key, value, source), ``packages`` (line_no, name, version,
source), ``gpus`` (collect_env's GPU list, the ``postmortem.parsers.hwtools`` schema).
"""

from __future__ import annotations

import polars as pl

from postmortem.parsers.ascii_text import rx
from postmortem.parsers.base import ParseResult, conform, consumed_of
from postmortem.parsers.hwtools import GPUS_SCHEMA
from postmortem.parsers.lines import file_of, files_where, of_files, with_stream

NAME = "config"

SAMPLE_LINES = [
    "Collecting environment information...",
    "PyTorch version: 2.4.0+cu121",
    "Is debug build: False",
    "CUDA used to build PyTorch: 12.1",
    "ROCM used to build PyTorch: N/A",
    "",
    "OS: Ubuntu 22.04.4 LTS (x86_64)",
    "GCC version: (Ubuntu 11.4.0-1ubuntu1~22.04) 11.4.0",
    "Python version: 3.10.12 (main, Nov 20 2023, 15:14:05) [GCC 11.4.0] (64-bit runtime)",
    "Is CUDA available: True",
    "CUDA runtime version: 12.1.105",
    "CUDA_MODULE_LOADING set to: LAZY",
    "GPU models and configuration: ",
    "GPU 0: NVIDIA H20",
    "GPU 1: NVIDIA H20",
    "",
    "Nvidia driver version: 550.54.15",
    "cuDNN version: Probably one of the following:",
    "/usr/lib/x86_64-linux-gnu/libcudnn.so.8.9.7",
    "HIP runtime version: N/A",
    "",
    "CPU:",
    "Architecture:                       x86_64",
    "Model name:                         Intel(R) Xeon(R) Platinum 8480+",
    "NUMA node(s):                       2",
    "",
    "Versions of relevant libraries:",
    "[pip3] numpy==1.26.4",
    "[pip3] torch==2.4.0",
    "[conda] torch                     2.4.0           py3.10_cuda12.1_cudnn9.1.0_0    pytorch",
    "[conda] Could not collect",
    "#!/bin/bash",
    "#SBATCH --job-name=moe-16b-pretrain",
    "#SBATCH -N 5",
    "#SBATCH --ntasks-per-node=1",
    "#SBATCH --gpus-per-node=8",
    "#SBATCH --time 2-00:00:00   # two days",
    "export NCCL_IB_HCA=mlx5",
    "MASTER_ADDR=$(scontrol show hostnames \"$SLURM_JOB_NODELIST\" | head -n 1)",
    "srun --label --kill-on-bad-exit=1 torchrun \\",
    "    --nnodes=5 --nproc-per-node 8 \\",
    "    --rdzv-backend=c10d --rdzv-endpoint=$MASTER_ADDR:29500 --rdzv-id=$SLURM_JOB_ID \\",
    "    pretrain_gpt.py --tensor-model-parallel-size 1",
    "+ python -m torch.distributed.run --nnodes 2 --node_rank 0 --master_addr 10.0.0.1 --master_port 29500 train.py",
    "deepspeed --num_gpus 8 --num_nodes 2 --hostfile hostfile --master_addr node01 train.py --deepspeed ds.json",
    "accelerate launch --num_processes 16 --num_machines 2 --machine_rank 0 --main_process_ip node01 train.py",
    "$ mpirun -np 16 -H node01:8,node02:8 -x NCCL_DEBUG=INFO ./train",
    "absl-py==2.1.0",
    "accelerate==0.33.0",
    "torch==2.4.0",
    "flash_attn @ file:///tmp/flash_attn-2.6.3-cp310-cp310-linux_x86_64.whl",
    "-e git+https://github.com/NVIDIA/Megatron-LM.git@a1b2c3d#egg=megatron_core",
]

JOB_CONFIG_SCHEMA = {"line_no": pl.UInt32, "key": pl.String, "value": pl.String, "source": pl.String}
PACKAGES_SCHEMA = {"line_no": pl.UInt32, "name": pl.String, "version": pl.String, "source": pl.String}

# Top-level keys of collect_env's template (torch 1.x-2.x); anything else under ``CPU:`` is lscpu.
_TOP = [
    "PyTorch version", "Is debug build", "CUDA used to build PyTorch", "ROCM used to build PyTorch", "OS",
    "GCC version", "Clang version", "CMake version", "Libc version", "Python version", "Python platform",
    "Is CUDA available", "CUDA runtime version", "CUDA_MODULE_LOADING set to", "GPU models and configuration",
    "Nvidia driver version", "cuDNN version", "HIP runtime version", "MIOpen runtime version",
    "Is XNNPACK available", "CPU", "Versions of relevant libraries", "Is XPU available",
    "XPU used to build PyTorch", "Intel GPU driver version", "Intel GPU models onboard",
    "Intel GPU models detected", "Caching allocator config", "Is CUDA available for jit",
]
_VERSION_KEYS = {"PyTorch version": "torch", "CUDA used to build PyTorch": "cuda (build)",
                 "CUDA runtime version": "cuda (runtime)", "Nvidia driver version": "nvidia-driver",
                 "Python version": "python", "cuDNN version": "cudnn", "ROCM used to build PyTorch": "rocm (build)",
                 "HIP runtime version": "hip (runtime)", "CMake version": "cmake", "GCC version": "gcc"}
_CE_KV = r"^([A-Za-z][\w .()/,+-]*?):\s*(.*?)\s*$"
_CE_PKG = r"^\[(pip\d?|conda)\] (.+?)\s*$"
_CE_GPU = r"^GPU (\d+): (.+?)\s*$"


_EMPTY = {"job_config": pl.DataFrame(schema=JOB_CONFIG_SCHEMA), "packages": pl.DataFrame(schema=PACKAGES_SCHEMA),
          "gpus": pl.DataFrame(schema=GPUS_SCHEMA)}


def _empty() -> dict[str, pl.DataFrame]:
    return dict(_EMPTY)  # frames are never modified in place; sharing the empty ones is safe


_COLLECT_START = r"^(?:Collecting environment information|PyTorch version: )"
_PIP_LINE = r"^[A-Za-z0-9][\w.-]*\s*===?\s*\S+\s*$|^[A-Za-z0-9][\w.-]* @ \S+$|^-e \S+"
_LAUNCH = r"\b(?:srun|torchrun|torch\.distributed\.(?:run|launch)|deepspeed|accelerate|mpirun|mpiexec)\s"


def file_gate(text: pl.Expr) -> pl.Expr:
    """A line this parser could start from: an input with none gives nothing (postmortem.analyzer.ingest
    skips the parser there; tests/test_batched_parsing.py holds the skip to the full run)."""
    # the patterns anchored at the line start as one regex (each fails within a few characters)
    text = text.fill_null("")
    line_starts = "|".join(f"(?:{pattern})" for pattern in (_COLLECT_START, _PIP_LINE, r"^Package\s+Version\b"))
    return (text.str.contains(rx(line_starts)) | text.str.contains("#SBATCH", literal=True)
            | text.str.contains(rx(_LAUNCH)))


def parse(lines: pl.DataFrame) -> ParseResult:
    """The configuration one input states, or several at once (an ``input_id`` column:
    ``postmortem.analyzer.ingest`` hands over a chunk's inputs that pass ``file_gate`` in one
    frame): each kind is read in the inputs that hold it."""
    tables = _empty()
    if lines is None or lines.is_empty() or "text" not in lines.columns:
        return ParseResult(tables=tables)
    # Which kinds are in which input: decided on the text before anything else is computed.
    text = pl.col("text")
    candidate = text.str.contains("=", literal=True) | text.str.contains(" @ ", literal=True) | text.str.starts_with("-e ")
    found = files_where(
        lines, collect=text.str.contains(rx(_COLLECT_START)).any(),
        pip=((candidate & text.str.contains(rx(_PIP_LINE))).sum() >= 3) | text.str.contains(rx(r"^Package\s+Version\b")).any(),
        sbatch=text.str.contains("#SBATCH", literal=True).any(), commands=text.str.contains(rx(_LAUNCH)).any())
    if not any(found[kind].any() for kind in ("collect", "pip", "sbatch", "commands")):
        return ParseResult(tables=tables)
    df = with_stream(lines).with_columns(_file=file_of(lines))
    config: list[pl.DataFrame] = []
    packages: list[pl.DataFrame] = []
    used: list[pl.DataFrame] = []
    if (mine := of_files(df, found, "collect")) is not None:
        _collect_env(mine, tables, config, packages, used)
    if (mine := of_files(df, found, "pip")) is not None:
        _pip(mine, packages, used)
    if (mine := of_files(df, found, "sbatch")) is not None:
        _sbatch(mine, config, used)
    if (mine := of_files(df, found, "commands")) is not None:
        _commands(mine, config, used)
    if config:
        tables["job_config"] = pl.concat([conform(f, JOB_CONFIG_SCHEMA) for f in config]).sort("line_no")
    if packages:
        tables["packages"] = pl.concat([conform(f, PACKAGES_SCHEMA) for f in packages]).sort("line_no")
    return ParseResult(tables=tables, consumed=consumed_of(*used))


# -- collect_env --------------------------------------------------------------------------------

def _collect_env(df: pl.DataFrame, tables: dict, config: list, packages: list, used: list) -> None:
    t = pl.col("text")
    s = "_stream"
    start = t.str.contains(r"^(?:Collecting environment information|PyTorch version: )")
    kv = t.str.contains(rx(_CE_KV))
    pkg = t.str.contains(rx(_CE_PKG))
    gpu = t.str.contains(rx(_CE_GPU))
    path = t.str.contains(rx(r"^/\S+$"))
    blank = t.str.strip_chars() == ""
    key = t.str.extract(rx(_CE_KV), 1)
    top = key.is_in(_TOP) & kv
    d = df.with_columns(
        _block=pl.when(start).then(pl.col("line_no"))
        .when(~(kv | pkg | gpu | path | blank)).then(pl.lit(0, dtype=pl.UInt32)).forward_fill().over(s),
        _section=pl.when(top).then(key).forward_fill().over(s),
        _key=key, _value=t.str.extract(rx(_CE_KV), 2),
    )
    inside = d.filter(pl.col("_block") > 0)
    section = pl.col("_section")
    pairs = inside.filter(kv & ~gpu & ~t.str.starts_with("Collecting environment")).select(
        "line_no", "_key", "_value",
        key=pl.when(top).then(pl.col("_key")).when(section == "CPU").then(pl.concat_str([pl.lit("cpu."), pl.col("_key")])),
        value="_value", source=pl.lit("collect_env"),
    ).drop_nulls("key")
    config.append(pairs)
    first = pl.col("value").str.extract(rx(r"^(?:version )?(\S+)"), 1)
    versions = pairs.filter(pl.col("key").is_in(list(_VERSION_KEYS)) & (pl.col("value") != "")
                            & ~pl.col("value").is_in(["N/A", "Could not collect"])
                            & ~pl.col("value").str.starts_with("Probably")).select(
        "line_no", name=pl.col("key").replace_strict(_VERSION_KEYS, default=None),
        version=pl.when(pl.col("key") == "GCC version").then(pl.col("value").str.extract(rx(r"(\S+)\s*$"), 1))
        .otherwise(first),
        source=pl.lit("collect_env"))
    cudnn = inside.filter(path & (section == "cuDNN version")).select(
        "line_no", name=pl.lit("cudnn"), version=t.str.extract(rx(r"libcudnn\.so\.([\d.]+)$"), 1),
        source=pl.lit("collect_env (candidate)")).drop_nulls("version")
    body = t.str.extract(rx(_CE_PKG), 2)
    pip_like = inside.filter(pkg & (section == "Versions of relevant libraries")).with_columns(
        _tool=t.str.extract(rx(_CE_PKG), 1), _body=body)
    pip_rows = pip_like.filter(pl.col("_body").str.contains(r"==") | pl.col("_body").str.contains(rx(r"^\S+\s+\S+"))).select(
        "line_no",
        name=pl.when(pl.col("_body").str.contains("==", literal=True)).then(pl.col("_body").str.extract(rx(r"^([^=\s]+)"), 1))
        .otherwise(pl.col("_body").str.extract(rx(r"^(\S+)"), 1)),
        version=pl.when(pl.col("_body").str.contains("==", literal=True)).then(pl.col("_body").str.extract(rx(r"==+(\S+)"), 1))
        .otherwise(pl.col("_body").str.extract(rx(r"^\S+\s+(\S+)"), 1)),
        source=pl.concat_str([pl.lit("collect_env "), pl.col("_tool")]),
    ).filter(pl.col("name") != "Could")
    packages += [versions, cudnn, pip_rows]
    gpus = inside.filter(gpu & (section == "GPU models and configuration")).select(
        "line_no", source=pl.lit("collect_env"), index=t.str.extract(rx(_CE_GPU), 1), name=t.str.extract(rx(_CE_GPU), 2),
    ).with_columns(gpu=pl.concat_str([pl.lit("GPU"), pl.col("index")]))
    tables["gpus"] = conform(gpus, GPUS_SCHEMA)
    used += [inside.filter(start | pkg), pairs, gpus, inside.filter(path & (section == "cuDNN version"))]


# -- pip freeze / pip list ----------------------------------------------------------------------

_FREEZE = r"^([A-Za-z0-9][\w.-]*)\s*===?\s*([^\s;#]+)\s*$"
_URL = r"^([A-Za-z0-9][\w.-]*) @ (\S+)\s*$"
_EDITABLE = r"^-e (\S+?)(?:#egg=([\w.-]+))?\s*$"
_LIST_ROW = r"^([A-Za-z0-9][\w.-]*)\s+(\d[\w.+!-]*)(?:\s+(\S.*?))?\s*$"


def _pip(df: pl.DataFrame, packages: list, used: list) -> None:
    t = pl.col("text")
    s = "_stream"
    freeze = df.filter(t.str.contains(rx(_FREEZE))).select(
        "line_no", name=t.str.extract(rx(_FREEZE), 1), version=t.str.extract(rx(_FREEZE), 2), source=pl.lit("pip freeze"))
    url = df.filter(t.str.contains(rx(_URL))).select(
        "line_no", name=t.str.extract(rx(_URL), 1), version=t.str.extract(rx(r"-(\d[\w.+]*?)-(?:py|cp)\d"), 0)
        .str.extract(r"-([^-]+)-", 1), source=pl.lit("pip freeze @"))
    editable = df.filter(t.str.contains(rx(_EDITABLE))).select(
        "line_no", name=t.str.extract(rx(_EDITABLE), 2), version=t.str.extract(r"@([0-9a-f]{6,40})", 1),
        source=pl.lit("pip freeze -e"))
    head = t.str.contains(rx(r"^Package\s+Version\b"))
    rule = t.str.contains(rx(r"^-{3,}(?:\s+-{3,})+\s*$"))
    d = df.with_columns(_table=pl.when(head).then(pl.col("line_no"))
                        .when(~(t.str.contains(rx(_LIST_ROW)) | rule)).then(pl.lit(0, dtype=pl.UInt32))
                        .forward_fill().over(s))
    in_table = d.filter((pl.col("_table") > 0) & ~head)
    listed = in_table.filter(t.str.contains(rx(_LIST_ROW)) & ~rule).select(
        "line_no", name=t.str.extract(rx(_LIST_ROW), 1), version=t.str.extract(rx(_LIST_ROW), 2), source=pl.lit("pip list"))
    packages += [freeze, url, editable, listed]
    used += [freeze, url, editable, listed, d.filter(head), in_table.filter(rule)]


# -- sbatch scripts -----------------------------------------------------------------------------

_SBATCH = r"^#SBATCH\s+(-{1,2}[\w-]+)(?:(?:=|\s+)([^#\s][^#]*?))?\s*(?:#.*)?$"
_SHORT = {"N": "nodes", "n": "ntasks", "c": "cpus_per_task", "t": "time", "p": "partition", "J": "job_name",
          "o": "output", "e": "error", "w": "nodelist", "x": "exclude", "A": "account", "G": "gpus",
          "l": "label", "u": "unbuffered", "q": "qos", "C": "constraint", "D": "chdir", "d": "dependency",
          "np": "np", "H": "host", "K": "kill_on_bad_exit", "W": "wait"}
_ASSIGN = r"^(export\s+)?([A-Za-z_][A-Za-z0-9_]*)=(.*?)\s*$"


def _norm_key(opt: pl.Expr, source: pl.Expr | None = None) -> pl.Expr:
    bare = opt.str.replace(r"^-+", "")
    short = opt.str.contains(r"^-[A-Za-z]{1,2}$")
    if source is not None:  # mpirun's short options are its own (-x exports, -H hosts)
        short = short & ~source.is_in(["mpirun", "mpiexec"])
    return pl.when(short).then(bare.replace_strict(_SHORT, default=bare)).otherwise(bare.str.replace_all("-", "_"))


def _unquote(value: pl.Expr) -> pl.Expr:
    return value.str.replace(r'^"(.*)"$', "$1").str.replace(r"^'(.*)'$", "$1")


def _sbatch(df: pl.DataFrame, config: list, used: list) -> None:
    t = pl.col("text")
    opts = df.filter(t.str.contains(rx(_SBATCH))).select(
        "line_no", key=_norm_key(t.str.extract(rx(_SBATCH), 1)), value=t.str.extract(rx(_SBATCH), 2).str.strip_chars(),
        source=pl.lit("sbatch"))
    value = t.str.extract(rx(_ASSIGN), 3)
    plain = value.str.contains(rx(r"^(?:\"[^\"]*\"|'[^']*'|\$\(.*\)|[^\s=\"'][^\s]*|)$"))
    assign = df.filter(t.str.contains(rx(_ASSIGN)) & plain).select(
        "line_no", key=t.str.extract(rx(_ASSIGN), 2), value=_unquote(t.str.extract(rx(_ASSIGN), 3)),
        source=pl.when(t.str.extract(rx(_ASSIGN), 1).is_not_null()).then(pl.lit("sbatch export")).otherwise(pl.lit("sbatch var")))
    shebang = df.filter(t.str.starts_with("#!/"))
    config += [opts, assign]
    used += [opts, assign, shebang]


# -- launch commands ----------------------------------------------------------------------------

_PROMPT = r"^(?:\S+@\S+?:[^#$]*[#$]\s+|[$+]\s+|\+\s*)?(?:exec\s+)?(?:[A-Za-z_]\w*=\S*\s+)*"
_LAUNCH_START = _PROMPT + r"(?:\S*/)?(?:srun|torchrun|deepspeed|accelerate\s+launch|mpirun|mpiexec|python3?(?:\.\d+)?\s+-m\s+torch\.distributed\.(?:run|launch))\s"
_FLAGS = {"standalone", "no_python", "no-python", "module", "m", "label", "l", "exclusive", "unbuffered", "u",
          "kill_on_bad_exit", "allow_run_as_root", "allow-run-as-root", "use_env", "multi_gpu", "no_local_rank",
          "redirects_all", "bind_to_core", "oversubscribe", "tag_output", "tag-output", "verbose", "v",
          "no_ssh_check", "force_multi", "autotuning", "no-kill", "overlap", "mpi", "same_network"}


def _commands(df: pl.DataFrame, config: list, used: list) -> None:
    t = pl.col("text")
    s = "_stream"
    cont = t.str.contains(rx(r"\\\s*$"))
    d = df.with_columns(_cont=cont, _prev_cont=cont.shift(1).over(s).fill_null(False))
    # Only launch lines and continued lines can belong to a command: group those alone.
    d = d.filter(pl.col("_cont") | pl.col("_prev_cont") | t.str.contains(rx(_LAUNCH_START)))
    d = d.with_columns(_cmd=pl.when(~pl.col("_prev_cont")).then(pl.col("line_no")).forward_fill().over(s))
    cmds = d.group_by([s, "_cmd"], maintain_order=True).agg(
        text=t.str.replace(rx(r"\\\s*$"), "").str.strip_chars().str.join(" "), lines=pl.col("line_no"))
    cmds = cmds.filter(pl.col("text").str.contains(rx(_LAUNCH_START)))
    if cmds.is_empty():
        return
    body = pl.col("text").str.replace(rx(_PROMPT), "")
    tokens = cmds.select(line_no="_cmd", command="text", tok=body.str.extract_all(rx(r"\S+"))) \
        .with_row_index("_c").explode("tok").with_columns(_i=pl.int_range(pl.len()).over("_c"))
    tok = pl.col("tok")
    prev = tok.shift(1).over("_c")
    base = tok.str.replace(r"^.*/", "")
    launcher = (pl.when(base.is_in(["srun", "torchrun", "deepspeed", "mpirun", "mpiexec"])).then(base)
                .when((tok == "launch") & (prev.str.replace(r"^.*/", "") == "accelerate")).then(pl.lit("accelerate"))
                .when(tok.str.contains(rx(r"^torch\.distributed\.(?:run|launch)$")) & (prev == "-m")).then(tok))
    tokens = tokens.with_columns(_launcher=launcher).with_columns(
        _seg=pl.when(pl.col("_launcher").is_not_null()).then(pl.col("_i")).forward_fill().over("_c"),
        _src=pl.col("_launcher").forward_fill().over("_c"))
    tokens = tokens.filter(pl.col("_seg").is_not_null())
    is_opt = tok.str.starts_with("-") & (pl.col("_launcher").is_null())
    has_eq = tok.str.contains("=", literal=True)
    name = tok.str.extract(r"^-+([^=]+)", 1)
    flag = name.is_in(list(_FLAGS)) | name.str.replace_all("-", "_").is_in(list(_FLAGS))
    takes_value = is_opt & ~has_eq & ~flag
    tokens = tokens.with_columns(_next=tok.shift(-1).over("_c"))
    nxt = pl.col("_next")
    # Open MPI's `--mca KEY VALUE` takes two tokens.
    two = is_opt & name.is_in(["mca", "gmca"]) & pl.col("_src").is_in(["mpirun", "mpiexec"])
    tokens = tokens.with_columns(
        _opt=is_opt, _takes=takes_value & nxt.is_not_null() & ~nxt.str.starts_with("-").fill_null(True),
        _two=two.fill_null(False), _next2=tok.shift(-2).over("_c"),
    ).with_columns(_is_value=pl.col("_takes").shift(1).over("_c").fill_null(False)
                   | pl.col("_two").shift(2).over("_c").fill_null(False))
    positional = ~pl.col("_opt") & ~pl.col("_is_value") & pl.col("_launcher").is_null()
    tokens = tokens.with_columns(_pos=positional).with_columns(
        _after=(pl.col("_pos").cast(pl.Int32).cum_sum().over(["_c", "_seg"]) - pl.col("_pos").cast(pl.Int32)) > 0)
    live = tokens.filter(~pl.col("_after"))
    opts = live.filter(pl.col("_opt")).with_columns(
        value=pl.when(has_eq).then(tok.str.replace(r"^[^=]*=", ""))
        .when(pl.col("_two")).then(pl.concat_str([nxt, pl.lit(" "), pl.col("_next2")]))
        .when(pl.col("_takes")).then(nxt).otherwise(pl.lit("true")),
        _name=tok.str.replace(r"=.*$", ""))
    # The token after `python -m` names the launcher: python's own `-m` is no option of a launcher.
    opts = opts.filter(~((pl.col("_name") == "-m") & nxt.str.contains(rx(r"^torch\.distributed\.")).fill_null(False)))
    rows = opts.select("line_no", key=_norm_key(pl.col("_name"), pl.col("_src")), value=_unquote(pl.col("value")), source="_src")
    programs = tokens.filter(pl.col("_pos") & ~pl.col("_after") & (tok != "-m")).group_by("_c", "_seg").agg(
        pl.col("line_no").first(), value=tok.first(), source=pl.col("_src").first()) \
        .filter(~pl.col("value").str.replace(r"^.*/", "").is_in(["python", "python3", "accelerate"])) \
        .select("line_no", key=pl.lit("program"), value="value", source="source")
    first = tokens.group_by("line_no").agg(source=pl.col("_src").drop_nulls().first())
    whole = cmds.select(line_no="_cmd", key=pl.lit("command"), value="text").join(first, on="line_no", how="left")
    config += [whole, rows, programs]
    used.append(cmds.select(line_no="lines").explode("line_no"))
