"""Test-input generator job (gloo, CPU): one fault per run, chosen by PM_FAULT."""
import ctypes, datetime, faulthandler, os, sys, time
import torch
import torch.distributed as dist

def main():
    fault = os.environ.get("PM_FAULT", "none")
    frank = int(os.environ.get("PM_FAULT_RANK", "1"))
    fstep = int(os.environ.get("PM_FAULT_STEP", "2"))
    timeout = float(os.environ.get("PM_TIMEOUT_S", "6"))
    faulthandler.enable()
    if fault == "fullmesh" and int(os.environ["RANK"]) == frank:
        os.environ["GLOO_SOCKET_IFNAME"] = "nonexistent0"
    dist.init_process_group("gloo", timeout=datetime.timedelta(seconds=timeout))
    rank, world = dist.get_rank(), dist.get_world_size()
    print(f"rank {rank} pid {os.getpid()} started", flush=True)
    for step in range(1, 5):
        if fault == "tqdm" and rank == frank:
            for i in range(0, 11):
                bar = "█" * i + ("▉" if i < 10 else "") + " " * (10 - i)
                sys.stderr.write(f"\rTrain: {i*10:3d}%|{bar}| {i}/10 [00:0{i}<00:00, 12.5it/s] 训练 🚀")
                sys.stderr.flush()
            if step == fstep:
                raise RuntimeError(f"injected failure after progress bar on rank {rank}")
        if rank == frank and step == fstep:
            lib = ctypes.CDLL("/tmp/pmruns/libcrash.so") if fault.startswith("cpp_") else None
            if fault == "raise" or (fault == "raise_first" and os.environ.get("TORCHELASTIC_RESTART_COUNT") == "0"):
                raise RuntimeError(f"injected failure on rank {rank} at step {step}")
            if fault == "exit3":
                sys.exit(3)
            if fault == "cpp_runtime":
                lib.throw_runtime_error_in_thread(b"injected std::runtime_error from a worker thread")
            if fault == "cpp_int":
                lib.throw_int_in_thread()
            if fault == "cpp_noexc":
                lib.destroy_joinable_thread()
            if fault == "cpp_distbackend":
                msg = os.environ["PM_MSG"].encode()
                lib.throw_dist_backend_error_in_thread(msg)
            if fault == "hang":
                def lazy_state_init():
                    time.sleep(timeout * 4)
                lazy_state_init()
                continue
            if fault == "abort":
                os.abort()
        n = 4096
        if fault == "size" and rank == frank and step == fstep:
            n = 2048
        grad = torch.ones(n)
        dist.all_reduce(grad)
    dist.barrier()
    dist.destroy_process_group()
    print(f"rank {rank} done", flush=True)

if __name__ == "__main__":
    main()
