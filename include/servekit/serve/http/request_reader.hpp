// SPDX-License-Identifier: Apache-2.0
#pragma once
// RequestReader: one connection's next request, read from whatever bytes have arrived so far
// (a request line, headers, a Content-Length or chunked body), with Boost.Beast's parser. The
// transport feeds it as the socket gives bytes and hands the connection to a thread only once
// the request is whole, so a client that sends half a header holds no thread. Bytes past the
// request (a pipelined next one) stay for the next request.
//
//   RequestReader r(max_body);
//   while (r.feed(bytes, n) == RequestReader::more) { ...wait for the socket... }
//   if (r.state() == RequestReader::failed) answer(r.error_status(), r.error());
//   else { HttpRequest q = r.take(); ...; r.next(); }
#include <boost/beast/http/error.hpp>
#include <boost/beast/http/field.hpp>
#include <boost/beast/http/parser.hpp>
#include <boost/beast/http/string_body.hpp>

#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

#include "servekit/serve/http/message.hpp"

namespace servekit::serve::http {

class RequestReader {
 public:
  enum State { more, done, failed };

  explicit RequestReader(std::size_t max_body, std::uint32_t max_header = 16 * 1024)
      : max_body_(max_body), max_header_(max_header) {
    restart();
  }

  // Takes n more bytes (n = 0: parses what is held) and says where the request stands.
  State feed(const char* data, std::size_t n) {
    if (state_ != more) return state_;
    buf_.append(data, n);
    held_ += n;
    while (off_ < buf_.size()) {
      // Beast 1.74 asserts that the last chunk's line comes back with at least 5 bytes
      // ("0\r\n\r\n") once it has begun: a valid body always ends with those 5 unconsumed,
      // so waiting for them delays no request and keeps debug builds from aborting on a
      // body cut at an unlucky byte (the http_transport fuzz target's first find).
      if (p_->is_header_done() && p_->chunked() && buf_.size() - off_ < 5) break;
      boost::beast::error_code ec;
      const std::size_t used =
          p_->put(boost::asio::const_buffer(buf_.data() + off_, buf_.size() - off_), ec);
      off_ += used;
      if (ec == boost::beast::http::error::need_more) break;
      if (ec) return fail(ec);
      if (p_->is_done()) {
        state_ = done;
        break;
      }
      if (used == 0) break;
    }
    if (off_ == buf_.size()) {  // all parsed: the body is in the message now
      buf_.clear();
      off_ = 0;
    }
    return state_;
  }

  State state() const { return state_; }
  int error_status() const { return error_status_; }
  const std::string& error() const { return error_; }
  // Bytes taken for this request so far (the transport's memory bound counts them).
  std::size_t held() const { return held_; }
  bool started() const { return held_ > 0; }
  // The header is in and asks for "100 Continue" before its body is sent (curl does past
  // 1 KiB); the transport answers it once.
  bool wants_continue() const {
    return state_ == more && p_->is_header_done() &&
           lower_case(view(p_->get()[boost::beast::http::field::expect])) == "100-continue";
  }

  // The whole request (state() == done).
  HttpRequest take() {
    auto m = p_->release();
    HttpRequest q;
    q.method = std::string(view(m.method_string()));
    const std::string_view target = view(m.target());
    q.path = std::string(target.substr(0, target.find('?')));
    for (const auto& f : m)
      q.headers.emplace_back(lower_case(view(f.name_string())), std::string(view(f.value())));
    q.keep_alive = m.keep_alive();
    q.body = std::move(m.body());
    return q;
  }

  // Ready for the next request on the connection, starting with any bytes already held.
  State next() {
    std::string rest = buf_.substr(off_);
    restart();
    return feed(rest.data(), rest.size());
  }

 private:
  // Boost 1.74's string_view is its own type.
  template <class View>
  static std::string_view view(const View& v) {
    return {v.data(), v.size()};
  }

  void restart() {
    p_.emplace();
    p_->header_limit(max_header_);
    p_->body_limit(max_body_);
    p_->eager(true);
    buf_.clear();
    off_ = 0;
    held_ = 0;
    state_ = more;
  }

  State fail(const boost::beast::error_code& ec) {
    namespace e = boost::beast::http;
    state_ = failed;
    if (ec == e::error::header_limit) {
      error_status_ = 431;
      error_ = "the request header is over " + std::to_string(max_header_) + " bytes";
    } else if (ec == e::error::body_limit) {
      error_status_ = 413;
      error_ = "the body is too large (over " + std::to_string(max_body_) + " bytes)";
    } else {
      error_status_ = 400;
      error_ = "bad request: " + ec.message();
    }
    return state_;
  }

  const std::size_t max_body_;
  const std::uint32_t max_header_;
  std::optional<boost::beast::http::request_parser<boost::beast::http::string_body>> p_;
  std::string buf_;       // bytes not yet parsed
  std::size_t off_ = 0;   // how far into buf_ the parser has read
  std::size_t held_ = 0;  // bytes fed for this request
  State state_ = more;
  int error_status_ = 0;
  std::string error_;
};

}  // namespace servekit::serve::http
