#include <catch2/catch.hpp>

#include <cmath>
#include <cstdlib>
#include <limits>
#include <map>
#include <set>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

#include "caflm/server/metrics.hpp"

using namespace caflm::server;

namespace {

// -- a small, strict reader of the text exposition format 0.0.4 ---------------

using LabelSet = std::map<std::string, std::string>;

struct Sample {
  std::string name;
  LabelSet labels;
  double value = 0.0;
};

struct Exposition {
  std::map<std::string, std::string> types;
  std::map<std::string, std::string> helps;
  std::vector<Sample> samples;

  /// The value of the one sample with this name and exactly these labels.
  double value(const std::string& name, const LabelSet& labels = {}) const {
    const Sample* found = nullptr;
    for (const auto& sample : samples) {
      if (sample.name == name && sample.labels == labels) {
        if (found)
          throw std::runtime_error("two samples " + name);
        found = &sample;
      }
    }
    if (!found)
      throw std::runtime_error("no sample " + name);
    return found->value;
  }

  bool has(const std::string& name, const LabelSet& labels) const {
    for (const auto& sample : samples)
      if (sample.name == name && sample.labels == labels)
        return true;
    return false;
  }

  std::size_t count(const std::string& name) const {
    std::size_t n = 0;
    for (const auto& sample : samples)
      n += sample.name == name ? 1 : 0;
    return n;
  }
};

[[noreturn]] void fail_at(std::size_t line_number, const std::string& why) {
  throw std::runtime_error("line " + std::to_string(line_number) + ": " + why);
}

bool is_name_char(char c, bool first, bool allow_colon) {
  bool letter = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || c == '_';
  return letter || (allow_colon && c == ':') || (!first && c >= '0' && c <= '9');
}

std::string read_name(const std::string& line, std::size_t& pos, bool allow_colon,
                      std::size_t line_number) {
  std::size_t start = pos;
  while (pos < line.size() && is_name_char(line[pos], pos == start, allow_colon))
    ++pos;
  if (pos == start)
    fail_at(line_number, "expected a name at column " + std::to_string(start));
  return line.substr(start, pos - start);
}

double read_value(const std::string& text, std::size_t line_number) {
  if (text == "+Inf")
    return std::numeric_limits<double>::infinity();
  if (text == "-Inf")
    return -std::numeric_limits<double>::infinity();
  if (text == "NaN")
    return std::numeric_limits<double>::quiet_NaN();
  if (text.empty())
    fail_at(line_number, "empty value");
  char* end = nullptr;
  double value = std::strtod(text.c_str(), &end);
  // strtod would also take "inf", "nan" or hex: the format wants Go floats.
  if (end != text.c_str() + text.size() || text.find_first_of("xXnNiI") != std::string::npos)
    fail_at(line_number, "bad value '" + text + "'");
  return value;
}

/// The family a sample belongs to: a histogram's _bucket, _sum and _count
/// samples belong to the histogram's name.
std::string family_of(const std::string& sample_name,
                      const std::map<std::string, std::string>& types) {
  for (const char* suffix : {"_bucket", "_sum", "_count"}) {
    std::string s{suffix};
    if (sample_name.size() > s.size() &&
        sample_name.compare(sample_name.size() - s.size(), s.size(), s) == 0) {
      auto base = sample_name.substr(0, sample_name.size() - s.size());
      auto it = types.find(base);
      if (it != types.end() && it->second == "histogram")
        return base;
    }
  }
  return sample_name;
}

/// Parses and checks `text`; throws std::runtime_error naming the line at
/// fault. Checks: line grammar, escapes, HELP/TYPE at most once and before
/// the family's samples, a family's samples together, no duplicate series,
/// counters non-negative, histograms with increasing `le`, cumulative
/// buckets, a +Inf bucket equal to _count, and _sum/_count present.
Exposition parse_exposition(const std::string& text) {
  Exposition result;
  if (!text.empty() && text.back() != '\n')
    throw std::runtime_error("the exposition does not end with a line feed");
  std::set<std::string> closed_families;
  std::string current_family;
  std::set<std::pair<std::string, LabelSet>> seen_series;
  std::size_t line_number = 0;
  std::size_t begin = 0;
  while (begin < text.size()) {
    std::size_t end = text.find('\n', begin);
    std::string line = text.substr(begin, end - begin);
    begin = end + 1;
    ++line_number;
    if (line.empty())
      continue;
    if (line[0] == '#') {
      if (line.rfind("# HELP ", 0) == 0 || line.rfind("# TYPE ", 0) == 0) {
        bool help = line[2] == 'H';
        std::size_t pos = 7;
        auto name = read_name(line, pos, true, line_number);
        if (pos < line.size() && line[pos] != ' ')
          fail_at(line_number, "junk after the metric name");
        std::string rest = pos < line.size() ? line.substr(pos + 1) : "";
        if (help) {
          if (result.helps.count(name))
            fail_at(line_number, "second HELP for " + name);
          std::string unescaped;
          for (std::size_t i = 0; i < rest.size(); ++i) {
            if (rest[i] == '\\') {
              if (i + 1 == rest.size() || (rest[i + 1] != '\\' && rest[i + 1] != 'n'))
                fail_at(line_number, "bad escape in HELP");
              unescaped += rest[i + 1] == 'n' ? '\n' : '\\';
              ++i;
            } else {
              unescaped += rest[i];
            }
          }
          result.helps[name] = unescaped;
        } else {
          if (result.types.count(name))
            fail_at(line_number, "second TYPE for " + name);
          static const std::set<std::string> known{"counter", "gauge", "histogram", "summary",
                                                   "untyped"};
          if (!known.count(rest))
            fail_at(line_number, "unknown type '" + rest + "'");
          result.types[name] = rest;
        }
        if (name != current_family && closed_families.count(name))
          fail_at(line_number, "metadata for " + name + " after its samples");
        if (name != current_family) {
          if (!current_family.empty())
            closed_families.insert(current_family);
          current_family = name;
        }
      }
      continue; // Other comments are allowed.
    }

    Sample sample;
    std::size_t pos = 0;
    sample.name = read_name(line, pos, true, line_number);
    if (pos < line.size() && line[pos] == '{') {
      ++pos;
      while (true) {
        if (pos < line.size() && line[pos] == '}') {
          ++pos;
          break;
        }
        auto label = read_name(line, pos, false, line_number);
        if (label.rfind("__", 0) == 0)
          fail_at(line_number, "reserved label name " + label);
        if (pos + 1 >= line.size() || line[pos] != '=' || line[pos + 1] != '"')
          fail_at(line_number, "expected =\" after label " + label);
        pos += 2;
        std::string value;
        while (true) {
          if (pos >= line.size())
            fail_at(line_number, "unterminated label value");
          char c = line[pos++];
          if (c == '"')
            break;
          if (c == '\\') {
            if (pos >= line.size())
              fail_at(line_number, "unterminated escape");
            char e = line[pos++];
            if (e == '\\')
              value += '\\';
            else if (e == '"')
              value += '"';
            else if (e == 'n')
              value += '\n';
            else
              fail_at(line_number, "bad escape in a label value");
          } else {
            value += c;
          }
        }
        if (!sample.labels.emplace(label, value).second)
          fail_at(line_number, "label " + label + " twice");
        if (pos < line.size() && line[pos] == ',')
          ++pos;
        else if (pos >= line.size() || line[pos] != '}')
          fail_at(line_number, "expected , or } after a label");
      }
    }
    if (pos >= line.size() || line[pos] != ' ')
      fail_at(line_number, "expected a space before the value");
    ++pos;
    std::size_t space = line.find(' ', pos);
    sample.value = read_value(line.substr(pos, space - pos), line_number);
    if (space != std::string::npos) {
      auto timestamp = line.substr(space + 1);
      if (timestamp.empty() || timestamp.find_first_not_of("-0123456789") != std::string::npos)
        fail_at(line_number, "bad timestamp");
    }

    auto family = family_of(sample.name, result.types);
    if (family != current_family) {
      if (closed_families.count(family))
        fail_at(line_number, "samples of " + family + " are not together");
      if (!current_family.empty())
        closed_families.insert(current_family);
      current_family = family;
    }
    auto type = result.types.count(family) ? result.types.at(family) : "untyped";
    if (type == "counter" && !(sample.value >= 0.0))
      fail_at(line_number, "negative counter");
    if (type == "histogram" && sample.name == family + "_bucket" && !sample.labels.count("le"))
      fail_at(line_number, "bucket without le");
    if (!seen_series.emplace(sample.name, sample.labels).second)
      fail_at(line_number, "duplicate series " + sample.name);
    result.samples.push_back(std::move(sample));
  }

  // Histograms, per series (labels other than le).
  for (const auto& [family, type] : result.types) {
    if (type != "histogram")
      continue;
    std::map<LabelSet, std::vector<std::pair<double, double>>> buckets;
    for (const auto& sample : result.samples) {
      if (sample.name != family + "_bucket")
        continue;
      auto labels = sample.labels;
      double le = read_value(labels.at("le"), 0);
      labels.erase("le");
      buckets[labels].emplace_back(le, sample.value);
    }
    for (const auto& [labels, series] : buckets) {
      for (std::size_t i = 1; i < series.size(); ++i) {
        if (!(series[i - 1].first < series[i].first))
          throw std::runtime_error(family + ": le not increasing");
        if (series[i].second < series[i - 1].second)
          throw std::runtime_error(family + ": buckets not cumulative");
      }
      if (series.empty() || !std::isinf(series.back().first))
        throw std::runtime_error(family + ": no +Inf bucket");
      if (!result.has(family + "_sum", labels) || !result.has(family + "_count", labels))
        throw std::runtime_error(family + ": _sum or _count missing");
      if (result.value(family + "_count", labels) != series.back().second)
        throw std::runtime_error(family + ": +Inf bucket differs from _count");
    }
  }
  return result;
}

/// The buckets of one histogram series, as (le text, cumulative count).
std::vector<std::pair<std::string, double>> buckets_of(const Exposition& exposition,
                                                       const std::string& family, LabelSet labels) {
  std::vector<std::pair<std::string, double>> result;
  for (const auto& sample : exposition.samples) {
    if (sample.name != family + "_bucket")
      continue;
    auto without_le = sample.labels;
    auto le = without_le.at("le");
    without_le.erase("le");
    if (without_le == labels)
      result.emplace_back(le, sample.value);
  }
  return result;
}

} // namespace

