// Input files: opened without blocking and refused unless they are regular files. A FIFO, a device
// or a directory named where a model file, a config or a control file belongs would otherwise hang
// the command (open(2) of a FIFO waits for a writer) or fail deep inside a library.
#pragma once
#include <sys/types.h>

#include <cstdint>
#include <string>

#include "base/error.hpp"

namespace moerun::io {

// "a FIFO", "a directory", ... for messages.
const char* file_type_name(mode_t mode);

// Reads the whole regular file `path`. A missing or unreadable file is ErrorKind::Io; one that is
// not a regular file is `not_regular` (BadInput for model files, Usage for files named by an
// option). Messages start with `path`.
std::string read_regular_file(const std::string& path, ErrorKind not_regular = ErrorKind::BadInput);
// An input that may be a pipe (--input: a FIFO, /dev/stdin), read once to its end: opened
// blocking (a FIFO waits for its writer), refused (Usage, naming `option`) only when it is a
// directory or a block device.
std::string read_stream_file(const std::string& path, const std::string& option);
// The same checks without reading: true when `path` exists and is regular; false when it is
// missing; throws `not_regular` naming it when it exists as anything else.
bool check_regular_file(const std::string& path, ErrorKind not_regular = ErrorKind::BadInput);

// An input file named by `option` (--kl-base, --affinity, --trace ...), checked before a library
// opens it: missing is ErrorKind::Io, anything but a regular file (a directory, a FIFO, a device)
// ErrorKind::Usage, both naming the option. Its content is the readers' to judge (BadInput).
void require_input_file(const std::string& path, const std::string& option);

// The byte offset of the first byte of `text` that is not part of well-formed UTF-8 (no overlong
// forms, surrogates or code points beyond U+10FFFF), or -1 when it is all well-formed.
int64_t first_invalid_utf8(const std::string& text);

}  // namespace moerun::io
