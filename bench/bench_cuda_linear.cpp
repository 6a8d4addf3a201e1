// The linear layers of one decode step of a llama-shaped model on the GPU:
// every product of every layer and the output projection, at m rows each,
// captured in one CUDA graph and replayed, launched serially and then
// programmatically (programmatic_launch.cuh). Reports ms per step and the
// weight bytes read per second, the figure the B=1 roofline is judged by.
// Defaults are TinyLlama-1.1B's shape in BF16; weights are a fixed byte
// pattern, since only their size and type matter to the time.
//
//   bench_cuda_linear [--rows 1,16,32,128] [--type bf16] [--dim 2048] ...

#include <CLI/CLI.hpp>

#include <algorithm>

#include <cstdio>
#include <stdexcept>
#include <string>
#include <vector>

#include "caflm/cuda/cuda_check.hpp"
#include "caflm/cuda/cuda_device.hpp"
#include "caflm/cuda/device_buffer.hpp"
#include "caflm/cuda/gemm_kernels.cuh"
#include "caflm/cuda/programmatic_launch.cuh"

using namespace caflm;
using namespace caflm::cuda;

namespace {

struct Shape {
  std::uint64_t dim = 2048;
  std::uint64_t kv_dim = 256;
  std::uint64_t ffn = 5632;
  std::uint64_t layers = 22;
  std::uint64_t vocab = 32000;
};

/// One product of the step: its weights and the widths of x and y.
struct Product {
  WeightView weight;
  std::uint64_t x_stride;
  std::uint64_t y_stride;
};

/// Milliseconds per replay of the step's products at `m` rows, captured in
/// one graph; `reps` replays after 3 to warm up.
double step_ms(const std::vector<Product>& products, const float* x, float* y, std::uint64_t m,
               bool programmatic, cudaStream_t stream, int reps) {
  cudaGraph_t graph = nullptr;
  cudaGraphExec_t exec = nullptr;
  CAFLM_CUDA_CHECK(cudaStreamBeginCapture(stream, cudaStreamCaptureModeGlobal));
  for (const Product& p : products)
    launch_linear(p.weight, x, p.x_stride, m, nullptr, y, p.y_stride, stream, programmatic);
  CAFLM_CUDA_CHECK(cudaStreamEndCapture(stream, &graph));
  CAFLM_CUDA_CHECK(cudaGraphInstantiate(&exec, graph, 0));
  for (int i = 0; i < 3; ++i)
    CAFLM_CUDA_CHECK(cudaGraphLaunch(exec, stream));
  cudaEvent_t start = nullptr, stop = nullptr;
  CAFLM_CUDA_CHECK(cudaEventCreate(&start));
  CAFLM_CUDA_CHECK(cudaEventCreate(&stop));
  CAFLM_CUDA_CHECK(cudaEventRecord(start, stream));
  for (int i = 0; i < reps; ++i)
    CAFLM_CUDA_CHECK(cudaGraphLaunch(exec, stream));
  CAFLM_CUDA_CHECK(cudaEventRecord(stop, stream));
  CAFLM_CUDA_CHECK(cudaEventSynchronize(stop));
  float ms = 0.0f;
  CAFLM_CUDA_CHECK(cudaEventElapsedTime(&ms, start, stop));
  cudaEventDestroy(start);
  cudaEventDestroy(stop);
  cudaGraphExecDestroy(exec);
  cudaGraphDestroy(graph);
  return ms / reps;
}

} // namespace

