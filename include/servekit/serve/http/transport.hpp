// SPDX-License-Identifier: Apache-2.0
#pragma once
// Transport: the server's sockets. One thread (run()) accepts connections and keeps them in a
// waiting room, an epoll set, until each has sent a whole request; only then does a worker
// thread take the connection, answer the request (handler) and write the response, after
// which a keep-alive connection goes back to the room. A client holding thousands of idle or
// half-sent connections costs a file descriptor and the bytes it sent each, never a thread,
// so it cannot starve the requests of others (a thread per connection, as most embedded HTTP
// servers have, is starved by a few hundred).
//
// Bounds of the room, each held by closing its oldest connection (the one likeliest to be a
// slow client: a real one sends its request within milliseconds of connecting):
//   - a request must be whole within read_timeout_s of the connection's start, or of the
//     previous response on a kept-alive connection (408 if it had begun, else closed quietly);
//   - at most max_waiting connections, max_waiting_per_peer from one address, and
//     max_waiting_bytes of unfinished requests held in all.
// Workers are the ElasticPool's (elastic_pool.hpp): threads answer at once; a response the
// client does not read for write_timeout_s is abandoned.
#include <arpa/inet.h>
#include <fcntl.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <sys/epoll.h>
#include <sys/eventfd.h>
#include <sys/socket.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <chrono>
#include <cstring>
#include <functional>
#include <list>
#include <memory>
#include <mutex>
#include <string>
#include <unordered_map>
#include <vector>

#include "servekit/core/error.hpp"
#include "servekit/serve/http/elastic_pool.hpp"
#include "servekit/serve/http/message.hpp"
#include "servekit/serve/http/request_reader.hpp"
#include "servekit/serve/http/response_writer.hpp"

namespace servekit::serve::http {

struct TransportOptions {
  std::string host = "127.0.0.1";
  int port = 8080;  // 0: any free port
  std::size_t max_body_bytes = std::size_t{1} << 20;
  std::size_t threads = 144;  // requests answered at once
  double read_timeout_s = 10;
  double write_timeout_s = 10;
  std::size_t max_waiting = 16384;
  std::size_t max_waiting_per_peer = 4096;
  std::size_t max_waiting_bytes = std::size_t{256} << 20;
};

// What the room has done, for /metrics and the hostile-load test.
struct TransportCounts {
  std::atomic<long> accepted{0}, timed_out{0}, evicted{0}, refused{0};
  std::atomic<long> waiting{0};  // connections in the room now
};

class Transport {
 public:
  using Handler = std::function<void(const HttpRequest&, HttpResponse&)>;
  using Clock = std::chrono::steady_clock;

  Transport(TransportOptions opt, Handler handler)
      : opt_(std::move(opt)),
        handler_(std::move(handler)),
        pool_(opt_.threads, std::chrono::seconds(5)) {}
  Transport(const Transport&) = delete;
  Transport& operator=(const Transport&) = delete;
  ~Transport() {
    stop();
    if (listen_fd_ >= 0) ::close(listen_fd_);
    if (wake_fd_ >= 0) ::close(wake_fd_);
    if (ep_ >= 0) ::close(ep_);
  }

