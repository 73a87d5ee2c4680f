// `moerun convert`: options into convert::ConvertConfig, a progress line, the summary.
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <iostream>

#include "io/dense_quant_cache.hpp"
#include "convert/hf_convert.hpp"
#include "model/model_config.hpp"
#include "io/object_store.hpp"
#include "launch/cli.hpp"
#include "runtime/model_forward.hpp"

namespace moerun::launch {
namespace {

// One line on stderr, rewritten in place on a terminal (a new line every 10 s otherwise).
class ConvertProgress {
 public:
  explicit ConvertProgress(bool quiet) : quiet_(quiet), tty_(::isatty(STDERR_FILENO)), start_(Clock::now()), last_(start_) {}
  void update(uint64_t done, uint64_t total) {
    if (quiet_) return;
    const auto now = Clock::now();
    if (done < total && now - last_ < std::chrono::milliseconds(tty_ ? 500 : 10000)) return;
    last_ = now;
    const double s = std::chrono::duration<double>(now - start_).count();
    const double rate = s > 0 ? static_cast<double>(done) / s : 0;
    const double eta = rate > 0 ? static_cast<double>(total - done) / rate : 0;
    std::fprintf(stderr, "%sconvert: %5.1f%%  %.2f / %.2f GiB  %.0f MB/s  ETA %.0f s%s", tty_ ? "\r" : "",
                 total ? 100.0 * static_cast<double>(done) / static_cast<double>(total) : 100.0, static_cast<double>(done) / (1 << 30),
                 static_cast<double>(total) / (1 << 30), rate / 1e6, eta, tty_ ? "   " : "\n");
    shown_ = true;
  }
  void end() {
    if (shown_ && tty_) std::fputc('\n', stderr);
  }

 private:
  using Clock = std::chrono::steady_clock;
  bool quiet_, tty_, shown_ = false;
  Clock::time_point start_, last_;
};

}  // namespace

int cmd_convert(int argc, char** argv) {
  convert::ConvertConfig c;
  bool quiet = false;
  std::string quantize_dense = "none";
  po::options_description o("convert options");
  const std::string from_help = "Hugging Face model directory: config.json and *.safetensors (" + model::supported_architectures() + ")";
  // clang-format off
  o.add_options()
    ("from-hf", po::value(&c.from)->required(), from_help.c_str())
    ("out", po::value(&c.out)->required(), "moe-hdf5 model directory to write (created; a rerun keeps the files already finished), or s3://bucket/prefix")
    ("staging", po::value(&c.staging), "s3:// --out: local directory the model is made in before the upload (default: in the temp directory)")
    ("dtype", po::value(&c.dtype)->default_value(c.dtype), "keep (bf16 stays bf16; f32 and f16 become f32), float32 or bfloat16")
    ("shards", po::value(&c.shards)->default_value(c.shards), "expert shard files (0: about 2 GiB each)")
    ("quantize", po::value(&c.quantize)->default_value(c.quantize),
     "the experts' stored format: keep (an MXFP4 or fp8 checkpoint's experts as shipped, else --dtype), none (dequantized "
     "to --dtype), q8 or q4 (quantized in groups of 32; docs/FORMATS.md); dense layers keep --dtype")
    ("quantize-dense", po::value(&quantize_dense)->default_value(quantize_dense),
     "none, q8 or q4: also make the dense cache `infer --quantize-dense` reads (dense-q8.bin / dense-q4.bin next to model.h5), "
     "so the first start does not quantize; a local --out only")
    ("quiet", po::bool_switch(&quiet), "no progress line or summary");
  // clang-format on
  ObjectStoreOptions object_store;
  object_store.add(o);
  po::variables_map vm;
  if (!parse_command_line(argc, argv, "usage: moerun convert --from-hf HF_DIR --out MODEL_DIR [options]", o, vm)) return 0;
  if (io::is_s3_url(c.out)) c.s3 = object_store.finish();
  const WeightScheme dense = parse_dense_quantization(quantize_dense);
  if (dense != WeightScheme::Plain && io::is_s3_url(c.out))
    fail(ErrorKind::Usage, "--quantize-dense: an s3:// --out keeps no dense cache (infer quantizes at load there)");
  c.validate();
  ConvertProgress progress(quiet);
  const convert::ConvertReport r = convert::convert_hf_checkpoint(c, [&](uint64_t done, uint64_t total) { progress.update(done, total); });
  progress.end();
  const auto t0 = std::chrono::steady_clock::now();
  const int quantized = dense == WeightScheme::Plain ? 0 : runtime::make_dense_cache(c.out, dense);
  const double dense_s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  if (!quiet) {
    const model::ModelConfig& m = r.config;
    std::fprintf(
        stderr,
        "moerun convert: %s -> %s: %s, %lld layers x %lld experts (top-%lld), %s, %lld parameters; %d file(s) written, %d kept from an earlier run, %.2f GiB read\n",
        c.from.c_str(), c.out.c_str(), m.architecture.c_str(), static_cast<long long>(m.num_layers), static_cast<long long>(m.num_experts),
        static_cast<long long>(m.top_k), dtype_name(m.dtype), static_cast<long long>(m.total_params()), r.files_written, r.files_kept,
        static_cast<double>(r.bytes_read) / (1 << 30));
    if (io::is_s3_url(c.out))
      std::fprintf(stderr, "moerun convert: %d object(s) uploaded to %s, %d already there\n", r.files_uploaded, c.out.c_str(),
                   r.uploads_kept);
    if (dense != WeightScheme::Plain)
      std::fprintf(stderr, "moerun convert: %d dense matrices quantized to %s in %.1f s, kept in %s\n", quantized, quantize_dense.c_str(),
                   dense_s, io::dense_cache_path(c.out, dense).c_str());
    if (!r.notes.empty()) std::fprintf(stderr, "notes:\n%s", r.notes.c_str());
  }
  return 0;
}

}  // namespace moerun::launch
