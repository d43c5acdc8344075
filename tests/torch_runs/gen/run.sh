#!/bin/bash
# usage: run.sh NAME FAULT RANK [extra torchrun args...]
name=$1; fault=$2; frank=$3; shift 3
d=/tmp/pmruns/$name; rm -rf $d; mkdir -p $d
cd $d
PM_FAULT=$fault PM_FAULT_RANK=$frank OMP_NUM_THREADS=1 PYTHONUNBUFFERED=1 timeout 120 /tmp/torchenv/bin/python -m torch.distributed.run "$@" /tmp/pmruns/job2.py > console.log 2>&1
echo "exit $?" >> $d/exit.txt
