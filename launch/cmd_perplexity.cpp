// `moerun perplexity`: option parsing into PerplexityConfig, the environment, then the Job.
#include "comm/mpi.hpp"
#include "launch/cli.hpp"
#include "launch/environment.hpp"
#include "launch/option_names.hpp"
#include "runtime/perplexity.hpp"

namespace moerun::launch {

int cmd_perplexity(int argc, char** argv) {
  runtime::PerplexityConfig c;
  po::options_description o("perplexity options");
  // clang-format off
  o.add_options()
    ("model", po::value(&c.engine.model)->required(), "model: a directory or s3://bucket/prefix (model.h5 + experts-*.h5)")
    ("text", po::value(&c.text), "UTF-8 text to score, tokenized by the model directory's tokenizer")
    ("tokens", po::value(&c.tokens), "or: a JSON array of token ids to score")
    ("context", po::value(&c.context)->default_value(c.context), "tokens per window")
    ("stride", po::value(&c.stride)->default_value(c.stride),
     "tokens between window starts (0: --context). Each window scores its tokens from max(context/2, context-stride) on")
    ("json", po::value(&c.json_out), "write {\"perplexity\", \"stderr\", \"tokens\", ...} as JSON")
    ("save-logits", po::value(&c.save_logits),
     "write the full-vocabulary log-probs of every scored token (HDF5; router N > 0 writes FILE.N), the base of a later --kl-base")
    ("kl-base", po::value(&c.kl_base),
     "compare with a --save-logits file of the same text: KL divergence, top-1 agreement, perplexity ratio")
    ("max-batch-size", po::value(&c.scheduler.max_batch_size)->default_value(c.scheduler.max_batch_size), "windows in flight")
    ("max-batch-tokens", po::value(&c.scheduler.max_batch_tokens)->default_value(c.scheduler.max_batch_tokens),
     "tokens per step (the step's logits hold this many rows of the vocabulary)")
    ("quiet", po::bool_switch(&c.quiet), "no progress or summary on stderr");
  // clang-format on
  EngineOptions engine;
  engine.add(o, c.engine);
  po::variables_map vm;
  if (!parse_command_line(argc, argv, "usage: moerun perplexity --model DIR (--text FILE | --tokens FILE.json) [options]", o, vm)) return 0;
  if ((vm.count("text") > 0) == (vm.count("tokens") > 0)) fail(ErrorKind::Usage, "give --text FILE or --tokens FILE (one of them)");
  const Environment env = engine.finish(c.engine);
  if (!env.python.empty()) c.tokenizer.python = env.python;
  c.option_name = option_name;
  comm::MpiSession mpi(&argc, &argv);
  if (mpi.size() > 1) log::set_rank(mpi.rank());
  if (mpi.rank() == 0) engine.warn_deprecated();
  runtime::run_perplexity(c, MPI_COMM_WORLD);
  return 0;
}

}  // namespace moerun::launch
