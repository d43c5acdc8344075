#!/bin/bash
# two agents on localhost (--nnodes 2), nproc 2 each; usage: run2.sh NAME FAULT RANK [LOGLEVEL]
name=$1; fault=$2; frank=$3; lvl=${4:-}
d=/tmp/pmruns/$name; rm -rf $d; mkdir -p $d; cd $d
for n in 0 1; do
  env ${lvl:+LOGLEVEL=$lvl} PM_FAULT=$fault PM_FAULT_RANK=$frank OMP_NUM_THREADS=1 PYTHONUNBUFFERED=1 timeout 120 \
    /tmp/torchenv/bin/python -m torch.distributed.run --nnodes 2 --nproc-per-node 2 --rdzv-backend c10d \
    --rdzv-endpoint localhost:29733 --rdzv-id job77 --log-dir $d/logs --redirects 3 --tee 3 \
    /tmp/pmruns/job2.py > node$n.log 2>&1 &
  sleep 1
done
wait
