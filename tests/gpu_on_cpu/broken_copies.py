#!/usr/bin/env python3
"""broken_copies.py BUILD [MPIEXEC]: proof that the CUDA backend on the CPU catches defects
(docs/architecture.md §10). For each case, one real source file of BUILD's OLMO2_CUDA_ON_CPU
build is copied to a temporary folder and broken by a textual edit that must match exactly
once (a source that changed fails here, so the case cannot go stale silently); the unit is
compiled with BUILD's own compile command (compile_commands.json), linked ahead of BUILD's
libraries into a copy of the test binary (its link.txt: Unix Makefiles), and run with a
narrow filter. The broken copy must fail, caught by the check the case names, and the same
copy unbroken, built the same way, must pass (so the failure is the edit's, not the
harness's). BUILD, built from this source tree, is only read. Exits 77 (skipped) when its
test binaries are absent. A third argument runs only the cases whose name contains it."""
import json, os, re, shlex, shutil, signal, subprocess, sys, tempfile, time
from pathlib import Path

# The checks, as their output names them (the first that matches says what caught it).
CHECKS = [("executor rule", r"SIMT executor: "), ("NCCL stand-in", r"NCCL stand-in: "),
          ("cuBLASLt stand-in", r"refused by the cuBLASLt stand-in"), ("wrong value", r"\[  FAILED  \] ")]
SYNC = "cudaMemcpyDeviceToHost, s), where(op));\n"
# (name, file edited, unit compiled, [(old, new)], test target, gtest filter, mpi env or None, check)
CASES = [
    ("reduction without its first __syncthreads", "ops/cuda/rmsnorm.cu", None,
     [("  __syncthreads();\n  if (threadIdx.x < 32) {", "  if (threadIdx.x < 32) {")],
     "ops_cuda_test", "CudaRmsNorm.MatchesCpu", None, "wrong value"),
    ("branch bound one lane short of the warp's shuffle", "ops/cuda/rmsnorm.cu", None,
     [("  if (threadIdx.x < 32) {", "  if (threadIdx.x < 31) {")],
     "ops_cuda_test", "CudaRmsNorm.MatchesCpu", None, "executor rule"),
    ("row loop one column short", "ops/cuda/tensor_ops.cu", None,
     [("c < cols; c += blockDim.x) s +=", "c < cols - 1; c += blockDim.x) s +=")],
     "ops_cuda_backend_test", "CudaTensorOps.SumSquaresAndRowNormsMatchCpu", None, "wrong value"),
    ("shuffle from the next lane", "ops/cuda/attention_tile.cuh", "ops/cuda/attention.cu",
     [("__shfl_sync(0xffffffffu, p[i], c)", "__shfl_sync(0xffffffffu, p[i], c + 1)")],
     "ops_cuda_backend_test", "CudaPagedAttention.MatchesCpu", None, "wrong value"),
    ("key tile read before the block has written it", "ops/cuda/attention_tile.cuh", "ops/cuda/attention.cu",
     [("      __syncthreads();\n\n      // This lane's key", "\n      // This lane's key")],
     "ops_cuda_backend_test", "CudaPagedAttention.MatchesCpu", None, "wrong value"),
    ("cuBLASLt layout of A with a wrong leading dimension", "ops/cuda/matmul.cpp", None,
     [("p.a = layout(a.type, a.rows, a.cols, a.ld);", "p.a = layout(a.type, a.rows, a.cols, a.ld + 1);")],
     "ops_cuda_backend_test", "CudaProducts.LinearMatchesCpu", None, "wrong value"),
    ("silu's exponential 1e-4 too large (the op table's backend test)", "ops/cuda/elementwise.cu", None,
     [("__fadd_rn(1.0f, expf(-g))", "__fadd_rn(1.0f, __fmul_rn(expf(-g), 1.0001f))")],
     "ops_backend_ops_test", "Table/BackendOp.MatchesTheCpu/swiglu", None, "wrong value"),
    ("pinned staging read before the stream is synchronised", "parallel/host_staged_communicator.cpp", None,
     [(SYNC + "  OLMO2_COMM_CUDA_CHECK(cudaStreamSynchronize(s), where(op));\n", SYNC)],
     "parallel_device_communicator_mpi_test", "DeviceComm.HostStagedMatchesMpi", {}, "wrong value"),
    ("NCCL send whose receive is never posted", "parallel/nccl_communicator.cpp", None,
     [("  if (o.count > 0) {\n    run(o, stream, [&](cudaStream_t s) {\n      OLMO2_NCCL_CHECK_ASYNC(ncclRecv(",
       "  if (false && o.count > 0) {\n    run(o, stream, [&](cudaStream_t s) {\n      OLMO2_NCCL_CHECK_ASYNC(ncclRecv(")],
     "parallel_device_communicator_mpi_test", "DeviceComm.NcclAcrossRanksMatchesMpi",
     {"OLMO2_SIMT_GPU_PER_PROCESS": "1", "OLMO2_SIMT_NCCL_TIMEOUT": "5"}, "NCCL stand-in"),
]
MPI_ENV = {"OMP_NUM_THREADS": "1", "OMPI_MCA_mpi_yield_when_idle": "1", "OMPI_MCA_rmaps_base_oversubscribe": "1"}


