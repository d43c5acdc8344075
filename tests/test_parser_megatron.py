"""postmortem.parsers.megatron: iteration / validation lines of every layout, memory reports, settings."""
from __future__ import annotations

import json
import math
import random
from datetime import datetime

import polars as pl
import pytest

from postmortem.parsers import megatron
from tests.parse_helpers import REAL, _env, bare







def real(name: str) -> megatron.ParseResult:
    path = REAL / name
    if not path.is_file():
        pytest.skip(f"{path} is not present")
    return megatron.parse(_env(path.read_bytes()))


@pytest.fixture(scope="module")
def sample():
    lines = _env(("\n".join(megatron.SAMPLE_LINES) + "\n").encode())
    return lines, megatron.parse(lines)


EXTRA = [
    # 1: 2019 BERT-era validation line
    " validation loss at iteration 2000 | LM loss: 3.250000E+00 | LM PPL: 2.579034E+01",
    # 2: end-of-training validation with a named set
    " validation loss at the end of training for val data | lm loss value: 2.100000E+00 | lm loss PPL: 8.166170E+00 | ",
    # 3: 2021 world-size line
    "using world size: 16, data-parallel-size: 4, tensor-model-parallel size: 2, pipeline-model-parallel size: 2 ",
    # 4: 2019 memory report keys
    "after 10 iterations memory (MB) | allocated: 100.5 | max allocated: 200.25 | cached: 300.0 | max cached: 400.0",
    # 5: 2026 datetime marker with microseconds and a SIGTERM exit marker
    "[after megatron is initialized] datetime: 2026-01-20 11:12:13.456789 ",
    "[exiting program after receiving SIGTERM.] datetime: 2026-01-20 12:00:00.000001 ",
    # 7: a Megatron-Core dump without banners is still read where the dot leader is present
    "  seq_length ...................................... 4096",
    # 8: lines that must not be taken
    "Training epoch 0, iteration 8/29 | lr: 5.389e-06 | global_batch_size: 512",
    "iteration: 991 / 1000 | consumed_tokens: 634K | lm_loss: 2.1",
    "  File \"/opt/megatron/training.py\", line 915, in train",
    "some text with memory (MB) mentioned | but: nothing else",
    "    rank 0 .... is not an argument line",
]


@pytest.fixture(scope="module")
def extra():
    return megatron.parse(_env(("\n".join(EXTRA) + "\n").encode()))


def test_every_sample_line_is_consumed(sample):
    lines, result = sample
    consumed = set(result.consumed.to_list())
    missing = [t for n, t in lines.select("line_no", "text").iter_rows() if n not in consumed and t.strip()]
    assert not missing, missing
    assert dict(result.tables["iterations"].schema) == megatron.ITERATIONS_SCHEMA
    assert dict(result.tables["memory"].schema) == megatron.MEMORY_SCHEMA
    assert dict(result.tables["settings"].schema) == megatron.SETTINGS_SCHEMA


def test_iteration_line_of_every_version(sample):
    _, result = sample
    it = result.tables["iterations"].filter(~pl.col("validation"))
    rows = {r["iteration"]: r for r in it.to_dicts()}
    # 2019: keys without a colon
    r = rows[100]
    assert (r["train_iters"], r["elapsed_ms"], r["learning_rate"], r["lm_loss"], r["loss_scale"]) == (
        10000, 512.3, 1.5e-4, 7.123456, 65536.0)
    assert r["consumed_samples"] is None and r["global_batch_size"] is None and r["ts"] is None
    # 2020: no consumed samples / global batch size, skipped counter
    r = rows[50]
    assert (r["lm_loss"], r["skipped_iterations"], r["nan_iterations"], r["consumed_samples"]) == (
        9.874512, 3, 0, None)
    # 2022: dynamic second loss key lands in fields
    r = rows[30]
    assert (r["consumed_samples"], r["global_batch_size"], r["lm_loss"]) == (120, 4, 10.12573)
    assert json.loads(r["fields"])["sop loss"] == "6.911852E-01"
    # 2024: datetime prefix, throughput, MoE aux loss
    r = rows[1200]
    assert r["ts"] == datetime(2024, 3, 11, 10, 12, 13)
    assert (r["throughput_tflops"], r["grad_norm"], r["global_batch_size"]) == (213.5, 0.412, 4096)
    assert json.loads(r["fields"])["load_balancing_loss"] == "1.013377E+00"
    # 2026: microseconds, energy, no lm loss key (NaN is never printed), grad norm nan
    r = rows[200]
    assert r["ts"] == datetime(2026, 2, 1, 3, 4, 5, 123456)
    assert r["lm_loss"] is None and math.isnan(r["grad_norm"])
    fields = json.loads(r["fields"])
    assert fields["skipped samples"] == "4096" and fields["energy per GPU (J/iter/GPU)"] == "4210.3"
    assert list(fields)[0] == "consumed samples"  # printed order is kept
    # Megatron-DeepSpeed: TFLOPs per GPU, inf values
    r = rows[5426]
    assert r["throughput_tflops"] == 78.36 and r["lm_loss"] == math.inf and r["grad_norm"] == -math.inf
    assert json.loads(r["fields"])["actual seqlen"] == "2048"


