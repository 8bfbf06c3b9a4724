"""``python -m kaio.hwcheck``: GPU acceptance in one command.

On a machine with an NVIDIA GPU, run from a kaio checkout::

    python -m kaio.hwcheck --out hwcheck.md      # about 10-25 minutes on an H100
    python -m kaio.hwcheck --sim --out smoke.md  # the same flow on the simulator, under a minute

It runs, each section in its own process:

============  ==========================================================  ========  ==========
section       what                                                        limit     no progress
============  ==========================================================  ========  ==========
tests         ``pytest -m gpu`` (each Hopper test on sm_90 and on sm_90a)  420 s     180 s
matmul        ``benchmarks/matmul.py`` at 1024, 4096, 8192 and the skinny  300 s     150 s
              shapes, f16 and bf16, beside cuBLAS and Triton; on Hopper
              (sm_90a, the default) the columns are wgmma,
              warp-specialised, cp.async, persistent, mma.sync, autotuned
attention     ``benchmarks/attention.py`` beside torch SDPA FLASH/cuDNN     150 s     120 s
attention_    the same with ``KAIO_ARCH=sm_90``: the portable mma.sync      150 s     120 s
sm_90         path (Hopper only)
memory_bound  ``benchmarks/memory_bound.py`` beside torch eager, a copy     120 s     60 s
training      ``benchmarks/training.py``: backward kernels beside torch's   120 s     60 s
              FLASH backward, eager, F.linear + F.cross_entropy
quantized     ``benchmarks/quantized.py``: GGUF Q4_K/Q8_0 decode against   120 s     90 s
              a copy's bandwidth, W4A16 against the f16 matmul, int8 and
              fp8 GEMMs against kaio's f16 GEMM and ``torch._int_mm`` /
              ``torch._scaled_mm``
launch        ``benchmarks/launch_overhead.py``                             60 s      60 s
============  ==========================================================  ========  ==========

The limits add up to 24 minutes, so even a run in which every section hangs ends within 25
(plus a few seconds to describe the machine). "No progress": the longest a section may go
without a new marker (each test, each benchmark kernel leaves one: :mod:`kaio.hwcheck.markers`);
a section that passes either limit is killed and reported as timed out *while running* its last
marker, so a hang names its test or kernel. A section that fails or crashes does not stop the
others.

The report (Markdown, printed and written to ``--out``, default ``hwcheck-report.md``) is a
dated section for docs/benchmarks.md: the GPU, driver and package versions, a summary table,
test counts and every failure with its message, then each benchmark's table as the script
printed it. Next to it, ``<out>.state.json`` records each finished section: a rerun resumes,
skipping those (``--fresh`` starts over; ``--only SECTION`` reruns one), and ``<out>.logs/``
holds each section's full output. A state file that does not read back as hwcheck wrote it is
renamed ``<out>.state.json.damaged`` (with a warning) and the run starts over; a report, state
file or logs folder that cannot be written stops the run before any section (exit status 2);
Ctrl-C at any point ends it with exit status 130 and the finished sections kept. Exit status 0 when every section passed, 1 when a test failed
or a section crashed or timed out, 2 when there is no checkout.

``--sim`` is the smoke test CI runs: the GPU tests are collected and skip (no GPU is used even
where there is one), the benchmark scripts run their simulator configurations
(``--sim-smoke``, the launch path with a few hundred launches), without torch/cuBLAS/Triton
baselines; the report has the same shape and says it holds no GPU figure.

hwcheck needs the repository's tests/ and benchmarks/, which a plain ``pip install`` does not
install: it looks in ``--repo DIR``, else the current directory, else the tree kaio was
installed from (an editable install), and otherwise stops with exit status 2 saying so.
"""
