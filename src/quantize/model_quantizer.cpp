#include "quantize/model_quantizer.hpp"

#include <unistd.h>

#include <algorithm>
#include <array>
#include <chrono>
#include <cmath>
#include <cstring>
#include <exception>
#include <map>
#include <thread>
#include <tuple>

#include "core/atomic_file.hpp"
#include "core/error.hpp"
#include "core/output_paths.hpp"
#include "kernels/format_table.hpp"
#include "quantize/imatrix_file.hpp"

namespace okapi::quantize {
namespace {

// llama.cpp's GGML_QNT_VERSION: the current layout of the quantized blocks.
constexpr uint32_t kQuantizationVersion = 2;
// Below this many elements a tensor is converted on one thread (thread start-up would dominate).
constexpr int64_t kMinElementsPerThread = 1 << 16;


int64_t metadata_int(const gguf::File& file, const std::string& key, int64_t fallback) {
  const gguf::Value* v = file.find(key);
  if (v == nullptr) return fallback;
  // Some models store per-layer head counts as arrays; the rules look at layer 0 as llama.cpp does.
  if (v->is_array()) {
    const auto items = v->as_int_array();
    return items.empty() ? fallback : items.front();
  }
  return v->as_int();
}

// Runs fn(first_row, end_row) over [0, n_rows) split into contiguous ranges, one per thread.
// Every row is computed the same way whichever thread runs it, so the result is thread-count
// independent. The first exception is rethrown.
template <typename Fn>
void for_row_ranges(int64_t n_rows, int64_t row_length, int n_threads, Fn&& fn) {
  const int64_t by_size = std::max<int64_t>(1, n_rows * row_length / kMinElementsPerThread);
  const int64_t n = std::clamp<int64_t>(std::min<int64_t>(n_threads, by_size), 1, n_rows);
  if (n == 1) {
    fn(int64_t{0}, n_rows);
    return;
  }
  std::vector<std::exception_ptr> errors(static_cast<size_t>(n));
  std::vector<std::thread> threads;
  auto run = [&](int64_t t) {
    try {
      fn(n_rows * t / n, n_rows * (t + 1) / n);
    } catch (...) {
      errors[static_cast<size_t>(t)] = std::current_exception();
    }
  };
  for (int64_t t = 1; t < n; ++t) threads.emplace_back(run, t);
  run(0);
  for (auto& th : threads) th.join();
  for (const auto& e : errors) {
    if (e) std::rethrow_exception(e);
  }
}

struct PlannedTensor {
  const gguf::TensorInfo* info;
  TensorChoice choice;
  uint64_t output_bytes;
  // Importance weights, [n_mat][row length] (one row per expert of a 3-D tensor), or null.
  const std::vector<float>* importance = nullptr;
};

// The importance matrix as llama-quantize hands it to the quantizer (its prepare_imatrix): per
// tensor name the mean squared activations, after --include-weights / --exclude-weights.
struct LoadedImatrix {
  std::map<std::string, std::vector<float>> weights;
  std::string dataset;        // the first calibration file name, if any
  int64_t chunk_count = 0;
};

std::optional<LoadedImatrix> load_imatrix(const ImatrixOptions& options) {
  if (!options.include_weights.empty() && !options.exclude_weights.empty()) {
    throw_error_for(Setting::Imatrix, "--include-weights and --exclude-weights cannot be used together");
  }
  if (options.file.empty()) return std::nullopt;
  const Imatrix imatrix = read_imatrix(options.file);
  if (!imatrix.legacy && !imatrix.has_metadata) {
    throw_error_for(Setting::Imatrix,
                    "importance matrix '{}' lacks imatrix.datasets / imatrix.chunk_count / imatrix.chunk_size "
                    "(llama-quantize refuses it too)", options.file);
  }
  LoadedImatrix loaded;
  auto matches_any = [](const std::string& name, const std::vector<std::string>& parts) {
    return std::any_of(parts.begin(), parts.end(),
                       [&name](const std::string& part) { return name.find(part) != std::string::npos; });
  };
  for (const auto& [name, entry] : imatrix.entries) {
    if (matches_any(name, options.exclude_weights)) continue;
    if (!options.include_weights.empty() && !matches_any(name, options.include_weights)) continue;
    std::vector<float> w = importance_weights(entry);
    for (const float v : w) {
      if (!std::isfinite(v)) {
        throw_error_for(Setting::Imatrix, "importance matrix '{}': entry '{}' has a non-finite value {}",
                        options.file, name, v);
      }
    }
    loaded.weights.emplace(name, std::move(w));
  }
  // llama-quantize treats an importance matrix left empty by the filters as none at all.
  if (loaded.weights.empty()) return std::nullopt;
  if (!imatrix.datasets.empty()) loaded.dataset = imatrix.datasets.front();
  loaded.chunk_count = imatrix.chunk_count;
  return loaded;
}

bool is_token_embedding(const std::string& name) {
  return name == "token_embd.weight" || name == "per_layer_token_embd.weight";
}

// The importance weights of one tensor, or null (llama-quantize's lookup and size check).
const std::vector<float>* importance_of(const gguf::TensorInfo& t, const LoadedImatrix& imatrix,
                                        const std::string& file) {
  const auto it = imatrix.weights.find(t.name);
  if (it == imatrix.weights.end()) return nullptr;
  const int64_t n_mat = t.shape.size() > 2 ? t.shape[2] : 1;
  const auto expected = static_cast<size_t>(t.shape[0] * n_mat);
  if (it->second.size() == expected) return &it->second;
  // A token embedding's entry never fits (its input is token ids); llama-quantize ignores it.
  if (is_token_embedding(t.name)) return nullptr;
  throw_error_for(Setting::Imatrix,
                  "importance matrix '{}': entry '{}' has {} values but the tensor needs {} ({} columns x {} "
                  "matrices); was it computed for another model?",
                  file, t.name, it->second.size(), expected, t.shape[0], n_mat);
}

// Reads one tensor as float32 rows: a view of the mapping when it already is F32, else converted.
class FloatSource {
 public:
  FloatSource(const gguf::TensorInfo& t, int n_threads) {
    const int64_t row_length = t.shape[0];
    const int64_t n_rows = t.n_rows();
    const auto address = reinterpret_cast<uintptr_t>(t.data);
    if (t.type == DType::F32 && address % alignof(float) == 0) {
      data_ = reinterpret_cast<const float*>(t.data);
      return;
    }
    buffer_.resize(static_cast<size_t>(t.n_elements()));
    data_ = buffer_.data();
    if (t.type == DType::I2_S) {  // one scale for the whole tensor: not row by row
      quant::dequantize_tensor(t.type, t.bytes(), t.shape, buffer_.data());
      return;
    }
    const quant::Format* f = quant::find_format(t.type);
    if (f == nullptr || f->dequantize == nullptr) {
      throw_error("tensor '{}': okapi cannot read {} weights to convert them", t.name, dtype_name(t.type));
    }
    const size_t in_row_bytes = *row_bytes(t.type, row_length);
    for_row_ranges(n_rows, row_length, n_threads, [&](int64_t first, int64_t end) {
      for (int64_t r = first; r < end; ++r) {
        f->dequantize(t.data + static_cast<size_t>(r) * in_row_bytes, buffer_.data() + r * row_length, row_length);
      }
    });
  }
  const float* data() const { return data_; }

