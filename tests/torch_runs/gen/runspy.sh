#!/bin/bash
# hang run: rank RANK never enters the all-reduce; py-spy dumps every worker while the others wait
name=$1; frank=$2; shift 2
d=/tmp/pmruns/$name; rm -rf $d; mkdir -p $d/pyspy; cd $d
PM_FAULT=hang PM_FAULT_RANK=$frank PM_TIMEOUT_S=20 OMP_NUM_THREADS=1 PYTHONUNBUFFERED=1 timeout 120 /tmp/torchenv/bin/python -m torch.distributed.run "$@" /tmp/pmruns/job2.py > console.log 2>&1 &
for i in $(seq 1 100); do [ "$(grep -c ' started' console.log)" -ge 4 ] && break; sleep 0.5; done
sleep 3
agent=$(pgrep -f "^/tmp/torchenv/bin/python -m torch.distributed.run.*$name/logs")
for pid in $(pgrep -P $agent); do /tmp/torchenv/bin/py-spy dump --pid $pid > pyspy/$pid.txt 2>&1; done
wait
