# The binaries bench/gpu/run.sh runs, as paths under a build folder: prepare.sh builds and
# carries these, run.sh links them (or builds them there). Sourced by both.
BINARIES="nanochat bench/bench_kernels tests/test_cuda"