// -- format details -----------------------------------------------------------

TEST_CASE("values are written as Prometheus reads them", "[metrics]") {
  CHECK(format_prometheus_value(0.0) == "0.0");
  CHECK(format_prometheus_value(1.0) == "1.0");
  CHECK(format_prometheus_value(42.0) == "42.0");
  CHECK(format_prometheus_value(2560.0) == "2560.0");
  CHECK(format_prometheus_value(0.001) == "0.001");
  CHECK(format_prometheus_value(0.1) == "0.1");
  CHECK(format_prometheus_value(-2.5) == "-2.5");
  CHECK(format_prometheus_value(1e-9) == "1e-09");
  CHECK(format_prometheus_value(std::numeric_limits<double>::infinity()) == "+Inf");
  CHECK(format_prometheus_value(-std::numeric_limits<double>::infinity()) == "-Inf");
  CHECK(format_prometheus_value(std::nan("")) == "NaN");
  // Large integral counters stay exact.
  CHECK(format_prometheus_value(123456789012.0) == "123456789012.0");
  for (double v : {0.3, 1.0 / 3.0, 7680.0, 1e300, 5e-324})
    CHECK(std::strtod(format_prometheus_value(v).c_str(), nullptr) == v);
}

TEST_CASE("label values and help texts are escaped", "[metrics]") {
  CHECK(escape_label_value("plain") == "plain");
  CHECK(escape_label_value("a\\b\"c\nd") == "a\\\\b\\\"c\\nd");
  CHECK(escape_help("a\\b\"c\nd") == "a\\\\b\"c\\nd");
}

