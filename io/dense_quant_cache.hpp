// The quantized dense matrices of a local model, kept next to its model.h5 (issue 41):
// `dense-q8.bin` / `dense-q4.bin` hold what --quantize-dense makes of the LM head and the
// multi-head attention projections, in base/quant_matmul's blocked form, each with the xxh64
// attribute of the model.h5 dataset it came from and a checksum of its own bytes. A start with
// --quantize-dense reads them instead of reading and quantizing the plain matrices; an entry whose
// source checksum differs (the model changed) or whose bytes fail theirs is not used (the matrix is
// quantized again). It is a cache: nothing in it is ever fatal. Layout in docs/FORMATS.md.
#pragma once
#include <cstdint>
#include <map>
#include <string>
#include <utility>
#include <vector>

#include "base/matmul.hpp"
#include "io/model_file.hpp"

namespace moerun::io {

// "dense-q4.bin" in the model directory.
std::string dense_cache_path(const std::string& model_dir, WeightScheme s);

// The matrices --quantize-dense quantizes, with their model.h5 paths: the LM head, and wq, wk, wv,
// wo of multi-head attention (MLA's are re-laid out and stay plain); only whole groups of 32 columns.
std::vector<std::pair<std::string, WeightMatrix*>> quantizable_dense_matrices(DenseWeights& w);

struct DenseCacheEntry {
  WeightMatrix matrix;  // scheme s, blocked bytes
  uint64_t source_xxh64 = 0;
};

// The usable entries of `path` for scheme `s` (empty when the file is missing). A file that is not a
// dense cache, or is damaged, gives none and one warning naming it. The matrices are read into `memory`.
std::map<std::string, DenseCacheEntry> read_dense_cache(const std::string& path, WeightScheme s,
                                                        const std::shared_ptr<HugePagePool>& memory = nullptr);

// Writes every quantized matrix of `w` (scheme s) with its source checksum (`sources`, by path),
// atomically. Returns false (after one warning) when the directory is not writable.
bool write_dense_cache(const std::string& path, WeightScheme s, DenseWeights& w, const std::map<std::string, uint64_t>& sources);

}  // namespace moerun::io