int main(int argc, char** argv) {
  CLI::App app{"Time the linear layers of one decode step on the GPU"};
  Shape shape;
  std::string type_name = "bf16";
  std::vector<std::uint64_t> rows{1, 16, 32, 128};
  int reps = 20;
  app.add_option("--type", type_name, "Weight type (a GGUF type name)")->capture_default_str();
  app.add_option("--dim", shape.dim, "Model width")->capture_default_str();
  app.add_option("--kv-dim", shape.kv_dim, "Width of K and V")->capture_default_str();
  app.add_option("--ffn", shape.ffn, "Feed-forward width")->capture_default_str();
  app.add_option("--layers", shape.layers, "Layers")->capture_default_str();
  app.add_option("--vocab", shape.vocab, "Vocabulary (the output projection)")
      ->capture_default_str();
  app.add_option("--rows", rows, "Rows of x (sequences of a decode step)")->delimiter(',');
  app.add_option("--reps", reps, "Graph replays timed per figure")->capture_default_str();
  CLI11_PARSE(app, argc, argv);

  try {
    const std::string reason = cuda_unavailable_reason();
    if (!reason.empty())
      throw std::runtime_error(reason);
    const auto type = tensor_type_from_name(type_name);
    if (!type || !gemm_supports(*type))
      throw std::invalid_argument("--type " + type_name + ": not a type the GPU GEMM decodes");

    // Per layer: q, k, v, o, gate, up, down; then the output projection.
    struct Matrix {
      std::uint64_t n, k;
    };
    std::vector<Matrix> matrices;
    for (std::uint64_t l = 0; l < shape.layers; ++l) {
      for (const Matrix& m : {Matrix{shape.dim, shape.dim}, Matrix{shape.kv_dim, shape.dim},
                              Matrix{shape.kv_dim, shape.dim}, Matrix{shape.dim, shape.dim},
                              Matrix{shape.ffn, shape.dim}, Matrix{shape.ffn, shape.dim},
                              Matrix{shape.dim, shape.ffn}})
        matrices.push_back(m);
    }
    matrices.push_back(Matrix{shape.vocab, shape.dim});

    std::vector<DeviceBuffer> buffers;
    std::vector<Product> products;
    std::uint64_t weight_bytes = 0;
    for (const Matrix& m : matrices) {
      const std::uint64_t bytes = m.n * tensor_row_bytes(*type, m.k);
      buffers.emplace_back(bytes, "weights");
      // 0x11 bytes: small finite scales for every block type.
      CAFLM_CUDA_CHECK(cudaMemset(buffers.back().as<void>(), 0x11, bytes));
      products.push_back(Product{WeightView{*type, buffers.back().as<void>(), m.n, m.k},
                                 /*x_stride=*/std::max(shape.dim, shape.ffn),
                                 /*y_stride=*/std::max({shape.dim, shape.ffn, shape.vocab})});
      weight_bytes += bytes;
    }
    std::uint64_t max_rows = 1;
    for (std::uint64_t m : rows)
      max_rows = std::max(max_rows, m);
    DeviceBuffer x(max_rows * products.front().x_stride * sizeof(float), "x");
    DeviceBuffer y(max_rows * products.front().y_stride * sizeof(float), "y");
    CAFLM_CUDA_CHECK(cudaMemset(x.as<void>(), 0, max_rows * products.front().x_stride * 4));
    cudaStream_t stream = nullptr;
    CAFLM_CUDA_CHECK(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking));

    const bool programmatic = programmatic_launch_supported();
    std::printf("# %zu products, %s, %.3f GB of weights%s\n", products.size(), to_string(*type),
                weight_bytes / 1e9, programmatic ? "" : " (no programmatic launch on this device)");
    std::printf("%6s %12s %10s %12s %10s\n", "m", "serial ms", "TB/s", "program. ms", "TB/s");
    for (std::uint64_t m : rows) {
      if (m == 0)
        continue;
      const double serial = step_ms(products, x.as<float>(), y.as<float>(), m, false, stream, reps);
      const double overlapped =
          programmatic ? step_ms(products, x.as<float>(), y.as<float>(), m, true, stream, reps)
                       : 0.0;
      std::printf("%6llu %12.3f %10.2f %12.3f %10.2f\n", static_cast<unsigned long long>(m), serial,
                  weight_bytes / (serial * 1e-3) / 1e12, overlapped,
                  overlapped > 0.0 ? weight_bytes / (overlapped * 1e-3) / 1e12 : 0.0);
    }
    cudaStreamDestroy(stream);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "bench_cuda_linear: %s\n", e.what());
    return 1;
  }
  return 0;
}