TEST_CASE("names are checked", "[metrics]") {
  CHECK(is_valid_metric_name("vllm:num_requests_running"));
  CHECK(is_valid_metric_name("_x1"));
  CHECK_FALSE(is_valid_metric_name(""));
  CHECK_FALSE(is_valid_metric_name("1x"));
  CHECK_FALSE(is_valid_metric_name("a-b"));
  CHECK(is_valid_label_name("model_name"));
  CHECK_FALSE(is_valid_label_name("__name__"));
  CHECK_FALSE(is_valid_label_name("a:b"));
  CHECK_FALSE(is_valid_label_name("9a"));

  Registry registry;
  CHECK_THROWS_AS(registry.counter("requests", "no _total"), std::invalid_argument);
  CHECK_THROWS_AS(registry.gauge("bad name", "space"), std::invalid_argument);
  CHECK_THROWS_AS(registry.gauge("g", "bad label", {"a-b"}), std::invalid_argument);
  CHECK_THROWS_AS(registry.gauge("g2", "label twice", {"a", "a"}), std::invalid_argument);
  CHECK_THROWS_AS(registry.histogram("h", "le is reserved", {"le"}, {1.0}), std::invalid_argument);
  CHECK_THROWS_AS(registry.histogram("h", "not increasing", {}, {1.0, 1.0}), std::invalid_argument);
  CHECK_THROWS_AS(registry.histogram("h", "infinite bound", {}, {1.0, INFINITY}),
                  std::invalid_argument);
  auto& counter = registry.counter("c_total", "ok", {"reason"});
  CHECK_THROWS_AS(registry.gauge("c_total", "registered twice"), std::invalid_argument);
  CHECK_THROWS_AS(counter.labels({}), std::invalid_argument);
  CHECK_THROWS_AS(counter.labels({"a", "b"}), std::invalid_argument);
  CHECK_THROWS_AS(counter.labels({"a"}).inc(-1.0), std::invalid_argument);
  CHECK_THROWS_AS(counter.labels({"a"}).inc(std::nan("")), std::invalid_argument);
}

