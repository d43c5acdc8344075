"""Hugging Face Trainer / Accelerate console output (``docs/formats/training-logs.md`` section 4), and
tqdm progress bars of any framework.

``iterations``  the metric dicts ``ProgressCallback``/``PrinterCallback`` print (Python reprs, not
                JSON): training ``{'loss': ..., ['grad_norm': ...,] 'learning_rate': ..., 'epoch':
                ...[, 'num_input_tokens_seen': ...]}``; evaluation ``{'eval_loss': ...,
                'eval_runtime': ..., ...}`` (``validation`` true). The dicts carry no step, so
                ``iteration`` is the ``step`` key where present (``trainer_state.json`` history)
                and otherwise the last tqdm bar position printed before the dict in the same
                stream (null when no bar came first). ``nan``/``inf`` become float NaN/inf.
``events``      the end-of-training dict ``{'train_runtime': ..., 'train_loss': ...}``
                (``train_summary``), ``nan_grad_norm`` / ``nan_loss`` / ``inf_loss`` /
                ``zero_loss_nan_grad`` (loss 0.0 with a NaN grad norm: a dead run),
                ``Saving model checkpoint to DIR`` (``checkpoint_save_start``, [mem]).
``train_progress`` tqdm bars: ``[desc: ]pct%|bar| n/total [elapsed<eta, rate s/it|it/s[, postfix]]``,
                also ``n/?`` and ``?it/s`` (Lightning's first redraw) and custom units.
``job_config``  the ``TrainingArguments(`` dump (``key=value,`` lines up to ``)``), the ``*****
                Running training *****`` block (``Num examples = ...``, ``Instantaneous batch size
                per device``, ``Total train batch size (w. parallel, distributed &
                accumulation)``, ``Gradient Accumulation steps``, ``Total optimization steps``,
                ``Number of trainable parameters``), and Accelerate's state block
                (``Distributed environment: MULTI_GPU  Backend: nccl``, ``Num processes: N``,
                ``Process index: i``, ``Local process index: l``, ``Device: cuda:l``, ``Mixed
                precision type: fp16``).
"""

from __future__ import annotations

import polars as pl

from postmortem.parsers import trainlog
from postmortem.parsers.ascii_text import rx
from postmortem.parsers.kinds import Kind, samples_of
from postmortem.parsers.base import ParseResult, consumed_of, to_int
from postmortem.parsers.lines import any_literal, with_stream_where

NAME = "hf_trainer"
# Batched over every log input (postmortem.analyzer.ingest): its many small passes would cost more per file.
BATCH_LITERAL = ""

SAMPLE_LINES = [
    "{'loss': 1.2992, 'learning_rate': 1.282051282051282e-06, 'epoch': 0.0}",
    "{'loss': 0.2051, 'grad_norm': nan, 'learning_rate': 9.774074342405685e-06, 'epoch': 0.53}",
    "{'loss': 0.0, 'grad_norm': nan, 'learning_rate': 9.773696745450087e-06, 'epoch': 0.53} ",
    "{'loss': 2.1, 'grad_norm': 1.25, 'learning_rate': 2e-05, 'epoch': 1.5, 'num_input_tokens_seen': 409600}",
    "{'eval_loss': 1.873, 'eval_runtime': 12.3, 'eval_samples_per_second': 81.3, 'eval_steps_per_second': 2.6, "
    "'epoch': 1.0}",
    "{'train_runtime': 3601.2, 'train_samples_per_second': 17.77, 'train_steps_per_second': 0.139, "
    "'train_loss': 1.4567, 'epoch': 3.0}",
    "{'loss': 1.1, 'learning_rate': 1e-05, 'epoch': 0.1, 'step': 40}",
    "  1%|          | 10/1233 [07:54<14:12:16, 41.81s/it]",
    "  2%|▏         | 20/1233 [14:40<13:43:48, 40.75s/it]",
    " 50%|█████     | 500/1000 [1:02:03<1:01:00,  8.12it/s, loss=0.53]",
    "Training:   0%|                                                             | 0/500 [00:00<?, ?it/s]",
    "Training: |                                                                   | 0/? [00:00<?, ?it/s]",
    "Epoch 0:  45%|████▌     | 30/67 [27:15<23:13, 37.65s/it, loss=2.31, v_num=0]",
    "Training/evaluation parameters TrainingArguments(",
    "_n_gpu=1,",
    "bf16=True,",
    "ddp_timeout=1800,",
    "gradient_accumulation_steps=4,",
    "gradient_checkpointing=True,",
    "per_device_train_batch_size=8,",
    ")",
    "***** Running training *****",
    "  Num examples = 52,002",
    "  Num Epochs = 3",
    "  Instantaneous batch size per device = 8",
    "  Total train batch size (w. parallel, distributed & accumulation) = 256",
    "  Gradient Accumulation steps = 4",
    "  Total optimization steps = 609",
    "  Number of trainable parameters = 6,738,415,616",
    "Saving model checkpoint to output/checkpoint-500",
]