 private:
  std::vector<float> buffer_;
  const float* data_ = nullptr;
};

// llama.cpp validates every converted row and refuses NaN / infinity; so does okapi, on the input.
void check_finite(const gguf::TensorInfo& t, const float* values, int64_t first_row, int64_t end_row) {
  const int64_t row_length = t.shape[0];
  for (int64_t i = first_row * row_length; i < end_row * row_length; ++i) {
    if (!std::isfinite(values[i])) {
      throw_error("tensor '{}': value {} at element {} (row {}) is not finite; refusing to convert", t.name,
                  values[i], i, i / row_length);
    }
  }
}

// I2_S keeps only signs and one scale per tensor (bitnet.cpp's quantizer: |x| <= 1e-6 is 0, any
// other value becomes +-max|x|). A tensor that is not already 0 / +-s would silently become
// another model, so it is refused.
void check_ternary_valued(const gguf::TensorInfo& t, const float* values) {
  const int64_t n = t.n_elements();
  float scale = 0.0f;
  for (int64_t i = 0; i < n; ++i) scale = std::fmax(scale, std::fabs(values[i]));
  for (int64_t i = 0; i < n; ++i) {
    const float a = std::fabs(values[i]);
    if (a > 1e-6f && std::fabs(a - scale) > 1e-3f * scale) {
      throw_error("tensor '{}': value {} at element {} is not 0 or +-{} (the tensor's largest magnitude): I2_S "
                  "stores ternary weights with one scale per tensor; use TQ2_0 or TQ1_0 for this model",
                  t.name, values[i], i, scale);
    }
  }
}

std::vector<uint8_t> convert_tensor(const gguf::TensorInfo& t, DType type, const std::vector<float>* importance,
                                    int n_threads) {
  const FloatSource source(t, n_threads);
  const quant::Format& f = quant::format(type);
  if (type == DType::I2_S) {  // one scale for the whole tensor: not row by row
    check_finite(t, source.data(), 0, t.n_rows());
    check_ternary_valued(t, source.data());
    return quant::quantize_tensor(type, source.data(), t.shape);
  }
  const int64_t row_length = t.shape[0];
  const size_t out_row_bytes = *row_bytes(type, row_length);
  // With importance weights the format's weighted quantizer runs (where it has one: Q8_0 and the
  // float types ignore them, as ggml); rows of expert e use the matrix's row e.
  const bool weighted = importance != nullptr && f.quantize_weighted != nullptr;
  const int64_t rows_per_matrix = t.shape.size() > 1 ? t.shape[1] : 1;
  std::vector<uint8_t> out(out_row_bytes * static_cast<size_t>(t.n_rows()));
  for_row_ranges(t.n_rows(), row_length, n_threads, [&](int64_t first, int64_t end) {
    check_finite(t, source.data(), first, end);
    for (int64_t r = first; r < end; ++r) {
      const float* x = source.data() + r * row_length;
      uint8_t* y = out.data() + static_cast<size_t>(r) * out_row_bytes;
      if (weighted) {
        f.quantize_weighted(x, y, row_length, importance->data() + (r / rows_per_matrix) * row_length);
      } else {
        f.quantize(x, y, row_length);
      }
    }
  });
  return out;
}

std::string mix_name(FileType ft) { return std::string(mix_spec(ft).name); }

// Everything llama-quantize refuses, and what okapi cannot do, before any work.
void check_planned(const std::vector<PlannedTensor>& planned, const QuantizeOptions& options,
                   const std::optional<LoadedImatrix>& imatrix) {
  const std::string mix = mix_name(options.mix.file_type);
  if (!imatrix) {
    for (const auto& p : planned) {
      if (!p.choice.requires_importance) continue;
      throw_error_for(Setting::Imatrix,
                      "the {} mix needs an importance matrix: tensor '{}' would be {}, which is garbage without "
                      "one (llama-quantize refuses it too); make one with `okapi imatrix` or llama-imatrix and "
                      "pass --imatrix FILE",
                      mix, p.info->name, dtype_name(p.choice.type));
    }
  }
  for (const auto& p : planned) {
    if (!p.choice.convert) continue;
    const gguf::TensorInfo& t = *p.info;
    const DType type = p.choice.type;
    if (p.choice.requires_importance && p.importance == nullptr) {
      throw_error_for(Setting::Imatrix,
                      "the importance matrix '{}' has no entry for tensor '{}', which the {} mix makes {} (a very "
                      "low-bit type that is garbage without one); llama-quantize refuses this too",
                      options.imatrix.file, t.name, mix, dtype_name(type));
    }
    if (layout(t.type).quantized && !options.allow_requantize) {
      throw_error_for(Setting::AllowRequantize,
                      "tensor '{}' is already quantized ({}); requantizing it to {} loses quality and is refused "
                      "without --allow-requantize (as llama-quantize)",
                      t.name, dtype_name(t.type), dtype_name(type));
    }
    if (type == DType::F32 || type == DType::F16 || type == DType::BF16) continue;
    const quant::Format* f = quant::find_format(type);
    const bool can_plain = f != nullptr && f->quantize != nullptr && !f->requires_importance;
    const bool can_weighted = f != nullptr && f->quantize_weighted != nullptr && p.importance != nullptr;
    if (f == nullptr || (f->quantize == nullptr && f->quantize_weighted == nullptr)) {
      throw_error("tensor '{}' gets {} in the {} mix, and this build of okapi cannot produce {} weights yet", t.name,
                  dtype_name(type), mix, dtype_name(type));
    }
    if (!can_plain && !can_weighted) {
      throw_error_for(Setting::Imatrix, "tensor '{}' gets {}, which needs importance weights, and {}", t.name,
                      dtype_name(type),
                      imatrix ? fmt::format("the importance matrix '{}' has none for it", options.imatrix.file)
                              : std::string("no importance matrix was given (--imatrix FILE)"));
    }
  }
}

std::vector<PlannedTensor> plan(const gguf::File& file, const QuantizeOptions& options,
                                const std::optional<LoadedImatrix>& imatrix) {
  std::vector<TensorDesc> descs;
  descs.reserve(file.tensors().size());
  for (const auto& t : file.tensors()) descs.push_back(TensorDesc{t.name, t.type, t.shape});
  MixOptions mix = options.mix;
  mix.has_imatrix = imatrix.has_value();
  const auto choices = choose_tensor_types(model_facts(file), descs, mix);

  std::vector<size_t> order(descs.size());
  for (size_t i = 0; i < order.size(); ++i) order[i] = i;
  if (options.order == TensorOrder::LlamaCpp) order = llama_cpp_tensor_order(descs);

  std::vector<PlannedTensor> planned;
  for (size_t i : order) {
    const gguf::TensorInfo& t = file.tensors()[i];
    const auto bytes = choices[i].convert ? tensor_bytes(choices[i].type, t.shape) : std::optional<uint64_t>(t.nbytes);
    if (!bytes) throw_error("tensor '{}': shape does not fit {}", t.name, dtype_name(choices[i].type));
    const std::vector<float>* importance =
        imatrix && choices[i].convert ? importance_of(t, *imatrix, options.imatrix.file) : nullptr;
    planned.push_back(PlannedTensor{&t, choices[i], *bytes, importance});
  }
  check_planned(planned, options, imatrix);
  return planned;
}

void warn_about(const std::vector<PlannedTensor>& planned, const QuantizeObserver& observer) {
  if (!observer.on_warning) return;
  // One line per kind of fallback (wanted type, row length, fallback type), not per tensor.
  struct Group {
    size_t count = 0;
    std::string example;
  };
  std::map<std::tuple<DType, int64_t, DType>, Group> fallbacks;
  Group requantized;
  for (const auto& p : planned) {
    Group* g = nullptr;
    if (p.choice.fell_back) g = &fallbacks[{p.choice.wanted, p.info->shape[0], p.choice.type}];
    if (g != nullptr && g->count++ == 0) g->example = p.info->name;
    if (p.choice.convert && layout(p.info->type).quantized && requantized.count++ == 0) {
      requantized.example = fmt::format("'{}' is {}", p.info->name, dtype_name(p.info->type));
    }
  }
  for (const auto& [key, g] : fallbacks) {
    const auto& [wanted, row_length, type] = key;
    observer.on_warning(fmt::format("{} tensor(s) with rows of {} (e.g. '{}') do not fit {} (blocks of {}); using {}",
                                    g.count, row_length, g.example, dtype_name(wanted), layout(wanted).block_size,
                                    dtype_name(type)));
  }
  if (requantized.count > 0) {
    observer.on_warning(fmt::format("requantizing {} already quantized tensor(s) (e.g. {}): quality will be worse "
                                    "than quantizing the original float weights",
                                    requantized.count, requantized.example));
  }
}

// An output whose directory is missing or read-only is refused before any work.
void check_output_directory(const std::filesystem::path& output) {
  std::filesystem::path dir = output.parent_path();
  if (dir.empty()) dir = ".";
  std::error_code ec;
  if (!std::filesystem::exists(dir, ec)) {
    throw_error("cannot write '{}': directory '{}' does not exist", output.string(), dir.string());
  }
  if (!std::filesystem::is_directory(dir, ec)) {
    throw_error("cannot write '{}': '{}' is not a directory", output.string(), dir.string());
  }
  if (::access(dir.c_str(), W_OK) != 0) {
    throw_error("cannot write '{}': permission denied to create files in directory '{}'",
                output.string(), dir.string());
  }
}

}  // namespace

ModelFacts model_facts(const gguf::File& file) {
  ModelFacts facts;
  facts.arch = file.architecture();
  const std::string prefix = facts.arch + ".";
  facts.n_layer = metadata_int(file, prefix + "block_count", 0);
  facts.n_head = metadata_int(file, prefix + "attention.head_count", 0);
  facts.n_head_kv = metadata_int(file, prefix + "attention.head_count_kv", facts.n_head);
  facts.n_expert = metadata_int(file, prefix + "expert_count", 0);
  return facts;
}

QuantizeReport quantize_model(const std::filesystem::path& input, const std::filesystem::path& output,
                              const QuantizeOptions& options, const QuantizeObserver& observer) {
  const auto start = std::chrono::steady_clock::now();
  check_output_path({output, "the output"}, {{input, "the input"}});
  if (!written_in_place(output)) check_output_directory(output);  // /dev/null is written, /dev need not be
  const gguf::File file = gguf::File::open(input);
  const std::optional<LoadedImatrix> imatrix = load_imatrix(options.imatrix);
  const std::vector<PlannedTensor> planned = plan(file, options, imatrix);

  // llama-quantize appends these, in this order, after the copied keys (its kv overrides for the
  // importance matrix: strings cut at 127 bytes, counts as u32; the chunk count only when known).
  std::vector<std::pair<std::string, gguf::Value>> appended;
  appended.emplace_back("general.quantization_version", kQuantizationVersion);
  appended.emplace_back("general.file_type", static_cast<uint32_t>(options.mix.file_type));
  if (imatrix) {
    appended.emplace_back("quantize.imatrix.file", options.imatrix.file.substr(0, 127));
    if (!imatrix->dataset.empty()) appended.emplace_back("quantize.imatrix.dataset", imatrix->dataset.substr(0, 127));
    appended.emplace_back("quantize.imatrix.entries_count", static_cast<uint32_t>(imatrix->weights.size()));
    if (imatrix->chunk_count > 0) {
      appended.emplace_back("quantize.imatrix.chunks_count", static_cast<uint32_t>(imatrix->chunk_count));
    }
  }
  std::vector<std::string_view> replaced = {"split.no", "split.count", "split.tensors.count"};
  for (const auto& kv : appended) replaced.push_back(kv.first);
  gguf::Writer writer;
  writer.copy_metadata(file, replaced);
  for (auto& [key, value] : appended) writer.set(key, std::move(value));
  warn_about(planned, observer);

  QuantizeReport report;
  report.input_file_bytes = file.file_size();
  const int n_threads = std::max(1, options.n_threads);
  for (size_t i = 0; i < planned.size(); ++i) {
    const PlannedTensor& p = planned[i];
    const gguf::TensorInfo& t = *p.info;
    // Tensors are converted one at a time while the writer streams them to disk.
    auto report_progress = [&observer, i, n = planned.size(), &t] {
      if (observer.on_tensor) observer.on_tensor(i + 1, n, t.name);
    };
    if (p.choice.convert) {
      writer.add_tensor_producer(t.name, p.choice.type, t.shape, [&t, &p, n_threads, report_progress] {
        std::vector<uint8_t> data = convert_tensor(t, p.choice.type, p.importance, n_threads);
        report_progress();
        return data;
      });
    } else {
      writer.add_tensor_producer(t.name, t.type, t.shape, [&t, report_progress] {
        report_progress();
        return std::vector<uint8_t>(t.data, t.data + t.nbytes);
      });
    }
    report.tensors.push_back(TensorReport{t.name, t.type, p.choice.type, t.n_elements(), t.nbytes, p.output_bytes,
                                          p.choice.convert, p.choice.fell_back});
  }
  report.output_file_bytes = writer.write(output);  // not file_size: the output may be a device or a FIFO
  report.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  return report;
}

}  // namespace okapi::quantize