TEST_CASE("the exposition has HELP, TYPE, escaped labels and cumulative buckets", "[metrics]") {
  Registry registry;
  auto& requests =
      registry.counter("app_requests_total", "Requests\nby \"code\" \\ path.", {"code", "path"});
  auto& temperature = registry.gauge("app_temperature", "A gauge without labels.");
  auto& latency = registry.histogram("app_latency_seconds", "Latency.", {"path"}, {0.1, 1.0});

  requests.labels({"200", "/a"}).inc();
  requests.labels({"200", "/a"}).inc(2);
  requests.labels({"500", "q\"uo\\te\nnl"}).inc();
  temperature.labels({}).set(-3.5);
  auto& series = latency.labels({"/a"});
  series.observe(0.05);
  series.observe(0.1); // On the bound: le is inclusive.
  series.observe(0.5);
  series.observe(3.0, 2);
  series.observe(std::nan("")); // Ignored.

  const std::string expected = "# HELP app_requests_total Requests\\nby \"code\" \\\\ path.\n"
                               "# TYPE app_requests_total counter\n"
                               "app_requests_total{code=\"200\",path=\"/a\"} 3.0\n"
                               "app_requests_total{code=\"500\",path=\"q\\\"uo\\\\te\\nnl\"} 1.0\n"
                               "# HELP app_temperature A gauge without labels.\n"
                               "# TYPE app_temperature gauge\n"
                               "app_temperature -3.5\n"
                               "# HELP app_latency_seconds Latency.\n"
                               "# TYPE app_latency_seconds histogram\n"
                               "app_latency_seconds_bucket{path=\"/a\",le=\"0.1\"} 2.0\n"
                               "app_latency_seconds_bucket{path=\"/a\",le=\"1.0\"} 3.0\n"
                               "app_latency_seconds_bucket{path=\"/a\",le=\"+Inf\"} 5.0\n"
                               "app_latency_seconds_sum{path=\"/a\"} 6.65\n"
                               "app_latency_seconds_count{path=\"/a\"} 5.0\n";
  auto text = registry.render();
  CHECK(text == expected);

  // And the reader gives the raw values back.
  auto parsed = parse_exposition(text);
  CHECK(parsed.types.at("app_requests_total") == "counter");
  CHECK(parsed.helps.at("app_requests_total") == "Requests\nby \"code\" \\ path.");
  CHECK(parsed.value("app_requests_total", {{"code", "500"}, {"path", "q\"uo\\te\nnl"}}) == 1.0);
  CHECK(parsed.value("app_latency_seconds_count", {{"path", "/a"}}) == 5.0);
}

TEST_CASE("an empty family still has its HELP and TYPE, and series can be removed", "[metrics]") {
  Registry registry;
  auto& gauge = registry.gauge("engine_load", "Load.", {"engine"});
  CHECK(registry.render() == "# HELP engine_load Load.\n# TYPE engine_load gauge\n");
  gauge.labels({"0"}).set(1);
  gauge.labels({"1"}).set(2);
  CHECK(gauge.size() == 2);
  CHECK(gauge.remove({"0"}));
  CHECK_FALSE(gauge.remove({"0"}));
  auto parsed = parse_exposition(registry.render());
  CHECK_FALSE(parsed.has("engine_load", {{"engine", "0"}}));
  CHECK(parsed.value("engine_load", {{"engine", "1"}}) == 2.0);
}

TEST_CASE("scrape hooks run before the families are read", "[metrics]") {
  Registry registry;
  auto& gauge = registry.gauge("scrapes", "Scrapes so far.").labels({});
  int scrapes = 0;
  registry.on_scrape([&] { gauge.set(++scrapes); });
  CHECK(parse_exposition(registry.render()).value("scrapes") == 1.0);
  CHECK(parse_exposition(registry.render()).value("scrapes") == 2.0);
}

TEST_CASE("the reader rejects invalid text", "[metrics]") {
  // The reader is what the other tests trust: it must be able to say no.
  CHECK_NOTHROW(parse_exposition("# TYPE a gauge\na 1\n"));
  CHECK_THROWS(parse_exposition("a 1"));              // no final line feed
  CHECK_THROWS(parse_exposition("a{b=\"c} 1\n"));     // unterminated value
  CHECK_THROWS(parse_exposition("a{b=\"\\t\"} 1\n")); // bad escape
  CHECK_THROWS(parse_exposition("a one\n"));          // bad value
  CHECK_THROWS(parse_exposition("# TYPE a gauge\n# TYPE a gauge\na 1\n"));
  CHECK_THROWS(parse_exposition("# TYPE a counter\na -1\n"));
  CHECK_THROWS(parse_exposition("a 1\nb 1\na{x=\"y\"} 1\n")); // family split
  CHECK_THROWS(parse_exposition("a 1\na 2\n"));               // duplicate series
  CHECK_THROWS(parse_exposition("# TYPE h histogram\nh_bucket{le=\"1.0\"} 2.0\n"
                                "h_bucket{le=\"+Inf\"} 1.0\nh_sum 1.0\nh_count 1.0\n"));
  CHECK_THROWS(parse_exposition("# TYPE h histogram\nh_bucket{le=\"1.0\"} 1.0\n"
                                "h_sum 1.0\nh_count 1.0\n")); // no +Inf
  CHECK_THROWS(parse_exposition("# TYPE h histogram\nh_bucket{le=\"+Inf\"} 2.0\n"
                                "h_sum 1.0\nh_count 1.0\n")); // +Inf != count
}

// -- the serving metrics --------------------------------------------------------

namespace {

const LabelSet model{{"model_name", "tiny"}};

LabelSet with(LabelSet labels, const std::string& name, const std::string& value) {
  labels[name] = value;
  return labels;
}

EngineState engine(std::string name, bool up, std::uint32_t running, std::uint32_t waiting,
                   std::uint32_t free_blocks, std::uint32_t total_blocks, std::uint64_t preemptions,
                   std::uint64_t queried, std::uint64_t hits, std::uint64_t prompt_tokens = 0,
                   std::uint64_t generated_tokens = 0) {
  EngineState state;
  state.name = std::move(name);
  state.up = up;
  state.running = running;
  state.waiting = waiting;
  state.free_blocks = free_blocks;
  state.total_blocks = total_blocks;
  state.load = 4.0 * waiting + running;
  state.preemptions = preemptions;
  state.prefix_queried_tokens = queried;
  state.prefix_hit_tokens = hits;
  state.prompt_tokens = prompt_tokens;
  state.generated_tokens = generated_tokens;
  return state;
}

} // namespace

