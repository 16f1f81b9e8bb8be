// Measured kernel speeds: the data the fp32 kernel choice decides from
// (kernel_choice.h). sgemm-bench --speed-table writes the rows on a GPU, one per
// shape and kernel (bench/sgemm_bench.cc); the repository keeps them in
// server/planner/kernel_speeds.csv, which the build compiles into the planner.
// Pure C++: the planner knows the GPU only by its name and SM count.
//
// The file is CSV, '#' starts a comment line, and its header is
//   device,sm_count,commit,shape_class,m,n,k,kernel,tflops
// device: the GPU's name as CUDA reports it; commit: the tree sgemm-bench was
// built from; shape_class: a kernel_shape_classes() id; kernel: a
// kernel_kind_name(); tflops: the median run's rate.
#pragma once

#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "common/gemm_types.h"
#include "common/status.h"

namespace sgemm {

struct KernelSpeed {
  std::string device;
  int sm_count = 0;
  std::string commit;
  std::string shape_class;
  GemmShape shape;
  KernelKind kernel = KernelKind::kPingpong;
  double tflops = 0;
};

// One measured shape of one device and class, with each kernel's rate there (the
// geometric mean of its runs).
struct MeasuredShape {
  GemmShape shape;
  std::vector<std::pair<KernelKind, double>> rates;
  // `kernel`'s rate; 0 when not measured.
  double rate(KernelKind kernel) const;
};

class KernelSpeeds {
 public:
  // The rows of `csv`; INVALID_ARGUMENT naming the line and the field that is wrong.
  static StatusOr<KernelSpeeds> parse(std::string_view csv);
  // server/planner/kernel_speeds.csv as built in. Parsed once; the build's tests
  // check that it parses (a broken file leaves the table empty and every choice
  // to the engine's default and its tuner).
  static const KernelSpeeds& built_in();
  static std::string_view built_in_csv();  // the file's text

  // The built-in rows followed by the rows of `csv` (a file sgemm-bench wrote for
  // other GPUs, or newer runs); `csv`'s errors as parse's.
  static StatusOr<KernelSpeeds> built_in_and(std::string_view csv);

  static constexpr std::string_view kHeader = "device,sm_count,commit,shape_class,m,n,k,kernel,tflops";
  // One row as the file holds it (no newline).
  static std::string csv_row(const KernelSpeed& row);

  // The device whose rows decide for a GPU named `device` with `sm_count` SMs:
  // that device when measured, else the measured device nearest in SM count (the
  // same chip with other memory, e.g. H100 and H200, has as many; the first of
  // equally near ones), else "" (no rows at all).
  std::string device_for(std::string_view device, int sm_count) const;
  // The shape of `shape_class` measured on `device` nearest to `shape`: the
  // smallest sum over m, n and k of |log2(measured / asked)| (the first of equally
  // near ones); null when the class has no rows for the device. Reads the index
  // built with the rows: no scan of the rows, as it runs on every launch choice.
  const MeasuredShape* nearest_measured(std::string_view device, std::string_view shape_class,
                                        const GemmShape& shape) const;
  // nearest_measured's shape; nullopt where it is null.
  std::optional<GemmShape> nearest(std::string_view device, std::string_view shape_class, const GemmShape& shape) const;
  // `kernel`'s rate on the measured `shape` on `device`: the geometric mean of its
  // runs; 0 when not measured.
  double rate(std::string_view device, const GemmShape& shape, KernelKind kernel) const;

  std::span<const KernelSpeed> rows() const { return rows_; }

 private:
  // The measured shapes of one device and class, in the order the rows first name them.
  struct ClassShapes {
    std::string device;
    std::string shape_class;
    std::vector<MeasuredShape> shapes;
  };
  struct Device {
    std::string name;
    int sm_count = 0;
  };
  void index();  // builds devices_ and classes_ from rows_

  std::vector<KernelSpeed> rows_;
  std::vector<Device> devices_;       // in the order the rows first name them
  std::vector<ClassShapes> classes_;  // one per (device, class)
};

}  // namespace sgemm