  // Binds and listens; returns the port (the chosen one for port 0).
  int bind() {
    addrinfo hints{}, *res = nullptr;
    hints.ai_family = AF_UNSPEC;
    hints.ai_socktype = SOCK_STREAM;
    hints.ai_flags = AI_PASSIVE;
    const std::string port = std::to_string(opt_.port);
    if (::getaddrinfo(opt_.host.c_str(), port.c_str(), &hints, &res) != 0 || !res)
      fail("http: cannot bind ", opt_.host, ":", opt_.port, " (not an address of this machine)");
    listen_fd_ = ::socket(res->ai_family, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
    const int on = 1;
    // A restarted server takes its port back at once, past the old sockets' TIME_WAIT.
    ::setsockopt(listen_fd_, SOL_SOCKET, SO_REUSEADDR, &on, sizeof on);
    const bool ok = listen_fd_ >= 0 && ::bind(listen_fd_, res->ai_addr, res->ai_addrlen) == 0 &&
                    ::listen(listen_fd_, SOMAXCONN) == 0;
    ::freeaddrinfo(res);
    if (!ok)
      fail("http: cannot bind ", opt_.host, ":", opt_.port, " (", std::strerror(errno),
           "; in use, or not an address of this machine)");
    sockaddr_storage a{};
    socklen_t len = sizeof a;
    ::getsockname(listen_fd_, reinterpret_cast<sockaddr*>(&a), &len);
    port_ = ntohs(a.ss_family == AF_INET6 ? reinterpret_cast<sockaddr_in6*>(&a)->sin6_port
                                          : reinterpret_cast<sockaddr_in*>(&a)->sin_port);
    ep_ = ::epoll_create1(EPOLL_CLOEXEC);
    wake_fd_ = ::eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
    watch(listen_fd_);
    watch(wake_fd_);
    return port_;
  }
  int port() const { return port_; }
  const TransportCounts& counts() const { return counts_; }

  // The waiting room's loop, until stop(); then closes every connection once the workers
  // have answered what they hold.
  void run() {
    std::vector<epoll_event> ev(256);
    while (!stop_) {
      const int n = ::epoll_wait(ep_, ev.data(), static_cast<int>(ev.size()), wait_ms());
      for (int i = 0; i < n; i++) {
        const int fd = ev[i].data.fd;
        if (fd == listen_fd_)
          accept_all();
        else if (fd == wake_fd_)
          take_back();
        else if (auto it = room_.find(fd); it != room_.end())
          read_from(*it->second);
      }
      if (listen_paused_ && Clock::now() >= resume_listen_) {
        listen_paused_ = false;
        watch(listen_fd_);
      }
      expire();
    }
    while (!order_.empty()) drop(*order_.front(), 0, "");
    pool_.shutdown();
    take_back();  // connections the workers gave back while stopping: closed
  }

  // Any thread; idempotent. Kept-alive connections are closed after their response.
  void stop() {
    if (stop_.exchange(true)) return;
    if (wake_fd_ >= 0) {
      const std::uint64_t one = 1;
      [[maybe_unused]] auto w = ::write(wake_fd_, &one, sizeof one);
    }
  }

 private:
  struct Conn {
    int fd;
    std::string peer;
    RequestReader reader;
    Clock::time_point deadline;
    std::list<Conn*>::iterator in_order, in_peer;
    bool continued = false;  // "100 Continue" sent for this request
    bool lingering = false;  // refused: reading what the client still sends, then closing
    Conn(int f, std::string p, std::size_t max_body)
        : fd(f), peer(std::move(p)), reader(max_body) {}
  };

  void watch(int fd) {
    epoll_event e{};
    e.events = EPOLLIN | EPOLLRDHUP;
    e.data.fd = fd;
    ::epoll_ctl(ep_, EPOLL_CTL_ADD, fd, &e);
  }

  int wait_ms() const {
    auto until = Clock::now() + std::chrono::seconds(1);
    if (!order_.empty()) until = std::min(until, order_.front()->deadline);
    if (listen_paused_) until = std::min(until, resume_listen_);
    const auto ms = std::chrono::ceil<std::chrono::milliseconds>(until - Clock::now()).count();
    return static_cast<int>(std::max<long>(0, ms));
  }

  void accept_all() {
    while (true) {
      sockaddr_storage a{};
      socklen_t len = sizeof a;
      const int fd = ::accept4(listen_fd_, reinterpret_cast<sockaddr*>(&a), &len, SOCK_CLOEXEC);
      if (fd < 0) {
        if (errno == EINTR || errno == ECONNABORTED) continue;
        if ((errno == EMFILE || errno == ENFILE) && !order_.empty()) {
          evict(*order_.front());  // out of descriptors: the oldest waiter gives its up
          continue;
        }
        if (errno == EMFILE || errno == ENFILE) {  // none to give: stop accepting a moment
          ::epoll_ctl(ep_, EPOLL_CTL_DEL, listen_fd_, nullptr);
          listen_paused_ = true;
          resume_listen_ = Clock::now() + std::chrono::milliseconds(100);
        }
        return;  // EAGAIN: all taken
      }
      counts_.accepted++;
      const int on = 1;
      ::setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &on, sizeof on);  // a small event per token
      const timeval tv = timeval_of(opt_.write_timeout_s);
      ::setsockopt(fd, SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof tv);
      enter(new Conn(fd, peer_of(a), opt_.max_body_bytes));
    }
  }