TEST_CASE("every serving metric is there, typed and labelled by model", "[metrics]") {
  ServingMetrics metrics{"tiny"};
  metrics.set_cluster_state({{engine("0", true, 1, 0, 10, 16, 0, 0, 0)}});
  auto parsed = parse_exposition(metrics.render());

  const std::vector<std::pair<std::string, std::string>> required{
      {"vllm:num_requests_running", "gauge"},
      {"vllm:num_requests_waiting", "gauge"},
      {"vllm:kv_cache_usage_perc", "gauge"},
      {"vllm:gpu_cache_usage_perc", "gauge"},
      {"vllm:prompt_tokens_total", "counter"},
      {"vllm:generation_tokens_total", "counter"},
      {"vllm:num_preemptions_total", "counter"},
      {"vllm:prefix_cache_queries_total", "counter"},
      {"vllm:prefix_cache_hits_total", "counter"},
      {"vllm:request_success_total", "counter"},
      {"vllm:time_to_first_token_seconds", "histogram"},
      {"vllm:inter_token_latency_seconds", "histogram"},
      {"vllm:time_per_output_token_seconds", "histogram"},
      {"vllm:e2e_request_latency_seconds", "histogram"},
      {"vllm:request_queue_time_seconds", "histogram"},
      {"caflm_failovers_total", "counter"},
      {"caflm_engines_up", "gauge"},
      {"caflm_engines_total", "gauge"},
      {"caflm_engine_load", "gauge"},
      {"caflm_engine_running", "gauge"},
      {"caflm_engine_waiting", "gauge"},
      {"caflm_engine_kv_blocks_used", "gauge"},
      {"caflm_engine_kv_blocks_total", "gauge"},
      {"caflm_engine_kv_blocks_cached", "gauge"},
      {"caflm_requests_rejected_total", "counter"},
      {"caflm_http_streams_open", "gauge"},
  };
  for (const auto& [name, type] : required) {
    INFO(name);
    REQUIRE(parsed.types.count(name) == 1);
    CHECK(parsed.types.at(name) == type);
    CHECK_FALSE(parsed.helps.at(name).empty());
  }
  // Every sample carries the model label, with the served name.
  for (const auto& sample : parsed.samples) {
    INFO(sample.name);
    CHECK(sample.labels.at("model_name") == "tiny");
  }
  // Present from the start (rate() sees them begin at zero).
  for (const char* name :
       {"vllm:num_requests_running", "vllm:num_requests_waiting", "vllm:kv_cache_usage_perc",
        "vllm:prompt_tokens_total", "vllm:generation_tokens_total", "vllm:num_preemptions_total",
        "vllm:prefix_cache_queries_total", "vllm:prefix_cache_hits_total",
        "vllm:time_to_first_token_seconds_count", "vllm:inter_token_latency_seconds_count",
        "vllm:e2e_request_latency_seconds_count", "vllm:request_queue_time_seconds_count",
        "caflm_failovers_total", "caflm_engines_up", "caflm_engines_total",
        "caflm_http_streams_open"}) {
    INFO(name);
    CHECK(parsed.has(name, model));
  }
  for (const char* reason : {"stop", "length", "abort"})
    CHECK(parsed.value("vllm:request_success_total", with(model, "finished_reason", reason)) ==
          0.0);
  for (const char* reason : {"queue_full", "invalid"})
    CHECK(parsed.value("caflm_requests_rejected_total", with(model, "reason", reason)) == 0.0);
  CHECK(parsed.has("caflm_engine_load", with(model, "engine", "0")));
}

TEST_CASE("histograms use vLLM's bucket boundaries", "[metrics]") {
  ServingMetrics metrics{"tiny"};
  auto parsed = parse_exposition(metrics.render());
  auto les = [&](const std::string& family) {
    std::vector<std::string> result;
    for (const auto& [le, count] : buckets_of(parsed, family, model))
      result.push_back(le);
    return result;
  };
  CHECK(les("vllm:time_to_first_token_seconds") ==
        std::vector<std::string>{"0.001", "0.005", "0.01",  "0.02",   "0.04", "0.06",
                                 "0.08",  "0.1",   "0.25",  "0.5",    "0.75", "1.0",
                                 "2.5",   "5.0",   "7.5",   "10.0",   "20.0", "40.0",
                                 "80.0",  "160.0", "640.0", "2560.0", "+Inf"});
  CHECK(les("vllm:inter_token_latency_seconds") ==
        std::vector<std::string>{"0.01", "0.025", "0.05", "0.075", "0.1",  "0.15", "0.2",
                                 "0.3",  "0.4",   "0.5",  "0.75",  "1.0",  "2.5",  "5.0",
                                 "7.5",  "10.0",  "20.0", "40.0",  "80.0", "+Inf"});
  CHECK(les("vllm:e2e_request_latency_seconds") ==
        std::vector<std::string>{"0.3",   "0.5",    "0.8",    "1.0",   "1.5",   "2.0",
                                 "2.5",   "5.0",    "10.0",   "15.0",  "20.0",  "30.0",
                                 "40.0",  "50.0",   "60.0",   "120.0", "240.0", "480.0",
                                 "960.0", "1920.0", "7680.0", "+Inf"});
  CHECK(les("vllm:request_queue_time_seconds") == les("vllm:e2e_request_latency_seconds"));
  CHECK(one_two_five_buckets(100) == std::vector<double>{1, 2, 5, 10, 20, 50, 100});
  CHECK(one_two_five_buckets(0.5).empty());
}