def run(cmd, cwd, env=None, timeout=240):
    """(exit status or "timeout", output); on a timeout its whole process group is killed."""
    p = subprocess.Popen(cmd, cwd=cwd, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                         errors="replace", start_new_session=True)
    try:
        out = p.communicate(timeout=timeout)[0]
        return p.returncode, out
    except subprocess.TimeoutExpired:
        os.killpg(p.pid, signal.SIGKILL)
        return "timeout", p.communicate()[0]


def relink(case, src, edited, unit, text, entry, binary, target):
    """BUILD's test `target` with `unit` compiled from `text` as `edited`; its path."""
    shutil.rmtree(case, ignore_errors=True)
    for f in {edited, unit}:
        (case / f).parent.mkdir(parents=True, exist_ok=True)
        shutil.copy(src / f, case / f)
    (case / edited).write_text(text)
    # BUILD's compile command, on the copy, whose own includes are found first.
    args = shlex.split(entry["command"])
    if Path(args[0]).name == "ccache":  # the compiler launcher (scripts/setup.sh): compile directly
        args = args[1:]
    args[args.index("-o") + 1] = str(case / "unit.o")
    args[args.index(str(src / unit))] = str(case / unit)
    args[1:1] = ["-iquote", str(case), "-iquote", str((src / unit).parent)]
    rc, out = run(args, entry["directory"])
    if rc != 0:
        sys.exit(f"{case}: {unit} does not compile:\n{out}")
    # BUILD's link line, the object first: the archive's copy of the unit is never pulled in.
    link_txt = binary.parent / "CMakeFiles" / f"{target}.dir" / "link.txt"
    if not link_txt.is_file():
        sys.exit(f"{link_txt} is missing: this test reads the link lines of a Unix Makefiles build")
    link = link_txt.read_text().strip().splitlines()[-1]
    args = shlex.split(link)
    args[args.index("-o") + 1] = str(case / target)
    args.insert(1, str(case / "unit.o"))
    rc, out = run(args, binary.parent)
    if rc != 0:
        sys.exit(f"{case}: {target} does not link with {unit}:\n{out}")
    return case / target


def main():
    build, mpiexec = Path(sys.argv[1]).resolve(), sys.argv[2] if len(sys.argv) > 2 else "mpiexec"
    cases = [c for c in CASES if len(sys.argv) < 4 or sys.argv[3] in c[0]]
    binaries = {t: next(iter(sorted((build / "tests").glob(f"*/{t}"))), None) for t in {c[4] for c in cases}}
    if not all(b and os.access(b, os.X_OK) for b in binaries.values()):
        print(f"not built: the GPU tests of {build} (scripts/setup.sh builds the OLMO2_CUDA_ON_CPU folder)")
        return 77
    if not (build / "compile_commands.json").is_file():
        sys.exit(f"{build}/compile_commands.json is missing (CMAKE_EXPORT_COMPILE_COMMANDS, set by the top CMakeLists.txt)")
    commands = {e["file"]: e for e in json.loads((build / "compile_commands.json").read_text())}
    src = Path(next(f for f in commands if f.endswith("/ops/cuda/rmsnorm.cu"))).parents[2]
    tmp, failures = Path(tempfile.mkdtemp(prefix="olmo2-broken-")), []
    unbroken = {}  # (file, unit, test, filter, mpi) -> the unbroken copy's (exit, output)
    try:
        for name, edited, unit, edits, target, flt, mpi, want in cases:
            start, unit = time.time(), unit or edited
            text = broken = (src / edited).read_text()
            for old, new in edits:
                if broken.count(old) != 1:
                    sys.exit(f"{name}: the edit's text occurs {broken.count(old)} times in {edited}, not once: update the case")
                broken = broken.replace(old, new)
            env, launcher = dict(os.environ), []
            if mpi is not None:
                env.update(MPI_ENV, **mpi)
                launcher = [mpiexec, "-n", "2", "--oversubscribe", "--allow-run-as-root"]
            results = []
            for kind, t in (("unbroken", text), ("broken", broken)):
                key = (edited, unit, target, flt, json.dumps(mpi))
                if kind == "unbroken" and key in unbroken:  # the same copy, built and run the same way
                    results.append(unbroken[key])
                    continue
                exe = relink(tmp / kind, src, edited, unit, t, commands[str(src / unit)], binaries[target], target)
                results.append(run(launcher + [str(exe), f"--gtest_filter={flt}"], binaries[target].parent, env))
                if kind == "unbroken":
                    unbroken[key] = results[-1]
            (ctl_rc, ctl_out), (rc, out) = results
            caught = next((c for c, pattern in CHECKS if re.search(pattern, out)), None)
            ok = ctl_rc == 0 and rc not in (0, "timeout") and caught == want
            print(f"{'ok' if ok else 'FAILED'}: {name} ({edited}), {flt}: unbroken copy exit {ctl_rc}, broken copy "
                  f"exit {rc}, caught by: {caught} (expected: {want}); {time.time() - start:.1f} s", flush=True)
            if not ok:
                failures.append(name)
                for kind, o in (("unbroken", ctl_out), ("broken", out)):
                    print(f"--- the {kind} copy's output (last 40 lines):\n" + "\n".join(o.splitlines()[-40:]))
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    print(f"{len(cases) - len(failures)} of {len(cases)} broken copies caught" + (f"; missed: {failures}" if failures else ""))
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
