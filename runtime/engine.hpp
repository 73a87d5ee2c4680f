// Engine: the model served across the ranks of a communicator, with no requests, files or CLI in
// it (DESIGN §1). Built from a typed EngineConfig, it owns the topology, the exchanges, the
// placement, the expert backend and store, and offers the two roles:
//   - router ranks step a batch of sequence chunks and get logits (step());
//   - expert ranks serve one step of every layer (serve_step()).
// Every rank takes part in each step in lockstep: step_boundary(), then its role's call. Whether
// another step comes is the caller's to agree on (the Job does it in its step control; a program
// embedding the engine does it with its own collective). Set-up is collective and agreed: a failure
// on any rank makes every rank throw (the failing one its Error, the others ReportedError).
//
//   Engine e(cfg, world);        // topology, HDF5 probe, model config
//   e.load();                    // weights: dense on routers, experts on expert ranks
//   e.start_serving();
//   while (more) { e.step_boundary(); e.is_router() ? e.step(batch, logits, &stats, m) : e.serve_step(m); }
//   EngineReport r = e.report();  // collective
#pragma once
#include <algorithm>
#include <chrono>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include <mpi.h>

#include "base/counter_fields.hpp"
#include "base/matmul.hpp"
#include "comm/exchange_select.hpp"
#include "comm/mpi.hpp"
#include "comm/topology.hpp"
#include "experts/backend.hpp"
#include "experts/expert_cache.hpp"
#include "experts/placement.hpp"
#include "io/hdf5_probe.hpp"
#include "model/model_config.hpp"
#include "io/model_file.hpp"
#include "io/model_location.hpp"
#include "io/object_store.hpp"
#include "router/router_config.hpp"
#include "runtime/expert_balance.hpp"
#include "runtime/hot_swap.hpp"
#include "runtime/memory_budget.hpp"
#include "runtime/blocks/mla_attention.hpp"
#include "runtime/model_forward.hpp"
#include "runtime/rebalance.hpp"
#include "runtime/routing_stats.hpp"

namespace moerun::runtime {

// Whether the weights (dense matrices, CPU experts) live in 2 MiB pages (base/huge_page_pool): a
// decode step streams them faster (q8 at one sequence, AMD host: +6-25%), but faulting them in costs
// more at load where the hypervisor hands back free memory (this host: +1 s for 0.65 GB). Auto:
// huge pages when the job is known to decode at least kHugePageSteps steps.
enum class HugePages { Auto, On, Off };
HugePages parse_huge_pages(const std::string& s);  // ConfigError naming the field "huge_pages"
inline constexpr int64_t kHugePageSteps = 2048;

struct EngineConfig {
  std::string model;  // a directory or s3://bucket/prefix (model.h5 + experts-*.h5)
  io::S3Config s3;  // for an s3:// model
  router::RouterConfig router;
  int micro_batches = 0;  // per step; 0: 1 in one process, 2 distributed (measured)
  int routers_per_node = 1;
  int router_nodes = 0;  // routers on the first N nodes only (0: every node)
  int ranks_per_node = 0;  // 0: nodes from MPI_Comm_split_type
  comm::A2aKind a2a = comm::A2aKind::Mpi;
  comm::TransportConfig transport;
  std::string placement_file;  // {"layer": {"expert": rank}}; empty: round-robin
  experts::ExpertCacheConfig cache;  // l1_bytes 0: sized by the memory budget (every owned expert resident when they fit)
  // Host memory per rank (runtime/memory_budget.hpp); 0: --memory-budget auto (cgroup limit or
  // MemAvailable). Experts that do not fit it are served by the expert cache.
  int64_t memory_budget = 0;
  // Host memory per node (--node-memory), shared by the node's ranks; 0: none (memory_budget says).
  int64_t node_memory = 0;
  std::string affinity;  // affinity graph for the cache's affinity prefetch
  experts::DeviceKind device = experts::DeviceKind::Cpu;
  MlaMode mla_attention = MlaMode::Auto;  // MLA models: absorbed, expanded, or by chunk size (runtime/blocks/mla_attention.hpp)
  // --quantize-dense: the LM head and the attention projections as q8/q4 on the routers, quantized
  // at load (runtime/model_forward); Plain keeps the model's dtype.
  WeightScheme dense_scheme = WeightScheme::Plain;
  HugePages huge_pages = HugePages::Auto;
  // Tokens per step the router's step buffers are sized and touched for at start (the scheduler's
  // max_batch_tokens; 0: grown on first use): the first large step would otherwise fault in 100 MB
  // of fresh pages one by one (with launch's keep_freed_memory, a cold 1024-token Qwen3-shaped
  // prefill step went 1.35 -> 0.7 s: docs/log/performance-2026.md).
  int64_t reserve_step_tokens = 0;
  std::string cuda_library;  // libmoerun_cuda.so to load; empty: next to the executable
  double comm_timeout_s = 300;  // a peer silent this long ends the job (set-up included)
  io::Hdf5Probe hdf5_probe;  // walks local HDF5 inputs in a child process first (off when empty)
  std::string swap_control;  // hot swap: a control file polled between steps (runtime/hot_swap.hpp)
  int64_t rebalance_every = 0;  // steps between placement plans from live loads (runtime/rebalance.hpp); 0: off
  int64_t redundant = 0;  // extra expert slots per layer the rebalancing may fill with replicas
  bool share_host_cores = true;  // ranks on one host split its cores (false: OMP_NUM_THREADS was given)
  bool quiet = false;  // no set-up lines on stderr
  // How the embedding program names a field in messages (launch/: its flag); unset: the field's name.
  std::function<std::string(const std::string& field)> option_name;

