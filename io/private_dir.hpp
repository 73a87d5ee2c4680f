// Directories whose contents a command trusts (convert's staging area, kept across a killed run):
// owned by this user and writable by nobody else, checked before anything in them is used. A
// directory of a predictable name in /tmp could otherwise be planted by another user, with a
// tampered shard inside that would be "kept from an earlier run".
#pragma once
#include <string>

namespace moerun::io {

// Makes `path` (mode 0700; its parent must exist) unless it exists, then checks it: a real
// directory (not a symlink), owned by the effective user, no write permission for group or
// others. Io error naming it (after `option`, when given) otherwise.
void make_private_directory(const std::string& path, const std::string& option = "");
// make_private_directory after making the missing parents of `path` (with the umask's mode).
void make_private_directory_path(const std::string& path, const std::string& option);
// The same checks on an existing directory given by the user (`option` names it).
void check_private_directory(const std::string& path, const std::string& option);
// This user's own directory under the system temp directory (TMPDIR or /tmp): moerun-UID, made
// and checked as above.
std::string user_temp_directory();

}  // namespace moerun::io
