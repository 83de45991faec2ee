// SPDX-License-Identifier: Apache-2.0
#pragma once
// A request's answer as server-sent events (`data:{json}\n\n`), written as the engine streams
// its tokens. The routes say how a token and the end are spelled (TGI's events, OpenAI's
// chunks); this runs the stream: waiting on the Flow, noticing a client that went away, and
// the bookkeeping once the request is done.
#include <atomic>
#include <cstddef>
#include <memory>
#include <mutex>
#include <string>

#include "servekit/serve/http/server_core.hpp"

namespace servekit::serve::http {

// Writes `data:{json}\n\n`; false if the client is gone.
inline bool write_event(Sink& sink, const std::string& data) {
  const std::string s = "data:" + data + "\n\n";
  return sink.write(s.data(), s.size());
}

// Runs the stream on the connection's thread: the transport calls the provider once and it writes
// every event. Events are written as the engine streams tokens; the one marked `ends` waits
// for the result, which the engine sets right after.
//
//   on_token(sink, token, piece, last) -> bool: last is the result with the final token, else
//   null. on_end(sink, result) -> bool: what follows the tokens. false: the client is gone.
template <class WriteToken, class WriteEnd>
void stream_flow(ServerCore& core, HttpResponse& res, std::shared_ptr<ServerCore::Job> job,
                 WriteToken on_token, WriteEnd on_end) {
  auto done = std::make_shared<std::atomic<bool>>(false);
  res.set_header("Cache-Control", "no-cache");
  res.set_chunked_content_provider(
      "text/event-stream",
      [&core, job, on_token, on_end, done](std::size_t, Sink& sink) {
        Flow& f = *job->flow;
        std::size_t sent = 0;
        bool ok = true;
        const Result* last = nullptr;  // set with the token that ended the request
        while (ok) {
          std::unique_lock lk(f.mu);
          f.cv.wait(lk, [&] { return f.ended || f.tokens.size() > sent; });
          if (f.tokens.size() > sent) {
            const GeneratedToken t = f.tokens[sent];
            const std::string piece = f.pieces[sent];
            if (t.ends && !f.ended) {  // the result comes right after this token
              f.cv.wait(lk, [&] { return f.ended; });
            }
            lk.unlock();
            if (t.ends) last = &job->handle.done->wait();
            ok = on_token(sink, t, piece, t.ends ? last : nullptr);
            sent++;
            if (last) break;
            continue;
          }
          lk.unlock();
          break;  // ended without a final token: cancelled or failed
        }
        if (!ok) {
          done->store(true);
          // Gone after the last token: the request had ended on its own, only the delivery
          // failed. Gone before: cancel it, which frees its cache now.
          if (last)
            core.finished(*job, *last, job->adapter, false);
          else
            core.abandon(*job);
          return false;
        }
        const Result& r = job->handle.done->wait();
        ok = on_end(sink, r);
        done->store(true);
        core.finished(*job, r, job->adapter, !ok);
        // The request stops counting as admitted before its last byte is written: a client
        // that has read the whole answer must not see it in num_requests_admitted.
        job->ticket.reset();
        if (ok) sink.done();
        return ok;
      },
      [&core, job, done](bool) {
        // The connection closed before the provider ran: cancel so nothing keeps running.
        if (!done->exchange(true)) core.abandon(*job);
      });
}

}  // namespace servekit::serve::http
