#include "apps/bench_serve/latency_plot.hpp"

#include <algorithm>
#include <array>
#include <cmath>
#include <cstdio>
#include <fstream>
#include <stdexcept>
#include <utility>
#include <zlib.h>

namespace caflm::apps::bench_serve {

namespace {

struct Color {
  std::uint8_t r, g, b;
};

constexpr Color kBlack{0, 0, 0};
constexpr Color kGrid{225, 225, 225};
/// p50, p90, p99.
constexpr std::array<Color, 3> kPercentileColors{{{31, 119, 180}, {255, 127, 14}, {214, 39, 40}}};
constexpr std::array<double, 3> kPercentiles{0.50, 0.90, 0.99};

/// A 3x5 pixel font for the labels: each glyph is five rows of three bits,
/// the leftmost pixel in the highest bit.
struct Glyph {
  char c;
  std::array<std::uint8_t, 5> rows;
};
constexpr Glyph kFont[] = {
    {'0', {7, 5, 5, 5, 7}}, {'1', {2, 6, 2, 2, 7}}, {'2', {7, 1, 7, 4, 7}}, {'3', {7, 1, 7, 1, 7}},
    {'4', {5, 5, 7, 1, 1}}, {'5', {7, 4, 7, 1, 7}}, {'6', {7, 4, 7, 5, 7}}, {'7', {7, 1, 1, 1, 1}},
    {'8', {7, 5, 7, 5, 7}}, {'9', {7, 5, 7, 1, 7}}, {'.', {0, 0, 0, 0, 2}}, {'-', {0, 0, 7, 0, 0}},
    {'T', {7, 2, 2, 2, 2}}, {'F', {7, 4, 6, 4, 4}}, {'I', {7, 2, 2, 2, 7}}, {'L', {4, 4, 4, 4, 7}},
    {'M', {5, 7, 7, 5, 5}}, {'S', {7, 4, 7, 1, 7}}, {'E', {7, 4, 6, 4, 7}}, {'P', {7, 5, 7, 4, 4}},
    {'(', {2, 4, 4, 4, 2}}, {')', {2, 1, 1, 1, 2}}, {'N', {5, 7, 7, 7, 5}}, {'O', {7, 5, 5, 5, 7}},
    {'D', {6, 5, 5, 5, 6}}, {'A', {7, 5, 7, 5, 5}},
};
constexpr int kFontScale = 2;

/// An RGB raster with lines, boxes and the little font.
class Canvas {
 public:
  Canvas(int width, int height)
    : width_(width)
    , height_(height)
    , rgb_(static_cast<std::size_t>(width) * height * 3, 255) {}

  int width() const { return width_; }
  int height() const { return height_; }
  const std::vector<std::uint8_t>& rgb() const { return rgb_; }

  void set(int x, int y, Color color) {
    if (x < 0 || y < 0 || x >= width_ || y >= height_)
      return;
    std::uint8_t* pixel = &rgb_[(static_cast<std::size_t>(y) * width_ + x) * 3];
    pixel[0] = color.r;
    pixel[1] = color.g;
    pixel[2] = color.b;
  }

  void fill(int x0, int y0, int x1, int y1, Color color) {
    for (int y = y0; y <= y1; ++y)
      for (int x = x0; x <= x1; ++x)
        set(x, y, color);
  }

  /// Bresenham, `thickness` pixels wide downwards and rightwards.
  void line(int x0, int y0, int x1, int y1, Color color, int thickness = 1) {
    const int dx = std::abs(x1 - x0), sx = x0 < x1 ? 1 : -1;
    const int dy = -std::abs(y1 - y0), sy = y0 < y1 ? 1 : -1;
    for (int error = dx + dy;;) {
      fill(x0, y0, x0 + thickness - 1, y0 + thickness - 1, color);
      if (x0 == x1 && y0 == y1)
        break;
      const int twice = 2 * error;
      if (twice >= dy) {
        error += dy;
        x0 += sx;
      }
      if (twice <= dx) {
        error += dx;
        y0 += sy;
      }
    }
  }

  /// `text` with its top left corner at (x, y); characters the font lacks
  /// are blanks.
  void text(int x, int y, const std::string& text, Color color) {
    for (char c : text) {
      for (const Glyph& glyph : kFont) {
        if (glyph.c != c)
          continue;
        for (int row = 0; row < 5; ++row)
          for (int column = 0; column < 3; ++column)
            if (glyph.rows[row] & (4 >> column))
              fill(x + column * kFontScale, y + row * kFontScale, x + (column + 1) * kFontScale - 1,
                   y + (row + 1) * kFontScale - 1, color);
      }
      x += 4 * kFontScale;
    }
  }