  void validate() const;  // ConfigError naming the field ("micro_batches", "router.load_penalty", ...)
};

// Seconds per phase of this rank's role (router: attention, gate, shared_expert, pack, exchange,
// wait_experts, expert_compute, combine, head; expert: pack, exchange, expert_compute, idle).
using PhaseSeconds = std::map<std::string, double>;

// What the engine counted, gathered on rank 0 by report().
struct EngineReport {
  int ranks = 1;
  int routers = 1;
  std::map<std::string, PhaseSeconds> phases;  // [role]: the maximum over the ranks of that role
  bool cache_on = false;
  experts::CacheCounters cache;  // summed over expert ranks
  std::map<int, experts::CacheCounters> cache_per_rank;
  HotSwapCounters hot_swap;
  BalanceReport balance;  // distributed runs
  bool remote_model = false;  // the model is in an object store
  bool huge_pages = false;  // the weights were placed in 2 MiB pages (--huge-pages)
  io::ObjectStoreStats object_store;  // requests this job sent, summed over ranks
  MemoryBudget memory_budget;  // rank 0's: what it was and where it came from
  int64_t moe_exchanges = 0;  // dispatch + combine pairs of the router with the most
};

class Engine {
 public:
  // Collective and agreed: validates, builds the topology (ranks sharing a host split its cores),
  // walks the HDF5 inputs in a child process, reads the model's config.
  Engine(EngineConfig cfg, MPI_Comm world);
  ~Engine();
  Engine(const Engine&) = delete;
  Engine& operator=(const Engine&) = delete;

  // Collective and agreed: placement, dense weights on routers (fingerprinted, packed), the
  // experts on expert ranks (shard index, backend, store), the exchanges. `before_weights` runs
  // on every rank inside the same agreed step, before any weight is read (the Job checks its
  // requests and outputs there).
  void load(const std::function<void()>& before_weights = {});

  const EngineConfig& config() const { return cfg_; }
  const model::ModelConfig& model() const { return mc_; }
  const io::ModelLocation& location() const { return *location_; }
  const comm::Topology& topology() const { return topo_; }
  MPI_Comm world() const { return world_; }
  int rank() const { return rank_; }
  bool distributed() const { return topo_.world_size > 1; }
  bool is_router() const { return topo_.is_router(rank_); }
  int router_index() const { return topo_.router_index(rank_); }
  int routers() const { return static_cast<int>(topo_.routers.size()); }
  // Identifies the weights (as stored) and the routing options; the same on every rank after load().
  uint64_t run_fingerprint() const { return run_fingerprint_; }