_DICT = r"^\s*\{'[A-Za-z_]\w*': .*\}\s*$"
_PAIR = r"'([^']+)': (nan|-?inf|[-+0-9.eE]+|'[^']*'|None|True|False)"
_TQDM = (r"^\s*(?:(?P<desc>[^|]*?):?\s*)?(?:(?P<pct>\d+)%)?\|(?P<bar>[^|]*)\|\s*(?P<n>\d+)/(?P<total>\d+|\?) "
         r"\[(?P<elapsed>[\d:]+)<(?P<eta>[\d:?]+),\s*(?P<rate>[\d.]+|\?)(?P<unit>[A-Za-z]*/[A-Za-z]+)"
         r"(?:, (?P<postfix>.*))?\]\s*$")
_TA_HEAD = r"TrainingArguments\($"
_TA_LINE = r"^(?P<k>[A-Za-z_]\w*)=(?P<v>.*?),?\s*$"
_RUNNING = {
    "Num examples": "num_examples", "Num Epochs": "num_epochs",
    "Instantaneous batch size per device": "micro_batch_size",
    "Total train batch size (w. parallel, distributed & accumulation)": "global_batch_size",
    "Gradient Accumulation steps": "gradient_accumulation_steps",
    "Total optimization steps": "train_iters",
    "Number of trainable parameters": "num_parameters",
}
_RUNNING_RE = r"^\s{2}(?P<k>Num examples|Num Epochs|Instantaneous batch size per device|Total train batch size \(w\. parallel, distributed & accumulation\)|Gradient Accumulation steps|Total optimization steps|Number of trainable parameters) = (?P<v>[\d,]+)\s*$"
# Settings lines (``postmortem.parsers.kinds``): each named group in ``keys`` gives one ``job_config`` row.
SETTING_KINDS: list[Kind] = [
    Kind("distributed_type", "job_config", r"^Distributed environment: (?P<v>\S+)(?:\s+Backend: (?P<b>\S+))?\s*$",
         literal="Distributed environment: ", keys=(("v", "distributed_type"), ("b", "backend")),
         samples=('Distributed environment: MULTI_GPU  Backend: nccl',)),
    Kind("world_size", "job_config", r"^Num processes: (?P<v>\d+)\s*$",
         literal="Num processes: ", keys=(("v", "world_size"),),
         samples=('Num processes: 2',)),
    Kind("process_index", "job_config", r"^Process index: (?P<v>\d+)\s*$",
         literal="Process index: ", keys=(("v", "process_index"),),
         samples=('Process index: 1',)),
    Kind("local_process_index", "job_config", r"^Local process index: (?P<v>\d+)\s*$",
         literal="Local process index: ", keys=(("v", "local_process_index"),),
         samples=('Local process index: 1',)),
    Kind("device", "job_config", r"^Device: (?P<v>cuda:\d+|cpu|xpu:\d+|npu:\d+)\s*$",
         literal="Device: ", keys=(("v", "device"),),
         samples=('Device: cuda:1',)),
    Kind("mixed_precision", "job_config", r"^Mixed precision type: (?P<v>\w+)\s*$",
         literal="Mixed precision type: ", keys=(("v", "mixed_precision"),),
         samples=('Mixed precision type: fp16',)),
]
SAMPLE_LINES += samples_of(SETTING_KINDS)