  static int text_width(const std::string& text) {
    return static_cast<int>(text.size()) * 4 * kFontScale;
  }

 private:
  int width_;
  int height_;
  std::vector<std::uint8_t> rgb_; // [height, width, 3]
};

std::string axis_number(double value) {
  char text[32];
  if (value >= 100 || value == 0)
    std::snprintf(text, sizeof text, "%.0f", value);
  else if (value >= 10)
    std::snprintf(text, sizeof text, "%.1f", value);
  else
    std::snprintf(text, sizeof text, "%.2f", value);
  return text;
}

/// A latency sample: when it counts and its value in ms.
using Sample = std::pair<double, double>;

/// The value below which `fraction` of the sorted `values` lie (linear
/// interpolation between closest ranks, as numpy's default).
double percentile_of_sorted(const std::vector<double>& values, double fraction) {
  const double rank = fraction * static_cast<double>(values.size() - 1);
  const std::size_t below = static_cast<std::size_t>(rank);
  const std::size_t above = std::min(below + 1, values.size() - 1);
  return values[below] + (values[above] - values[below]) * (rank - static_cast<double>(below));
}

/// The three percentile lines of one panel: at each of `points` times
/// across [0, end_s], over the samples in the window ending there; NaN where
/// a window is empty.
std::array<std::vector<double>, 3> rolling_percentiles(std::vector<Sample> samples, double end_s,
                                                       int points) {
  std::sort(samples.begin(), samples.end());
  const double window = end_s / 10;
  std::array<std::vector<double>, 3> lines;
  for (auto& line : lines)
    line.assign(points, std::nan(""));
  std::size_t first = 0, last = 0;
  std::vector<double> values;
  for (int point = 0; point < points; ++point) {
    const double t = end_s * point / (points - 1);
    while (last < samples.size() && samples[last].first <= t)
      ++last;
    while (first < last && samples[first].first <= t - window)
      ++first;
    if (first == last)
      continue;
    values.clear();
    for (std::size_t i = first; i < last; ++i)
      values.push_back(samples[i].second);
    std::sort(values.begin(), values.end());
    for (std::size_t k = 0; k < kPercentiles.size(); ++k)
      lines[k][point] = percentile_of_sorted(values, kPercentiles[k]);
  }
  return lines;
}

/// One panel in the box (left, top)-(right, bottom).
void draw_panel(Canvas& canvas, int left, int top, int right, int bottom, const std::string& title,
                const std::vector<Sample>& samples, double end_s) {
  const int points = std::max(2, (right - left) / 4);
  const auto lines = rolling_percentiles(samples, end_s, points);
  double y_max = 0;
  for (const auto& line : lines)
    for (double value : line)
      if (!std::isnan(value))
        y_max = std::max(y_max, value);
  y_max = y_max > 0 ? y_max * 1.1 : 1.0;

  // Grid, axes and their numbers.
  for (int tick = 0; tick <= 4; ++tick) {
    const int y = bottom - (bottom - top) * tick / 4;
    canvas.line(left, y, right, y, kGrid);
    const std::string label = axis_number(y_max * tick / 4);
    canvas.text(left - 6 - Canvas::text_width(label), y - 5, label, kBlack);
  }
  for (int tick = 0; tick <= 4; ++tick) {
    const int x = left + (right - left) * tick / 4;
    canvas.line(x, top, x, bottom, kGrid);
    const std::string label = axis_number(end_s * tick / 4);
    canvas.text(x - Canvas::text_width(label) / 2, bottom + 6, label, kBlack);
  }
  canvas.line(left, top, left, bottom, kBlack);
  canvas.line(left, bottom, right, bottom, kBlack);
  canvas.text(left, top - 16, title, kBlack);
  // The legend, right-aligned above the panel.
  int x = right - 3 * 60;
  for (std::size_t k = 0; k < kPercentiles.size(); ++k, x += 60) {
    canvas.fill(x, top - 12, x + 12, top - 6, kPercentileColors[k]);
    canvas.text(x + 16, top - 14, k == 0 ? "P50" : k == 1 ? "P90" : "P99", kBlack);
  }
  if (samples.empty()) {
    canvas.text((left + right) / 2 - Canvas::text_width("NO DATA") / 2, (top + bottom) / 2,
                "NO DATA", kBlack);
    return;
  }
  for (std::size_t k = 0; k < lines.size(); ++k) {
    int previous_x = 0, previous_y = 0;
    bool have_previous = false;
    for (int point = 0; point < points; ++point) {
      const double value = lines[k][point];
      if (std::isnan(value)) {
        have_previous = false;
        continue;
      }
      const int px = left + (right - left) * point / (points - 1);
      const int py = bottom - static_cast<int>(std::lround((bottom - top) * value / y_max));
      if (have_previous)
        canvas.line(previous_x, previous_y, px, py, kPercentileColors[k], 2);
      else
        canvas.fill(px, py, px + 1, py + 1, kPercentileColors[k]);
      previous_x = px;
      previous_y = py;
      have_previous = true;
    }
  }
}

void append_u32(std::string& out, std::uint32_t value) {
  for (int shift = 24; shift >= 0; shift -= 8)
    out += static_cast<char>((value >> shift) & 0xff);
}

void append_chunk(std::string& out, const char* type, const std::string& data) {
  append_u32(out, static_cast<std::uint32_t>(data.size()));
  const std::string typed = std::string(type, 4) + data;
  out += typed;
  append_u32(out, static_cast<std::uint32_t>(
                      crc32(0, reinterpret_cast<const Bytef*>(typed.data()), typed.size())));
}

} // namespace

std::string encode_png(std::uint32_t width, std::uint32_t height,
                       const std::vector<std::uint8_t>& rgb) {
  if (rgb.size() != static_cast<std::size_t>(width) * height * 3)
    throw std::invalid_argument("encode_png: the pixels are not width x height x 3 bytes");
  // Each row is its filter type (0, none) and its pixels.
  const std::size_t row_bytes = static_cast<std::size_t>(width) * 3;
  std::vector<std::uint8_t> raw;
  raw.reserve((row_bytes + 1) * height);
  for (std::uint32_t y = 0; y < height; ++y) {
    raw.push_back(0);
    raw.insert(raw.end(), rgb.begin() + y * row_bytes, rgb.begin() + (y + 1) * row_bytes);
  }
  uLongf packed_size = compressBound(raw.size());
  std::string packed(packed_size, '\0');
  if (compress2(reinterpret_cast<Bytef*>(packed.data()), &packed_size, raw.data(), raw.size(),
                Z_BEST_COMPRESSION) != Z_OK)
    throw std::runtime_error("encode_png: zlib could not compress the image");
  packed.resize(packed_size);

  std::string png("\x89PNG\r\n\x1a\n", 8);
  std::string header;
  append_u32(header, width);
  append_u32(header, height);
  header += std::string("\x08\x02\x00\x00\x00", 5); // 8 bits, RGB, deflate, filter 0, no interlace
  append_chunk(png, "IHDR", header);
  append_chunk(png, "IDAT", packed);
  append_chunk(png, "IEND", {});
  return png;
}

void write_latency_plot(const std::string& path, const std::vector<RequestOutcome>& outcomes) {
  std::vector<Sample> ttft, itl;
  double end_s = 0;
  for (const RequestOutcome& outcome : outcomes) {
    end_s = std::max(end_s, outcome.finished_s);
    if (!outcome.success || outcome.chunk_times_s.empty())
      continue;
    ttft.emplace_back(outcome.finished_s, (outcome.chunk_times_s[0] - outcome.sent_s) * 1e3);
    for (std::size_t i = 1; i < outcome.chunk_times_s.size(); ++i)
      itl.emplace_back(outcome.chunk_times_s[i],
                       (outcome.chunk_times_s[i] - outcome.chunk_times_s[i - 1]) * 1e3);
  }
  if (end_s <= 0)
    end_s = 1;

  Canvas canvas(960, 640);
  const int left = 90, right = canvas.width() - 30;
  draw_panel(canvas, left, 50, right, 270, "TTFT (MS)", ttft, end_s);
  draw_panel(canvas, left, 350, right, 570, "ITL (MS)", itl, end_s);
  const std::string x_title = "TIME (S)";
  canvas.text((left + right) / 2 - Canvas::text_width(x_title) / 2, 610, x_title, kBlack);

  const std::string png = encode_png(static_cast<std::uint32_t>(canvas.width()),
                                     static_cast<std::uint32_t>(canvas.height()), canvas.rgb());
  std::ofstream out(path, std::ios::binary);
  out.write(png.data(), static_cast<std::streamsize>(png.size()));
  out.close();
  if (!out)
    throw std::runtime_error("--plot " + path + ": cannot write the file");
}

} // namespace caflm::apps::bench_serve