  // Collective, before the first step: the exchanges, the roles, the cache's warm-up, and a
  // hot-swap control file already there.
  void start_serving();
  // When serving began (before the warm-up): time to first token counts from here.
  std::chrono::steady_clock::time_point serving_since() const { return serving_since_; }
  // At a step boundary on every rank: a changed hot-swap control file is applied here.
  void step_boundary();
  // Before load() (in its before_weights): the KV-cache rows the caller will keep at once, and in
  // how many sequences (each a recurrent state in a hybrid model), reserved in the memory budget;
  // they also bound the step buffers' tokens (reserved_step_tokens).
  void expect_kv_tokens(int64_t tokens, int64_t sequences) {
    kv_tokens_ = tokens;
    kv_sequences_ = sequences;
  }
  // Before load() (in its before_weights): the vocabulary rows one step may hold (its logits: every
  // token of the step when requests score their prompts, else one per sequence in flight), each
  // `copies` times (log-softmax rows, --kl-base rows), and the fewest a step needs (`floor`).
  void expect_logit_rows(int64_t rows, int64_t copies, int64_t floor) {
    logit_rows_ = rows;
    logit_copies_ = copies;
    logit_floor_ = floor;
  }
  // Router ranks, after step(): per token, the first layer whose output was not finite (-1: none).
  const std::vector<int32_t>& step_nonfinite_layers() const;
  // After load(): the rows a step may score under the memory budget (SchedulerConfig::max_logit_rows;
  // 0: no cap), reserved in it.
  int64_t logit_rows_per_step() const { return logit_cap_; }
  // Likewise the prefix cache's bound (--prefix-cache-mb): KV rows kept past their requests.
  void expect_prefix_cache_bytes(int64_t bytes) { prefix_cache_bytes_ = bytes; }
  // Before load() (in its before_weights): about how many decode steps the job takes, for
  // --huge-pages auto (0, the default: unknown, small pages).
  void expect_decode_steps(int64_t steps) { decode_steps_ = steps; }
  // After load(): whether the weights were placed in huge pages.
  bool weights_in_huge_pages() const { return weight_memory_ != nullptr; }
  // The budget this rank divided, and the L1 bytes it chose (0: experts resident); after load().
  const MemoryBudget& memory_budget() const { return budget_; }
  int64_t l1_bytes() const { return l1_bytes_; }
  // Tells the cache how many requests have finished (its hotness warm-up counts them).
  void requests_finished(int64_t done);
  // Router ranks: one forward step; logits [batch.logit_rows(), vocab] in chunk order. Its
  // micro-batches (0: the configured count; else 1..that, the same on every rank of the step: the
  // caller agrees on it, as step_micro_batches() does).
  void step(const StepBatch& batch, std::vector<float>& logits, RoutingStats* stats, int micro_batches = 0);
  // Expert ranks: serve every layer of one step, of `micro_batches` as step() takes it.
  void serve_step(int micro_batches = 0);
  // Seconds of the expert rank's wait for the next step (counted as idle in its phases).
  void add_idle(double seconds) { idle_s_ += seconds; }

  // Collective: phases, cache, hot-swap and object-store counters to rank 0.
  EngineReport report();