TEST_CASE("request events land in the right series", "[metrics]") {
  ServingMetrics metrics{"tiny", 100, TokenCounts::from_requests};
  metrics.request_started();
  metrics.first_token(0.03, 0.005);
  metrics.token(0.02);
  metrics.tokens(3, 0.2);
  metrics.request_finished("length", 7, 5, 0.9);
  metrics.request_started();
  metrics.request_finished("abort", 4, 0, 0.01);
  metrics.request_rejected("queue_full");
  metrics.request_rejected("queue_full");
  metrics.request_rejected("invalid");
  metrics.failover();
  metrics.stream_opened();
  metrics.stream_opened();
  metrics.stream_closed();

  auto parsed = parse_exposition(metrics.render());
  CHECK(parsed.value("caflm_requests_received_total", model) == 2.0);
  CHECK(parsed.value("vllm:generation_tokens_total", model) == 5.0);
  CHECK(parsed.value("vllm:prompt_tokens_total", model) == 11.0);
  CHECK(parsed.value("vllm:request_success_total", with(model, "finished_reason", "length")) ==
        1.0);
  CHECK(parsed.value("vllm:request_success_total", with(model, "finished_reason", "abort")) == 1.0);
  CHECK(parsed.value("vllm:request_success_total", with(model, "finished_reason", "stop")) == 0.0);
  CHECK(parsed.value("caflm_requests_rejected_total", with(model, "reason", "queue_full")) == 2.0);
  CHECK(parsed.value("caflm_requests_rejected_total", with(model, "reason", "invalid")) == 1.0);
  CHECK(parsed.value("caflm_failovers_total", model) == 1.0);
  CHECK(parsed.value("caflm_http_streams_open", model) == 1.0);

  CHECK(parsed.value("vllm:time_to_first_token_seconds_count", model) == 1.0);
  CHECK(parsed.value("vllm:time_to_first_token_seconds_sum", model) == Approx(0.03));
  CHECK(parsed.value("vllm:request_queue_time_seconds_count", model) == 1.0);
  // One token at 0.02 s, three at 0.2 s each.
  CHECK(parsed.value("vllm:inter_token_latency_seconds_count", model) == 4.0);
  CHECK(parsed.value("vllm:inter_token_latency_seconds_sum", model) == Approx(0.62));
  CHECK(parsed.value("vllm:time_per_output_token_seconds_count", model) == 4.0);
  auto itl = buckets_of(parsed, "vllm:inter_token_latency_seconds", model);
  auto at = [](const std::vector<std::pair<std::string, double>>& buckets, const std::string& le) {
    for (const auto& [bound, count] : buckets)
      if (bound == le)
        return count;
    throw std::runtime_error("no bucket le=" + le);
  };
  CHECK(at(itl, "0.01") == 0.0);
  CHECK(at(itl, "0.025") == 1.0);
  CHECK(at(itl, "0.15") == 1.0);
  CHECK(at(itl, "0.2") == 4.0);
  CHECK(at(itl, "+Inf") == 4.0);
  CHECK(parsed.value("vllm:e2e_request_latency_seconds_count", model) == 2.0);
  auto prompt = buckets_of(parsed, "vllm:request_prompt_tokens", model);
  CHECK(at(prompt, "5.0") == 1.0);  // the 4-token prompt
  CHECK(at(prompt, "10.0") == 2.0); // and the 7-token one
  CHECK(at(prompt, "100.0") == 2.0);
}

