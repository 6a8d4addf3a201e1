#include "caflm/engine/engine_options.hpp"

#include <cmath>
#include <stdexcept>

namespace caflm {

const char* to_string(Device device) {
  switch (device) {
  case Device::Auto:
    return "auto";
  case Device::Cpu:
    return "cpu";
  case Device::Cuda:
    return "cuda";
  }
  return "unknown";
}

std::optional<Device> parse_device(std::string_view name) {
  for (Device device : {Device::Auto, Device::Cpu, Device::Cuda})
    if (name == to_string(device))
      return device;
  return std::nullopt;
}

std::uint64_t GpuMemory::budget(std::uint64_t total_bytes) const {
  if (bytes > 0)
    return bytes;
  return static_cast<std::uint64_t>(fraction * static_cast<double>(total_bytes));
}

GpuMemory parse_gpu_memory(std::string_view text) {
  const std::string value(text);
  std::size_t used = 0;
  double number = 0.0;
  try {
    number = std::stod(value, &used);
  } catch (const std::exception&) {
    used = 0;
  }
  if (used != value.size() || !std::isfinite(number) || number <= 0.0)
    throw std::invalid_argument("--gpu-memory " + value +
                                ": expected a fraction of the device's memory in (0, 1] or a "
                                "number of MiB");
  GpuMemory memory;
  if (number <= 1.0) {
    memory.fraction = number;
    return memory;
  }
  if (number != std::floor(number) || number > double(std::uint64_t{1} << 40))
    throw std::invalid_argument("--gpu-memory " + value + ": MiB must be a whole number");
  memory.fraction = 0.0;
  memory.bytes = static_cast<std::uint64_t>(number) << 20;
  return memory;
}

} // namespace caflm