def test_validation_lines(sample, extra):
    _, result = sample
    v = result.tables["iterations"].filter(pl.col("validation"))
    assert v.select("iteration", "lm_loss").rows() == [(1200, 2.301234)]
    assert json.loads(v["fields"][0])["lm loss PPL"] == "9.986543E+00"
    v = extra.tables["iterations"].filter(pl.col("validation"))
    assert v.select("line_no", "iteration", "lm_loss").rows() == [(1, 2000, 3.25), (2, None, 2.1)]


def test_not_iteration_lines(extra):
    # line 8 is NeMo 2's iteration line (framework "nemo"), the others are not iterations
    it = extra.tables["iterations"]
    assert it["line_no"].to_list() == [1, 2, 8]
    assert it.filter(line_no=8)["framework"].to_list() == ["nemo"]
    consumed = set(extra.consumed.to_list())
    assert not consumed & {9, 10, 11, 12}


def test_memory_reports(sample, extra):
    _, result = sample
    mem = result.tables["memory"].filter(framework="megatron")
    assert mem.select("reported_rank", "label", "iteration", "allocated_mib", "max_allocated_mib",
                      "reserved_mib", "max_reserved_mib", "device_used_mib").rows() == [
        (16, "after 10 iterations", 10, 20245.03, 61234.5, 63210.0, 63210.0, 71002.12),
        (None, "after 5 iterations", 5, 6245.033203125, 9554.87939453125, 10020.0, 10020.0, None),
        (0, "before save_checkpoint for iteration 1000", 1000, 1.5, 2.5, 3.0, 4.0, None),
    ]
    assert set(mem["source_unit"]) == {"MB=MiB"}
    mem = extra.tables["memory"]
    assert mem.select("line_no", "iteration", "reserved_mib", "max_reserved_mib").rows() == [(4, 10, 300.0, 400.0)]


def test_settings(sample, extra):
    _, result = sample
    s = result.tables["settings"]
    startup = {(r["line_no"], r["key"]): r["value"] for r in s.filter(source="megatron-startup").to_dicts()}
    world = {k: v for (n, k), v in startup.items() if n == 12}
    assert world == {
        "world_size": "40", "data_parallel_size": "40", "context_parallel_size": "1",
        "hierarchical_context_parallel_sizes": "None", "tensor_model_parallel_size": "1",
        "encoder_tensor_model_parallel_size": "0", "pipeline_model_parallel_size": "1",
        "encoder_pipeline_model_parallel_size": "0",
    }
    assert {k: v for (n, k), v in startup.items() if n == 13} == {"world_size": "8", "model_parallel_size": "2"}
    assert startup[(14, "tensor_model_parallel_size")] == "2"
    assert startup[(15, "pipeline_model_parallel_size")] == "4"
    assert startup[(16, "datetime:after dataloaders are built")] == "2024-03-11 10:02:03"
    args = dict(s.filter(source="megatron-args").select("key", "value").iter_rows())
    assert args == {
        "distributed_timeout_minutes": "10", "expert_model_parallel_size": "8", "micro_batch_size": "1",
        "an_argument_name_longer_than_forty_eight_characters_x": "True",
    }
    s = extra.tables["settings"]
    assert dict(s.filter(line_no=3).select("key", "value").iter_rows()) == {
        "world_size": "16", "data_parallel_size": "4", "tensor_model_parallel_size": "2",
        "pipeline_model_parallel_size": "2"}
    assert s.filter(line_no=5).select("key", "value").rows() == [
        ("datetime:after megatron is initialized", "2026-01-20 11:12:13.456789")]
    assert s.filter(line_no=6)["key"].to_list() == ["datetime:exiting program after receiving SIGTERM."]
    assert s.filter(line_no=7).select("source", "key", "value").rows() == [("megatron-args", "seq_length", "4096")]
    assert s.filter(pl.col("line_no") >= 8).is_empty()