def _empty_tables() -> dict[str, pl.DataFrame]:
    return {"iterations": trainlog.empty(trainlog.ITERATIONS_SCHEMA),
            "events": trainlog.empty(trainlog.EVENTS_SCHEMA),
            "train_progress": trainlog.empty(trainlog.PROGRESS_SCHEMA),
            "job_config": trainlog.empty(trainlog.JOB_CONFIG_SCHEMA)}


def _progress(df: pl.DataFrame) -> pl.DataFrame:
    t = pl.col("text")
    sub = df.filter(t.str.contains("|", literal=True) & t.str.contains(" [", literal=True))
    if sub.is_empty():
        return pl.DataFrame()
    g = t.str.extract_groups(rx(_TQDM))
    out = sub.select(
        "line_no", "_stream", "_seq",
        desc=g.struct.field("desc").str.strip_chars().replace("", None),
        pct=to_int(g.struct.field("pct")), n=to_int(g.struct.field("n")), total=to_int(g.struct.field("total")),
        elapsed_s=trainlog.seconds(g.struct.field("elapsed")),
        _rate=trainlog.num(g.struct.field("rate")), _unit=g.struct.field("unit"),
        postfix=g.struct.field("postfix"),
    ).filter(pl.col("n").is_not_null())
    return out.with_columns(s_per_it=pl.when(pl.col("_unit").str.starts_with("s/")).then(pl.col("_rate"))
                            .when(pl.col("_unit").str.ends_with("/s") & (pl.col("_rate") > 0))
                            .then(1.0 / pl.col("_rate")))


def _dicts(df: pl.DataFrame, progress: pl.DataFrame) -> tuple[pl.DataFrame, pl.DataFrame]:
    t = pl.col("text")
    sub = df.filter(t.str.contains("{'", literal=True) & t.str.contains(rx(_DICT))
                    & t.str.contains(rx(r"'(?:loss|eval_\w+|train_runtime|train_loss|grad_norm|learning_rate)': ")))
    if sub.is_empty():
        return pl.DataFrame(), pl.DataFrame()
    pairs = sub.select("line_no", kv=t.str.extract_all(rx(_PAIR))).explode("kv").filter(pl.col("kv").is_not_null())
    pairs = pairs.select("line_no", k=pl.col("kv").str.extract(rx(_PAIR), 1),
                         v=pl.col("kv").str.extract(rx(_PAIR), 2).str.strip_chars("'"))
    wide = pairs.group_by("line_no").agg(
        [pl.col("v").filter(pl.col("k") == k).first().alias(k) for k in
         ("loss", "grad_norm", "learning_rate", "epoch", "step", "eval_loss", "train_runtime", "train_loss")]
    ).join(trainlog.kv_json(pairs), on="line_no", how="left")
    rows = sub.select("line_no", "_stream", "_seq").join(wide, on="line_no", how="inner")
    # The step: the last tqdm bar before the dict in the same stream.
    if not progress.is_empty():
        bars = progress.select("_stream", "_seq", _bar_n="n", _is_bar=pl.lit(True))
        both = pl.concat([rows.with_columns(_bar_n=pl.lit(None, dtype=pl.Int64), _is_bar=pl.lit(False)),
                          bars], how="diagonal_relaxed").sort("_stream", "_seq")
        rows = both.with_columns(_bar_n=pl.col("_bar_n").forward_fill().over("_stream")).filter(
            ~pl.col("_is_bar")).drop("_is_bar")
    else:
        rows = rows.with_columns(_bar_n=pl.lit(None, dtype=pl.Int64))
    rows = rows.with_columns(
        iteration=pl.coalesce(to_int(pl.col("step").cast(pl.Float64, strict=False)), pl.col("_bar_n")),
        lm_loss=pl.coalesce(pl.col("loss"), pl.col("eval_loss")).cast(pl.Float64, strict=False),
        grad_norm=pl.col("grad_norm").cast(pl.Float64, strict=False),
        learning_rate=pl.col("learning_rate").cast(pl.Float64, strict=False),
        epoch=pl.col("epoch").cast(pl.Float64, strict=False),
        validation=pl.col("eval_loss").is_not_null() & pl.col("loss").is_null(),
    ).sort("line_no")
    summary = rows.filter(pl.col("train_runtime").is_not_null())
    iterations = rows.filter(pl.col("train_runtime").is_null())
    events = [summary.with_columns(kind=pl.lit("train_summary"), detail=pl.col("fields"),
                                   value=pl.col("train_loss").cast(pl.Float64, strict=False),
                                   duration_s=pl.col("train_runtime").cast(pl.Float64, strict=False))]
    train = iterations.filter(~pl.col("validation"))
    for kind, cond, value in (
        ("zero_loss_nan_grad", (pl.col("lm_loss") == 0.0) & pl.col("grad_norm").is_nan(), pl.col("grad_norm")),
        ("nan_grad_norm", pl.col("grad_norm").is_nan() & (pl.col("lm_loss") != 0.0), pl.col("grad_norm")),
        ("nan_loss", pl.col("lm_loss").is_nan(), pl.col("lm_loss")),
        ("inf_loss", pl.col("lm_loss").is_infinite(), pl.col("lm_loss")),
    ):
        events.append(train.filter(cond.fill_null(False)).with_columns(kind=pl.lit(kind), value=value,
                                                                       level=pl.lit("warning")))
    events = pl.concat([e.with_columns(message=pl.lit(None, dtype=pl.String)) for e in events if not e.is_empty()],
                       how="diagonal_relaxed") if any(not e.is_empty() for e in events) else pl.DataFrame()
    if not events.is_empty():
        events = events.join(df.select("line_no", message_t="text"), on="line_no", how="left").with_columns(
            message=pl.col("message_t").str.strip_chars())
    return iterations, events


