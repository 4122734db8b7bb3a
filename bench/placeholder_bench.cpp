// PLACEHOLDER: kernel benchmarks are being written (bench/quant_bench.cpp).
