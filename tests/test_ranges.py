from postmortem.analyzer.ranges import hostlist, rank_ranges


def test_rank_ranges():
    assert rank_ranges([0, 1, 2, 3, 5, 7, 8, 9]) == "0-3,5,7-9"
    assert rank_ranges(list(range(13)) + list(range(14, 40))) == "0-12,14-39"
    assert rank_ranges([4]) == "4"


def test_hostlist():
    assert hostlist(["gpu-01", "gpu-02", "gpu-03", "gpu-05"]) == "gpu-[01-03,05]"
    assert hostlist(["h20-node-04"]) == "h20-node-04"
    assert hostlist(["a1", "a2", "login"]) == "a[1-2],login"