def _config(df: pl.DataFrame) -> tuple[pl.DataFrame, pl.Series]:
    t = pl.col("text")
    frames = []
    extra = pl.Series("line_no", [], dtype=pl.UInt32)
    # TrainingArguments( ... ) dump: contiguous key=value lines under the opening line.
    has_dump = bool(df["text"].str.contains("TrainingArguments(", literal=True).any())
    cand = df.filter(t.str.contains("=", literal=True) | t.str.contains("TrainingArguments(", literal=True)
                     | (t.str.strip_chars() == ")")) if has_dump else df.clear()
    cand = cand.filter(t.str.contains(rx(_TA_HEAD)) | t.str.contains(rx(_TA_LINE)) | (t.str.strip_chars() == ")"))
    if not cand.is_empty() and cand["text"].str.contains(rx(_TA_HEAD)).any():
        s = "_stream"
        contiguous = (pl.col("_seq").shift(1).over(s) == pl.col("_seq") - 1).fill_null(False)
        cand = cand.with_columns(_head=t.str.contains(rx(_TA_HEAD)), _close=t.str.strip_chars() == ")")
        cand = cand.with_columns(_block=(pl.col("_head") | ~contiguous).cum_sum().over(s))
        cand = cand.with_columns(_in=pl.col("_head").first().over([s, "_block"]),
                                 _closed_before=pl.col("_close").cum_sum().over([s, "_block"])
                                 - pl.col("_close").cast(pl.Int64))
        block = cand.filter(pl.col("_in") & (pl.col("_closed_before") == 0))
        kv = block.filter(~pl.col("_head") & ~pl.col("_close"))
        g = t.str.extract_groups(rx(_TA_LINE))
        frames.append(kv.select("line_no", source=pl.lit("hf-training-args"),
                                key=trainlog.canonical(g.struct.field("k")), value=g.struct.field("v"),
                                raw_key=g.struct.field("k")))
        extra = block.filter(pl.col("_head") | pl.col("_close"))["line_no"]
    run = df.filter(t.str.contains(" = ", literal=True) & t.str.contains(rx(_RUNNING_RE)))
    if not run.is_empty():
        g = t.str.extract_groups(rx(_RUNNING_RE))
        frames.append(run.select("line_no", source=pl.lit("hf-running-training"),
                                 key=g.struct.field("k").replace_strict(_RUNNING, default=None,
                                                                        return_dtype=pl.String),
                                 value=g.struct.field("v").str.replace_all(",", ""), raw_key=g.struct.field("k")))
    banner = df.filter(t.str.contains("***** Running ", literal=True))
    banner = banner.filter(t.str.contains(rx(r"^\s*\*{5} Running (?:training|Evaluation) \*{5}\s*$")))
    extra = pl.concat([extra, banner["line_no"]])
    frames += trainlog.settings_rows(df, t, SETTING_KINDS, "accelerate-state")
    return trainlog.stack_conformed(frames, trainlog.JOB_CONFIG_SCHEMA, framework=NAME), extra.cast(pl.UInt32)