  // Into the room, making space by the bounds above; or straight to a worker if the bytes
  // it holds already make a request (pipelining).
  void enter(Conn* c) {
    if (c->reader.state() == RequestReader::done) return dispatch(c, false);
    if (auto p = by_peer_.find(c->peer);
        p != by_peer_.end() && p->second.size() >= opt_.max_waiting_per_peer)
      evict(*p->second.front());
    if (order_.size() >= opt_.max_waiting) evict(*order_.front());
    auto& mine = by_peer_[c->peer];
    c->deadline = Clock::now() + seconds(opt_.read_timeout_s);
    c->in_order = order_.insert(order_.end(), c);
    c->in_peer = mine.insert(mine.end(), c);
    room_[c->fd] = c;
    held_ += c->reader.held();
    counts_.waiting++;
    watch(c->fd);
    if (c->reader.state() == RequestReader::failed)  // a pipelined request it could not read
      refuse(*c, c->reader.error_status(), c->reader.error());
  }

  // Out of the room (the connection stays open).
  void leave(Conn& c) {
    ::epoll_ctl(ep_, EPOLL_CTL_DEL, c.fd, nullptr);
    order_.erase(c.in_order);
    auto p = by_peer_.find(c.peer);
    p->second.erase(c.in_peer);
    if (p->second.empty()) by_peer_.erase(p);
    room_.erase(c.fd);
    held_ -= c.reader.held();
    counts_.waiting--;
  }

  void read_from(Conn& c) {
    char buf[64 * 1024];
    while (true) {
      const ssize_t r = ::recv(c.fd, buf, sizeof buf, MSG_DONTWAIT);
      if (r == 0 || (r < 0 && errno != EAGAIN && errno != EINTR))
        return drop(c, 0, "");  // the client closed, or the connection broke
      if (r < 0) return;
      if (c.lingering) continue;
      const std::size_t before = c.reader.held();
      const RequestReader::State s = c.reader.feed(buf, static_cast<std::size_t>(r));
      held_ += c.reader.held() - before;
      if (s == RequestReader::failed) return refuse(c, c.reader.error_status(), c.reader.error());
      if (s == RequestReader::done) return dispatch(&c, true);
      if (c.reader.wants_continue() && !c.continued) {
        c.continued = true;
        send_now(c.fd, "HTTP/1.1 100 Continue\r\n\r\n");
      }
      while (held_ > opt_.max_waiting_bytes && order_.front() != &c) evict(*order_.front());
      if (held_ > opt_.max_waiting_bytes) return evict(c);
    }
  }

  void dispatch(Conn* c, bool in_room) {
    if (in_room) leave(*c);
    auto q = std::make_shared<HttpRequest>(c->reader.take());
    pool_.enqueue([this, c, q] { answer(c, *q); });
  }

  // On a worker: the handler, the response, and the connection back to the room or closed.
  void answer(Conn* c, const HttpRequest& q) {
    HttpResponse res;
    try {
      handler_(q, res);
    } catch (...) {  // the handler answers its own errors; this is the last line
      res = HttpResponse{};
      res.status = 500;
      res.set_content(R"({"error":"internal error","error_type":"generation"})",
                      "application/json");
    }
    const bool keep = q.keep_alive && !stop_;
    const bool ok = write_response(c->fd, res, keep);
    if (!ok || !keep) return close_conn(c);
    c->continued = false;
    c->reader.next();
    {
      std::lock_guard lk(back_mu_);
      back_.push_back(c);
    }
    const std::uint64_t one = 1;
    [[maybe_unused]] auto w = ::write(wake_fd_, &one, sizeof one);
  }