def test_real_megatron_deepspeed_grad_norm_nan():
    it = real("training/megatron-deepspeed-issue-396-grad-norm-nan.log").tables["iterations"]
    assert it["iteration"].to_list() == [5426, 5427, 5428]
    assert set(it["train_iters"]) == {250000}
    assert it["consumed_samples"].to_list() == [43408, 43416, 43424]
    assert all(math.isnan(g) for g in it["grad_norm"])
    assert it["lm_loss"].null_count() == 3          # no loss key on these lines
    assert it["throughput_tflops"].to_list() == [78.36, 78.77, 78.71]
    assert it["loss_scale"].to_list() == [1.0, 1.0, 1.0]
    assert json.loads(it["fields"][0])["consumed tokens"] == "88899584"


def test_real_megatron_llm_nan_loss_omitted():
    it = real("training/megatron-llm-issue-33-nan-loss-omitted.log").tables["iterations"]
    assert it.select("iteration", "lm_loss").rows() == [(3383, 0.7334521), (3384, 0.7072597), (3385, None)]
    assert it["learning_rate"].to_list()[:2] == [6.680e-06, 6.678e-06]
    assert it["grad_norm"].to_list()[:2] == [0.752, 0.741]
    assert it["skipped_iterations"].to_list()[:2] == [0, 0]


def test_real_megatron_bert_2022():
    result = real("training/nccl-issue-743-megatron-bert-old-timers.log")
    it = result.tables["iterations"]
    assert it.select("iteration", "skipped_iterations", "lm_loss", "loss_scale").rows() == [
        (10, 10, None, 8388608.0), (30, 1, 10.12573, 16384.0)]
    assert json.loads(it["fields"][1])["sop loss"] == "6.911852E-01"
    (mem,) = result.tables["memory"].to_dicts()
    assert (mem["reported_rank"], mem["iteration"], mem["allocated_mib"], mem["max_reserved_mib"]) == (
        0, 20, 6245.033203125, 6554.0)
    marks = result.tables["settings"].select("key", "value").rows()
    assert marks == [("datetime:after dataloaders are built", "2022-10-31 08:35:51"),
                     ("datetime:before the start of training step", "2022-10-31 08:35:51")]


def test_real_megatron_2020_startup():
    result = real("training/megatron-lm-issue-51-2020-startup.log")
    s = result.tables["settings"]
    args = dict(s.filter(source="megatron-args").select("key", "value").iter_rows())
    assert args == {"vocab_file": "checkpoints/gpt2-vocab.json", "warmup": "0.01", "weight_decay": "0.01",
                    "world_size": "1"}
    assert s.filter(source="megatron-startup").select("key", "value").rows() == [("model_parallel_size", "1")]
    assert 5 in set(result.consumed.to_list())  # the 2020 `end of arguments` banner
    assert result.tables["iterations"].is_empty()  # `> working on iteration: 10` is not a training line


def test_real_pai_megatron_arguments_dump():
    s = real("training/pai-megatron-patch-issue-671-arguments-dump.log").tables["settings"]
    args = dict(s.select("key", "value").iter_rows())
    assert len(args) == 23 and set(s["source"]) == {"megatron-args"}
    assert args["micro_batch_size"] == "8" and args["moe_expert_parallel_size"] == "None"
    assert args["min_lr"] == "1e-06"


def test_real_nemo_lines_are_nemo_iterations():
    result = real("training/nemo-issue-14850-srun-label-moe.log")
    it = result.tables["iterations"]
    assert it.select("iteration", "train_iters", "framework").rows() == [
        (8, 29, "nemo"), (9, 29, "nemo"), (10, 29, "nemo"), (11, 29, "nemo")]
    assert it["lm_loss"].to_list() == [10.22, 10.1, 10.06, 9.924]
    assert it["elapsed_ms"].to_list() == [27010.0, 27880.0, 26630.0, 26930.0]
    mem = result.tables["memory"]
    assert mem["source_unit"].unique().to_list() == ["bytes"]
    assert mem["max_reserved_mib"].to_list()[-1] == 57675874304 / 1048576


def test_no_false_positives_in_non_megatron_real_logs():
    if not REAL.is_dir():
        pytest.skip("real data not present")
    megatron_files = {
        "megatron-deepspeed-issue-396-grad-norm-nan.log", "megatron-llm-issue-33-nan-loss-omitted.log",
        "megatron-lm-issue-51-2020-startup.log", "nccl-issue-743-megatron-bert-old-timers.log",
        "pai-megatron-patch-issue-671-arguments-dump.log", "nemo-issue-14850-srun-label-moe.log",
    }
    for path in sorted(REAL.glob("*/*.log")):
        if path.name in megatron_files:
            continue
        result = megatron.parse(bare(path.read_bytes()))
        for name, table in result.tables.items():
            if name == "job_config":     # launch command lines are read in any log
                table = table.filter(pl.col("source") != "cmdline")
            assert table.is_empty(), (path.name, name, table)


