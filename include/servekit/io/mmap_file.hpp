// SPDX-License-Identifier: Apache-2.0
#pragma once
// A read-only memory map of a whole file. Checkpoints are mapped rather than read so that a
// tensor is only paged in when it is converted, and views into it cost nothing.
#include <cerrno>
#include <cstddef>
#include <cstring>
#include <filesystem>
#include <span>
#include <string>
#include <utility>

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include "servekit/core/error.hpp"
#include "servekit/core/regular_file.hpp"

namespace servekit::io {

class MappedFile {
 public:
  MappedFile() = default;
  MappedFile(const MappedFile&) = delete;
  MappedFile& operator=(const MappedFile&) = delete;
  MappedFile(MappedFile&& o) noexcept
      : path_(std::move(o.path_)),
        data_(std::exchange(o.data_, nullptr)),
        size_(std::exchange(o.size_, 0)) {}
  MappedFile& operator=(MappedFile&& o) noexcept {
    if (this != &o) {
      unmap();
      path_ = std::move(o.path_);
      data_ = std::exchange(o.data_, nullptr);
      size_ = std::exchange(o.size_, 0);
    }
    return *this;
  }
  ~MappedFile() { unmap(); }

  static MappedFile open(const std::filesystem::path& path) {
    MappedFile m;
    m.path_ = path;
    require_regular_file(path);
    const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
    if (fd < 0) fail(path.string(), ": cannot open: ", std::strerror(errno));
    struct stat st {};
    if (::fstat(fd, &st) != 0) {
      const int err = errno;
      ::close(fd);
      fail(path.string(), ": cannot stat: ", std::strerror(err));
    }
    if (!S_ISREG(st.st_mode)) {
      ::close(fd);
      fail(path.string(), ": not a regular file");
    }
    m.size_ = std::size_t(st.st_size);
    if (m.size_ > 0) {  // mmap of length 0 is an error; an empty file is simply empty
      void* p = ::mmap(nullptr, m.size_, PROT_READ, MAP_PRIVATE, fd, 0);
      if (p == MAP_FAILED) {
        const int err = errno;
        ::close(fd);
        fail(path.string(), ": cannot mmap ", m.size_, " bytes: ", std::strerror(err));
      }
      m.data_ = static_cast<const std::byte*>(p);
    }
    ::close(fd);  // the mapping keeps its own reference to the file
    return m;
  }

  std::span<const std::byte> bytes() const { return {data_, size_}; }
  std::size_t size() const { return size_; }
  const std::filesystem::path& path() const { return path_; }

 private:
  void unmap() {
    if (data_) ::munmap(const_cast<std::byte*>(data_), size_);
    data_ = nullptr;
    size_ = 0;
  }

  std::filesystem::path path_;
  const std::byte* data_ = nullptr;
  std::size_t size_ = 0;
};

}  // namespace servekit::io
