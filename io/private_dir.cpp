// Private directories: mkdir 0700, then lstat for type, owner and mode.
#include "io/private_dir.hpp"

#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <filesystem>

#include "base/error.hpp"
#include "io/input_file.hpp"

namespace moerun::io {
namespace {

void check(const std::string& path, const std::string& what) {
  struct stat sb {};
  if (::lstat(path.c_str(), &sb) != 0) fail(ErrorKind::Io, what, path, ": cannot stat: ", std::strerror(errno));
  if (S_ISLNK(sb.st_mode)) fail(ErrorKind::Io, what, path, ": is a symlink; refusing to trust a directory through it");
  if (!S_ISDIR(sb.st_mode)) fail(ErrorKind::Io, what, path, ": is ", file_type_name(sb.st_mode), ", expected a directory");
  if (sb.st_uid != ::geteuid())
    fail(ErrorKind::Io, what, path, ": is owned by uid ", sb.st_uid, ", not by this user (uid ", ::geteuid(),
         "); refusing to trust what is in it");
  if (sb.st_mode & (S_IWGRP | S_IWOTH)) {
    char mode[8];
    std::snprintf(mode, sizeof mode, "%04o", static_cast<unsigned>(sb.st_mode & 07777));
    fail(ErrorKind::Io, what, path, ": is writable by group or others (mode ", mode, "); refusing to trust what is in it");
  }
}

}  // namespace

void make_private_directory(const std::string& path, const std::string& option) {
  const std::string what = option.empty() ? "" : option + " ";
  if (::mkdir(path.c_str(), 0700) != 0 && errno != EEXIST)
    fail(ErrorKind::Io, what, path, ": cannot create directory: ", std::strerror(errno));
  check(path, what);
}

void make_private_directory_path(const std::string& path, const std::string& option) {
  const std::filesystem::path parent = std::filesystem::path(path).lexically_normal().parent_path();
  std::error_code ec;
  if (!parent.empty()) std::filesystem::create_directories(parent, ec);
  if (ec) fail(ErrorKind::Io, option, " ", path, ": cannot create its parent directory: ", ec.message());
  make_private_directory(path, option);
}

void check_private_directory(const std::string& path, const std::string& option) {
  check(path, option + " ");
}

std::string user_temp_directory() {
  const std::string dir = (std::filesystem::temp_directory_path() / ("moerun-" + std::to_string(::geteuid()))).string();
  make_private_directory(dir);
  return dir;
}

}  // namespace moerun::io