def test_garbage_returns_empty_tables():
    rng = random.Random(2)
    junk = rng.randbytes(100_000) + b"\n" + b"x" * (1 << 20)
    for frame in (_env(b""), _env(junk), bare(b"iteration |" * 100_000), bare(b"|" * 100_000)):
        result = megatron.parse(frame)
        for name, schema in (("iterations", megatron.ITERATIONS_SCHEMA), ("memory", megatron.MEMORY_SCHEMA),
                             ("settings", megatron.SETTINGS_SCHEMA), ("events", megatron.EVENTS_SCHEMA),
                             ("job_config", megatron.JOB_CONFIG_SCHEMA), ("timers", megatron.TIMERS_SCHEMA)):
            assert result.tables[name].is_empty() and dict(result.tables[name].schema) == schema
        assert result.consumed.is_empty()


def test_huge_and_bad_numbers():
    text = (
        " iteration 99999999999999999999/ 10 | consumed samples: -5 | lm loss: nan | global batch size: 1.5 |\n"
        "[Rank 99999999999999999999] (after 1 iterations) memory (MB) | allocated: x | max allocated: 1e3\n"
    )
    result = megatron.parse(bare(text.encode()))
    (it,) = result.tables["iterations"].to_dicts()
    assert it["iteration"] is None and it["train_iters"] == 10 and it["consumed_samples"] == -5
    assert math.isnan(it["lm_loss"]) and it["global_batch_size"] is None
    (mem,) = result.tables["memory"].to_dicts()
    assert mem["reported_rank"] is None and mem["allocated_mib"] is None and mem["max_allocated_mib"] == 1000.0


# A piece as the old patterns read it: the key up to the first colon (lazy, less its trailing
# blanks) and the value after its leading blanks; without a colon, the last blank-separated word.
_COLON_PATTERN = r"^(?P<k>[^:]*?)\s*:\s*(?P<v>.*?)$"
_PIECES = [" consumed samples:   1024 ", "lm loss : 2.5E+00", "key:", ":value", "a: b: c", "tokens 5",
           "single", "tab\tkey:\t7", "nbsp\u00a0key\u00a0:\u00a0v", "  spaced key   :   v  ", "x\u3000y 3",
           'we"ird\\ key: 3', "ctl\x01key: \x1fv", "", "   ", "|"]


def test_pieces_are_read_as_the_colon_and_bare_patterns_read_them():
    heads = pl.DataFrame({"line_no": pl.Series([1, 2], dtype=pl.UInt32),
                          "rest": ["|".join(_PIECES), "|".join(reversed(_PIECES))]})
    got = megatron._pieces(heads)
    long = (heads.select("line_no", piece=pl.col("rest").str.split("|")).explode("piece")
            .with_columns(pl.col("piece").str.strip_chars()).filter(pl.col("piece").str.len_chars() > 0)
            .with_columns(pos=pl.int_range(pl.len()).over("line_no")))
    colon = pl.col("piece").str.extract_groups(_COLON_PATTERN)
    bare = pl.col("piece").str.extract_groups(megatron._PIECE_BARE)
    has_colon = pl.col("piece").str.contains(":", literal=True)
    want = long.with_columns(
        k=pl.when(has_colon).then(colon.struct.field("k")).otherwise(bare.struct.field("k")),
        v=pl.when(has_colon).then(colon.struct.field("v")).otherwise(bare.struct.field("v")),
    ).filter(pl.col("k").is_not_null() & (pl.col("k").str.len_chars() > 0))
    assert got.equals(want)
    assert ("a", "b: c") in got.select("k", "v").rows() and ("tokens", "5") in got.select("k", "v").rows()


def test_json_strings_escape_backslashes_and_quotes_and_blank_control_characters():
    values = pl.DataFrame({"v": ['we"ird\\', "ctl\x01\x1f\x00x", "plain", "\\\"", ""]})
    got = values.select(megatron._json_str(pl.col("v")).alias("v"))["v"].to_list()
    assert got == ['"we\\"ird\\\\"', '"ctl   x"', '"plain"', '"\\\\\\""', '""']
    assert [json.loads(text) for text in got] == ['we"ird\\', "ctl   x", "plain", '\\"', ""]
