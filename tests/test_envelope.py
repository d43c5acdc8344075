
from postmortem.parsers.lines import SAMPLE_LINES, decode_lines, envelope


def test_sample_prefixes_are_peeled():
    df = envelope(("\n".join(SAMPLE_LINES) + "\n").encode())
    rows = df.to_dicts()
    assert rows[0]["srun_task"] == 3 and rows[0]["text"].startswith("node03:38646:35596 [4] NCCL INFO")
    assert rows[1]["mpi_rank"] == 5 and rows[1]["text"].startswith("node03:")
    assert rows[2]["mpi_rank"] == 0 and rows[2]["ext_ts"] == "Fri Aug 11 12:31:45 2023"
    assert rows[4]["ray_pid"] == 615 and rows[4]["host_tag"] == "10.100.2.6"
    assert rows[5]["ext_ts"].startswith("2025-11-24T03:20:21") and rows[5]["rank_tag"] == 3
    assert rows[6]["local_rank"] == 3 and rows[6]["rank_tag"] == 27
    assert rows[6]["text"].startswith("[E909 09:55:29")
    assert rows[7]["host_tag"] == "dinov2-giant-nodes.cn-d004" and rows[7]["rank_tag"] == 14
    # a progress bar glued in front of c10d's prefix
    assert rows[8]["rank_tag"] == 3 and rows[8]["text"].startswith("[E918")
    assert rows[9]["rank_tag"] == 0 and rows[9]["ray_pid"] == 86559
    # a custom torchrun template: which number is the global rank is for analyzer.identity to
    # decide (the envelope keeps the first as the stream's number, the prefix keeps both)
    assert rows[10]["local_rank"] == 0 and rows[10]["rank_tag"] is None and rows[10]["prefix"] == "[trainer0|0]:"


def test_offsets_point_at_original_bytes_even_with_invalid_utf8():
    data = b"ok line\nbad \xff\xfe bytes\r\nlast"
    df = decode_lines(data)
    assert df["line_no"].to_list() == [1, 2, 3]
    for offset, length, raw in zip(df["offset"], df["length"], [b"ok line", b"bad \xff\xfe bytes\r", b"last"]):
        assert data[offset:offset + length] == raw
    assert "\\xff" in df["raw"][1]


def test_carriage_return_keeps_last_segment_and_ansi_is_removed():
    df = envelope(b"10%|#  |\r50%|### |\r\x1b[31mdone\x1b[0m\r\n")
    assert df["text"].to_list() == ["done"]


def test_pdsh_prefix_needs_a_recurring_host():
    lines = b"\n".join([b"gpu1504: step 1", b"gpu1504: step 2", b"gpu1504: step 3", b"RuntimeError: boom"])
    df = envelope(lines)
    assert df["host_tag"].to_list()[:3] == ["gpu1504"] * 3
    assert df["text"][3] == "RuntimeError: boom" and df["host_tag"][3] is None


def test_empty_input():
    assert envelope(b"").is_empty()


def test_decoding_many_inputs_at_once_equals_decoding_each():
    """postmortem.parsers.lines.decode_many (one split for all valid UTF-8 inputs) against decode_lines per
    input: empty, no final newline, invalid UTF-8, CRLF, blank lines."""
    import polars as pl

    from postmortem.parsers.lines import decode_lines, decode_many

    small = [b"a\nbb\n", b"", b"x", b"\xff\xfeoops\nok\n", "é\r\nz\n".encode(), b"\n\n", b"last\n"]
    # inputs of a megabyte and more are split each as a stream of its own, not joined first
    large = [b"line %d\n" % i * 150_000 for i in range(3)] + [b"\n" * 2_000_000, b"no end" * 300_000]
    for datas in (small, large, small + large):
        many = decode_many(datas)
        for i, data in enumerate(datas):
            assert many.filter(pl.col("_input") == i).drop("_input").equals(decode_lines(data))
        assert many["_input"].is_sorted()