 private:
  void connect();
  // Runs f; a ConfigError becomes a Usage error naming the field as cfg_.option_name says.
  template <typename F>
  void naming_fields(F&& f) const;
  void build_store(int64_t rank);
  // The expert cache's L1 (0: every owned expert resident): --l1-bytes, else what the budget leaves.
  int64_t plan_expert_memory(int64_t owned);
  // --quantize-dense: what the dense cache did not hold is quantized now, and the cache rewritten.
  void quantize_dense();
  // The budget, placement, then the dense weights (routers), and apart the expert store (expert
  // ranks); the fingerprints of what this rank read. Neither is collective.
  void load_dense(uint64_t& dense_fp);
  void load_experts(uint64_t& experts_fp);
  // Collective: where the budget is a node's (not --memory-budget), its expert ranks take what its
  // routers do not need of it.
  void share_node_budget();
  // Whether this rank is its node's first expert rank (it reports how the node's budget was divided).
  bool first_expert_rank_of_node() const;
  void build_exchanges();
  void reserve_step_buffers(int64_t tokens);
  // A step's micro-batches as step() and serve_step() take them: 0 is the configured count.
  int checked_micro_batches(int micro_batches) const;
  PhaseSeconds my_phases() const;
  void start_rebalancing();
  BalanceReport balance_report();  // collective
  void reduce_layer_rows();  // collective: the rows counted since the last call, into balance_

  EngineConfig cfg_;
  MPI_Comm world_;
  int rank_ = 0;
  double setup_timeout_s_ = 300;
  comm::Topology topo_;
  std::optional<io::ModelLocation> location_;
  model::ModelConfig mc_;
  experts::Placement placement_;
  Matmul mm_;
  std::optional<io::DenseWeights> dense_;
  std::unique_ptr<io::ExpertShardIndex> source_;  // L3 for the cache
  std::optional<io::AffinityGraph> graph_;
  std::unique_ptr<experts::ExpertBackend> backend_;  // before the store, which uses it until destroyed
  std::unique_ptr<experts::ExpertStore> store_;
  std::unique_ptr<comm::AllToAllV> dispatch_, combine_;
  comm::OwnedComm routers_comm_;  // the router ranks (the split of replicated experts' rows)
  std::unique_ptr<class MoeExchangeProtocol> protocol_;
  std::unique_ptr<class MoeLayer> moe_;
  std::unique_ptr<ModelForward> forward_;
  std::unique_ptr<class ExpertServer> server_;
  std::optional<HotSwap> swap_;
  std::unique_ptr<Rebalancer> rebalancer_;
  int64_t steps_ = 0;  // step boundaries passed
  // Rows per expert rank per layer and step, reduced every kBalanceSteps steps (memory stays bounded
  // on long runs): the sums over steps of the busiest rank's rows and of the mean, on rank 0.
  static constexpr int64_t kBalanceSteps = 256;
  int64_t balanced_steps_ = 0;
  std::vector<LayerRowsBalance> balance_;
  uint64_t run_fingerprint_ = 0;
  int ranks_on_host_ = 1;
  int64_t kv_tokens_ = 0, kv_sequences_ = 0;
  int64_t decode_steps_ = 0;
  std::shared_ptr<HugePagePool> weight_memory_;  // null: the weights are on the C heap
  // Step buffers: for EngineConfig::reserve_step_tokens, or fewer when the KV rows the caller
  // expects are fewer (each token of a step is a KV row of a sequence in flight): a small job under
  // a memory budget leaves the rest to the expert cache.
  int64_t reserved_step_tokens() const {
    return kv_tokens_ > 0 ? std::min(cfg_.reserve_step_tokens, kv_tokens_) : cfg_.reserve_step_tokens;
  }
  int64_t prefix_cache_bytes_ = 0;
  int64_t logit_rows_ = 0, logit_copies_ = 1, logit_floor_ = 1, logit_cap_ = 0;
  int64_t logit_bytes() const { return (logit_cap_ > 0 ? logit_cap_ : logit_rows_) * logit_copies_ * mc_.vocab_size * int64_t{4}; }
  MemoryBudget budget_;
  int64_t l1_bytes_ = 0;
  std::chrono::steady_clock::time_point serving_since_;
  double idle_s_ = 0;
};

// Runs `f` on every rank of `world`; if any rank failed, the lowest failing rank prints its error
// (prefixed with its rank when it is not rank 0) and every rank throws: ReportedError with that
// code. One process: f's error is rethrown. The agreement has a deadline: a rank that never
// arrives ends the job with a Comm error naming it. `what` names the set-up step.
void agree_on_setup(MPI_Comm world, double timeout_s, const char* what, const std::function<void()>& f);

}  // namespace moerun::runtime