TEST_CASE("updates from four threads add up exactly", "[metrics]") {
  ServingMetrics metrics{"tiny", 8192, TokenCounts::from_requests};
  constexpr int threads = 4;
  constexpr int requests_per_thread = 500;
  constexpr int tokens_per_request = 9; // first + token() + tokens(7)
  std::vector<std::thread> workers;
  std::atomic<bool> done{false};
  // A scraper beside them: every exposition it reads is valid, and counters
  // never go back between two reads.
  std::string scrape_error;
  std::thread scraper([&] {
    double last_tokens = 0.0;
    while (!done.load()) {
      try {
        auto parsed = parse_exposition(metrics.render());
        double tokens = parsed.value("vllm:generation_tokens_total", model);
        if (tokens < last_tokens)
          throw std::runtime_error("generation tokens went back");
        last_tokens = tokens;
      } catch (const std::exception& error) {
        scrape_error = error.what();
        return;
      }
    }
  });
  for (int t = 0; t < threads; ++t) {
    workers.emplace_back([&metrics, t] {
      for (int i = 0; i < requests_per_thread; ++i) {
        metrics.request_started();
        metrics.stream_opened();
        metrics.first_token(0.05, 0.01);
        metrics.token(0.02);
        metrics.tokens(7, 0.03);
        metrics.request_finished(i % 2 ? "stop" : "length", 10, tokens_per_request, 1.0);
        metrics.request_rejected(t % 2 ? "queue_full" : "invalid");
        metrics.stream_closed();
      }
    });
  }
  for (auto& worker : workers)
    worker.join();
  done = true;
  scraper.join();
  CHECK(scrape_error.empty());

  constexpr double requests = threads * requests_per_thread;
  auto parsed = parse_exposition(metrics.render());
  CHECK(parsed.value("caflm_requests_received_total", model) == requests);
  CHECK(parsed.value("vllm:generation_tokens_total", model) == requests * tokens_per_request);
  CHECK(parsed.value("vllm:prompt_tokens_total", model) == requests * 10);
  CHECK(parsed.value("vllm:request_success_total", with(model, "finished_reason", "stop")) ==
        requests / 2);
  CHECK(parsed.value("vllm:request_success_total", with(model, "finished_reason", "length")) ==
        requests / 2);
  CHECK(parsed.value("caflm_requests_rejected_total", with(model, "reason", "queue_full")) ==
        requests / 2);
  CHECK(parsed.value("vllm:time_to_first_token_seconds_count", model) == requests);
  CHECK(parsed.value("vllm:inter_token_latency_seconds_count", model) == requests * 8);
  CHECK(parsed.value("vllm:inter_token_latency_seconds_sum", model) ==
        Approx(requests * (0.02 + 7 * 0.03)));
  CHECK(parsed.value("vllm:e2e_request_latency_seconds_sum", model) == requests);
  CHECK(parsed.value("caflm_http_streams_open", model) == 0.0);
}

TEST_CASE("cluster state sets the gauges, aggregated over engines that are up", "[metrics]") {
  ServingMetrics metrics{"tiny"};
  metrics.set_cluster_state({{
      engine("0", true, 3, 1, 6, 16, 0, 0, 0),
      engine("10.0.0.2:7000", true, 2, 0, 12, 16, 0, 0, 0),
      engine("10.0.0.3:7000", false, 9, 9, 0, 16, 0, 0, 0),
  }});
  auto parsed = parse_exposition(metrics.render());
  CHECK(parsed.value("vllm:num_requests_running", model) == 5.0);
  CHECK(parsed.value("vllm:num_requests_waiting", model) == 1.0);
  // (10 + 4) used of 32, the down engine left out.
  CHECK(parsed.value("vllm:kv_cache_usage_perc", model) == Approx(14.0 / 32.0));
  CHECK(parsed.value("vllm:gpu_cache_usage_perc", model) == Approx(14.0 / 32.0));
  CHECK(parsed.value("caflm_engines_up", model) == 2.0);
  CHECK(parsed.value("caflm_engines_total", model) == 3.0);
  auto remote = with(model, "engine", "10.0.0.2:7000");
  CHECK(parsed.value("caflm_engine_running", remote) == 2.0);
  CHECK(parsed.value("caflm_engine_waiting", remote) == 0.0);
  CHECK(parsed.value("caflm_engine_kv_blocks_used", remote) == 4.0);
  CHECK(parsed.value("caflm_engine_kv_blocks_total", remote) == 16.0);
  CHECK(parsed.value("caflm_engine_kv_blocks_cached", remote) == 0.0);
  CHECK(parsed.value("caflm_engine_load", with(model, "engine", "0")) == 7.0);
  CHECK(parsed.value("caflm_engine_up", with(model, "engine", "10.0.0.3:7000")) == 0.0);

  // An engine that leaves takes its gauges with it.
  metrics.set_cluster_state({{engine("0", true, 0, 0, 16, 16, 0, 0, 0)}});
  parsed = parse_exposition(metrics.render());
  CHECK_FALSE(parsed.has("caflm_engine_running", remote));
  CHECK(parsed.count("caflm_engine_load") == 1);
  CHECK(parsed.value("vllm:kv_cache_usage_perc", model) == 0.0);

  // No engine at all: zeros, not NaN.
  metrics.set_cluster_state({});
  parsed = parse_exposition(metrics.render());
  CHECK(parsed.value("vllm:kv_cache_usage_perc", model) == 0.0);
  CHECK(parsed.value("caflm_engines_up", model) == 0.0);
}

