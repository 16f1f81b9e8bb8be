// sgemm-server's command line: what its flags fill and the flags themselves
// (docs/server.md lists them). main.cc parses them and runs the Server.
#pragma once

#include <CLI/CLI.hpp>
#include <cstdint>
#include <string>

#include "server/app/process_setup.h"
#include "server/app/server.h"

// What the flags fill: the Server's options, and what main() uses itself to
// open the logs and build the engine.
struct CommandLine : sgemm::ServerOptions {
  std::string devices = "all";       // "all" or a comma list of CUDA ordinals
  std::string backend = "auto";      // auto | cuda | cpu
  std::string kernel;                // pingpong | cublas; "" = the engine's default
  sgemm::LogOptions logs;            // --log-dir, --log-max-bytes, --log-max-files, --log-level
  int cpu_threads = 0;               // OpenBLAS threads for the cpu backend; 0 = all cores
  double collective_timeout_s = 60;  // a split job's NCCL collectives must finish within this
  // Page-locked memory pinned at start-up for request buffers (cuda backend):
  // 4 GiB holds one 16384^3 request's A, B and C; 0 = pin buffers as they come.
  int64_t pinned_pool_bytes = int64_t(4) << 30;
  // Resident matrices (docs/resident.md): bytes per GPU (cuda) or of host
  // memory (cpu) that PutMatrix and kept results may hold; 0 = the engine's
  // default (8 GiB per GPU, 1 GiB on cpu).
  int64_t resident_bytes = 0;
  int lanes_per_gpu = 2;            // cuda: requests one GPU runs at once (each a lane: its streams and buffers)
  bool no_warm_up = false;          // skip the start-up warm-up (to measure what it saves)
  bool no_kernel_autotune = false;  // the measured speeds alone pick the fp32 kernel (docs/engine.md)
  std::string kernel_speeds;        // sgemm-bench --speed-table rows for this host's GPUs, added to the built-in
};

// Adds every flag of sgemm-server to `app`, each writing into `opt`.
void add_server_flags(CLI::App& app, CommandLine& opt);
