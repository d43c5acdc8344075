#!/bin/bash
cd /tmp/pmruns
p=29710
for spec in "size size 1" "exit3 exit3 2" "cpp_runtime cpp_runtime 1" "cpp_int cpp_int 1" "cpp_noexc cpp_noexc 1" "abort abort 2" "fullmesh fullmesh 1"; do
  set -- $spec
  p=$((p+1))
  ./run.sh $1 $2 $3 --nproc-per-node 4 --log-dir /tmp/pmruns/$1/logs --redirects 3 --tee 3 --master-port $p
done
PM_MSG='[PG ID 0 PG GUID 0(default_pg) Rank 1] Process group watchdog thread terminated with exception: [Rank 1] Watchdog caught collective operation timeout: WorkNCCL(SeqNum=7, OpType=ALLREDUCE, NumelIn=4096, NumelOut=4096, Timeout(ms)=6000) ran for 6004 milliseconds before timing out.' ./run.sh cpp_distbackend cpp_distbackend 1 --nproc-per-node 4 --log-dir /tmp/pmruns/cpp_distbackend/logs --redirects 3 --tee 3 --master-port 29730
echo ALLDONE