TEST_CASE("engine counters never go back, whatever happens to the engines", "[metrics]") {
  ServingMetrics metrics{"tiny"};
  auto counters = [&] {
    auto parsed = parse_exposition(metrics.render());
    return std::vector<double>{parsed.value("vllm:num_preemptions_total", model),
                               parsed.value("vllm:prefix_cache_queries_total", model),
                               parsed.value("vllm:prefix_cache_hits_total", model),
                               parsed.value("vllm:prompt_tokens_total", model),
                               parsed.value("vllm:generation_tokens_total", model)};
  };
  using V = std::vector<double>;

  metrics.set_cluster_state({{engine("0", true, 0, 0, 16, 16, 2, 100, 40, 300, 30),
                              engine("1", true, 0, 0, 16, 16, 1, 50, 10, 60, 6)}});
  CHECK(counters() == V{3, 150, 50, 360, 36});
  // Engine 1 advances; a repeated report adds nothing.
  metrics.set_cluster_state({{engine("0", true, 0, 0, 16, 16, 2, 100, 40, 300, 30),
                              engine("1", true, 0, 0, 16, 16, 4, 80, 30, 90, 9)}});
  CHECK(counters() == V{6, 180, 70, 390, 39});
  metrics.set_cluster_state({{engine("0", true, 0, 0, 16, 16, 2, 100, 40, 300, 30),
                              engine("1", true, 0, 0, 16, 16, 4, 80, 30, 90, 9)}});
  CHECK(counters() == V{6, 180, 70, 390, 39});
  // Engine 1 is lost: its counts stay in the totals.
  metrics.set_cluster_state({{engine("0", true, 0, 0, 16, 16, 3, 120, 50, 310, 31)}});
  CHECK(counters() == V{7, 200, 80, 400, 40});
  // Engine 0 goes down and reports zeros: skipped, nothing goes back.
  metrics.set_cluster_state({{engine("0", false, 0, 0, 0, 0, 0, 0, 0)}});
  CHECK(counters() == V{7, 200, 80, 400, 40});
  // It comes back where it was, then a little further: only the new part.
  metrics.set_cluster_state({{engine("0", true, 0, 0, 16, 16, 4, 130, 55, 320, 32)}});
  CHECK(counters() == V{8, 210, 85, 410, 41});
  // Engine 1 returns restarted: one counter went back, so all its counts
  // are new, even the prompt tokens that happen to exceed the old figure.
  metrics.set_cluster_state({{engine("0", true, 0, 0, 16, 16, 4, 130, 55, 320, 32),
                              engine("1", true, 0, 0, 16, 16, 1, 20, 5, 100, 3)}});
  CHECK(counters() == V{9, 230, 90, 510, 44});
  // Two engines of one name would make the deltas meaningless.
  CHECK_THROWS_AS(metrics.set_cluster_state({{engine("0", true, 0, 0, 16, 16, 9, 0, 0),
                                              engine("0", true, 0, 0, 16, 16, 9, 0, 0)}}),
                  std::invalid_argument);
  CHECK(counters() == V{9, 230, 90, 510, 44});
}

TEST_CASE("a new incarnation of an engine counts from zero", "[metrics]") {
  ServingMetrics metrics{"tiny"};
  auto preemptions = [&] {
    return parse_exposition(metrics.render()).value("vllm:num_preemptions_total", model);
  };
  auto run = [](std::uint64_t incarnation, std::uint64_t count) {
    auto state = engine("10.0.0.2:7000", true, 0, 0, 16, 16, count, 0, 0);
    state.incarnation = incarnation;
    return ClusterState{{state}};
  };
  metrics.set_cluster_state(run(77, 5));
  CHECK(preemptions() == 5.0);
  metrics.set_cluster_state(run(77, 8));
  CHECK(preemptions() == 8.0);
  // Restarted, and already past the old count: no counter went back, but
  // the incarnation says all 9 are new.
  metrics.set_cluster_state(run(78, 9));
  CHECK(preemptions() == 17.0);
}

TEST_CASE("token counters follow the source chosen for them", "[metrics]") {
  auto play = [](ServingMetrics& metrics) {
    metrics.set_cluster_state({{engine("0", true, 0, 0, 16, 16, 0, 0, 0, 1000, 100)}});
    metrics.first_token(0.1, 0.0);
    metrics.tokens(4, 0.01);
    metrics.request_finished("stop", 12, 5, 0.2);
    auto parsed = parse_exposition(metrics.render());
    return std::make_pair(parsed.value("vllm:prompt_tokens_total", model),
                          parsed.value("vllm:generation_tokens_total", model));
  };
  ServingMetrics from_engines{"tiny", 8192, TokenCounts::from_engines};
  CHECK(play(from_engines) == std::make_pair(1000.0, 100.0));
  ServingMetrics from_requests{"tiny", 8192, TokenCounts::from_requests};
  CHECK(play(from_requests) == std::make_pair(12.0, 5.0));
}

TEST_CASE("a model name that needs escaping still gives valid text", "[metrics]") {
  const std::string name = "org/model \"q\" \\ v1\nnext";
  ServingMetrics metrics{name};
  metrics.request_started();
  metrics.first_token(0.1, 0.0);
  metrics.request_finished("stop", 3, 1, 0.2);
  metrics.request_rejected("a \"weird\"\nreason");
  metrics.set_cluster_state({{engine("host\"x\":1", true, 1, 0, 1, 2, 0, 0, 0)}});
  Exposition parsed;
  REQUIRE_NOTHROW(parsed = parse_exposition(metrics.render()));
  LabelSet labels{{"model_name", name}};
  CHECK(parsed.value("vllm:request_success_total", with(labels, "finished_reason", "stop")) == 1.0);
  CHECK(parsed.value("caflm_requests_rejected_total",
                     with(labels, "reason", "a \"weird\"\nreason")) == 1.0);
  CHECK(parsed.value("caflm_engine_running", with(labels, "engine", "host\"x\":1")) == 1.0);
}
