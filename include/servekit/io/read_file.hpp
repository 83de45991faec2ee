// SPDX-License-Identifier: Apache-2.0
#pragma once
// A file opened for reading at offsets. Checkpoints are read with pread rather than mapped:
// a mapped file that is truncated under the reader kills the process with SIGBUS, while a
// short read is an error that can name the file, the tensor and the bytes that went missing.
// Tensors are still read only when they are converted, straight into their destination.
#include <cerrno>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <filesystem>
#include <memory>
#include <span>
#include <string>

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include "servekit/core/error.hpp"
#include "servekit/core/regular_file.hpp"

namespace servekit::io {

class ReadOnlyFile {
 public:
  ReadOnlyFile(const ReadOnlyFile&) = delete;
  ReadOnlyFile& operator=(const ReadOnlyFile&) = delete;
  ~ReadOnlyFile() {
    if (fd_ >= 0) ::close(fd_);
  }

  // Shared because every tensor entry of a checkpoint reads through the same descriptor.
  static std::shared_ptr<const ReadOnlyFile> open(const std::filesystem::path& path) {
    require_regular_file(path);  // before open(): opening a FIFO would block forever
    std::shared_ptr<ReadOnlyFile> f(new ReadOnlyFile(path));
    f->fd_ = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
    if (f->fd_ < 0) fail(path.string(), ": cannot open: ", std::strerror(errno));
    struct stat st {};
    if (::fstat(f->fd_, &st) != 0) fail(path.string(), ": cannot stat: ", std::strerror(errno));
    if (!S_ISREG(st.st_mode)) fail(path.string(), ": not a regular file");
    f->size_ = uint64_t(st.st_size);
    return f;
  }

  // Fills `out` from byte `offset`. The size seen at open() may no longer hold: a file cut
  // short since then is reported here, with what the caller was reading (`what`).
  void read_at(uint64_t offset, std::span<std::byte> out, const std::string& what) const {
    std::size_t done = 0;
    while (done < out.size()) {
      const ssize_t got = ::pread(fd_, out.data() + done, out.size() - done, off_t(offset + done));
      if (got < 0 && errno == EINTR) continue;
      if (got < 0)
        fail(path_.string(), ": ", what, ": cannot read bytes [", offset, ", ", offset + out.size(),
             "): ", std::strerror(errno));
      if (got == 0)
        fail(path_.string(), ": ", what, ": the file ends at byte ", offset + done, " but bytes [",
             offset, ", ", offset + out.size(), ") were to be read (it was ", size_,
             " bytes when opened; was it truncated while loading?)");
      done += std::size_t(got);
    }
  }

  uint64_t size() const { return size_; }
  const std::filesystem::path& path() const { return path_; }

 private:
  explicit ReadOnlyFile(std::filesystem::path p) : path_(std::move(p)) {}

  std::filesystem::path path_;
  int fd_ = -1;
  uint64_t size_ = 0;
};

}  // namespace servekit::io
