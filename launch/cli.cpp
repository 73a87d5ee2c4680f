// Option parsing helpers.
#include "launch/cli.hpp"
#include "launch/option_names.hpp"

#include <algorithm>
#include <cmath>
#include <cstdlib>

#include <fstream>
#include <iostream>
#include <sstream>

#include "base/error.hpp"
#include "base/weight_scheme_table.hpp"
#include "base/log.hpp"
#include "comm/exchange_select.hpp"
#include "experts/backend.hpp"
#include "io/input_file.hpp"
#include "convert/synthetic_model.hpp"

namespace moerun::launch {

std::string command_names(const std::vector<CommandRow>& rows, const char* separator) {
  std::string out;
  for (const CommandRow& r : rows) out += (out.empty() ? "" : separator) + std::string(r.name);
  return out;
}

int run_subcommand(int argc, char** argv, const char* command, const char* unknown, const std::vector<CommandRow>& rows) {
  const std::string usage =
      str("usage: moerun ", command, " <", command_names(rows), "> [options]   (moerun ", command, " ", rows.front().name, " --help)");
  if (argc < 2 || !std::strcmp(argv[1], "--help") || !std::strcmp(argv[1], "-h")) {
    std::cout << usage << "\n\n";
    for (const CommandRow& r : rows)
      std::cout << "  " << r.name << std::string(std::max<std::size_t>(1, 10 - std::strlen(r.name)), ' ') << r.what << "\n";
    return argc < 2 ? 2 : 0;
  }
  for (const CommandRow& r : rows)
    if (!std::strcmp(argv[1], r.name)) return r.run(argc - 1, argv + 1);
  fail(ErrorKind::Usage, unknown, " \"", argv[1], "\" (", usage, ")");
}

bool parse_command_line(int argc, char** argv, const std::string& usage, po::options_description& opts, po::variables_map& vm,
                        const po::positional_options_description* positional) {
  // clang-format off
  opts.add_options()("help,h", "show this help")("config", po::value<std::string>(),
                                                  "read options from FILE (lines `option = value`)");
  // clang-format on
  try {
    po::command_line_parser parser(argc, argv);
    parser.options(opts);
    if (positional) parser.positional(*positional);
    po::store(parser.run(), vm);
    if (vm.count("help")) {
      std::cout << usage << "\n\n" << opts << "\n";
      return false;
    }
    if (vm.count("config")) {
      const std::string path = vm["config"].as<std::string>();
      std::istringstream in(io::read_regular_file(path, ErrorKind::Usage));
      po::store(po::parse_config_file(in, opts), vm);
    }
    po::notify(vm);
  } catch (const po::error& e) {
    fail(ErrorKind::Usage, e.what(), " (see --help)");
  }
  return true;
}

void CacheOptions::add(po::options_description& o, runtime::EngineConfig& c) {
  // clang-format off
  o.add_options()
    ("memory-budget", po::value(&budget)->default_value(budget),
     "host memory per rank, e.g. 12G: the dense part, step buffers and KV cache come first, the experts get the rest (all "
     "resident when they fit, else the expert cache's L1); auto: the cgroup memory limit or MemAvailable, shared by the "
     "ranks of a host")
    ("node-memory", po::value(&node_memory)->default_value(node_memory),
     "host memory per node, e.g. 256G, shared by the node's ranks (instead of --memory-budget): experts are spread over "
     "the nodes' expert ranks, so the nodes' memory together holds them; what does not fit is served by each rank's "
     "expert cache from its local disk (0: --memory-budget decides)")
    ("l1-bytes", po::value(&l1)->default_value(l1), "expert cache: L1 budget per expert rank, e.g. 512M (0: from --memory-budget)")
    ("l2-dir", po::value(&c.cache.l2_dir), "expert cache: L2 directory on local disk (kept across runs; one subdirectory per rank)")
    ("l2-bytes", po::value(&l2)->default_value(l2), "expert cache: L2 budget per expert rank")
    ("l2-io", po::value(&l2_io)->default_value(l2_io), "expert cache: L2 reads direct (O_DIRECT where the filesystem allows) or buffered (page cache)")
    ("l3-io", po::value(&l3_io)->default_value(l3_io),
     "expert cache: reads of a local model's shards direct (O_DIRECT where the filesystem allows: L1 holds the experts, the "
     "page cache would hold them twice) or buffered")
    ("prefetch", po::value(&prefetch)->default_value(prefetch), "expert cache: off, lru, affinity (needs --affinity) or gate (the next layer's gate on this layer's input, sent to the experts' ranks with the dispatch; else lru)")
    ("affinity", po::value(&c.affinity), "expert-affinity graph (moerun affinity build) for --prefetch affinity")
    ("warmup", po::value(&warmup)->default_value(warmup),
     "expert cache: fill the empty L1 by hotness (in the background, hottest experts of the first requests first), "
     "id-order (all of L1 before the first step), or none (demand and prefetch only)")
    ("warmup-requests", po::value(&c.cache.warmup_requests)->default_value(c.cache.warmup_requests),
     "expert cache: requests whose expert use drives the hotness warm-up")
    ("io-threads", po::value(&c.cache.io_threads)->default_value(c.cache.io_threads), "expert cache: loader threads per expert rank");
  // clang-format on
}

void CacheOptions::finish(runtime::EngineConfig& c) const {
  c.memory_budget = budget == "auto" ? 0 : parse_bytes(budget, "memory-budget");
  if (budget != "auto" && c.memory_budget <= 0) fail(ErrorKind::Usage, "--memory-budget must be a size > 0 or auto, not \"", budget, "\"");
  c.node_memory = parse_bytes(node_memory, "node-memory");
  if (c.node_memory < 0) fail(ErrorKind::Usage, "--node-memory must be a size >= 0, not \"", node_memory, "\"");
  if (c.node_memory > 0 && budget != "auto")
    fail(ErrorKind::Usage, "--node-memory and --memory-budget: give one (a node's memory, or a rank's)");
  c.cache.l1_bytes = parse_bytes(l1, "l1-bytes");
  c.cache.l2_bytes = parse_bytes(l2, "l2-bytes");
  c.cache.prefetch = experts::parse_prefetch(prefetch);
  c.cache.warmup = experts::parse_warmup(warmup);
  if (l2_io != "direct" && l2_io != "buffered") fail(ErrorKind::Usage, "--l2-io must be direct or buffered, not \"", l2_io, "\"");
  c.cache.l2_direct = l2_io == "direct";
  if (l3_io != "direct" && l3_io != "buffered") fail(ErrorKind::Usage, "--l3-io must be direct or buffered, not \"", l3_io, "\"");
  c.cache.l3_direct = l3_io == "direct";
  with_option_names([&] { c.cache.validate(); });
}

WeightScheme parse_dense_quantization(const std::string& name) {
  if (name == "none") return WeightScheme::Plain;
  const auto s = weight_scheme_by_name(name);
  if (!s || !weight_scheme_row(*s).dense_quantizable)
    fail(ErrorKind::Usage, "--quantize-dense must be none, ",
         weight_scheme_names([](const WeightSchemeRow& r) { return r.dense_quantizable; }), ", not \"", name, "\"");
  return *s;
}

void EngineOptions::add(po::options_description& o, runtime::EngineConfig& c) {
  // clang-format off
  o.add_options()
    ("routers-per-node", po::value(&c.routers_per_node)->default_value(c.routers_per_node), "router ranks per node (the first local ranks)")
    ("router-nodes", po::value(&c.router_nodes)->default_value(c.router_nodes),
     "routers on the first N nodes only; every rank of the others is an expert rank (0: every node)")
    ("ranks-per-node", po::value(&c.ranks_per_node)->default_value(c.ranks_per_node),
     "treat every N consecutive ranks as one node (0: MOERUN_RANKS_PER_NODE, else from the MPI library)")
    ("placement", po::value(&placement)->default_value(placement),
     "round-robin, or a JSON file {\"layer\": {\"expert\": rank or [ranks]}} (moerun placement plan writes one; an expert "
     "on several ranks has its rows split among them)")
    ("rebalance-every", po::value(&c.rebalance_every)->default_value(c.rebalance_every),
     "every N steps, plan a placement from the rows routed since the last plan and switch to it when it makes the busiest "
     "expert rank at least 5% lighter (experts move between ranks while steps go on; outputs do not change; 0: off)")
    ("redundant", po::value(&c.redundant)->default_value(c.redundant),
     "with --rebalance-every: extra expert slots per layer for replicas of the hottest experts")
    ("micro-batches", po::value(&c.micro_batches)->default_value(c.micro_batches),
     "micro-batches per step: attention of one overlaps the experts of another (0: 1 in one process, 2 distributed; "
     "a step where no router has two sequences runs in one)")
    ("a2a", po::value(&a2a)->default_value(a2a), "all-to-all: mpi (flat) or hier (shared memory in a node + UCX between nodes); auto is a deprecated name for mpi")
    ("comm-timeout", po::value(&c.comm_timeout_s)->default_value(c.comm_timeout_s), "seconds to wait for a peer before aborting the job")
    ("device", po::value(&device)->default_value(device), "where expert ranks keep and compute experts: cpu, or cuda (device memory, cuBLAS; needs a CUDA build and a GPU per expert rank)")
    ("mla-attention", po::value(&mla_attention)->default_value(mla_attention),
     "MLA models (DeepSeek): absorbed (attend to the compressed cache), expanded (per-head keys and values), or auto "
     "(expanded for prompt tokens, absorbed for generated ones: the same bits however a prompt is chunked)")
    ("quantize-dense", po::value(&quantize_dense)->default_value(quantize_dense), kQuantizeDenseHelp)
    ("huge-pages", po::value(&huge_pages)->default_value(huge_pages),
     "on, off or auto: keep the weights (dense matrices, CPU experts) in 2 MiB pages. Decode streams them faster "
     "(fewer TLB misses), loading faults them in slower where the hypervisor reclaims free memory; auto: on for "
     "jobs of at least 2048 decode steps (their tokens over the batch size)");
  // clang-format on
  cache.add(o, c);
  object_store.add(o);
}

Environment EngineOptions::finish(runtime::EngineConfig& c) const {
  with_option_names([&] {
    c.device = experts::parse_device(device);
    c.a2a = comm::parse_a2a(a2a == "auto" ? "mpi" : a2a);
    c.mla_attention = runtime::parse_mla_mode(mla_attention);
    c.huge_pages = runtime::parse_huge_pages(huge_pages);
  });
  c.dense_scheme = parse_dense_quantization(quantize_dense);
  c.placement_file = placement == "round-robin" ? "" : placement;
  cache.finish(c);
  c.s3 = object_store.finish();
  const Environment env = Environment::read();
  apply_environment(env, c);
  c.hdf5_probe.s3_retries = c.s3.retries;
  c.hdf5_probe.s3_timeout_s = c.s3.timeout_s;
  c.option_name = option_name;
  return env;
}

void EngineOptions::warn_deprecated() const {
  if (a2a == "auto")
    log::warn("--a2a auto is deprecated and means mpi: hier has not measured faster than mpi anywhere yet (docs/PERFORMANCE.md)");
}

void ObjectStoreOptions::add(po::options_description& o) {
  // clang-format off
  o.add_options()
    ("s3-retries", po::value(&s3.retries)->default_value(s3.retries), "s3:// model: retries of a failed request (5xx, timeout, reset), with exponential backoff")
    ("s3-timeout", po::value(&s3.timeout_s)->default_value(s3.timeout_s), "s3:// model: seconds one request may take");
  // clang-format on
}

io::S3Config ObjectStoreOptions::finish() const {
  io::S3Config c = s3_from_environment(s3);
  if (c.retries < 0) fail(ErrorKind::Usage, "--s3-retries must be >= 0");
  // libcurl counts milliseconds, and 0 ms means no timeout at all.
  if (!(c.timeout_s >= 0.001) || !std::isfinite(c.timeout_s))
    fail(ErrorKind::Usage, "--s3-timeout must be a number of seconds >= 0.001, not ", c.timeout_s);
  return c;
}

io::S3Config s3_from_environment(io::S3Config c) {
  auto env = [](const char* name) {
    const char* v = std::getenv(name);
    return std::string(v ? v : "");
  };
  c.endpoint = env("AWS_ENDPOINT_URL");
  c.region = env("AWS_REGION");
  if (c.region.empty()) c.region = env("AWS_DEFAULT_REGION");
  if (c.region.empty()) c.region = "us-east-1";
  c.access_key_id = env("AWS_ACCESS_KEY_ID");
  c.secret_access_key = env("AWS_SECRET_ACCESS_KEY");
  c.session_token = env("AWS_SESSION_TOKEN");
  return c;
}

void check_output_files(const std::vector<io::PathUse>& outputs, const std::vector<io::PathUse>& inputs) {
  std::vector<io::PathUse> given;
  for (const auto& o : outputs)
    if (!o.path.empty()) given.push_back(o);
  for (const auto& o : given) io::check_output_target(o.path, o.option);
  io::check_distinct_paths(inputs, given);
}

int64_t parse_bytes(const std::string& s, const std::string& option) {
  std::size_t used = 0;
  double v = 0;
  try {
    v = std::stod(s, &used);
  } catch (const std::exception&) {
    fail(ErrorKind::Usage, "--", option, ": \"", s, "\" is not a size (e.g. 4096, 64M, 2G)");
  }
  std::string unit = s.substr(used);
  if (!unit.empty() && (unit.back() == 'B' || unit.back() == 'b')) unit.pop_back();
  if (!unit.empty() && (unit.back() == 'i')) unit.pop_back();
  double mult = 1;
  if (unit == "K" || unit == "k")
    mult = 1024.0;
  else if (unit == "M" || unit == "m")
    mult = 1024.0 * 1024;
  else if (unit == "G" || unit == "g")
    mult = 1024.0 * 1024 * 1024;
  else if (unit == "T" || unit == "t")
    mult = 1024.0 * 1024 * 1024 * 1024;
  else if (!unit.empty())
    fail(ErrorKind::Usage, "--", option, ": \"", s, "\" has an unknown unit (K, M, G, T)");
  if (!(v >= 0)) fail(ErrorKind::Usage, "--", option, " must be >= 0");
  // 2^62 bytes: beyond any machine, and v * mult still fits int64_t (inf and 1e30 do not).
  if (!(v * mult <= 0x1p62)) fail(ErrorKind::Usage, "--", option, ": \"", s, "\" is too large (at most 4 EiB)");
  return static_cast<int64_t>(v * mult);
}

void ModelOptions::add(po::options_description& o, model::ModelConfig& m) {
  dtype = dtype_name(m.dtype);
  // clang-format off
  o.add_options()
    ("layers", po::value(&m.num_layers)->default_value(m.num_layers), "num_layers")
    ("experts", po::value(&m.num_experts)->default_value(m.num_experts), "num_experts")
    ("top-k", po::value(&m.top_k)->default_value(m.top_k), "experts per token")
    ("hidden", po::value(&m.hidden_size)->default_value(m.hidden_size), "hidden_size")
    ("intermediate", po::value(&m.intermediate_size)->default_value(m.intermediate_size), "expert intermediate_size")
    ("heads", po::value(&m.num_heads)->default_value(m.num_heads), "num_heads")
    ("kv-heads", po::value(&m.num_kv_heads)->default_value(m.num_kv_heads), "num_kv_heads (divides heads)")
    ("head-dim", po::value(&m.head_dim)->default_value(m.head_dim), "head_dim")
    ("vocab", po::value(&m.vocab_size)->default_value(m.vocab_size), "vocab_size")
    ("max-position", po::value(&m.max_position)->default_value(m.max_position), "max_position")
    ("rope-theta", po::value(&m.rope_theta)->default_value(m.rope_theta), "rope_theta")
    ("rms-norm-eps", po::value(&m.rms_norm_eps)->default_value(m.rms_norm_eps), "rms_norm_eps")
    ("bos", po::value(&m.bos_token_id)->default_value(m.bos_token_id), "bos_token_id")
    ("eos", po::value(&m.eos_token_id)->default_value(m.eos_token_id), "eos_token_id")
    ("dtype", po::value(&dtype)->default_value(dtype),
     "float32 or bfloat16; q8, q4, int4, mxfp4 or fp8-block: bfloat16 dense layers, experts quantized from the same float32 "
     "weights (docs/FORMATS.md)")
    ("family", po::value(&family)->default_value(family),
     ("layer variants of a family, as convert sets them: " + model::supported_architectures() + " (docs/FORMATS.md)").c_str())
    ("layer-mlp", po::value(&layer_mlp), "per layer moe or dense, e.g. dense,moe,moe,moe (default: all moe)")
    ("dense-intermediate", po::value(&dense_intermediate)->default_value(0), "the dense layers' MLP width (default: 4 x intermediate)")
    ("layer-types", po::value(&layer_types), "per layer full, sliding or linear (Gated DeltaNet) attention, e.g. sliding,full,sliding,full")
    ("sliding-window", po::value<int64_t>()->notifier([this](int64_t v) { sliding_window = v; }),
     "W of the sliding layers, >= 1 (gpt_oss default: min(128, max_position / 4))")
    ("shared-intermediate", po::value<int64_t>()->notifier([this](int64_t v) { shared_intermediate = v; }),
     "shared expert width (qwen2_moe default: 2 x intermediate; 0: none)")
    ("rope-type", po::value(&rope_type), "RoPE scaling: default, linear, yarn or llama3 (gpt_oss default: yarn)")
    ("rope-factor", po::value<double>()->notifier([this](double v) { rope_factor = v; }), "RoPE scaling factor, finite and > 0 (linear: >= 1)")
    ("rope-original-max-position", po::value<int64_t>()->notifier([this](int64_t v) { rope_original_max_position = v; }),
     "yarn, llama3: the context trained at (>= 1)");
  // clang-format on
}

void ModelOptions::finish(model::ModelConfig& m) const {
  if (!model::is_weight_format_name(dtype)) fail(ErrorKind::Usage, "--dtype must be ", model::weight_format_names_text());
  const bool quantized = dtype != "float32" && dtype != "bfloat16";
  m.dtype = dtype == "float32" ? DType::F32 : DType::BF16;
  m.expert_format = model::parse_weight_format(quantized ? dtype : dtype_name(m.dtype), m.dtype, "--dtype");
  convert::apply_family(family, m);
  if (dense_intermediate > 0 && layer_mlp.empty()) fail(ErrorKind::Usage, "--dense-intermediate needs --layer-mlp with a dense layer");
  try {
    if (!layer_mlp.empty()) {
      m.layer_mlp = model::parse_layer_mlp(layer_mlp, "--layer-mlp");
      m.dense_intermediate_size = dense_intermediate > 0 ? dense_intermediate : 4 * m.intermediate_size;
    }
    if (!layer_types.empty()) m.layer_attention = model::parse_layer_attention(layer_types, "--layer-types");
    if (!rope_type.empty()) m.rope.type = model::parse_rope_type(rope_type, "--rope-type");
  } catch (const Error& e) {
    throw Error(ErrorKind::Usage, e.what());
  }
  // A value out of range is refused naming its option (the config's own checks would name the
  // attribute, or another option that only looked wrong next to it).
  if (sliding_window && *sliding_window < 1) fail(ErrorKind::Usage, "--sliding-window must be >= 1, not ", *sliding_window);
  if (shared_intermediate && *shared_intermediate < 0)
    fail(ErrorKind::Usage, "--shared-intermediate must be >= 0 (0: no shared expert), not ", *shared_intermediate);
  if (rope_factor && !(std::isfinite(*rope_factor) && *rope_factor > 0))
    fail(ErrorKind::Usage, "--rope-factor must be a finite number > 0, not ", *rope_factor);
  if (rope_original_max_position && *rope_original_max_position < 1)
    fail(ErrorKind::Usage, "--rope-original-max-position must be >= 1, not ", *rope_original_max_position);
  if (sliding_window) m.sliding_window = *sliding_window;
  if (shared_intermediate) m.shared_expert_intermediate_size = *shared_intermediate;
  if (rope_factor) m.rope.factor = *rope_factor;
  if (rope_original_max_position) m.rope.original_max_position = *rope_original_max_position;
  if (rope_factor && m.rope.type == model::RopeType::Linear && *rope_factor < 1)
    fail(ErrorKind::Usage, "--rope-factor must be >= 1 with --rope-type linear, not ", *rope_factor);
}

std::vector<int64_t> parse_int_list(const std::string& s, const std::string& option) {
  std::vector<int64_t> out;
  for (const std::string& part : parse_string_list(s)) {
    try {
      std::size_t pos = 0;
      out.push_back(std::stoll(part, &pos));
      if (pos != part.size()) throw std::invalid_argument(part);
    } catch (const std::exception&) {
      fail(ErrorKind::Usage, "--", option, ": \"", part, "\" is not an integer");
    }
  }
  return out;
}

std::vector<std::string> parse_string_list(const std::string& s) {
  std::vector<std::string> out;
  std::stringstream ss(s);
  std::string part;
  while (std::getline(ss, part, ','))
    if (!part.empty()) out.push_back(part);
  return out;
}

}  // namespace moerun::launch