# The line router: every literal the functions above and ``parse`` filter the lines on (of two
# ANDed ones, one: ``|`` for a tqdm bar). A line with none of them is no function's: one scan
# drops it. A new filter on a literal must add it here (its sample would go unconsumed otherwise).
_ROUTE = [
    "|",                                                                    # _progress
    "{'",                                                                   # _dicts
    "TrainingArguments(", " = ", "***** Running ",                          # _config
    *(kind.literal for kind in SETTING_KINDS),                              # trainlog.settings_rows
    "Saving model checkpoint to ",                                          # parse
]
# A TrainingArguments dump's ``key=value`` lines and its closing ``)``: read only where the
# input holds the dump's opening line (``_config``'s has_dump), so routed only there.
_DUMP_ROUTE = ["=", ")"]


def _routed(lines: pl.DataFrame) -> pl.DataFrame:
    """``with_stream(lines)`` at the lines some function of this parser reads (``_ROUTE``); each
    keeps its ``_stream`` and ``_seq``, so blocks followed per stream end where they did."""
    text = pl.col("text")
    keep = any_literal(text, _ROUTE)
    if lines.select(text.str.contains("TrainingArguments(", literal=True).any()).item():
        keep = keep | any_literal(text, _DUMP_ROUTE)
    return with_stream_where(lines, keep)


def parse(lines: pl.DataFrame) -> ParseResult:
    if lines is None or lines.is_empty() or "text" not in lines.columns:
        return ParseResult(tables=_empty_tables())
    df = _routed(lines)
    if df.is_empty():   # most chunks of a large run
        return ParseResult(tables=_empty_tables())
    t = pl.col("text")
    progress = _progress(df)
    iterations, events = _dicts(df, progress)
    job_config, extra = _config(df)
    saves = df.filter(t.str.contains("Saving model checkpoint to ", literal=True)).select(
        "line_no", path=t.str.extract(rx(r"^\s*Saving model checkpoint to (\S+)\s*$"), 1), message=t,
        kind=pl.lit("checkpoint_save_start")).filter(pl.col("path").is_not_null())
    saves = saves.with_columns(iteration=to_int(pl.col("path").str.extract(rx(r"checkpoint-(\d+)/?$"), 1)))
    ev = [e for e in (events, saves) if not e.is_empty()]
    tables = {
        "iterations": trainlog.stack_conformed([iterations], trainlog.ITERATIONS_SCHEMA, framework=NAME),
        "events": trainlog.stack_conformed(ev, trainlog.EVENTS_SCHEMA, framework=NAME),
        "train_progress": trainlog.stack_conformed([progress], trainlog.PROGRESS_SCHEMA, framework=NAME),
        "job_config": job_config,
    }
    consumed = consumed_of(*tables.values(), pl.DataFrame({"line_no": extra}))
    return ParseResult(tables=tables, consumed=consumed)