  void take_back() {
    std::uint64_t n;
    [[maybe_unused]] auto r = ::read(wake_fd_, &n, sizeof n);
    std::vector<Conn*> back;
    {
      std::lock_guard lk(back_mu_);
      back.swap(back_);
    }
    for (Conn* c : back) stop_ ? close_conn(c) : enter(c);
  }

  // A request the transport itself refuses (400, 413, 431): the answer, then reading what the
  // client still sends for a while, so that it reads the answer rather than a reset.
  void refuse(Conn& c, int status, const std::string& why) {
    counts_.refused++;
    send_now(c.fd, error_response(status, why));
    ::shutdown(c.fd, SHUT_WR);
    c.lingering = true;
    c.deadline = Clock::now() + seconds(opt_.read_timeout_s);
    order_.splice(order_.end(), order_, c.in_order);  // the room stays in deadline order
  }

  void evict(Conn& c) {
    counts_.evicted++;
    // A 503 even if nothing was read yet: its request may be on the way.
    drop(c, c.lingering ? 0 : 503,
         "too many connections are waiting for their requests; this one was the oldest");
  }

  void expire() {
    const auto now = Clock::now();
    while (!order_.empty() && order_.front()->deadline <= now) {
      Conn& c = *order_.front();
      if (!c.lingering) counts_.timed_out++;
      drop(c, c.reader.started() && !c.lingering ? 408 : 0,
           "the request did not arrive whole in " + std::to_string(opt_.read_timeout_s) + " s");
    }
  }

  // Out of the room and closed, with a last answer if status != 0. What the client sent that
  // was never read is read first (a bounded amount): closing a socket with unread input resets
  // the connection, and the client would read the reset instead of the answer.
  void drop(Conn& c, int status, const std::string& why) {
    leave(c);
    if (status) {
      send_now(c.fd, error_response(status, why));
      char sink[4096];
      for (int i = 0; i < 64 && ::recv(c.fd, sink, sizeof sink, MSG_DONTWAIT) > 0; i++) {
      }
      ::shutdown(c.fd, SHUT_WR);
    }
    close_conn(&c);
  }

  void close_conn(Conn* c) {
    ::close(c->fd);
    delete c;
  }

  static std::chrono::nanoseconds seconds(double s) {
    return std::chrono::duration_cast<std::chrono::nanoseconds>(std::chrono::duration<double>(s));
  }
  static timeval timeval_of(double s) {
    timeval tv{};
    tv.tv_sec = static_cast<time_t>(s);
    tv.tv_usec = static_cast<suseconds_t>((s - static_cast<double>(tv.tv_sec)) * 1e6);
    return tv;
  }
  static std::string peer_of(const sockaddr_storage& a) {
    char s[INET6_ADDRSTRLEN] = "?";
    if (a.ss_family == AF_INET)
      ::inet_ntop(AF_INET, &reinterpret_cast<const sockaddr_in*>(&a)->sin_addr, s, sizeof s);
    else if (a.ss_family == AF_INET6)
      ::inet_ntop(AF_INET6, &reinterpret_cast<const sockaddr_in6*>(&a)->sin6_addr, s, sizeof s);
    return s;
  }
  // Best effort from the room's thread: a few hundred bytes into an empty send buffer.
  static void send_now(int fd, const std::string& s) {
    [[maybe_unused]] auto r = ::send(fd, s.data(), s.size(), MSG_DONTWAIT | MSG_NOSIGNAL);
  }

  const TransportOptions opt_;
  const Handler handler_;
  ElasticPool pool_;
  int listen_fd_ = -1, wake_fd_ = -1, ep_ = -1, port_ = -1;
  std::atomic<bool> stop_{false};
  TransportCounts counts_;
  // The room: the loop's thread alone touches these.
  std::unordered_map<int, Conn*> room_;
  std::list<Conn*> order_;  // by deadline: the front is the oldest
  std::unordered_map<std::string, std::list<Conn*>> by_peer_;
  std::size_t held_ = 0;  // bytes of unfinished requests in the room
  bool listen_paused_ = false;
  Clock::time_point resume_listen_;
  // Kept-alive connections the workers hand back.
  std::mutex back_mu_;
  std::vector<Conn*> back_;
};

}  // namespace servekit::serve::http
